//! Decisions: the rules of every policy a token carries, merged (Consul's
//! precedence: `deny`, then `write`, `list`, `read`), decide first — an
//! exact rule, else the longest matching prefix — and what they leave
//! undecided falls to the default (`allow`, `deny`, or management).

use std::collections::{BTreeMap, HashMap};

use crate::rules::{Level, Resource, Rules};

/// What was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read.
    Read,
    /// List (keys: recursive reads with `enable_key_list_policy`).
    List,
    /// Write.
    Write,
}

impl Access {
    /// The word in permission errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::List => "list",
            Access::Write => "write",
        }
    }
}

/// A rule's answer: allowed, denied, or nothing said (ask the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied; nothing later may allow it.
    Deny,
    /// No rule applies.
    Default,
}

/// What a level grants for an access (Consul's `enforce`).
fn enforce(level: Level, access: Access) -> Decision {
    match (level, access) {
        (Level::Write, _) => Decision::Allow,
        (Level::List, Access::Read | Access::List) => Decision::Allow,
        (Level::Read, Access::Read) => Decision::Allow,
        _ => Decision::Deny,
    }
}

/// The rules of one resource: exact names and prefixes.
#[derive(Debug, Clone, Default)]
struct Table {
    exact: BTreeMap<String, Level>,
    prefix: BTreeMap<String, Level>,
}

impl Table {
    /// The level that governs `name`: its exact rule, else its longest
    /// matching prefix.
    fn level_for(&self, name: &str) -> Option<Level> {
        if let Some(level) = self.exact.get(name) {
            return Some(*level);
        }
        self.longest_prefix(name)
    }

    fn longest_prefix(&self, name: &str) -> Option<Level> {
        if self.prefix.is_empty() {
            return None;
        }
        (0..=name.len())
            .rev()
            .filter(|&end| name.is_char_boundary(end))
            .find_map(|end| self.prefix.get(&name[..end]).copied())
    }

    /// Every rule whose label starts with `prefix` (exact or prefix).
    fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = Level> + 'a {
        let within = move |map: &'a BTreeMap<String, Level>| {
            map.range(prefix.to_string()..)
                .take_while(move |(label, _)| label.starts_with(prefix))
                .map(|(_, level)| *level)
        };
        within(&self.exact).chain(within(&self.prefix))
    }
}

/// The merged rules of a set of policies.
#[derive(Debug, Clone, Default)]
pub struct PolicyAuthorizer {
    scalars: HashMap<Resource, Level>,
    tables: HashMap<Resource, Table>,
}

impl PolicyAuthorizer {
    /// Merges `policies` into one authorizer.
    pub fn new<'a>(policies: impl IntoIterator<Item = &'a Rules>) -> PolicyAuthorizer {
        let mut merged = PolicyAuthorizer::default();
        for rules in policies {
            for &(resource, level) in &rules.scalars {
                merged
                    .scalars
                    .entry(resource)
                    .and_modify(|l| *l = l.merge(level))
                    .or_insert(level);
            }
            for rule in &rules.rules {
                let table = merged.tables.entry(rule.resource).or_default();
                let map = if rule.prefix {
                    &mut table.prefix
                } else {
                    &mut table.exact
                };
                map.entry(rule.label.clone())
                    .and_modify(|l| *l = l.merge(rule.level))
                    .or_insert(rule.level);
            }
        }
        merged
    }

    /// The decision of these rules alone for `access` to `resource`
    /// `name` (ignored for scalar resources).
    pub fn decide(&self, resource: Resource, name: &str, access: Access) -> Decision {
        if resource.is_scalar() {
            return self.decide_scalar(resource, access);
        }
        match self.tables.get(&resource).and_then(|t| t.level_for(name)) {
            Some(level) => enforce(level, access),
            None => Decision::Default,
        }
    }

    fn decide_scalar(&self, resource: Resource, access: Access) -> Decision {
        match self.scalars.get(&resource) {
            Some(level) => enforce(*level, access),
            // No mesh or peering rule: the operator rule decides.
            None if matches!(resource, Resource::Mesh | Resource::Peering) => {
                self.decide_scalar(Resource::Operator, access)
            }
            None => Decision::Default,
        }
    }

    /// Writing every key under `prefix` (`DELETE ?recurse`): the governing
    /// prefix rule must grant write and no rule under the prefix may grant
    /// less.
    pub fn decide_key_write_prefix(&self, prefix: &str) -> Decision {
        let Some(keys) = self.tables.get(&Resource::Key) else {
            return Decision::Default;
        };
        let governing = keys.longest_prefix(prefix);
        if governing.is_some_and(|l| l != Level::Write) {
            return Decision::Deny;
        }
        if keys.under(prefix).any(|l| l != Level::Write) {
            return Decision::Deny;
        }
        if governing.is_some() {
            Decision::Allow
        } else {
            Decision::Default
        }
    }
}

impl PolicyAuthorizer {
    /// `access` to every `resource` name (Consul's `NodeReadAll`,
    /// `ServiceReadAll`): the rule governing the empty prefix must grant
    /// it and no rule anywhere may grant less.
    pub fn decide_all(&self, resource: Resource, access: Access) -> Decision {
        let Some(table) = self.tables.get(&resource) else {
            return Decision::Default;
        };
        let grants = |level: Level| enforce(level, access) == Decision::Allow;
        let governing = table.longest_prefix("");
        if governing.is_some_and(|l| !grants(l)) || table.under("").any(|l| !grants(l)) {
            return Decision::Deny;
        }
        if governing.is_some() {
            Decision::Allow
        } else {
            Decision::Default
        }
    }
}

/// What undecided requests get: `acl.default_policy`, or management.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultPolicy {
    /// `allow`: everything but the ACL system and snapshots.
    Allow,
    /// `deny`: nothing.
    Deny,
    /// A management token: everything.
    Manage,
}

impl DefaultPolicy {
    fn decide(self, resource: Resource) -> bool {
        match self {
            DefaultPolicy::Manage => true,
            DefaultPolicy::Deny => false,
            DefaultPolicy::Allow => resource != Resource::Acl,
        }
    }
}

/// A token's authorizer: its merged policies, then the default.
#[derive(Debug, Clone)]
pub struct Authorizer {
    policies: PolicyAuthorizer,
    default: DefaultPolicy,
}

impl Authorizer {
    /// Policies over a default.
    pub fn new(policies: PolicyAuthorizer, default: DefaultPolicy) -> Authorizer {
        Authorizer { policies, default }
    }

    /// Everything allowed (a management token).
    pub fn management() -> Authorizer {
        Authorizer::new(PolicyAuthorizer::default(), DefaultPolicy::Manage)
    }

    /// Whether `access` to `resource` `name` is allowed.
    pub fn allowed(&self, resource: Resource, name: &str, access: Access) -> bool {
        match self.policies.decide(resource, name, access) {
            Decision::Allow => true,
            Decision::Deny => false,
            Decision::Default => self.default.decide(resource),
        }
    }

    /// Whether the whole state may be saved or restored (a snapshot):
    /// `acl = "write"`, or management.
    pub fn snapshot_allowed(&self) -> bool {
        match self.policies.decide(Resource::Acl, "", Access::Write) {
            Decision::Allow => true,
            Decision::Deny => false,
            Decision::Default => self.default == DefaultPolicy::Manage,
        }
    }

    /// Whether `access` to every `resource` name is allowed.
    pub fn all_allowed(&self, resource: Resource, access: Access) -> bool {
        match self.policies.decide_all(resource, access) {
            Decision::Allow => true,
            Decision::Deny => false,
            Decision::Default => self.default.decide(resource),
        }
    }

    /// Whether every key under `prefix` may be written.
    pub fn key_write_prefix_allowed(&self, prefix: &str) -> bool {
        match self.policies.decide_key_write_prefix(prefix) {
            Decision::Allow => true,
            Decision::Deny => false,
            Decision::Default => self.default.decide(Resource::Key),
        }
    }

    /// What intentions decide when none matches: allow unless the default
    /// is deny.
    pub fn intention_default_allow(&self) -> bool {
        self.default != DefaultPolicy::Deny
    }
}

/// Consul's permission-denied text after `Permission denied: `: `token with
/// AccessorID '…' lacks permission 'key:read' on "app/x"`, or the anonymous
/// token's form with Consul's hint; no ` on …` for scalar resources.
pub fn denial(
    accessor_id: &str,
    anonymous: bool,
    resource: crate::Resource,
    access: Access,
    name: &str,
) -> String {
    let mut message = if anonymous {
        "anonymous token".to_string()
    } else {
        format!("token with AccessorID '{accessor_id}'")
    };
    message.push_str(&format!(
        " lacks permission '{}:{}'",
        resource.as_str(),
        access.as_str()
    ));
    if !name.is_empty() {
        message.push_str(&format!(" on {name:?}"));
    }
    if anonymous {
        message.push_str(
            ". The anonymous token is used implicitly when a request does not specify a token.",
        );
    }
    message
}
