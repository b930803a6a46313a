//! Write-time checks across entries: every discovery chain the entries
//! define must still compile after a change. A write that would break a
//! chain is refused with a message naming that chain, so a change to one
//! entry can never silently invalidate another.
//!
//! Checked here: routers and splitters need an HTTP-family protocol
//! (`http`, `http2`, `grpc`, from `service-defaults` then
//! `proxy-defaults`); every service a chain reaches uses the chain's
//! protocol; referenced subsets exist; splitters and resolver redirects
//! have no cycles.

use std::collections::BTreeSet;

use legate_types::config_entry::ConfigEntry;

use crate::entries::RoutingEntries;

/// The most splitters (or resolver redirects) one discovery chain may pass
/// through in a row. Walking and compiling a chain recurse once per hop, so
/// without a bound a long enough chain of entries would exhaust a server
/// thread's stack (Consul has no bound; real chains have a few hops).
pub const MAX_CHAIN_DEPTH: usize = 64;

fn too_deep(chain: &str) -> String {
    format!(
        "discovery chain {chain:?}: more than {MAX_CHAIN_DEPTH} splitters or resolver redirects in a row"
    )
}

/// The kinds whose changes can break a discovery chain.
pub const ROUTING_KINDS: &[&str] = &[
    "proxy-defaults",
    "service-defaults",
    "service-router",
    "service-splitter",
    "service-resolver",
];

/// The routing entries, checked chain by chain. Parts of the graph that a
/// chain's walk found sound are remembered per protocol and not walked
/// again for the next chain, so checking every chain costs one walk of the
/// graph rather than one per chain (a linear chain of n splitters used to
/// cost n² steps per write). This is safe for cycles too: a part found
/// sound reaches no cycle, or its own walk would have met it.
struct Graph {
    entries: RoutingEntries,
    /// Parts found sound, with how many splitters in a row they hold (so a
    /// part reached at any depth is still held to [`MAX_CHAIN_DEPTH`]).
    sound: std::cell::RefCell<std::collections::HashMap<Step, usize>>,
    /// Walks done (not remembered), for the tests.
    walks: std::cell::Cell<usize>,
}

/// One remembered walk: the protocol walked under, which walk, service and
/// subset.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Step {
    protocol: String,
    split: bool,
    service: String,
    subset: String,
}

impl std::ops::Deref for Graph {
    type Target = RoutingEntries;

    fn deref(&self) -> &RoutingEntries {
        &self.entries
    }
}

impl Graph {
    fn check_chain(&self, chain: &str) -> Result<(), String> {
        let protocol = self.protocol(chain);
        let http = matches!(protocol.as_str(), "http" | "http2" | "grpc");
        if !http && (self.routers.contains_key(chain) || self.splitters.contains_key(chain)) {
            return Err(format!(
                "discovery chain {chain:?} uses a protocol {protocol:?} that does not permit advanced routing or splitting behavior"
            ));
        }
        let mut walk = Walk {
            graph: self,
            chain,
            protocol: &protocol,
            http,
        };
        match self.routers.get(chain).filter(|_| http) {
            Some(router) => {
                for route in &router.routes {
                    if let Some(dest) = &route.destination {
                        let service = if dest.service.is_empty() {
                            chain
                        } else {
                            dest.service.as_str()
                        };
                        walk.split_or_resolve(service, &dest.service_subset, &mut BTreeSet::new())?;
                    }
                }
                walk.split_or_resolve(chain, "", &mut BTreeSet::new())
                    .map(|_| ())
            }
            None => walk
                .split_or_resolve(chain, "", &mut BTreeSet::new())
                .map(|_| ()),
        }
    }
}

struct Walk<'a> {
    graph: &'a Graph,
    chain: &'a str,
    protocol: &'a str,
    http: bool,
}

impl Walk<'_> {
    fn step(&self, split: bool, service: &str, subset: &str) -> Step {
        Step {
            protocol: self.protocol.to_string(),
            split,
            service: service.to_string(),
            subset: subset.to_string(),
        }
    }

    /// Runs `walk` for `step` unless an earlier walk found it sound; either
    /// way, the part's splitters in a row, which must fit below the
    /// `splitters_above` already on the path.
    fn once(
        &mut self,
        step: Step,
        splitters_above: usize,
        walk: impl FnOnce(&mut Self) -> Result<usize, String>,
    ) -> Result<usize, String> {
        let known = self.graph.sound.borrow().get(&step).copied();
        let height = match known {
            Some(height) => height,
            None => {
                self.graph.walks.set(self.graph.walks.get() + 1);
                let height = walk(self)?;
                self.graph.sound.borrow_mut().insert(step, height);
                height
            }
        };
        if splitters_above + height > MAX_CHAIN_DEPTH {
            return Err(too_deep(self.chain));
        }
        Ok(height)
    }

    fn same_protocol(&self, service: &str) -> Result<(), String> {
        let theirs = self.graph.protocol(service);
        if theirs != self.protocol {
            return Err(format!(
                "discovery chain {:?} uses inconsistent protocols: {:?} is {} but {:?} is {}",
                self.chain, self.chain, self.protocol, service, theirs
            ));
        }
        Ok(())
    }

    /// Checks what `service` splits or resolves to; the splitters in a row
    /// from here.
    fn split_or_resolve(
        &mut self,
        service: &str,
        subset: &str,
        splitters_seen: &mut BTreeSet<String>,
    ) -> Result<usize, String> {
        let step = self.step(true, service, subset);
        let above = splitters_seen.len();
        self.once(step, above, |walk| {
            walk.split_or_resolve_now(service, subset, splitters_seen)
        })
    }

    fn split_or_resolve_now(
        &mut self,
        service: &str,
        subset: &str,
        splitters_seen: &mut BTreeSet<String>,
    ) -> Result<usize, String> {
        self.same_protocol(service)?;
        if subset.is_empty() && self.http {
            if let Some(splitter) = self.graph.splitters.get(service) {
                if splitters_seen.len() >= MAX_CHAIN_DEPTH {
                    return Err(too_deep(self.chain));
                }
                if !splitters_seen.insert(service.to_string()) {
                    return Err(format!("discovery chain {:?}: detected circular reference between splitters of {service:?}", self.chain));
                }
                let mut below = 0;
                for split in &splitter.splits {
                    let target = if split.service.is_empty() {
                        service
                    } else {
                        split.service.as_str()
                    };
                    if target == service || !split.service_subset.is_empty() {
                        self.resolve_fresh(target, &split.service_subset)?;
                    } else {
                        below = below.max(self.split_or_resolve(target, "", splitters_seen)?);
                    }
                }
                splitters_seen.remove(service);
                return Ok(below + 1);
            }
        }
        self.resolve_fresh(service, subset)?;
        Ok(0)
    }

    /// A resolver walk that starts here (no redirect seen yet; its
    /// redirects are bounded on their own, so it holds no splitters).
    fn resolve_fresh(&mut self, service: &str, subset: &str) -> Result<(), String> {
        let step = self.step(false, service, subset);
        self.once(step, 0, |walk| {
            walk.resolve(service, subset, &mut BTreeSet::new())?;
            Ok(0)
        })
        .map(|_| ())
    }

    fn resolve(
        &mut self,
        service: &str,
        subset: &str,
        redirects_seen: &mut BTreeSet<(String, String)>,
    ) -> Result<(), String> {
        self.same_protocol(service)?;
        if redirects_seen.len() >= MAX_CHAIN_DEPTH {
            return Err(too_deep(self.chain));
        }
        if !redirects_seen.insert((service.to_string(), subset.to_string())) {
            return Err(format!(
                "discovery chain {:?}: detected circular resolver redirect at {service:?}",
                self.chain
            ));
        }
        let resolver = self.graph.resolvers.get(service);
        if let Some(redirect) = resolver.and_then(|r| r.redirect.as_ref()) {
            if redirect.datacenter.is_empty() && redirect.peer.is_empty() {
                let target = if redirect.service.is_empty() {
                    service
                } else {
                    redirect.service.as_str()
                };
                let target_subset = if redirect.service_subset.is_empty() && target == service {
                    subset
                } else {
                    redirect.service_subset.as_str()
                };
                return self.resolve(target, target_subset, redirects_seen);
            }
            return Ok(());
        }
        if !subset.is_empty() && !resolver.is_some_and(|r| r.subsets.contains_key(subset)) {
            return Err(format!(
                "discovery chain {:?}: service {service:?} does not have a subset named {subset:?}",
                self.chain
            ));
        }
        Ok(())
    }
}

/// Checks every chain the routing entries define (each service named by a
/// routing entry is a chain).
pub fn validate_graph(entries: &[ConfigEntry]) -> Result<(), String> {
    validate_graph_counting(entries).map(|_| ())
}

/// [`validate_graph`], returning how many walks it took.
fn validate_graph_counting(entries: &[ConfigEntry]) -> Result<usize, String> {
    let graph = Graph {
        entries: RoutingEntries::new(entries)?,
        sound: Default::default(),
        walks: Default::default(),
    };
    let chains: BTreeSet<&String> = graph
        .routers
        .keys()
        .chain(graph.splitters.keys())
        .chain(graph.resolvers.keys())
        .chain(graph.defaults.keys())
        .collect();
    for chain in chains {
        graph.check_chain(chain)?;
    }
    Ok(graph.walks.get())
}

/// The kinds whose changes can make an L7 intention meaningless: the
/// intentions themselves and whatever sets a destination's protocol.
pub const INTENTION_PROTOCOL_KINDS: &[&str] =
    &["proxy-defaults", "service-defaults", "service-intentions"];

/// L7 intentions (with `Permissions`) need an HTTP-family protocol at
/// their destination; refuses entries where one does not have it.
pub fn validate_l7_intentions(entries: &[ConfigEntry]) -> Result<(), String> {
    let routing: Vec<ConfigEntry> = entries
        .iter()
        .filter(|e| ROUTING_KINDS.contains(&e.kind.as_str()))
        .cloned()
        .collect();
    let graph = RoutingEntries::new(&routing)?;
    for entry in entries.iter().filter(|e| e.kind == "service-intentions") {
        let intentions: crate::entries_more::ServiceIntentions = crate::entries::decode(entry)?;
        let Some(i) = intentions
            .sources
            .iter()
            .position(|s| !s.permissions.is_empty())
        else {
            continue;
        };
        let protocol = graph.protocol(&entry.name);
        if !matches!(protocol.as_str(), "http" | "http2" | "grpc") {
            return Err(format!(
                "service-intentions {:?}: Sources[{i}] has L7 Permissions, which need an HTTP-family protocol (http, http2 or grpc) for {:?}, whose protocol is {protocol:?}",
                entry.name, entry.name
            ));
        }
    }
    Ok(())
}

/// The entries as they would be after writing `proposed` (or deleting
/// `kind/name` when `proposed` is `None`).
pub fn with_change(
    current: &[ConfigEntry],
    kind: &str,
    name: &str,
    proposed: Option<&ConfigEntry>,
) -> Vec<ConfigEntry> {
    let mut out: Vec<ConfigEntry> = current
        .iter()
        .filter(|e| !(e.kind == kind && e.name == name))
        .cloned()
        .collect();
    if let Some(entry) = proposed {
        out.push(entry.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_types::config_entry::from_json;
    use serde_json::json;

    fn entries(values: Vec<serde_json::Value>) -> Vec<ConfigEntry> {
        values.into_iter().map(|v| from_json(v).unwrap()).collect()
    }

    fn linear_splitters(n: usize, last_to_first: bool) -> Vec<ConfigEntry> {
        let mut values = vec![
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
        ];
        for i in 0..n {
            let next = if last_to_first && i == n - 1 {
                0
            } else {
                i + 1
            };
            values.push(json!({"Kind": "service-splitter", "Name": format!("s{i}"),
                               "Splits": [{"Weight": 100, "Service": format!("s{next}")}]}));
        }
        entries(values)
    }

    #[test]
    fn shared_parts_are_walked_once_not_once_per_chain() {
        // A chain of 60 splitters that 3,000 others lead into: remembered
        // parts make it about two walks per splitter, not 3,000 x 60.
        let mut es = linear_splitters(60, false);
        for i in 0..3000 {
            es.push(
                from_json(
                    json!({"Kind": "service-splitter", "Name": format!("top{i}"),
                                 "Splits": [{"Weight": 100, "Service": "s0"}]}),
                )
                .unwrap(),
            );
        }
        let walks = validate_graph_counting(&es).unwrap();
        assert!(walks <= 2 * 3060 + 2, "{walks} walks");
        // Remembering never hides a cycle.
        let err = validate_graph(&linear_splitters(60, true)).unwrap_err();
        assert!(
            err.contains("circular reference between splitters"),
            "{err}"
        );
    }

    #[test]
    fn remembered_parts_are_still_held_to_the_depth_bound() {
        // Each splitter leads to one whose name sorts earlier, so chains are
        // checked shortest first and every walk meets a remembered part one
        // hop down: the bound must still count the whole run.
        let mut values = vec![
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
        ];
        for i in 1..=200 {
            values.push(
                json!({"Kind": "service-splitter", "Name": format!("n{i:04}"),
                               "Splits": [{"Weight": 100, "Service": format!("n{:04}", i - 1)}]}),
            );
        }
        let err = validate_graph(&entries(values)).unwrap_err();
        assert!(err.contains("more than 64 splitters"), "{err}");
    }

    #[test]
    fn chains_deeper_than_the_bound_are_refused_not_a_stack_overflow() {
        assert_eq!(
            validate_graph(&linear_splitters(MAX_CHAIN_DEPTH - 1, false)),
            Ok(())
        );
        for n in [MAX_CHAIN_DEPTH + 1, 100_000] {
            let err = validate_graph(&linear_splitters(n, false)).unwrap_err();
            assert!(
                err.contains("more than 64 splitters or resolver redirects"),
                "{err}"
            );
        }
        let mut values = Vec::new();
        for i in 0..10_000 {
            values.push(json!({"Kind": "service-resolver", "Name": format!("r{i}"),
                               "Redirect": {"Service": format!("r{}", i + 1)}}));
        }
        let err = validate_graph(&entries(values)).unwrap_err();
        assert!(err.contains("more than 64"), "{err}");
    }

    #[test]
    fn routers_and_splitters_need_http() {
        let es = entries(vec![
            json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 100}]}),
        ]);
        let err = validate_graph(&es).unwrap_err();
        assert!(
            err.contains("does not permit advanced routing or splitting behavior"),
            "{err}"
        );
        let mut es = es;
        es.push(
            from_json(json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http"}))
                .unwrap(),
        );
        assert_eq!(validate_graph(&es), Ok(()));
        // proxy-defaults can supply the protocol for everyone.
        let es = entries(vec![
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Destination": {"Service": "admin"}}]}),
        ]);
        assert_eq!(validate_graph(&es), Ok(()));
        // Deleting that proxy-defaults would break the router: refused, naming the chain.
        let after = with_change(&es, "proxy-defaults", "global", None);
        let err = validate_graph(&after).unwrap_err();
        assert!(err.contains("discovery chain \"web\""), "{err}");
    }

    #[test]
    fn subsets_must_exist_and_protocols_agree() {
        let base = vec![
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
            json!({"Kind": "service-resolver", "Name": "web", "Subsets": {"v1": {"Filter": "Service.Meta.v == 1"}}}),
        ];
        let mut ok = base.clone();
        ok.push(json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 50, "ServiceSubset": "v1"}, {"Weight": 50, "Service": "db"}]}));
        assert_eq!(validate_graph(&entries(ok)), Ok(()));
        let mut missing = base.clone();
        missing.push(json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 100, "ServiceSubset": "v2"}]}));
        let err = validate_graph(&entries(missing)).unwrap_err();
        assert!(err.contains("does not have a subset named \"v2\""), "{err}");
        let mut mixed = base;
        mixed.push(json!({"Kind": "service-defaults", "Name": "db", "Protocol": "tcp"}));
        mixed.push(json!({"Kind": "service-router", "Name": "web", "Routes": [{"Destination": {"Service": "db"}}]}));
        let err = validate_graph(&entries(mixed)).unwrap_err();
        assert!(err.contains("inconsistent protocols"), "{err}");
    }

    #[test]
    fn cycles_are_detected() {
        let es = entries(vec![
            json!({"Kind": "service-resolver", "Name": "a", "Redirect": {"Service": "b"}}),
            json!({"Kind": "service-resolver", "Name": "b", "Redirect": {"Service": "a"}}),
        ]);
        assert!(validate_graph(&es)
            .unwrap_err()
            .contains("circular resolver redirect"));
        let es = entries(vec![
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
            json!({"Kind": "service-splitter", "Name": "a", "Splits": [{"Weight": 100, "Service": "b"}]}),
            json!({"Kind": "service-splitter", "Name": "b", "Splits": [{"Weight": 100, "Service": "a"}]}),
        ]);
        assert!(validate_graph(&es)
            .unwrap_err()
            .contains("circular reference between splitters"));
    }
}
