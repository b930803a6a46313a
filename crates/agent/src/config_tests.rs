use super::*;
use serde_json::json;

#[test]
fn seed_demo_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.hcl");
    std::fs::write(
        &path,
        "services {\n  name = \"web\"\n  port = 8080\n  connect {\n    sidecar_service {\n      proxy {\n        upstreams {\n          destination_name = \"db\"\n          local_bind_port = 9191\n        }\n      }\n    }\n  }\n}\nservices {\n  name = \"db\"\n  port = 9090\n  connect { sidecar_service {} }\n}\n",
    )
    .unwrap();
    let config = load(&[
        ConfigSource::Hcl("ports { grpc = 8502 }".into()),
        ConfigSource::File(path),
    ])
    .unwrap();
    assert_eq!(config.ports.grpc, Some(8502));
    assert_eq!(config.services.len(), 2);
    let web = &config.services[0];
    assert_eq!(web.name, "web");
    let sidecar = web
        .connect
        .as_ref()
        .unwrap()
        .sidecar_service
        .as_ref()
        .unwrap();
    let upstream = &sidecar.proxy.as_ref().unwrap().upstreams[0];
    assert_eq!(upstream.destination_name, "db");
    assert_eq!(upstream.local_bind_port, 9191);
    assert!(config.services[1]
        .connect
        .as_ref()
        .unwrap()
        .sidecar_service
        .is_some());
}

#[test]
fn later_sources_win_and_lists_append() {
    let config = load(&[
        ConfigSource::Json(
            "a".into(),
            json!({"datacenter": "east", "service": {"name": "a"}, "ports": {"http": 1}}),
        ),
        ConfigSource::Json(
            "b".into(),
            json!({"datacenter": "west", "services": [{"name": "b"}], "ports": {"dns": -1}}),
        ),
    ])
    .unwrap();
    assert_eq!(config.datacenter, "west");
    assert_eq!(
        config
            .services
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    assert_eq!(config.ports.http, Some(1));
    assert_eq!(config.ports.dns, None);
    let config = load(&[ConfigSource::Hcl("addresses { http = \"0.0.0.0\" }".into())]).unwrap();
    assert_eq!(config.http_addr, Some(IpAddr::from([0, 0, 0, 0])));
    assert!(load(&[ConfigSource::Hcl("addresses { http = \"nowhere\" }".into())]).is_err());
}

#[test]
fn unknown_keys_are_refused_and_unimplemented_warned() {
    let err = load(&[ConfigSource::Json(
        "x.json".into(),
        json!({"no_such_key": 1}),
    )])
    .unwrap_err();
    assert!(
        err.0.contains("x.json") && err.0.contains("no_such_key"),
        "{err}"
    );
    let err = load(&[ConfigSource::Json(
        "x.json".into(),
        json!({"ports": {"htp": 1}}),
    )])
    .unwrap_err();
    assert!(err.0.contains("ports.htp"), "{err}");
    let config = load(&[ConfigSource::Json(
        "y.json".into(),
        json!({"telemetry": {"statsite_address": "x"}, "auto_encrypt": {"tls": true}}),
    )])
    .unwrap();
    assert_eq!(config.warnings.len(), 2);
    let err = load(&[ConfigSource::Json("z.json".into(), json!({"encrypt": "k"}))]).unwrap_err();
    assert!(err.0.contains("encrypt: the key"), "{err}");
}

#[test]
fn the_xds_block_is_read_without_a_warning() {
    let config = load(&[ConfigSource::Json(
        "x.json".into(),
        json!({"xds": {"update_max_per_second": 10}}),
    )])
    .unwrap();
    assert_eq!(config.xds_update_max_per_second, 10.0);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn bad_values_name_the_key() {
    for (value, needle) in [
        (json!({"ports": {"http": "abc"}}), "ports.http"),
        (json!({"ports": {"http": 70000}}), "ports.http"),
        (json!({"server": "yes"}), "server"),
        (json!({"client_addr": "nope"}), "client_addr"),
        (
            json!({"autopilot": {"max_trailing_logs": -1}}),
            "autopilot.max_trailing_logs",
        ),
        (json!({"autopilot": {"bogus": 1}}), "autopilot.bogus"),
        (
            json!({"autopilot": {"server_stabilization_time": "soon"}}),
            "autopilot.server_stabilization_time",
        ),
        (
            json!({"tls": {"defaults": {"verify_incoming": true}}}),
            "ca_file",
        ),
        (
            json!({"tls": {"defaults": {"cert_file": "c.pem"}}}),
            "key_file",
        ),
        (json!({"tls": {"everything": {}}}), "tls.everything"),
        (
            json!({"performance": {"raft_multiplier": 11}}),
            "raft_multiplier",
        ),
        (
            json!({"services": [{"name": "x", "port": "eighty"}]}),
            "services[0]",
        ),
    ] {
        let err = load(&[ConfigSource::Json("f".into(), value)]).unwrap_err();
        assert!(err.0.contains(needle), "{err} should mention {needle}");
    }
}

#[test]
fn hcl_parse_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.hcl");
    std::fs::write(&path, "datacenter = \"x\"\nports {\n").unwrap();
    let err = load(&[ConfigSource::File(path)]).unwrap_err();
    assert!(err.0.contains("bad.hcl") && err.0.contains("line"), "{err}");
}
