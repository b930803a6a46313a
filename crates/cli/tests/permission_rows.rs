//! The HTTP half of the permission table: every row of
//! `legate_acl::doors::HTTP` tried through the binary (a dev agent with
//! `default_policy = "deny"`) with a token holding exactly the row's
//! permissions on the fixtures' names and with tokens each lacking one of
//! them: denied rows answer 403 `Permission denied` (a transaction 409),
//! filtered rows leave the fixture out and set
//! `X-Consul-Results-Filtered-By-ACLs`, open rows answer the anonymous
//! token, and rows for a known token refuse an unknown one with
//! `ACL not found`. (The server-port half is
//! `crates/server/tests/permission_rows.rs`.) With
//! `enable_key_list_policy`, recursive KV reads need `key:list` first.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::{eventually, try_http_request_full, try_http_request_within};
use legate_acl::doors::example::{name_for, EVENT, KEY, NODE, QUERY, SERVICE};
use legate_acl::doors::{config_entry_needs, Need, Needs, Side, HTTP};
use legate_acl::Resource;
use serde_json::{json, Value};

const CHECK: &str = "fx-web-check";
const UNKNOWN: &str = "00000000-1111-2222-3333-444444444444";
/// The fixtures' auth method.
const AUTH_METHOD: &str = "fx-jwt";

/// The key prefix a row's key rules are written for: recursive deletes
/// need a prefix rule (an exact rule governs no prefix), the root rows
/// one on `""`.
fn key_prefix_of(door: &str) -> Option<&'static str> {
    if door.starts_with("DELETE /v1/kv/?") || door == "PUT /v1/kv/" {
        Some("")
    } else if door == "DELETE /v1/kv/{*key}?recurse" {
        Some(KEY)
    } else {
        None
    }
}

/// The rules granting `need` for `door`.
fn rule(door: &str, need: &Need) -> String {
    match key_prefix_of(door) {
        Some(prefix) if need.resource == Resource::Key => format!(
            "key_prefix {prefix:?} {{ policy = \"{}\" }}\n",
            need.access.as_str()
        ),
        _ => need.granting_rules(name_for(need.resource)),
    }
}

/// Rules every token of a row holds besides the row's needs: the connect
/// rows list proxy instances, each filtered by `service:read` on its own
/// name (the sidecar's), as the table's note says.
fn common_rules(door: &str) -> &'static str {
    if door.contains("/connect/{service}") {
        "service \"fx-web-sidecar-proxy\" { policy = \"read\" }\n"
    } else if door.contains("/ingress/{service}") {
        "service \"fx-ingress\" { policy = \"read\" }\n"
    } else {
        ""
    }
}

/// A coordinate at the origin.
fn coordinate() -> Value {
    json!({"Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], "Error": 1.5, "Adjustment": 0.0, "Height": 1e-5})
}

/// Whether a response said its results were filtered by ACLs.
fn filtered_by_acls(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("X-Consul-Results-Filtered-By-ACLs") && v == "true")
}

/// What a request answered (statuses and texts are shown in failures).
#[derive(Debug)]
#[allow(dead_code)]
enum Outcome {
    Answered {
        status: u16,
        filtered: bool,
        text: String,
    },
    Refused(String),
    Failed {
        status: u16,
        text: String,
    },
}

fn outcome(status: u16, headers: &[(String, String)], text: String) -> Outcome {
    let refusal = text.contains("Permission denied") || text.contains("ACL not found");
    match status {
        403 if text.contains("ACL bootstrap no longer allowed") => Outcome::Failed { status, text },
        403 => Outcome::Refused(text),
        // A transaction refused per operation.
        409 if refusal => Outcome::Refused(text),
        200..=299 | 404 => Outcome::Answered {
            status,
            filtered: filtered_by_acls(headers),
            text,
        },
        _ => Outcome::Failed { status, text },
    }
}

/// What each row is tried on.
#[derive(Clone)]
struct Fixtures {
    session: String,
    /// The prepared query named [`QUERY`].
    query: String,
    intention: String,
    token: String,
    policy: (String, String),
    role: (String, String),
    /// A snapshot taken with the management token (for the restore row).
    snapshot: Vec<u8>,
    /// A name no earlier row used.
    unique: String,
    /// A token made by logging in with the fixtures' auth method.
    login_token: String,
}

struct Harness {
    acl: Acl,
    minted: AtomicUsize,
    snapshot: Vec<u8>,
    /// The fixtures as last made, while no request since could have
    /// changed them (only reads were sent).
    made: std::sync::Mutex<Option<Fixtures>>,
}

impl Harness {
    fn start(acl_extra: &str) -> Harness {
        // A metrics proxy to a closed port: its row answers 502 once allowed.
        let acl = Acl::start_full(
            acl_extra,
            &format!("agent = \"{ROOT}\""),
            &[
                &format!("-node={NODE}"),
                "-hcl=ui_config { metrics_proxy { base_url = \"http://127.0.0.1:9\" } }",
            ],
        );
        let mut h = Harness {
            acl,
            minted: AtomicUsize::new(0),
            snapshot: Vec::new(),
            made: std::sync::Mutex::new(None),
        };
        // Once: an event, a coordinate, a mesh gateway in this datacenter's
        // federation state.
        h.root("PUT", &format!("/v1/event/fire/{EVENT}"), None);
        h.root(
            "PUT",
            "/v1/agent/service/register",
            Some(
                &json!({"ID": "fx-gateway", "Name": SERVICE, "Kind": "mesh-gateway", "Port": 8443})
                    .to_string(),
            ),
        );
        h.root(
            "PUT",
            "/v1/coordinate/update",
            Some(&json!({"Node": NODE, "Coord": coordinate()}).to_string()),
        );
        for (path, wanted) in [
            ("/v1/coordinate/nodes", NODE),
            ("/v1/internal/federation-states/mesh-gateways", SERVICE),
        ] {
            eventually(Duration::from_secs(60), || {
                let (status, _, text) = h.acl.call("GET", path, Some(ROOT), None);
                (status == 200 && text.contains(wanted)).then_some(())
            });
        }
        let (status, _, body) = try_http_request_full(
            h.acl.agent.http_port,
            "GET",
            "/v1/snapshot",
            &[("X-Consul-Token", ROOT)],
            None,
        )
        .unwrap();
        assert_eq!(status, 200);
        h.snapshot = body;
        h
    }

    fn next(&self) -> usize {
        self.minted.fetch_add(1, Ordering::Relaxed)
    }

    /// A request with the management token that must succeed.
    fn root(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let headers = [("X-Consul-Token", ROOT)];
        let port = self.acl.agent.http_port;
        let Some((status, _, text)) = try_http_request_full(
            port,
            method,
            path,
            &headers,
            body.map(|b| b.as_bytes().to_vec()),
        ) else {
            panic!(
                "{method} {path}: the agent did not answer; its log:\n{}",
                self.acl.agent.log_text()
            );
        };
        let text = String::from_utf8_lossy(&text).to_string();
        assert_eq!(status, 200, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// A token with exactly `rules` (none: a token without policies).
    fn token(&self, rules: &str) -> String {
        if rules.is_empty() {
            let token = self.root("PUT", "/v1/acl/token", Some("{}"));
            return token["SecretID"].as_str().unwrap().to_string();
        }
        self.acl
            .token_with_rules(&format!("row-{}", self.next()), rules)
    }

    /// Everything the rows name: made again when a request that may have
    /// changed them was sent since they were last made.
    fn fixtures(&self) -> Fixtures {
        let unique = format!("u{}", self.next());
        let mut made = self.made.lock().unwrap();
        let fixtures = match made.take() {
            Some(fixtures) => fixtures,
            None => self.make_fixtures(),
        };
        *made = Some(fixtures.clone());
        Fixtures { unique, ..fixtures }
    }

    fn make_fixtures(&self) -> Fixtures {
        let n = self.next();
        self.root(
            "PUT",
            "/v1/agent/service/register",
            Some(
                &json!({
                    "ID": SERVICE, "Name": SERVICE, "Port": 80,
                    "Check": {"CheckID": CHECK, "TTL": "10m"},
                    "Connect": {"SidecarService": {}}
                })
                .to_string(),
            ),
        );
        self.root(
            "PUT",
            "/v1/agent/check/register",
            Some(r#"{"ID":"fx-node-check","Name":"node","TTL":"10m"}"#),
        );
        // An ingress gateway exposing the service (tagged with its name, so
        // an answer that lists the gateway names the service too).
        self.root(
            "PUT",
            "/v1/agent/service/register",
            Some(
                &json!({"Kind": "ingress-gateway", "Name": "fx-ingress", "Port": 8443, "Tags": [SERVICE]})
                    .to_string(),
            ),
        );
        self.root("PUT", &format!("/v1/kv/{KEY}"), Some("v"));
        let session = self.root(
            "PUT",
            "/v1/session/create",
            Some(&json!({"Node": NODE}).to_string()),
        );
        for entry in [
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
            json!({"Kind": "service-defaults", "Name": SERVICE, "Protocol": "http"}),
            json!({"Kind": "ingress-gateway", "Name": "fx-ingress", "Listeners": [
                {"Port": 8443, "Protocol": "http", "Services": [{"Name": SERVICE}]}
            ]}),
        ] {
            self.root("PUT", "/v1/config", Some(&entry.to_string()));
        }
        // The destination's intentions start over as legacy ones.
        let entry = format!("/v1/config/service-intentions/{SERVICE}");
        let _ = self.acl.call("DELETE", &entry, Some(ROOT), None);
        let intention = self.root(
            "POST",
            "/v1/connect/intentions",
            Some(
                &json!({"SourceName": "api", "DestinationName": SERVICE, "Action": "allow"})
                    .to_string(),
            ),
        );
        let token = self.root("PUT", "/v1/acl/token", Some("{}"));
        let policy_name = format!("spare-{n}");
        let policy = self.root(
            "PUT",
            "/v1/acl/policy",
            Some(&json!({"Name": policy_name}).to_string()),
        );
        let role = self.root(
            "PUT",
            "/v1/acl/role",
            Some(&json!({"Name": policy_name}).to_string()),
        );
        let _ = self.acl.call(
            "DELETE",
            &format!("/v1/agent/service/maintenance/{SERVICE}?enable=false"),
            Some(ROOT),
            None,
        );
        // The query (its name is unique): made again once a row deleted
        // it; its checks are the fixtures' TTL checks, critical until
        // passed, so it ignores them.
        let queries = self.root("GET", "/v1/query", None);
        let existing = queries
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["Name"] == QUERY)
            .map(|q| q["ID"].as_str().unwrap().to_string());
        let query = existing.unwrap_or_else(|| {
            let body = json!({"Name": QUERY, "Service": {"Service": SERVICE,
                "IgnoreCheckIDs": [CHECK, "fx-node-check"]}});
            let created = self.root("POST", "/v1/query", Some(&body.to_string()));
            created["ID"].as_str().unwrap().to_string()
        });
        // An auth method trusting the fixture key, a rule giving its
        // logins the service's identity, and a token made by login.
        let signer = common::jwt::Signer::fixture();
        self.root(
            "PUT",
            &format!("/v1/acl/auth-method/{AUTH_METHOD}"),
            Some(
                &json!({"Type": "jwt", "Config": {"JWTValidationPubKeys": [signer.public_pem()]}})
                    .to_string(),
            ),
        );
        let rules = self.root("GET", "/v1/acl/binding-rules", None);
        if rules.as_array().unwrap().is_empty() {
            self.root(
                "PUT",
                "/v1/acl/binding-rule",
                Some(
                    &json!({"AuthMethod": AUTH_METHOD, "BindType": "service", "BindName": SERVICE})
                        .to_string(),
                ),
            );
        }
        let now = common::jwt::now();
        let jwt = signer.sign(&json!({"sub": "fx", "iat": now, "exp": now + 600}), None);
        let login = self.root(
            "POST",
            "/v1/acl/login",
            Some(&json!({"AuthMethod": AUTH_METHOD, "BearerToken": jwt}).to_string()),
        );
        Fixtures {
            login_token: login["SecretID"].as_str().unwrap().to_string(),
            query,
            session: session["ID"].as_str().unwrap().to_string(),
            intention: intention["ID"].as_str().unwrap().to_string(),
            token: token["AccessorID"].as_str().unwrap().to_string(),
            policy: (
                policy["ID"].as_str().unwrap().to_string(),
                policy_name.clone(),
            ),
            role: (role["ID"].as_str().unwrap().to_string(), policy_name),
            snapshot: self.snapshot.clone(),
            unique: format!("u{n}"),
        }
    }

    /// Sends `door`'s example with `token` (none when empty); `None` for a
    /// row this test has no example of.
    fn call(&self, door: &str, token: &str, fx: &Fixtures) -> Option<Outcome> {
        let (method, path, body) = example(door, fx)?;
        if method != "GET" {
            *self.made.lock().unwrap() = None;
        }
        let headers: Vec<(&str, &str)> = if token.is_empty() {
            Vec::new()
        } else {
            vec![("X-Consul-Token", token)]
        };
        // The log stream stays open: its head is the answer.
        let patience = if door == "GET /v1/agent/monitor" || door == "GET /v1/agent/metrics/stream"
        {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(700)
        };
        let Some((status, headers, text)) = try_http_request_within(
            self.acl.agent.http_port,
            method,
            &path,
            &headers,
            body,
            patience,
        ) else {
            panic!(
                "{door}: the agent did not answer; its log:\n{}",
                self.acl.agent.log_text()
            );
        };
        let mut text = String::from_utf8_lossy(&text).to_string();
        if door.ends_with("/execute") && status == 200 {
            // What the ACLs filter is the instances (the answer names the
            // service looked up whatever the token).
            let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            text = answer["Nodes"].to_string();
        }
        Some(outcome(status, &headers, text))
    }
}

/// A concrete request for each row: method, path and body.
fn example(door: &str, fx: &Fixtures) -> Option<(&'static str, String, Option<Vec<u8>>)> {
    let body = |v: Value| Some(v.to_string().into_bytes());
    let coord = coordinate();
    let key = "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=";
    let (method, rest) = door.split_once(' ')?;
    let method: &'static str = match method {
        "GET" => "GET",
        "PUT" => "PUT",
        "POST" => "POST",
        _ => "DELETE",
    };
    let (path, body) = match door {
        "GET /v1/agent/service/{id}"
        | "GET /v1/agent/health/service/id/{id}"
        | "GET /v1/agent/health/service/name/{name}"
        | "GET /v1/agent/connect/ca/leaf/{service}"
        | "PUT /v1/agent/service/deregister/{id}"
        | "GET /v1/catalog/service/{service}"
        | "GET /v1/catalog/connect/{service}"
        | "GET /v1/health/checks/{service}"
        | "GET /v1/health/service/{service}"
        | "GET /v1/health/connect/{service}"
        | "GET /v1/health/ingress/{service}"
        | "GET /v1/discovery-chain/{service}"
        | "GET /v1/catalog/gateway-services/{gateway}"
        | "GET /v1/internal/ui/traffic/{service}"
        | "GET /v1/internal/ui/gateway-services-nodes/{gateway}"
        | "GET /v1/internal/ui/gateway-intentions/{gateway}" => (fill(rest, SERVICE), None),
        "GET /v1/internal/ui/node/{node}" => (fill(rest, NODE), None),
        "GET /v1/internal/ui/proxy/{id}" => (fill(rest, "fx-gateway"), None),
        "GET /v1/internal/ui/service-topology/{service}" => {
            (format!("{}?kind=", fill(rest, SERVICE)), None)
        }
        "POST /v1/discovery-chain/{service}" => (fill(rest, SERVICE), body(json!({}))),
        "PUT /v1/agent/service/maintenance/{id}" => (
            format!("{}?enable=true&reason=r", fill(rest, SERVICE)),
            None,
        ),
        "PUT /v1/agent/maintenance" => (format!("{rest}?enable=false"), None),
        "GET /v1/agent/monitor" => (format!("{rest}?loglevel=error"), None),
        "PUT /v1/agent/service/register" => (
            rest.to_string(),
            body(json!({"ID": SERVICE, "Name": SERVICE, "Port": 81})),
        ),
        "PUT /v1/agent/check/register" => (
            rest.to_string(),
            body(
                json!({"ID": format!("c-{}", fx.unique), "Name": "c", "ServiceID": SERVICE, "TTL": "10m"}),
            ),
        ),
        "PUT /v1/agent/check/deregister/{id}"
        | "PUT /v1/agent/check/pass/{id}"
        | "PUT /v1/agent/check/warn/{id}"
        | "PUT /v1/agent/check/fail/{id}" => (fill(rest, CHECK), None),
        "PUT /v1/agent/check/update/{id}" => (
            fill(rest, CHECK),
            body(json!({"Status": "passing", "Output": "ok"})),
        ),
        "POST /v1/agent/connect/authorize" | "PUT /v1/agent/connect/authorize" => (
            rest.to_string(),
            body(
                json!({"Target": SERVICE, "ClientCertURI": "spiffe://11111111-2222-3333-4444-555555555555.consul/ns/default/dc/dc1/svc/api"}),
            ),
        ),
        "PUT /v1/agent/join/{address}" => (fill(rest, "127.0.0.1:1"), None),
        "PUT /v1/agent/force-leave/{node}" => (fill(rest, "nobody"), None),
        "PUT /v1/agent/token/{kind}" => (fill(rest, "replication"), body(json!({"Token": ""}))),
        "POST /v1/operator/keyring"
        | "PUT /v1/operator/keyring"
        | "DELETE /v1/operator/keyring" => (rest.to_string(), body(json!({"Key": key}))),
        "PUT /v1/event/fire/{name}" => (fill(rest, EVENT), None),
        "POST /v1/connect/intentions" => (
            rest.to_string(),
            body(json!({"SourceName": fx.unique, "DestinationName": SERVICE, "Action": "allow"})),
        ),
        "GET /v1/connect/intentions/exact" | "DELETE /v1/connect/intentions/exact" => {
            (format!("{rest}?source=api&destination={SERVICE}"), None)
        }
        "PUT /v1/connect/intentions/exact" => (
            format!("{rest}?source=api&destination={SERVICE}"),
            body(json!({"Action": "deny"})),
        ),
        "GET /v1/connect/intentions/match" => {
            (format!("{rest}?by=destination&name={SERVICE}"), None)
        }
        "GET /v1/connect/intentions/check" => {
            (format!("{rest}?source=api&destination={SERVICE}"), None)
        }
        "GET /v1/connect/intentions/{id}" | "DELETE /v1/connect/intentions/{id}" => {
            (fill(rest, &fx.intention), None)
        }
        "PUT /v1/connect/intentions/{id}" => (
            fill(rest, &fx.intention),
            body(json!({"SourceName": "api", "DestinationName": SERVICE, "Action": "deny"})),
        ),
        "PUT /v1/connect/ca/configuration" => (
            rest.to_string(),
            body(json!({"Provider": "no-such-provider", "Config": {}})),
        ),
        "PUT /v1/catalog/register" => (
            rest.to_string(),
            body(
                json!({"Node": NODE, "Address": "127.0.0.1", "SkipNodeUpdate": true, "Service": {"ID": fx.unique, "Service": SERVICE, "Port": 82}}),
            ),
        ),
        "PUT /v1/catalog/deregister" => (
            rest.to_string(),
            body(json!({"Node": NODE, "ServiceID": SERVICE})),
        ),
        "GET /v1/catalog/node/{node}"
        | "GET /v1/catalog/node-services/{node}"
        | "GET /v1/health/node/{node}"
        | "GET /v1/session/node/{node}"
        | "GET /v1/coordinate/node/{node}" => (fill(rest, NODE), None),
        "GET /v1/health/state/{state}" => (fill(rest, "any"), None),
        "PUT /v1/config" => (
            rest.to_string(),
            body(json!({"Kind": "service-defaults", "Name": SERVICE, "Protocol": "http"})),
        ),
        "GET /v1/config/{kind}" => (fill(rest, "service-defaults"), None),
        "GET /v1/config/{kind}/{name}" | "DELETE /v1/config/{kind}/{name}" => {
            (format!("/v1/config/service-defaults/{SERVICE}"), None)
        }
        "GET /v1/kv/{*key}" | "DELETE /v1/kv/{*key}" => (format!("/v1/kv/{KEY}"), None),
        "PUT /v1/kv/{*key}" => (format!("/v1/kv/{KEY}"), Some(b"w".to_vec())),
        "GET /v1/kv/{*key}?recurse" => ("/v1/kv/app?recurse".to_string(), None),
        "GET /v1/kv/{*key}?keys" => ("/v1/kv/app?keys".to_string(), None),
        "DELETE /v1/kv/{*key}?recurse" => (format!("/v1/kv/{KEY}?recurse"), None),
        "GET /v1/kv/?recurse" | "DELETE /v1/kv/?recurse" => ("/v1/kv/?recurse".to_string(), None),
        "PUT /v1/kv/" => ("/v1/kv/".to_string(), Some(b"w".to_vec())),
        "PUT /v1/txn" => (
            rest.to_string(),
            body(json!([{"KV": {"Verb": "set", "Key": KEY, "Value": "dg=="}}])),
        ),
        "PUT /v1/session/create" => (rest.to_string(), body(json!({"Node": NODE}))),
        "POST /v1/query" => (
            rest.to_string(),
            body(json!({"Name": QUERY, "Service": {"Service": SERVICE}})),
        ),
        "GET /v1/query/{id}" | "DELETE /v1/query/{id}" => (fill(rest, &fx.query), None),
        "PUT /v1/query/{id}" => (
            fill(rest, &fx.query),
            body(json!({"Name": QUERY, "Service": {"Service": SERVICE,
                "IgnoreCheckIDs": [CHECK, "fx-node-check"]}})),
        ),
        "GET /v1/query/{id}/execute" | "GET /v1/query/{id}/explain" => (fill(rest, QUERY), None),
        "PUT /v1/session/destroy/{id}"
        | "PUT /v1/session/renew/{id}"
        | "GET /v1/session/info/{id}" => (fill(rest, &fx.session), None),
        "DELETE /v1/operator/raft/peer" => (format!("{rest}?address=127.0.0.9:8300"), None),
        "PUT /v1/operator/autopilot/configuration" => (
            rest.to_string(),
            body(
                json!({"CleanupDeadServers": true, "LastContactThreshold": "200ms",
                "MaxTrailingLogs": 250, "ServerStabilizationTime": "10s"}),
            ),
        ),
        "PUT /v1/snapshot" => (rest.to_string(), Some(fx.snapshot.clone())),
        "GET /v1/internal/federation-state/{dc}" => (fill(rest, "dc1"), None),
        "PUT /v1/coordinate/update" => (
            rest.to_string(),
            body(json!({"Node": NODE, "Coord": coord})),
        ),
        "PUT /v1/acl/token" => (rest.to_string(), body(json!({"Description": fx.unique}))),
        "GET /v1/acl/token/{id}" | "DELETE /v1/acl/token/{id}" => (fill(rest, &fx.token), None),
        "PUT /v1/acl/token/{id}" => (
            fill(rest, &fx.token),
            body(json!({"Description": "changed"})),
        ),
        "PUT /v1/acl/token/{id}/clone" => {
            (fill(rest, &fx.token), body(json!({"Description": "clone"})))
        }
        "PUT /v1/acl/policy" | "PUT /v1/acl/role" => (
            rest.to_string(),
            body(json!({"Name": format!("new-{}", fx.unique)})),
        ),
        "GET /v1/acl/policy/{id}" | "DELETE /v1/acl/policy/{id}" => {
            (fill(rest, &fx.policy.0), None)
        }
        "PUT /v1/acl/policy/{id}" => (
            fill(rest, &fx.policy.0),
            body(json!({"Name": fx.policy.1, "Description": "d"})),
        ),
        "GET /v1/acl/policy/name/{*name}" => (fill(rest, &fx.policy.1), None),
        "GET /v1/acl/role/{id}" | "DELETE /v1/acl/role/{id}" => (fill(rest, &fx.role.0), None),
        "PUT /v1/acl/role/{id}" => (
            fill(rest, &fx.role.0),
            body(json!({"Name": fx.role.1, "Description": "d"})),
        ),
        "GET /v1/acl/role/name/{*name}" => (fill(rest, &fx.role.1), None),
        "GET /v1/acl/templated-policy/name/{*name}" => (fill(rest, "builtin/dns"), None),
        "GET /v1/internal/ui/metrics-proxy/{*path}" => (fill(rest, "api/v1/query"), None),
        "PUT /v1/acl/auth-method" => (
            rest.to_string(),
            body(json!({"Name": fx.unique, "Type": "jwt",
                "Config": {"JWTValidationPubKeys": [common::jwt::Signer::fixture().public_pem()]}})),
        ),
        "GET /v1/acl/auth-method/{name}" | "DELETE /v1/acl/auth-method/{name}" => {
            (fill(rest, AUTH_METHOD), None)
        }
        "PUT /v1/acl/auth-method/{name}" => (
            fill(rest, AUTH_METHOD),
            body(json!({"Type": "jwt", "Description": "d",
                "Config": {"JWTValidationPubKeys": [common::jwt::Signer::fixture().public_pem()]}})),
        ),
        "PUT /v1/acl/binding-rule" => (
            rest.to_string(),
            body(json!({"AuthMethod": AUTH_METHOD, "BindType": "node", "BindName": NODE})),
        ),
        "GET /v1/acl/binding-rule/{id}" | "DELETE /v1/acl/binding-rule/{id}" => {
            (fill(rest, "6c1ee7d2-0000-4000-8000-000000000000"), None)
        }
        "PUT /v1/acl/binding-rule/{id}" => (
            fill(rest, "6c1ee7d2-0000-4000-8000-000000000000"),
            body(json!({"AuthMethod": AUTH_METHOD, "BindType": "node", "BindName": NODE})),
        ),
        "POST /v1/acl/login" => (
            rest.to_string(),
            body(json!({"AuthMethod": AUTH_METHOD, "BearerToken": "not.a.jwt"})),
        ),
        "POST /v1/acl/templated-policy/preview/{*name}" => (
            fill(rest, "builtin/service"),
            body(json!({"Name": SERVICE})),
        ),
        "POST /v1/internal/acl/authorize" => (
            rest.to_string(),
            body(json!([{"Resource": "service", "Segment": SERVICE, "Access": "read"}])),
        ),
        "PUT /v1/acl/destroy/{id}" | "GET /v1/acl/info/{id}" | "PUT /v1/acl/clone/{id}" => {
            (fill(rest, &fx.token), None)
        }
        // Everything else takes no parameter.
        _ if !rest.contains('{') => (rest.to_string(), None),
        _ => return None,
    };
    Some((method, path, body))
}

/// `path` with its one `{param}` (or `{*param}`) replaced by `value`.
fn fill(path: &str, value: &str) -> String {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) => format!("{}{value}{}", &path[..open], &path[close + 1..]),
        _ => path.to_string(),
    }
}

/// The needs a row is tried with (config entries: service-defaults).
fn row_needs(door: &str, needs: Needs) -> Needs {
    match needs {
        Needs::ByKind(side) => {
            let kind = config_entry_needs("service-defaults").unwrap();
            match side {
                Side::Write => Needs::All(std::slice::from_ref(&kind.write)),
                Side::Read if door == "GET /v1/config/{kind}" => {
                    Needs::Filtered(std::slice::from_ref(kind.read.as_ref().unwrap()))
                }
                Side::Read => Needs::All(std::slice::from_ref(kind.read.as_ref().unwrap())),
            }
        }
        other => other,
    }
}

/// Tokens for a row: one holding all of `needs`, and for each need one
/// holding the others and that one a level weaker (or not at all).
fn tokens_for(h: &Harness, door: &str, needs: &[Need]) -> (String, Vec<(Need, String)>) {
    let all: String = needs.iter().map(|n| rule(door, n)).collect();
    let allowed = h.token(&(all + common_rules(door)));
    let mut denied = Vec::new();
    for (i, need) in needs.iter().enumerate() {
        let mut rules: String = common_rules(door).to_string();
        rules += &needs
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| rule(door, n))
            .collect::<String>();
        if let Some(weaker) = need.weaker() {
            rules.push_str(&rule(door, &weaker));
        }
        denied.push((*need, h.token(&rules)));
    }
    (allowed, denied)
}

/// Rows whose request is refused for everyone before any ACL check.
fn refused_before_checks(note: &str) -> bool {
    note.starts_with("refused before any check")
}

#[test]
fn every_http_row_allows_what_it_names_and_refuses_the_rest() {
    let h = Harness::start("");
    let mut failures = Vec::new();
    // Rows that would take the state or the agent away go last.
    let last = |door: &str| match door {
        "PUT /v1/snapshot" => 1,
        "PUT /v1/agent/leave" => 2,
        _ => 0,
    };
    let mut rows: Vec<_> = HTTP.iter().collect();
    rows.sort_by_key(|d| last(d.door));
    for row in rows {
        let door = row.door;
        let fx = h.fixtures();
        let needs = row_needs(door, row.needs);
        let mut check =
            |what: &str, outcome: Option<Outcome>, ok: &dyn Fn(&Outcome) -> bool| match outcome {
                None => failures.push(format!("{door}: no example")),
                Some(o) if !ok(&o) => failures.push(format!("{door} {what}: {o:?}")),
                Some(_) => {}
            };
        let not_refused = |o: &Outcome| !matches!(o, Outcome::Refused(_));
        match needs {
            Needs::Nothing => check("anonymous", h.call(door, "", &fx), &not_refused),
            Needs::KnownToken => {
                // Logging out needs a token login made.
                let known = if door == "POST /v1/acl/logout" {
                    fx.login_token.clone()
                } else {
                    h.token("")
                };
                check("a known token", h.call(door, &known, &fx), &not_refused);
                check(
                    "an unknown token",
                    h.call(door, UNKNOWN, &fx),
                    &|o| matches!(o, Outcome::Refused(text) if text.contains("ACL not found")),
                );
            }
            Needs::All(list) | Needs::EachOperation(list) => {
                let (allowed, denied) = tokens_for(&h, door, list);
                // Refusals first: an allowed leave takes the agent away.
                for (need, token) in denied {
                    let fx = h.fixtures();
                    let what = format!(
                        "without {}:{}",
                        need.resource.as_str(),
                        need.access.as_str()
                    );
                    let outcome = h.call(door, &token, &fx);
                    if refused_before_checks(row.note) {
                        check(&what, outcome, &not_refused);
                    } else {
                        check(
                            &what,
                            outcome,
                            &|o| matches!(o, Outcome::Refused(text) if text.contains("Permission denied")),
                        );
                    }
                }
                let fx = h.fixtures();
                check("allowed", h.call(door, &allowed, &fx), &not_refused);
            }
            Needs::Filtered(list) => {
                let (allowed, denied) = tokens_for(&h, door, list);
                check("allowed", h.call(door, &allowed, &fx), &|o| match o {
                    Outcome::Answered { text, .. } => {
                        list.iter().all(|n| text.contains(name_for(n.resource)))
                    }
                    _ => false,
                });
                for (need, token) in denied {
                    let what = format!(
                        "without {}:{}",
                        need.resource.as_str(),
                        need.access.as_str()
                    );
                    let hidden = name_for(need.resource);
                    check(&what, h.call(door, &token, &fx), &|o| match o {
                        // A 404 is no row (its text names what was asked for).
                        Outcome::Answered {
                            filtered,
                            text,
                            status,
                        } => *filtered && (*status == 404 || !text.contains(hidden)),
                        _ => false,
                    });
                }
            }
            Needs::ByKind(_) => unreachable!("resolved by row_needs"),
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed: {failures:#?}",
        failures.len()
    );
}

#[test]
fn with_enable_key_list_policy_recursive_reads_need_list_on_the_prefix() {
    let h = Harness::start("enable_key_list_policy = true");
    h.fixtures();
    let read_only = h.token("key_prefix \"app\" { policy = \"read\" }");
    let list = h.token("key_prefix \"app\" { policy = \"list\" }");
    for path in ["/v1/kv/app?recurse", "/v1/kv/app?keys"] {
        let (status, _, text) = h.acl.call("GET", path, Some(&read_only), None);
        assert_eq!(status, 403, "{path}: {text}");
        assert_eq!(
            text,
            format!("Permission denied: token with AccessorID '{}' lacks permission 'key:list' on \"app\"", accessor(&h, &read_only)),
        );
        let (status, _, text) = h.acl.call("GET", path, Some(&list), None);
        assert_eq!(status, 200, "{path}: {text}");
        assert!(text.contains(KEY), "{path}: {text}");
    }
    // A single key still needs only read.
    let (status, _, text) = h
        .acl
        .call("GET", &format!("/v1/kv/{KEY}"), Some(&read_only), None);
    assert_eq!(status, 200, "{text}");
}

fn accessor(h: &Harness, secret: &str) -> String {
    let token = h.acl.json("GET", "/v1/acl/token/self", secret, None);
    token["AccessorID"].as_str().unwrap().to_string()
}
