//! The answers clients map to exceptions: for each endpoint's error and
//! empty cases, the status, the text (or the empty form: `[]`, `{}`,
//! `null`) Consul's handler gives, one row each, with the handler cited.
//! Rows are added as endpoints are matched against Consul's.

mod common;

use common::{http_request_full, TestAgent};

/// What a row expects of the body.
enum Body {
    /// Exactly this text.
    Is(&'static str),
    /// Starting with this text.
    Starts(&'static str),
}

/// One request and Consul's answer to it.
struct Row {
    method: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: Option<&'static str>,
    status: u16,
    answer: Body,
    /// The Consul handler the row follows.
    consul: &'static str,
}

const ROWS: &[Row] = &[
    Row {
        method: "GET",
        path: "/v1/catalog/nodes?ns=team",
        headers: &[],
        body: None,
        status: 400,
        answer: Body::Is(
            "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature",
        ),
        consul: "agent/http_ce.go parseEntMeta",
    },
    Row {
        method: "GET",
        path: "/v1/catalog/services",
        headers: &[("X-Consul-Namespace", "team")],
        body: None,
        status: 400,
        answer: Body::Is(
            "Invalid header: \"X-Consul-Namespace\" - Namespaces are a Consul Enterprise feature",
        ),
        consul: "agent/http_ce.go parseEntMeta",
    },
    Row {
        method: "GET",
        path: "/v1/kv/app?partition=p1",
        headers: &[],
        body: None,
        status: 400,
        answer: Body::Is(
            "Invalid query parameter: \"partition\" - Partitions are a Consul Enterprise feature",
        ),
        consul: "agent/http_ce.go parseEntMetaPartition",
    },
    Row {
        method: "GET",
        path: "/v1/health/service/web",
        headers: &[("X-Consul-Partition", "p1")],
        body: None,
        status: 400,
        answer: Body::Is(
            "Invalid header: \"X-Consul-Partition\" - Partitions are a Consul Enterprise feature",
        ),
        consul: "agent/http_ce.go parseEntMetaPartition",
    },
    Row {
        method: "GET",
        path: "/v1/query",
        headers: &[],
        body: None,
        status: 200,
        answer: Body::Is("[]"),
        consul: "agent/prepared_query_endpoint.go preparedQueryList (never null)",
    },
    Row {
        method: "GET",
        path: "/v1/query/6d2f0a52-0000-4000-8000-000000000000",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is("Query not found"),
        consul: "agent/prepared_query_endpoint.go preparedQueryGet",
    },
    Row {
        method: "GET",
        path: "/v1/query/nope/execute",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is("Query not found"),
        consul: "agent/prepared_query_endpoint.go preparedQueryExecute",
    },
    Row {
        method: "GET",
        path: "/v1/query/nope/explain",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is("Query not found"),
        consul: "agent/prepared_query_endpoint.go preparedQueryExplain",
    },
    Row {
        method: "PUT",
        path: "/v1/query/6d2f0a52-0000-4000-8000-000000000000",
        headers: &[],
        body: Some(r#"{"Service": {"Service": "db"}}"#),
        status: 500,
        answer: Body::Is(
            "Cannot modify non-existent prepared query: '6d2f0a52-0000-4000-8000-000000000000'",
        ),
        consul: "agent/consul/prepared_query_endpoint.go Apply",
    },
    Row {
        method: "POST",
        path: "/v1/query",
        headers: &[],
        body: Some(r#"{"Name": "q"}"#),
        status: 500,
        answer: Body::Is("Invalid prepared query: Must provide a Service name to query"),
        consul: "agent/consul/prepared_query_endpoint.go Apply, parseService",
    },
    Row {
        method: "POST",
        path: "/v1/query",
        headers: &[],
        body: Some(r#"{"Name": "q", "Service": {"Service": "db"}, "Template": {"Type": "glob"}}"#),
        status: 500,
        answer: Body::Starts("Bad Template.Type 'glob'"),
        consul: "agent/consul/prepared_query/template.go Compile",
    },
    Row {
        method: "GET",
        path: "/v1/catalog/services?peer=other",
        headers: &[],
        body: None,
        status: 200,
        answer: Body::Is("{}"),
        consul: "agent/catalog_endpoint.go CatalogServices (PeerName; empty map, not null)",
    },
    Row {
        method: "GET",
        path: "/v1/catalog/nodes?peer=other",
        headers: &[],
        body: None,
        status: 200,
        answer: Body::Is("[]"),
        consul: "agent/catalog_endpoint.go CatalogNodes (PeerName)",
    },
    Row {
        method: "GET",
        path: "/v1/catalog/service/consul?peer=other",
        headers: &[],
        body: None,
        status: 200,
        answer: Body::Is("[]"),
        consul: "agent/catalog_endpoint.go CatalogServiceNodes (PeerName)",
    },
    Row {
        method: "GET",
        path: "/v1/health/service/consul?peer=other",
        headers: &[],
        body: None,
        status: 200,
        answer: Body::Is("[]"),
        consul: "agent/health_endpoint.go HealthServiceNodes (PeerName)",
    },
    Row {
        method: "GET",
        path: "/v1/health/state/any?peer=other",
        headers: &[],
        body: None,
        status: 200,
        answer: Body::Is("[]"),
        consul: "agent/health_endpoint.go HealthChecksInState (PeerName)",
    },
    Row {
        method: "POST",
        path: "/v1/query",
        headers: &[],
        body: Some(r#"{"Service": {"Service": "db"}}"#),
        status: 500,
        answer: Body::Is("Invalid prepared query: Must be bound to a session"),
        consul: "agent/consul/prepared_query_endpoint.go parseQuery (anonymous queries)",
    },
    Row {
        method: "GET",
        path: "/v1/query/any/execute?connect=maybe",
        headers: &[],
        body: None,
        status: 500,
        answer: Body::Is(
            "Error parsing 'connect' value: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        consul: "agent/prepared_query_endpoint.go preparedQueryExecute",
    },
    Row {
        method: "GET",
        path: "/v1/query/any/execute?limit=ten",
        headers: &[],
        body: None,
        status: 500,
        answer: Body::Is("Bad limit: strconv.Atoi: parsing \"ten\": invalid syntax"),
        consul: "agent/prepared_query_endpoint.go parseLimit",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/deregister/nope",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is(
            "Unknown check ID \"nope\". Ensure that the check ID is passed, not the check name.",
        ),
        consul: "agent/agent_endpoint.go AgentDeregisterCheck (vetCheckUpdateWithAuthorizer)",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/pass/nope",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is(
            "Unknown check ID \"nope\". Ensure that the check ID is passed, not the check name.",
        ),
        consul: "agent/agent_endpoint.go AgentCheckPass (vetCheckUpdateWithAuthorizer)",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/update/nope",
        headers: &[],
        body: Some(r#"{"Status":"passing"}"#),
        status: 404,
        answer: Body::Is(
            "Unknown check ID \"nope\". Ensure that the check ID is passed, not the check name.",
        ),
        consul: "agent/agent_endpoint.go AgentCheckUpdate",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/update/nope",
        headers: &[],
        body: Some(r#"{"Status":"bogus"}"#),
        status: 400,
        answer: Body::Is("Invalid check status: 'bogus'"),
        consul: "agent/agent_endpoint.go AgentCheckUpdate (the status before the check)",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/register",
        headers: &[],
        body: Some(r#"{"Name":"c","ServiceID":"nosvc","TTL":"10s"}"#),
        status: 404,
        answer: Body::Is("ServiceID \"nosvc\" does not exist"),
        consul: "agent/agent_endpoint.go AgentRegisterCheck",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/register",
        headers: &[],
        body: Some(r#"{"Name":"h","ID":"h1","HTTP":"http://127.0.0.1:1/","Interval":"10s"}"#),
        status: 200,
        answer: Body::Is(""),
        consul: "agent/agent_endpoint.go AgentRegisterCheck",
    },
    Row {
        method: "PUT",
        path: "/v1/agent/check/pass/h1",
        headers: &[],
        body: None,
        status: 500,
        answer: Body::Is("CheckID \"h1\" does not have associated TTL"),
        consul: "agent/agent.go updateTTLCheck",
    },
    Row {
        method: "GET",
        path: "/v1/agent/monitor?loglevel=verbose",
        headers: &[],
        body: None,
        status: 400,
        answer: Body::Is("Unknown log level: verbose"),
        consul: "agent/agent_endpoint.go AgentMonitor",
    },
    Row {
        method: "GET",
        path: "/v1/agent/metrics?format=prometheus",
        headers: &[],
        body: None,
        status: 415,
        answer: Body::Is("Prometheus is not enabled since its retention time is not positive"),
        consul: "agent/agent_endpoint.go AgentMetrics",
    },
    Row {
        method: "GET",
        path: "/v1/agent/metrics",
        headers: &[("Accept", "application/openmetrics-text; version=1.0.0")],
        body: None,
        status: 415,
        answer: Body::Is("Prometheus is not enabled since its retention time is not positive"),
        consul: "agent/agent_endpoint.go acceptsOpenMetricsMimeType",
    },
    Row {
        method: "GET",
        path: "/v1/no/such/endpoint",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is("Invalid URL path: not a recognized HTTP API endpoint\n"),
        consul: "agent/http.go Index",
    },
    Row {
        method: "POST",
        path: "/favicon.ico",
        headers: &[],
        body: None,
        status: 404,
        answer: Body::Is(
            "Invalid URL path: if attempting to use the HTTP API, ensure the path starts with '/v1/'\n",
        ),
        consul: "agent/http.go Index",
    },
];

#[test]
fn error_and_empty_answers_are_consuls() {
    let agent = TestAgent::dev(&[]);
    for row in ROWS {
        let (status, _, text) =
            http_request_full(agent.http_port, row.method, row.path, row.headers, row.body);
        let what = format!("{} {} ({})", row.method, row.path, row.consul);
        assert_eq!(status, row.status, "{what}: {text}");
        match row.answer {
            Body::Is(expected) => assert_eq!(text, expected, "{what}"),
            Body::Starts(expected) => assert!(text.starts_with(expected), "{what}: {text}"),
        }
    }
}

/// `GET /`: Consul's index handler redirects to the UI's content path when
/// the UI is on (as in `-dev`) and answers 200 with its "UI disabled"
/// text when it is off, so a health check pointed at `/` passes.
#[test]
fn the_root_redirects_to_the_ui_or_says_it_is_disabled() {
    let dev = TestAgent::dev(&["-ui-content-path=dash"]);
    let (status, headers, _) = http_request_full(dev.http_port, "GET", "/", &[], None);
    assert_eq!(status, 301);
    let location = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.as_str());
    assert_eq!(location, Some("/dash/"));
    let off = TestAgent::dev(&["-hcl=ui_config { enabled = false }"]);
    let (status, _, text) = http_request_full(off.http_port, "GET", "/", &[], None);
    assert_eq!(
        (status, text.as_str()),
        (
            200,
            "Consul Agent: UI disabled. To enable, set ui_config.enabled=true in the agent configuration and restart."
        )
    );
}
