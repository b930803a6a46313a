//! `/v1/internal/ui/service-topology/:service` in Consul's shape: upstreams
//! from the proxies' registrations, downstreams from proxies whose
//! upstream is the service or routes to it, an upstream known only from
//! routing config, intentions' decision per edge, the protocol, and
//! Consul's 400s.

mod common;

use std::time::Duration;

use common::{eventually, write, TestAgent};
use serde_json::{json, Value};

const SERVICES: &str = r#"
services {
  name = "web"
  port = 8080
  connect { sidecar_service { proxy {
    upstreams { destination_name = "db" local_bind_port = 9191 }
    upstreams { destination_name = "shop" local_bind_port = 9192 }
    upstreams { destination_type = "prepared_query" destination_name = "nearest" local_bind_port = 9194 }
  } } }
}
services {
  name = "db"
  port = 9090
  tags = ["primary"]
  connect { sidecar_service {} }
}
services {
  name = "cart"
  port = 7070
  connect { sidecar_service { proxy { upstreams { destination_name = "shop" local_bind_port = 9193 } } } }
}
services {
  name = "api"
  port = 6060
}
"#;

fn topology(agent: &TestAgent, service: &str) -> Value {
    agent
        .get(&format!("/v1/internal/ui/service-topology/{service}?kind="))
        .unwrap()
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["Name"].as_str().unwrap())
        .collect()
}

fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["Name"] == name)
        .unwrap_or_else(|| panic!("{name} in {list}"))
}

#[test]
fn upstreams_downstreams_and_decisions_in_consuls_shape() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "services.hcl", SERVICES);
    let agent = TestAgent::dev(&["-config-file", config.to_str().unwrap()]);
    eventually(Duration::from_secs(10), || {
        let list = agent.get("/v1/catalog/services").ok()?;
        list.get("cart-sidecar-proxy").map(|_| ())
    });
    // shop has no instances, only a resolver sending it to db.
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-resolver","Name":"shop","Redirect":{"Service":"db"}}"#,
    );
    assert_eq!(status, 200, "{body}");

    let web = topology(&agent, "web");
    assert_eq!(web["Protocol"], "tcp");
    assert_eq!(web["TransparentProxy"], false);
    assert_eq!(web["FilteredByACLs"], false);
    assert_eq!(web["Downstreams"], json!([]));
    // db from the registration (the prepared query is no edge), then shop
    // from its routing config with no instances.
    assert_eq!(names(&web["Upstreams"]), ["db", "shop"]);
    let db = find(&web["Upstreams"], "db");
    let keys: Vec<&String> = db.as_object().unwrap().keys().collect();
    let expected: Vec<&str> = common::SERVICE_SUMMARY_KEYS
        .into_iter()
        .chain(["Source", "Intention"])
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(db["Source"], "proxy-registration");
    assert_eq!(db["Tags"], json!(["primary"]));
    assert_eq!(db["InstanceCount"], 1, "its sidecar is folded in: {db}");
    assert_eq!(
        db["Intention"],
        json!({"Allowed": true, "HasPermissions": false, "ExternalSource": "", "HasExact": false, "DefaultAllow": true})
    );
    let shop = find(&web["Upstreams"], "shop");
    assert_eq!(shop["Source"], "routing-config");
    assert_eq!(
        (shop["InstanceCount"].clone(), shop["Datacenter"].clone()),
        (json!(0), json!("dc1"))
    );
    assert_eq!(shop["Nodes"], Value::Null);

    // db is called by web directly and by cart through shop's resolver;
    // api (no sidecar, not transparent) is no downstream.
    let db_view = topology(&agent, "db");
    assert_eq!(names(&db_view["Downstreams"]), ["cart", "web"]);
    assert_eq!(
        find(&db_view["Downstreams"], "cart")["Source"],
        "proxy-registration"
    );
    assert_eq!(db_view["Upstreams"], json!([]));

    // A deny intention and an L7 one show in the decisions.
    let out = agent.cli(&["intention", "create", "-deny", "web", "db"]);
    assert!(out.status.success(), "{out:?}");
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"proxy-defaults","Name":"global","Config":{"protocol":"http"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = agent.put(
        "/v1/config",
        r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"web","Action":"deny"},{"Name":"cart","Permissions":[{"Action":"allow","HTTP":{"PathPrefix":"/"}}]}]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let db_view = topology(&agent, "db");
    assert_eq!(db_view["Protocol"], "http");
    let web_edge = &find(&db_view["Downstreams"], "web")["Intention"];
    assert_eq!(
        (web_edge["Allowed"].clone(), web_edge["HasExact"].clone()),
        (json!(false), json!(true))
    );
    let cart_edge = &find(&db_view["Downstreams"], "cart")["Intention"];
    assert_eq!(
        (
            cart_edge["Allowed"].clone(),
            cart_edge["HasPermissions"].clone()
        ),
        (json!(false), json!(true))
    );
    assert_eq!(
        find(&topology(&agent, "web")["Upstreams"], "db")["Intention"]["Allowed"],
        false
    );
}

#[test]
fn consuls_400s_and_the_blocking_index() {
    let agent = TestAgent::dev(&[]);
    let ask = |path: &str| {
        let (status, _, body) = agent.request("GET", path, None);
        (status, body)
    };
    assert_eq!(
        ask("/v1/internal/ui/service-topology/web"),
        (400, "Missing service kind".to_string())
    );
    assert_eq!(
        ask("/v1/internal/ui/service-topology/web?kind=connect-proxy"),
        (
            400,
            "Unsupported service kind \"connect-proxy\"".to_string()
        )
    );
    assert_eq!(
        ask("/v1/internal/ui/service-topology/"),
        (400, "Missing service name".to_string())
    );
    let (status, headers, body) = agent.request(
        "GET",
        "/v1/internal/ui/service-topology/web?kind=ingress-gateway",
        None,
    );
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    // No ingress-gateway entry: no protocol.
    assert_eq!(answer["Protocol"], "");
    assert!(
        common::header(&headers, "x-consul-index").is_some(),
        "{headers:?}"
    );
}

/// `/v1/internal/ui/gateway-services-nodes/:gateway`: a summary per
/// linked service (one with no instances too), an ingress gateway's
/// addresses, `[]` for an unknown gateway, and Consul's 400.
#[test]
fn a_gateways_services_as_summaries() {
    let agent = TestAgent::dev(&[]);
    for (name, port) in [("web", 80), ("api", 81)] {
        let (status, body) = agent.put(
            "/v1/agent/service/register",
            &format!(r#"{{"Name":"{name}","Port":{port}}}"#),
        );
        assert_eq!(status, 200, "{body}");
    }
    for entry in [
        r#"{"Kind":"ingress-gateway","Name":"ing","Listeners":[{"Port":8080,"Protocol":"tcp","Services":[{"Name":"web"}]}]}"#,
        r#"{"Kind":"terminating-gateway","Name":"term","Services":[{"Name":"api"},{"Name":"ghost"}]}"#,
    ] {
        let (status, body) = agent.put("/v1/config", entry);
        assert_eq!(status, 200, "{body}");
    }
    let ingress = agent
        .get("/v1/internal/ui/gateway-services-nodes/ing")
        .unwrap();
    assert_eq!(names(&ingress), ["web"]);
    assert_eq!(ingress[0]["InstanceCount"], 1);
    assert_eq!(
        ingress[0]["GatewayConfig"],
        json!({"Addresses": ["web.ingress.dc1.consul:8080"]})
    );
    let terminating = agent
        .get("/v1/internal/ui/gateway-services-nodes/term")
        .unwrap();
    assert_eq!(names(&terminating), ["api", "ghost"]);
    let ghost = find(&terminating, "ghost");
    assert_eq!(
        (
            ghost["InstanceCount"].clone(),
            ghost["Nodes"].clone(),
            ghost["GatewayConfig"].clone()
        ),
        (json!(0), Value::Null, json!({}))
    );
    assert_eq!(
        agent
            .get("/v1/internal/ui/gateway-services-nodes/nobody")
            .unwrap(),
        json!([])
    );
    let (status, _, body) = agent.request("GET", "/v1/internal/ui/gateway-services-nodes/", None);
    assert_eq!((status, body.as_str()), (400, "Missing gateway name"));

    // The intentions whose destination the terminating gateway links.
    for (source, destination) in [("web", "api"), ("web", "other"), ("*", "*")] {
        let out = agent.cli(&["intention", "create", "-deny", source, destination]);
        assert!(out.status.success(), "{out:?}");
    }
    let intentions = agent
        .get("/v1/internal/ui/gateway-intentions/term")
        .unwrap();
    let pairs: Vec<(&str, &str)> = intentions
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["SourceName"].as_str().unwrap(),
                i["DestinationName"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(pairs, [("web", "api"), ("*", "*")]);
    assert_eq!(
        agent
            .get("/v1/internal/ui/gateway-intentions/nobody")
            .unwrap(),
        json!([])
    );
    let (status, _, body) = agent.request("GET", "/v1/internal/ui/gateway-intentions/", None);
    assert_eq!((status, body.as_str()), (400, "Missing gateway name"));
}
