//! Hostile config entries: bounded-time property runs that push random,
//! mostly-invalid entries through what a write does (key canonicalization,
//! decoding, normalization, per-entry and graph validation) and compile
//! chains over whatever was accepted. Any panic fails the run.

use legate_chain::{compile, normalize_entry, validate_entry, validate_graph, CompileRequest};
use legate_types::config_entry::{from_json, ConfigEntry};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const KINDS: &[&str] = &[
    "service-defaults",
    "proxy-defaults",
    "service-router",
    "service-splitter",
    "service-resolver",
    "service-intentions",
    "mesh",
    "exported-services",
    "nonsense",
];

const KEYS: &[&str] = &[
    "Name",
    "Protocol",
    "protocol",
    "Config",
    "Splits",
    "Weight",
    "Service",
    "ServiceSubset",
    "Redirect",
    "Failover",
    "Subsets",
    "Filter",
    "OnlyPassing",
    "DefaultSubset",
    "Routes",
    "Match",
    "HTTP",
    "PathPrefix",
    "PathExact",
    "PathRegex",
    "Header",
    "Destination",
    "Sources",
    "Action",
    "Permissions",
    "Precedence",
    "ConnectTimeout",
    "RequestTimeout",
    "Datacenters",
    "Targets",
    "MeshGateway",
    "Mode",
    "LoadBalancer",
    "Policy",
    "Meta",
    "retry_on",
    "NumRetries",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "",
            "web",
            "db",
            "v1",
            "*",
            "http",
            "tcp",
            "grpc",
            "allow",
            "deny",
            "NaN",
            "inf",
            "-1",
            "1e400",
            "10s",
            "-5s",
            "Service.Meta.version == v1",
            "((((",
            "/a",
            "local",
            "random",
            "least_request",
        ])
        .prop_map(|s| Value::String(s.to_string())),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

fn entry() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(KINDS),
        prop::sample::select(vec!["web", "db", "api", "global", "*", ""]),
        prop::collection::vec((prop::sample::select(KEYS), value()), 0..6),
    )
        .prop_map(|(kind, name, fields)| {
            let mut map: Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            map.insert("Kind".into(), json!(kind));
            map.insert("Name".into(), json!(name));
            Value::Object(map)
        })
}

fn name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["web", "db", "api", ""])
}

fn subset_name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "v1", "v2", "nope"])
}

/// Entries shaped like real ones, with names from a small set so they
/// meet: splits, subsets, redirects, failovers, routes and protocols.
fn plausible_entry() -> impl Strategy<Value = Value> {
    prop_oneof![
        (
            name(),
            prop::sample::select(vec!["tcp", "http", "grpc", "bogus"])
        )
            .prop_map(|(n, p)| json!({"Kind": "service-defaults", "Name": n, "Protocol": p})),
        prop::sample::select(vec!["tcp", "http"]).prop_map(
            |p| json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": p}})
        ),
        (
            name(),
            prop::collection::vec((0u32..=100, name(), subset_name()), 1..4)
        )
            .prop_map(|(n, splits)| {
                let splits: Vec<Value> = splits
                    .into_iter()
                    .map(|(w, s, sub)| json!({"Weight": w, "Service": s, "ServiceSubset": sub}))
                    .collect();
                json!({"Kind": "service-splitter", "Name": n, "Splits": splits})
            }),
        (name(), name(), subset_name(), any::<bool>(), name()).prop_map(
            |(n, to, sub, redirect, failover)| {
                let mut e = json!({"Kind": "service-resolver", "Name": n, "DefaultSubset": sub,
                    "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"}, "v2": {}}});
                if redirect {
                    e["Redirect"] = json!({"Service": to, "ServiceSubset": sub});
                } else {
                    e["Failover"] = json!({"*": {"Service": failover}});
                }
                e
            }
        ),
        (
            name(),
            name(),
            subset_name(),
            prop::sample::select(vec!["/", "/a", ""])
        )
            .prop_map(
                |(n, to, sub, prefix)| json!({"Kind": "service-router", "Name": n, "Routes": [
                {"Match": {"HTTP": {"PathPrefix": prefix}},
                 "Destination": {"Service": to, "ServiceSubset": sub}}]})
            ),
    ]
}

/// What a config-entry write does before Raft; the accepted entries.
fn accept(values: Vec<Value>) -> Vec<ConfigEntry> {
    let mut accepted = Vec::new();
    for value in values {
        let Ok(mut entry) = from_json(legate_types::keys::canonicalize_keys(value)) else {
            continue;
        };
        normalize_entry(&mut entry);
        if validate_entry(&entry).is_err() {
            continue;
        }
        let mut next = accepted.clone();
        next.push(entry);
        if validate_graph(&next).is_ok() {
            accepted = next;
        }
    }
    accepted
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn random_entries_are_refused_or_compile(values in prop::collection::vec(entry(), 1..8)) {
        compiles(accept(values))?;
    }

    #[test]
    fn plausible_entries_are_refused_or_compile(
        values in prop::collection::vec(plausible_entry(), 1..10)
    ) {
        compiles(accept(values))?;
    }
}

/// Every chain compiles over entries the write-time checks accepted.
fn compiles(accepted: Vec<ConfigEntry>) -> Result<(), TestCaseError> {
    {
        for service in ["web", "db", "api", "x"] {
            let request = CompileRequest {
                service: service.into(),
                datacenter: "dc1".into(),
                trust_domain: "11111111-2222-3333-4444-555555555555.consul".into(),
                ..Default::default()
            };
            // Entries that passed the write-time checks must compile.
            if let Err(e) = compile(&accepted, &request) {
                prop_assert!(false, "{service}: {e}\n{accepted:?}");
            }
        }
    }
    Ok(())
}
