//! Intention evaluation, as Consul's: precedence from exactness (9 → 1),
//! matching with `*` wildcards, ordering, the L4 decision (highest
//! precedence wins, deny wins at equal precedence, L7 intentions count as
//! deny where only L4 is known) and L7 permission matching for HTTP
//! requests. Pure functions over typed views; no IO.

use legate_types::intention::{Intention, IntentionCheck};
use regex::Regex;

use crate::entries::HeaderMatch;
use crate::entries_more::{Permission, ServiceIntentions};

/// The wildcard.
pub const WILDCARD: &str = "*";

fn exact_parts(namespace: &str, name: &str) -> i64 {
    if namespace == WILDCARD {
        0
    } else if name == WILDCARD {
        1
    } else {
        2
    }
}

/// Consul's precedence: 9, 6 or 3 by how exact the destination is, minus
/// how far from exact the source is. In the default namespace only 9, 8, 6
/// and 5 occur.
pub fn precedence(source_ns: &str, source: &str, destination_ns: &str, destination: &str) -> i64 {
    let max = match exact_parts(destination_ns, destination) {
        2 => 9,
        1 => 6,
        _ => 3,
    };
    max - (2 - exact_parts(source_ns, source))
}

/// `allow` or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Allow.
    Allow,
    /// Deny.
    Deny,
}

impl Action {
    /// Parses `allow`/`deny` (any case).
    pub fn parse(s: &str) -> Option<Action> {
        match s.to_ascii_lowercase().as_str() {
            "allow" => Some(Action::Allow),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }

    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// One intention, flattened from a `service-intentions` entry source.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Source namespace (`default`).
    pub source_ns: String,
    /// Source service or `*`.
    pub source: String,
    /// Destination namespace (`default`).
    pub destination_ns: String,
    /// Destination service or `*`.
    pub destination: String,
    /// The L4 action (`None` when `permissions` decide).
    pub action: Option<Action>,
    /// L7 permissions, in order.
    pub permissions: Vec<Permission>,
    /// Computed precedence.
    pub precedence: i64,
}

impl Rule {
    /// Whether this rule applies to traffic from `source` to `destination`.
    pub fn matches(&self, source: &str, destination: &str) -> bool {
        (self.source == WILDCARD || self.source == source)
            && (self.destination == WILDCARD || self.destination == destination)
    }

    /// Whether the rule needs L7 (HTTP) information to decide.
    pub fn is_l7(&self) -> bool {
        !self.permissions.is_empty()
    }
}

fn ns(s: &str) -> String {
    if s.is_empty() {
        "default".into()
    } else {
        s.to_string()
    }
}

/// The rules of one entry (its name is the destination).
pub fn rules_of(destination: &str, entry: &ServiceIntentions) -> Vec<Rule> {
    let destination_ns = ns(&entry.namespace);
    entry
        .sources
        .iter()
        .map(|s| {
            let source_ns = ns(&s.namespace);
            Rule {
                precedence: precedence(&source_ns, &s.name, &destination_ns, destination),
                source_ns,
                source: s.name.clone(),
                destination_ns: destination_ns.clone(),
                destination: destination.to_string(),
                action: Action::parse(&s.action),
                permissions: s.permissions.clone(),
            }
        })
        .collect()
}

/// Consul's order: precedence, highest first; ties broken by the
/// (source ns, source, destination ns, destination) tuple so the order is
/// stable.
pub fn sort_rules(rules: &mut [Rule]) {
    rules.sort_by(|a, b| {
        b.precedence.cmp(&a.precedence).then_with(|| {
            (&a.source_ns, &a.source, &a.destination_ns, &a.destination).cmp(&(
                &b.source_ns,
                &b.source,
                &b.destination_ns,
                &b.destination,
            ))
        })
    });
}

/// The outcome of an L4 check.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Whether the connection is allowed.
    pub allowed: bool,
    /// The rule that decided (`None`: the default policy did).
    pub matched: Option<Rule>,
}

/// Decides an L4 connection from `source` to `destination` over `rules`
/// (any order): the highest-precedence matching rule wins; at equal
/// precedence a deny wins; a rule with L7 permissions counts as deny here
/// (an L4 check cannot see HTTP); no match → `default_allow`.
pub fn decide(rules: &[Rule], source: &str, destination: &str, default_allow: bool) -> Decision {
    let mut best: Option<&Rule> = None;
    for rule in rules.iter().filter(|r| r.matches(source, destination)) {
        let denies = |r: &Rule| r.is_l7() || r.action == Some(Action::Deny);
        best = match best {
            None => Some(rule),
            Some(b) if rule.precedence > b.precedence => Some(rule),
            Some(b) if rule.precedence == b.precedence && denies(rule) && !denies(b) => Some(rule),
            keep => keep,
        };
    }
    match best {
        Some(rule) => Decision {
            allowed: !rule.is_l7() && rule.action == Some(Action::Allow),
            matched: Some(rule.clone()),
        },
        None => Decision {
            allowed: default_allow,
            matched: None,
        },
    }
}

/// The parts of an HTTP request L7 permissions look at.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest<'a> {
    /// Method (`GET`, ...).
    pub method: &'a str,
    /// Path without the query string.
    pub path: &'a str,
    /// Headers (names compared case-insensitively).
    pub headers: &'a [(&'a str, &'a str)],
}

fn header_matches(m: &HeaderMatch, headers: &[(&str, &str)]) -> bool {
    let value = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(&m.name))
        .map(|(_, v)| *v);
    let hit = if m.present {
        value.is_some()
    } else if let Some(v) = value {
        let fold = |s: &str| {
            if m.ignore_case {
                s.to_lowercase()
            } else {
                s.to_string()
            }
        };
        let v_cmp = fold(v);
        if !m.exact.is_empty() {
            v_cmp == fold(&m.exact)
        } else if !m.prefix.is_empty() {
            v_cmp.starts_with(&fold(&m.prefix))
        } else if !m.suffix.is_empty() {
            v_cmp.ends_with(&fold(&m.suffix))
        } else if !m.contains.is_empty() {
            v_cmp.contains(&fold(&m.contains))
        } else if !m.regex.is_empty() {
            Regex::new(&format!("^(?:{})$", m.regex)).is_ok_and(|r| r.is_match(v))
        } else {
            false
        }
    } else {
        false
    };
    hit != m.invert
}

/// Whether one permission's HTTP match covers `request`.
pub fn permission_matches(permission: &Permission, request: &HttpRequest<'_>) -> bool {
    let Some(http) = &permission.http else {
        return false;
    };
    let path_ok = if !http.path_exact.is_empty() {
        request.path == http.path_exact
    } else if !http.path_prefix.is_empty() {
        request.path.starts_with(&http.path_prefix)
    } else if !http.path_regex.is_empty() {
        Regex::new(&format!("^(?:{})$", http.path_regex)).is_ok_and(|r| r.is_match(request.path))
    } else {
        true
    };
    let method_ok = http.methods.is_empty()
        || http
            .methods
            .iter()
            .any(|m| m.eq_ignore_ascii_case(request.method));
    path_ok
        && method_ok
        && http
            .header
            .iter()
            .all(|h| header_matches(h, request.headers))
}

/// Decides an HTTP request from `source` to `destination`: the
/// highest-precedence matching rule applies; for an L7 rule the first
/// matching permission is terminal, and a request no permission matches
/// gets the default policy (intentions are not additive).
pub fn decide_http(
    rules: &[Rule],
    source: &str,
    destination: &str,
    request: &HttpRequest<'_>,
    default_allow: bool,
) -> bool {
    let mut sorted: Vec<&Rule> = rules
        .iter()
        .filter(|r| r.matches(source, destination))
        .collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.precedence));
    let Some(rule) = sorted.first() else {
        return default_allow;
    };
    if !rule.is_l7() {
        // L4 decision (deny wins at equal precedence).
        return decide(rules, source, destination, default_allow).allowed;
    }
    rule.permissions
        .iter()
        .find(|p| permission_matches(p, request))
        .map(|p| Action::parse(&p.action) == Some(Action::Allow))
        .unwrap_or(default_allow)
}

/// The evaluation view of an intention.
pub fn rule_of(intention: &Intention) -> Rule {
    Rule {
        source_ns: intention.source_ns.clone(),
        source: intention.source_name.clone(),
        destination_ns: intention.destination_ns.clone(),
        destination: intention.destination_name.clone(),
        action: Action::parse(&intention.action),
        permissions: intention
            .permissions
            .iter()
            .filter_map(|p| serde_json::from_value(p.clone()).ok())
            .collect(),
        precedence: intention.precedence,
    }
}

/// Decides `source` → `destination` over `intentions` with Consul's
/// reasons (`Matched L4 intention: ...`, `Matched L7 intention: ...`,
/// `Default behavior configured by ACLs`).
pub fn check_intentions(
    intentions: &[Intention],
    source: &str,
    destination: &str,
    default_allow: bool,
) -> IntentionCheck {
    let rules: Vec<Rule> = intentions.iter().map(rule_of).collect();
    let decision = decide(&rules, source, destination, default_allow);
    let reason = match &decision.matched {
        None => "Default behavior configured by ACLs".to_string(),
        Some(rule) => {
            let matched = intentions
                .iter()
                .find(|i| {
                    i.source_name == rule.source
                        && i.destination_name == rule.destination
                        && i.precedence == rule.precedence
                })
                .map(Intention::describe)
                .unwrap_or_default();
            if rule.is_l7() {
                format!("Matched L7 intention: {matched}")
            } else {
                format!("Matched L4 intention: {matched}")
            }
        }
    };
    IntentionCheck {
        allowed: decision.allowed,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries_more::PermissionHttp;

    fn rule(source: &str, destination: &str, action: &str) -> Rule {
        Rule {
            source_ns: "default".into(),
            source: source.into(),
            destination_ns: "default".into(),
            destination: destination.into(),
            action: Action::parse(action),
            permissions: vec![],
            precedence: precedence("default", source, "default", destination),
        }
    }

    #[test]
    fn all_nine_precedence_levels() {
        let cases = [
            (("ns", "web"), ("ns", "db"), 9),
            (("ns", "*"), ("ns", "db"), 8),
            (("*", "*"), ("ns", "db"), 7),
            (("ns", "web"), ("ns", "*"), 6),
            (("ns", "*"), ("ns", "*"), 5),
            (("*", "*"), ("ns", "*"), 4),
            (("ns", "web"), ("*", "*"), 3),
            (("ns", "*"), ("*", "*"), 2),
            (("*", "*"), ("*", "*"), 1),
        ];
        for ((sns, s), (dns, d), want) in cases {
            assert_eq!(precedence(sns, s, dns, d), want, "{sns}/{s} -> {dns}/{d}");
        }
    }

    #[test]
    fn the_most_exact_rule_wins_whatever_the_order() {
        let rules = vec![
            rule("*", "*", "deny"),
            rule("web", "*", "allow"),
            rule("*", "db", "deny"),
            rule("web", "db", "allow"),
        ];
        let d = decide(&rules, "web", "db", false);
        assert!(d.allowed);
        assert_eq!(d.matched.unwrap().precedence, 9);
        // api -> db: `* -> db` (8) beats `* -> *` (5).
        let d = decide(&rules, "api", "db", true);
        assert!(!d.allowed);
        assert_eq!(d.matched.unwrap().precedence, 8);
        // web -> cache: `web -> *` (6) allows.
        assert!(decide(&rules, "web", "cache", false).allowed);
        // api -> cache: only `* -> *` (5), deny.
        assert!(!decide(&rules, "api", "cache", true).allowed);
        // Nothing matches: the default policy.
        assert!(decide(&[], "a", "b", true).allowed);
        assert!(!decide(&[], "a", "b", false).allowed);
        assert!(decide(&[], "a", "b", true).matched.is_none());
    }

    #[test]
    fn deny_wins_a_tie_and_l7_counts_as_deny_for_l4() {
        let mut other_ns = rule("web", "db", "allow");
        other_ns.source_ns = "default".into();
        let tie = vec![rule("web", "db", "allow"), rule("web", "db", "deny")];
        assert!(!decide(&tie, "web", "db", true).allowed);
        let tie_reversed = vec![rule("web", "db", "deny"), other_ns];
        assert!(!decide(&tie_reversed, "web", "db", true).allowed);
        let mut l7 = rule("web", "db", "");
        l7.permissions = vec![Permission {
            action: "allow".into(),
            http: Some(PermissionHttp {
                path_prefix: "/".into(),
                ..Default::default()
            }),
            jwt: None,
        }];
        let d = decide(&[l7.clone()], "web", "db", true);
        assert!(!d.allowed, "an L7 intention is a deny at L4");
        assert!(d.matched.unwrap().is_l7());
        let mut sorted = vec![rule("*", "*", "deny"), l7, rule("web", "*", "allow")];
        sort_rules(&mut sorted);
        let order: Vec<i64> = sorted.iter().map(|r| r.precedence).collect();
        assert_eq!(order, [9, 6, 5]);
    }

    fn perm(action: &str, http: PermissionHttp) -> Permission {
        Permission {
            action: action.into(),
            http: Some(http),
            jwt: None,
        }
    }

    #[test]
    fn l7_permissions_first_match_is_terminal_and_unmatched_gets_the_default() {
        let mut l7 = rule("web", "api", "");
        l7.permissions = vec![
            perm(
                "deny",
                PermissionHttp {
                    path_prefix: "/admin".into(),
                    ..Default::default()
                },
            ),
            perm(
                "allow",
                PermissionHttp {
                    path_regex: "/v[0-9]+/.*".into(),
                    methods: vec!["GET".into(), "HEAD".into()],
                    ..Default::default()
                },
            ),
            perm(
                "allow",
                PermissionHttp {
                    path_exact: "/health".into(),
                    header: vec![HeaderMatch {
                        name: "x-debug".into(),
                        present: true,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ),
            perm(
                "allow",
                PermissionHttp {
                    header: vec![HeaderMatch {
                        name: "X-Role".into(),
                        exact: "ops".into(),
                        invert: true,
                        ..Default::default()
                    }],
                    path_exact: "/public".into(),
                    ..Default::default()
                },
            ),
        ];
        let rules = vec![l7];
        let req =
            |method: &'static str,
             path: &'static str,
             headers: &'static [(&'static str, &'static str)]| HttpRequest {
                method,
                path,
                headers,
            };
        let check = |r: HttpRequest<'_>| decide_http(&rules, "web", "api", &r, false);
        assert!(!check(req("GET", "/admin/x", &[])));
        assert!(check(req("GET", "/v1/users", &[])));
        assert!(check(req("head", "/v2/x", &[])));
        assert!(!check(req("POST", "/v1/users", &[])));
        assert!(!check(req("GET", "/v1", &[])), "regex is anchored");
        assert!(check(req("GET", "/health", &[("X-Debug", "")])));
        assert!(!check(req("GET", "/health", &[])));
        assert!(check(req("GET", "/public", &[("x-role", "dev")])));
        assert!(!check(req("GET", "/public", &[("x-role", "ops")])));
        // Unmatched requests get the default policy.
        assert!(!check(req("GET", "/other", &[])));
        assert!(decide_http(
            &rules,
            "web",
            "api",
            &req("GET", "/other", &[]),
            true
        ));
        // Other sources are not covered by this intention.
        assert!(decide_http(
            &rules,
            "billing",
            "api",
            &req("GET", "/admin", &[]),
            true
        ));
        // An L4 rule decides HTTP too.
        let l4 = vec![rule("web", "api", "deny")];
        assert!(!decide_http(&l4, "web", "api", &req("GET", "/", &[]), true));
    }
}
