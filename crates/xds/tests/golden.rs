//! Golden files: every resource generated for a set of snapshot fixtures,
//! as canonical proto3 JSON, compared with `tests/golden/<fixture>.json`.
//! Refresh with `LEGATE_UPDATE_GOLDEN=1 cargo test -p legate-xds --test golden`
//! and review the diff.
//!
//! Chains come from the real discovery-chain compiler over config entries.

use std::collections::BTreeMap;
use std::path::PathBuf;

use legate_chain::{compile, CompileRequest, CompiledChain};
use legate_proxycfg::{
    ConnectProxySnapshot, Endpoint, EndpointHealth, QueryEndpoint, QueryUpstreamSnapshot,
    UpstreamSnapshot,
};
use legate_types::config_entry::{from_json, ConfigEntry};
use legate_types::intention::Intention;
use legate_types::Upstream;
use legate_xds::json::any_to_json;
use legate_xds::resources::{generate, Resources};
use serde_json::{json, Map, Value};

#[path = "fixtures/gateway.rs"]
mod gateway_fixture;

const TD: &str = "11111111-2222-3333-4444-555555555555.consul";

fn entries(values: Vec<Value>) -> Vec<ConfigEntry> {
    values.into_iter().map(|v| from_json(v).unwrap()).collect()
}

fn chain(service: &str, config: &[ConfigEntry]) -> CompiledChain {
    compile(
        config,
        &CompileRequest {
            service: service.into(),
            datacenter: "dc1".into(),
            trust_domain: TD.into(),
            ..Default::default()
        },
    )
    .unwrap()
}

fn endpoint(address: &str, port: u16, health: EndpointHealth, weight: u32) -> Endpoint {
    Endpoint {
        node: "node1".into(),
        service_id: format!("sidecar-{address}-{port}"),
        address: address.into(),
        port,
        health,
        weight,
    }
}

fn intention(source: &str, destination: &str, action: &str, permissions: Vec<Value>) -> Intention {
    Intention {
        source_ns: "default".into(),
        source_name: source.into(),
        destination_ns: "default".into(),
        destination_name: destination.into(),
        action: action.into(),
        permissions,
        precedence: legate_chain::intentions::precedence("default", source, "default", destination),
        ..Default::default()
    }
}

fn upstream(
    name: &str,
    port: u16,
    chain: CompiledChain,
    endpoints: BTreeMap<String, Vec<Endpoint>>,
) -> UpstreamSnapshot {
    UpstreamSnapshot {
        upstream: Upstream {
            destination_name: name.into(),
            local_bind_port: port,
            ..Default::default()
        }
        .into(),
        chain: chain.into(),
        endpoints: endpoints.into(),
    }
}

fn snapshot(
    service: &str,
    protocol: &str,
    intentions: Vec<Intention>,
    default_allow: bool,
    upstreams: Vec<UpstreamSnapshot>,
    config: Map<String, Value>,
) -> ConnectProxySnapshot {
    ConnectProxySnapshot {
        proxy_id: format!("{service}-sidecar-proxy"),
        proxy_service: format!("{service}-sidecar-proxy"),
        destination_service: service.into(),
        native: false,
        address: "10.0.0.1".into(),
        port: 21000,
        local_service_address: "127.0.0.1".into(),
        local_service_port: 8080,
        config,
        datacenter: "dc1".into(),
        trust_domain: TD.into(),
        roots: vec!["-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----".into()],
        leaf_cert: "-----BEGIN CERTIFICATE-----\nLEAF\n-----END CERTIFICATE-----\n".into(),
        leaf_key: "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n".into(),
        intentions: intentions.into(),
        default_allow,
        protocol: protocol.into(),
        upstreams,
        query_upstreams: Vec::new(),
        pending_upstreams: Vec::new(),
        mesh_gateway: None,
        changed_at: None,
    }
}

/// A Connect-native service `web` served proxyless, with the certificate
/// provider its gRPC client names (if any).
fn proxyless_fixtures() -> Vec<(&'static str, ConnectProxySnapshot, Option<&'static str>)> {
    // db speaks gRPC; v1/v2 subsets split 80/20; v1 fails over to v2.
    let config = entries(vec![
        json!({"Kind": "service-defaults", "Name": "db", "Protocol": "grpc"}),
        json!({"Kind": "service-resolver", "Name": "db",
               "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"},
                           "v2": {"Filter": "Service.Meta.version == v2"}},
               "Failover": {"v1": {"ServiceSubset": "v2"}}}),
        json!({"Kind": "service-splitter", "Name": "db",
               "Splits": [{"Weight": 80, "ServiceSubset": "v1"}, {"Weight": 20, "ServiceSubset": "v2"}]}),
    ]);
    let db = chain("db", &config);
    let mut db_endpoints = BTreeMap::new();
    for (id, target) in &db.targets {
        let list = match target.service_subset.as_str() {
            "v1" => vec![
                endpoint("10.0.2.1", 7001, EndpointHealth::Passing, 1),
                endpoint("10.0.2.2", 7002, EndpointHealth::Critical, 1),
            ],
            _ => vec![endpoint("10.0.2.3", 7003, EndpointHealth::Passing, 1)],
        };
        db_endpoints.insert(id.clone(), list);
    }
    let mut native = snapshot(
        "web",
        "",
        vec![],
        true,
        vec![upstream("db", 0, db, db_endpoints)],
        Map::new(),
    );
    native.native = true;
    native.proxy_id = "web-1".into();
    native.proxy_service = "web".into();
    native.leaf_cert.clear();
    native.leaf_key.clear();
    vec![
        ("proxyless_grpc_plaintext", native.clone(), None),
        ("proxyless_grpc_mtls", native, Some("legate")),
    ]
}

/// Every fixture, rendered by the generator it is served with.
fn rendered_fixtures() -> Vec<(&'static str, Value)> {
    let mut out: Vec<(&'static str, Value)> = fixtures()
        .into_iter()
        .map(|(name, s)| (name, render(&generate(&s))))
        .collect();
    for (name, s, provider) in proxyless_fixtures() {
        out.push((name, render(&legate_xds::grpc::generate(&s, provider))));
    }
    out
}

fn fixtures() -> Vec<(&'static str, ConnectProxySnapshot)> {
    let mut out = Vec::new();

    // L4: web with a tcp upstream db; no intentions, default allow.
    let db = chain("db", &[]);
    let db_target = db.targets.keys().next().unwrap().clone();
    out.push((
        "l4_default_allow",
        snapshot(
            "web",
            "tcp",
            vec![],
            true,
            vec![upstream(
                "db",
                9191,
                db.clone(),
                [(
                    db_target.clone(),
                    vec![
                        endpoint("10.0.0.2", 21000, EndpointHealth::Passing, 1),
                        endpoint("10.0.0.3", 21000, EndpointHealth::Warning, 1),
                        endpoint("10.0.0.4", 21000, EndpointHealth::Critical, 1),
                    ],
                )]
                .into(),
            )],
            Map::new(),
        ),
    ));

    // L4 intentions on db: deny web (exact) under allow-all wildcard,
    // default deny; and the inverse under default allow.
    out.push((
        "l4_intentions_default_deny",
        snapshot(
            "db",
            "tcp",
            vec![
                intention("web", "db", "deny", vec![]),
                intention("*", "db", "allow", vec![]),
            ],
            false,
            vec![],
            Map::new(),
        ),
    ));
    out.push((
        "l4_intentions_default_allow",
        snapshot(
            "db",
            "tcp",
            vec![
                intention("web", "db", "deny", vec![]),
                intention("api", "*", "deny", vec![]),
                intention("billing", "db", "allow", vec![]),
            ],
            true,
            vec![],
            {
                let mut m = Map::new();
                m.insert("bind_address".into(), json!("0.0.0.0"));
                m.insert("bind_port".into(), json!(20000));
                m.insert("local_connect_timeout_ms".into(), json!(1500));
                m
            },
        ),
    ));

    // L7: api (http) behind a router, a splitter over resolver subsets,
    // and a resolver with failover; web calls it; L7 intentions on api.
    let config = entries(vec![
        json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
        json!({"Kind": "service-resolver", "Name": "api",
               "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"},
                           "v2": {"Filter": "Service.Meta.version == v2", "OnlyPassing": true}},
               "Failover": {"*": {"Datacenters": ["dc2"]}}}),
        json!({"Kind": "service-splitter", "Name": "api",
               "Splits": [{"Weight": 90, "ServiceSubset": "v1"}, {"Weight": 10, "ServiceSubset": "v2"}]}),
        json!({"Kind": "service-router", "Name": "api",
               "Routes": [{"Match": {"HTTP": {"PathPrefix": "/admin", "Methods": ["GET", "POST"],
                                             "Header": [{"Name": "x-debug", "Present": true}]}},
                           "Destination": {"Service": "admin", "RequestTimeout": "3s", "NumRetries": 2}}]}),
    ]);
    let api = chain("api", &config);
    let mut api_endpoints = BTreeMap::new();
    for (id, target) in &api.targets {
        let list = if target.datacenter == "dc1" {
            vec![
                endpoint("10.0.1.1", 21000, EndpointHealth::Passing, 3),
                endpoint("10.0.1.2", 21000, EndpointHealth::Warning, 1),
            ]
        } else {
            vec![endpoint("10.1.0.1", 21000, EndpointHealth::Passing, 1)]
        };
        api_endpoints.insert(id.clone(), list);
    }
    let mut http_config = Map::new();
    http_config.insert("protocol".into(), json!("http"));
    http_config.insert("local_request_timeout_ms".into(), json!(2000));
    out.push((
        "l7_router_splitter_failover",
        snapshot(
            "web",
            "http",
            vec![
                intention("billing", "web", "", vec![
                    json!({"Action": "deny", "HTTP": {"PathPrefix": "/internal"}}),
                    json!({"Action": "allow", "HTTP": {"PathRegex": "/v[0-9]+/.*", "Methods": ["GET"]}}),
                ]),
                intention("*", "web", "deny", vec![]),
            ],
            false,
            vec![upstream("api", 9292, api, api_endpoints)],
            http_config,
        ),
    ));
    // Escape hatches: the operator's public listener (our TLS injected),
    // an upstream cluster override, and an invalid local cluster (ignored).
    let mut hatches = Map::new();
    hatches.insert(
        "envoy_public_listener_json".into(),
        json!(json!({
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": "ignored",
            "address": {"socket_address": {"address": "0.0.0.0", "port_value": 21000}},
            "filter_chains": [{"filters": [{"name": "envoy.filters.network.tcp_proxy", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                "stat_prefix": "custom", "cluster": "local_app"}}]}]
        }).to_string()),
    );
    hatches.insert(
        "envoy_local_cluster_json".into(),
        json!(r#"{"name": "local_app", "no_such_field": 1}"#),
    );
    let mut db_up = upstream(
        "db",
        9191,
        db.clone(),
        [(
            db_target,
            vec![endpoint("10.0.0.2", 21000, EndpointHealth::Passing, 1)],
        )]
        .into(),
    );
    let mut escaped = (*db_up.upstream).clone();
    escaped.config.insert(
        "envoy_cluster_json".into(),
        json!(json!({"name": "x", "type": "EDS", "connect_timeout": "9s",
                     "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}}).to_string()),
    );
    db_up.upstream = escaped.into();
    out.push((
        "escape_hatches",
        snapshot("web", "tcp", vec![], true, vec![db_up], hatches),
    ));

    // web's upstream is a prepared query that failed over: db's sidecars
    // in dc2 (twice, one SAN) and a Connect-native db in dc3.
    let mut queried = snapshot("web", "tcp", vec![], true, vec![], Map::new());
    let answer = |dc: &str, service: &str, endpoint: Endpoint| QueryEndpoint {
        endpoint,
        datacenter: dc.into(),
        service: service.into(),
    };
    queried.query_upstreams = vec![QueryUpstreamSnapshot {
        upstream: Upstream {
            destination_type: "prepared_query".into(),
            destination_name: "nearest-db".into(),
            local_bind_port: 9292,
            config: [("connect_timeout_ms".to_string(), json!(2500))]
                .into_iter()
                .collect(),
            ..Default::default()
        }
        .into(),
        datacenter: "dc1".into(),
        endpoints: vec![
            answer(
                "dc2",
                "db",
                endpoint("10.2.0.1", 21000, EndpointHealth::Passing, 1),
            ),
            answer(
                "dc2",
                "db",
                endpoint("10.2.0.2", 21000, EndpointHealth::Warning, 1),
            ),
            answer(
                "dc3",
                "db",
                endpoint("10.3.0.1", 8443, EndpointHealth::Critical, 3),
            ),
        ],
    }];
    out.push(("prepared_query_upstream", queried));

    // A mesh gateway carrying the servers' traffic (WAN federation):
    // Consul's `mesh-gateway-using-federation` shapes.
    out.push((
        "mesh_gateway_using_federation",
        gateway_fixture::gateway_snapshot(
            serde_json::json!({}),
            gateway_fixture::wan_federation_state(),
        ),
    ));
    out
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Object keys sorted at every level (maps decode in hash order).
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn render(resources: &Resources) -> Value {
    let mut out = Map::new();
    for (type_url, items) in &resources.by_type {
        let short = type_url.rsplit('.').next().unwrap().to_string();
        let mut by_name = Map::new();
        for (name, any) in items {
            by_name.insert(name.clone(), sorted(any_to_json(any).unwrap()));
        }
        out.insert(short, Value::Object(by_name));
    }
    Value::Object(out)
}

#[test]
fn generated_resources_match_the_golden_files() {
    let update = std::env::var("LEGATE_UPDATE_GOLDEN").is_ok();
    std::fs::create_dir_all(golden_dir()).unwrap();
    let mut failures = Vec::new();
    for (name, value) in rendered_fixtures() {
        let rendered = serde_json::to_string_pretty(&value).unwrap() + "\n";
        let path = golden_dir().join(format!("{name}.json"));
        if update {
            std::fs::write(&path, &rendered).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == rendered => {}
            Ok(_) => failures.push(format!(
                "{name}: differs from {} (LEGATE_UPDATE_GOLDEN=1 to refresh, then review the diff)",
                path.display()
            )),
            Err(_) => failures.push(format!("{name}: {} is missing", path.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn generation_is_deterministic_byte_for_byte() {
    for (name, snapshot, provider) in proxyless_fixtures() {
        let first = legate_xds::grpc::generate(&snapshot, provider);
        assert_eq!(
            legate_xds::grpc::generate(&snapshot, provider),
            first,
            "{name}"
        );
    }
    for (name, snapshot) in fixtures() {
        let first = generate(&snapshot);
        for _ in 0..5 {
            assert_eq!(
                generate(&snapshot),
                first,
                "{name}: resources differ between runs"
            );
        }
    }
}

#[test]
fn proxyless_resources_take_the_shapes_grpc_accepts() {
    for (name, s, provider) in proxyless_fixtures() {
        let r = render(&legate_xds::grpc::generate(&s, provider));
        // A listener named as the dialled target, an API listener whose
        // connection manager ends with the router and splits 80/20.
        let listener = &r["Listener"]["db"];
        assert!(listener["address"].is_null(), "{name}: not an API listener");
        let manager = &listener["api_listener"]["api_listener"];
        let filters = manager["http_filters"].as_array().unwrap();
        assert_eq!(
            filters.last().unwrap()["typed_config"]["@type"],
            "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        );
        let host = &manager["route_config"]["virtual_hosts"][0];
        assert_eq!(host["domains"], json!(["*"]));
        let weights: Vec<u64> = host["routes"][0]["route"]["weighted_clusters"]["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["weight"].as_u64().unwrap())
            .collect();
        assert_eq!(weights, vec![8000, 2000], "{name}");
        // EDS clusters only; TLS only through the named provider.
        for (cluster_name, cluster) in r["Cluster"].as_object().unwrap() {
            assert_eq!(cluster["type"], "EDS", "{name}: {cluster_name}");
            let tls = &cluster["transport_socket"]["typed_config"]["common_tls_context"];
            match provider {
                None => assert!(cluster["transport_socket"].is_null(), "{name}"),
                Some(p) => {
                    assert_eq!(tls["tls_certificate_provider_instance"]["instance_name"], p);
                    assert!(tls["tls_certificates"].is_null());
                    let validation = &tls["validation_context"];
                    assert_eq!(
                        validation["ca_certificate_provider_instance"]["instance_name"],
                        p
                    );
                    assert!(validation["match_subject_alt_names"][0]["exact"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("spiffe://{TD}/ns/default/dc/dc1/svc/db")));
                }
            }
        }
        // Every priority is a locality with a weight; v1 fails over to v2.
        let v1 = r["ClusterLoadAssignment"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(n, _)| n.starts_with("v1."))
            .unwrap()
            .1;
        let localities = v1["endpoints"].as_array().unwrap();
        assert_eq!(localities.len(), 2, "{name}: primary and failover");
        for (priority, l) in localities.iter().enumerate() {
            assert!(l["locality"].is_object(), "{name}");
            assert_eq!(l["load_balancing_weight"], 1, "{name}");
            assert_eq!(l["priority"].as_u64().unwrap_or(0), priority as u64);
        }
    }
}

#[test]
fn l4_rbac_follows_intention_precedence() {
    let fixtures = fixtures();
    let rendered = render(&generate(
        &fixtures
            .iter()
            .find(|(n, _)| *n == "l4_intentions_default_deny")
            .unwrap()
            .1,
    ));
    let listener = &rendered["Listener"]["public_listener:10.0.0.1:21000"];
    let rbac = &listener["filter_chains"][0]["filters"][0]["typed_config"]["rules"];
    // Default deny: ALLOW policies; the wildcard allow excludes web.
    assert_eq!(
        rbac["action"],
        Value::Null,
        "ALLOW is the default enum value"
    );
    let policies = rbac["policies"].as_object().unwrap();
    assert_eq!(policies.len(), 1);
    let principal = &policies.values().next().unwrap()["principals"][0]["and_ids"]["ids"];
    assert!(
        principal[1]["not_id"]["authenticated"]["principal_name"]["safe_regex"]["regex"]
            .as_str()
            .unwrap()
            .ends_with("/svc/web$")
    );
}

#[test]
fn bootstrap_matches_its_golden_file() {
    use legate_xds::bootstrap::{bootstrap, parse_extra, BootstrapParams};
    let mut params = BootstrapParams {
        proxy_id: "web-sidecar-proxy".into(),
        cluster: "web-sidecar-proxy".into(),
        admin_address: "127.0.0.1".into(),
        admin_port: 19000,
        admin_access_log_path: "/dev/null".into(),
        agent_address: "127.0.0.1".into(),
        agent_port: 8502,
        token: "secret".into(),
        prometheus_bind_addr: Some(("0.0.0.0".into(), 9102)),
        extra_clusters: Vec::new(),
        extra_listeners: Vec::new(),
        agent_ca_pem: None,
    };
    params.extra_clusters = parse_extra(
        "envoy_extra_static_clusters_json",
        r#"{"name": "tracing", "type": "STRICT_DNS", "connect_timeout": "1s"}"#,
        "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    )
    .unwrap();
    assert!(parse_extra(
        "envoy_extra_static_clusters_json",
        r#"{"name": "x", "bogus": true}"#,
        "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    )
    .unwrap_err()
    .contains("bogus"));
    let rendered = serde_json::to_string_pretty(&bootstrap(&params)).unwrap() + "\n";
    let path = golden_dir().join("bootstrap.json");
    if std::env::var("LEGATE_UPDATE_GOLDEN").is_ok() {
        std::fs::write(&path, &rendered).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        rendered,
        "bootstrap differs from {} (LEGATE_UPDATE_GOLDEN=1 to refresh)",
        path.display()
    );
}
