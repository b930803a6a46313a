use std::time::Duration;

use legate_types::config_entry::{from_json, ConfigEntry};
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn entries(values: Vec<Value>) -> Vec<ConfigEntry> {
    values.into_iter().map(|v| from_json(v).unwrap()).collect()
}

fn request(service: &str) -> CompileRequest {
    CompileRequest {
        service: service.into(),
        datacenter: "dc1".into(),
        trust_domain: "11111111-2222-3333-4444-555555555555.consul".into(),
        ..Default::default()
    }
}

fn as_json(chain: &CompiledChain) -> Value {
    serde_json::to_value(chain).unwrap()
}

#[test]
fn default_chain() {
    let chain = as_json(&compile(&[], &request("web")).unwrap());
    assert_eq!(
        chain,
        json!({
            "ServiceName": "web", "Namespace": "default", "Partition": "default", "Datacenter": "dc1",
            "CustomizationHash": "", "Default": true, "Protocol": "tcp",
            "StartNode": "resolver:web.default.default.dc1",
            "Nodes": {"resolver:web.default.default.dc1": {
                "Type": "resolver", "Name": "web.default.default.dc1",
                "Resolver": {"ConnectTimeout": "5s", "Default": true, "Target": "web.default.default.dc1"}}},
            "Targets": {"web.default.default.dc1": {
                "ID": "web.default.default.dc1", "Service": "web", "Namespace": "default", "Partition": "default",
                "Datacenter": "dc1", "MeshGateway": {}, "Subset": {}, "ConnectTimeout": "5s",
                "SNI": "web.default.dc1.internal.11111111-2222-3333-4444-555555555555.consul",
                "Name": "web.default.dc1.internal.11111111-2222-3333-4444-555555555555.consul"}}
        })
    );
}

#[test]
fn splitter_over_resolver_subsets() {
    let es = entries(vec![
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http"}),
        json!({"Kind": "service-resolver", "Name": "web", "ConnectTimeout": "3s",
               "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"}, "v2": {"Filter": "Service.Meta.version == v2", "OnlyPassing": true}}}),
        json!({"Kind": "service-splitter", "Name": "web", "Splits": [
            {"Weight": 90, "ServiceSubset": "v1", "RequestHeaders": {"Set": {"x-split": "v1"}}},
            {"Weight": 10, "ServiceSubset": "v2"}]}),
    ]);
    let chain = as_json(&compile(&es, &request("web")).unwrap());
    assert_eq!(chain["Protocol"], "http");
    assert_eq!(chain["Default"], false);
    assert_eq!(chain["StartNode"], "splitter:web.default.default");
    let splitter = &chain["Nodes"]["splitter:web.default.default"];
    assert_eq!(splitter["Type"], "splitter");
    assert_eq!(
        splitter["Splits"],
        json!([
            {"Weight": 90.0, "NextNode": "resolver:v1.web.default.default.dc1", "RequestHeaders": {"Set": {"x-split": "v1"}}},
            {"Weight": 10.0, "NextNode": "resolver:v2.web.default.default.dc1"}
        ])
    );
    let v1 = &chain["Nodes"]["resolver:v1.web.default.default.dc1"];
    assert_eq!(
        v1["Resolver"],
        json!({"ConnectTimeout": "3s", "Target": "v1.web.default.default.dc1"})
    );
    let target = &chain["Targets"]["v2.web.default.default.dc1"];
    assert_eq!(target["ServiceSubset"], "v2");
    assert_eq!(
        target["Subset"],
        json!({"Filter": "Service.Meta.version == v2", "OnlyPassing": true})
    );
    assert_eq!(
        target["SNI"],
        "v2.web.default.dc1.internal.11111111-2222-3333-4444-555555555555.consul"
    );
}

#[test]
fn router_with_catch_all_route() {
    let es = entries(vec![
        json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
        json!({"Kind": "service-router", "Name": "web", "Routes": [
            {"Match": {"HTTP": {"PathPrefix": "/admin", "Methods": ["get"]}},
             "Destination": {"Service": "admin", "RequestTimeout": "10s", "NumRetries": 2}},
            {"Match": {"HTTP": {"Header": [{"Name": "x-canary", "Exact": "1"}]}}, "Destination": {"ServiceSubset": "canary"}}
        ]}),
        json!({"Kind": "service-resolver", "Name": "web", "Subsets": {"canary": {"Filter": "Service.Tags contains canary"}}}),
    ]);
    let chain = as_json(&compile(&es, &request("web")).unwrap());
    assert_eq!(chain["StartNode"], "router:web.default.default");
    let routes = chain["Nodes"]["router:web.default.default"]["Routes"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(routes.len(), 3, "two routes plus the implicit catch-all");
    assert_eq!(routes[0]["NextNode"], "resolver:admin.default.default.dc1");
    assert_eq!(
        routes[0]["Definition"]["Match"]["HTTP"]["Methods"],
        json!(["GET"])
    );
    assert_eq!(
        routes[0]["Definition"]["Destination"],
        json!({"Service": "admin", "Namespace": "default", "Partition": "default", "RequestTimeout": "10s", "NumRetries": 2})
    );
    assert_eq!(
        routes[1]["NextNode"],
        "resolver:canary.web.default.default.dc1"
    );
    assert_eq!(
        routes[2]["Definition"]["Match"],
        json!({"HTTP": {"PathPrefix": "/"}})
    );
    assert_eq!(routes[2]["NextNode"], "resolver:web.default.default.dc1");
    assert_eq!(chain["Targets"].as_object().unwrap().len(), 3);
}

#[test]
fn nested_splitters_flatten_and_multiply() {
    let es = entries(vec![
        json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
        json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 50, "Service": "web-next"}, {"Weight": 50}]}),
        json!({"Kind": "service-splitter", "Name": "web-next", "Splits": [{"Weight": 50, "ServiceSubset": "a"}, {"Weight": 50, "ServiceSubset": "b"}]}),
        json!({"Kind": "service-resolver", "Name": "web-next", "Subsets": {"a": {}, "b": {}}}),
    ]);
    let chain = as_json(&compile(&es, &request("web")).unwrap());
    let splits = chain["Nodes"]["splitter:web.default.default"]["Splits"].clone();
    assert_eq!(
        splits,
        json!([
            {"Weight": 25.0, "NextNode": "resolver:a.web-next.default.default.dc1"},
            {"Weight": 25.0, "NextNode": "resolver:b.web-next.default.default.dc1"},
            {"Weight": 50.0, "NextNode": "resolver:web.default.default.dc1"}
        ])
    );
    assert!(
        chain["Nodes"]
            .get("splitter:web-next.default.default")
            .is_none(),
        "flattened away"
    );
}

#[test]
fn redirect_failover_and_default_subset() {
    let es = entries(vec![
        json!({"Kind": "service-resolver", "Name": "web", "Redirect": {"Service": "web-v2", "Datacenter": "dc2"}}),
        json!({"Kind": "service-resolver", "Name": "db", "DefaultSubset": "primary",
               "Subsets": {"primary": {"Filter": "Service.Meta.role == primary"}},
               "Failover": {"*": {"Datacenters": ["dc2", "dc3"]}}}),
    ]);
    let web = as_json(&compile(&es, &request("web")).unwrap());
    assert_eq!(web["StartNode"], "resolver:web-v2.default.default.dc2");
    assert_eq!(
        web["Targets"]["web-v2.default.default.dc2"]["SNI"],
        "web-v2.default.dc2.internal.11111111-2222-3333-4444-555555555555.consul"
    );
    let db = as_json(&compile(&es, &request("db")).unwrap());
    assert_eq!(db["StartNode"], "resolver:primary.db.default.default.dc1");
    assert_eq!(
        db["Nodes"]["resolver:primary.db.default.default.dc1"]["Resolver"]["Failover"],
        json!({"Targets": ["primary.db.default.default.dc2", "primary.db.default.default.dc3"]})
    );
    assert_eq!(db["Targets"].as_object().unwrap().len(), 3);
}

#[test]
fn a_resolver_redirecting_its_own_service_to_another_datacenter_is_no_loop() {
    let es = entries(vec![
        json!({"Kind": "service-resolver", "Name": "db", "Redirect": {"Datacenter": "dc2"}}),
        json!({"Kind": "service-resolver", "Name": "a", "Redirect": {"Service": "b", "Datacenter": "dc2"}}),
        json!({"Kind": "service-resolver", "Name": "b", "Redirect": {"Service": "a", "Datacenter": "dc1"}}),
    ]);
    let db = as_json(&compile(&es, &request("db")).unwrap());
    assert_eq!(db["StartNode"], "resolver:db.default.default.dc2");
    assert_eq!(db["Targets"].as_object().unwrap().len(), 1);
    assert_eq!(
        db["Targets"]["db.default.default.dc2"]["SNI"],
        "db.default.dc2.internal.11111111-2222-3333-4444-555555555555.consul"
    );
    // Seen from dc2 it is the local target.
    let mut in_dc2 = request("db");
    in_dc2.datacenter = "dc2".into();
    let db = as_json(&compile(&es, &in_dc2).unwrap());
    assert_eq!(db["StartNode"], "resolver:db.default.default.dc2");
    // A real loop across datacenters is still refused.
    let err = compile(&es, &request("a")).unwrap_err();
    assert!(err.contains("circular resolver redirect"), "{err}");
}

#[test]
fn overrides_change_protocol_timeout_and_gateway_mode() {
    let es = entries(vec![
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http", "MeshGateway": {"Mode": "local"}}),
    ]);
    let plain = as_json(&compile(&es, &request("web")).unwrap());
    assert_eq!(
        plain["Targets"]["web.default.default.dc1"]["MeshGateway"],
        json!({"Mode": "local"})
    );
    let mut req = request("web");
    req.override_protocol = "grpc".into();
    req.override_connect_timeout = Some(Duration::from_secs(7));
    req.override_mesh_gateway = "remote".into();
    let chain = as_json(&compile(&es, &req).unwrap());
    assert_eq!(chain["Protocol"], "grpc");
    assert_ne!(chain["CustomizationHash"], "");
    assert_eq!(chain["Default"], false);
    assert_eq!(
        chain["Nodes"]["resolver:web.default.default.dc1"]["Resolver"]["ConnectTimeout"],
        "7s"
    );
    let target = &chain["Targets"]["web.default.default.dc1"];
    assert_eq!(target["ConnectTimeout"], "7s");
    assert_eq!(target["MeshGateway"], json!({"Mode": "remote"}));
    // The hash depends only on the overrides.
    assert_eq!(
        chain["CustomizationHash"],
        as_json(&compile(&[], &req).unwrap())["CustomizationHash"]
    );
}

#[test]
fn errors_are_reported_not_panicked() {
    let es = entries(vec![
        json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
        json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 100, "ServiceSubset": "nope"}]}),
    ]);
    assert!(compile(&es, &request("web"))
        .unwrap_err()
        .contains("does not have a subset named \"nope\""));
    let es = entries(vec![
        json!({"Kind": "service-resolver", "Name": "a", "Redirect": {"Service": "b"}}),
        json!({"Kind": "service-resolver", "Name": "b", "Redirect": {"Service": "a"}}),
    ]);
    assert!(compile(&es, &request("a"))
        .unwrap_err()
        .contains("circular"));
    assert!(compile(&[], &request("")).is_err());
}

#[test]
fn chains_too_deep_to_compile_are_refused_not_a_stack_overflow() {
    // Entries that never passed the write-time checks (a restored
    // snapshot): 100,000 splitters in a row.
    let mut values =
        vec![json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}})];
    for i in 0..100_000 {
        values.push(json!({"Kind": "service-splitter", "Name": format!("s{i}"),
                           "Splits": [{"Weight": 100, "Service": format!("s{}", i + 1)}]}));
    }
    let err = compile(&entries(values), &request("s0")).unwrap_err();
    assert!(err.contains("more than 64 splitters"), "{err}");
}

// ----- properties -----

fn service() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["web", "api", "db"])
}

fn subset() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "v1", "v2"])
}

fn random_entry() -> impl Strategy<Value = Value> {
    prop_oneof![
        (service(), prop::sample::select(vec!["tcp", "http", "grpc"]))
            .prop_map(|(s, p)| json!({"Kind": "service-defaults", "Name": s, "Protocol": p})),
        prop::sample::select(vec!["tcp", "http"]).prop_map(|p| json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": p}})),
        (service(), prop::option::of(service()), prop::sample::select(vec!["", "v1"]), prop::option::of(prop::sample::select(vec!["dc2", "dc3"])))
            .prop_map(|(s, redirect, default_subset, failover)| {
                let mut e = json!({"Kind": "service-resolver", "Name": s});
                match redirect {
                    Some(r) if r != s => e["Redirect"] = json!({"Service": r}),
                    _ => {
                        e["Subsets"] = json!({"v1": {"Filter": "Service.Meta.v == 1"}, "v2": {"OnlyPassing": true}});
                        e["DefaultSubset"] = json!(default_subset);
                        if let Some(dc) = failover {
                            e["Failover"] = json!({"*": {"Datacenters": [dc]}});
                        }
                    }
                }
                e
            }),
        (service(), prop::collection::vec((service(), subset(), 1u32..5), 1..4)).prop_map(|(s, legs)| {
            let total: u32 = legs.iter().map(|l| l.2).sum();
            let mut remaining = 10000u32;
            let n = legs.len();
            let splits: Vec<Value> = legs
                .iter()
                .enumerate()
                .map(|(i, (svc, sub, w))| {
                    let hundredths = if i + 1 == n { remaining } else { w * 10000 / total };
                    remaining -= hundredths;
                    json!({"Weight": hundredths as f64 / 100.0, "Service": svc, "ServiceSubset": sub})
                })
                .collect();
            json!({"Kind": "service-splitter", "Name": s, "Splits": splits})
        }),
        (service(), prop::collection::vec((service(), subset()), 0..3)).prop_map(|(s, dests)| {
            let routes: Vec<Value> = dests
                .iter()
                .enumerate()
                .map(|(i, (svc, sub))| json!({"Match": {"HTTP": {"PathPrefix": format!("/{i}")}}, "Destination": {"Service": svc, "ServiceSubset": sub}}))
                .collect();
            json!({"Kind": "service-router", "Name": s, "Routes": routes})
        }),
    ]
}

/// Keeps the last entry of each kind/name, drops entries that fail their
/// own validation, then requires the whole set to pass the graph checks.
fn valid_set(values: Vec<Value>) -> Option<Vec<ConfigEntry>> {
    let mut by_key = std::collections::BTreeMap::new();
    for v in values {
        let Ok(e) = from_json(v) else { continue };
        if crate::validate_entry(&e).is_ok() {
            by_key.insert((e.kind.clone(), e.name.clone()), e);
        }
    }
    let set: Vec<ConfigEntry> = by_key.into_values().collect();
    crate::validate_graph(&set).ok().map(|_| set)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn valid_entries_always_compile_to_a_consistent_chain(values in prop::collection::vec(random_entry(), 0..8), svc in service()) {
        let Some(set) = valid_set(values) else { return Ok(()); };
        let first = compile(&set, &request(svc));
        let second = compile(&set, &request(svc));
        prop_assert_eq!(&first, &second, "compilation must be deterministic");
        let chain = first.map_err(|e| TestCaseError::fail(format!("valid entries failed to compile: {e}")))?;
        prop_assert!(chain.nodes.contains_key(&chain.start_node));
        for (id, node) in &chain.nodes {
            let mut next_nodes = Vec::new();
            if let Some(routes) = node["Routes"].as_array() {
                next_nodes.extend(routes.iter().map(|r| r["NextNode"].as_str().unwrap().to_string()));
            }
            if let Some(splits) = node["Splits"].as_array() {
                let sum: f64 = splits.iter().map(|s| s["Weight"].as_f64().unwrap()).sum();
                prop_assert!((sum - 100.0).abs() < 0.05, "splits of {} sum to {}", id, sum);
                next_nodes.extend(splits.iter().map(|s| s["NextNode"].as_str().unwrap().to_string()));
            }
            for next in next_nodes {
                prop_assert!(chain.nodes.contains_key(&next), "{} points at missing {}", id, next);
            }
            if let Some(target) = node["Resolver"]["Target"].as_str() {
                prop_assert!(chain.targets.contains_key(target), "missing target {}", target);
                for fo in node["Resolver"]["Failover"]["Targets"].as_array().into_iter().flatten() {
                    prop_assert!(chain.targets.contains_key(fo.as_str().unwrap()));
                }
            }
        }
    }
}
