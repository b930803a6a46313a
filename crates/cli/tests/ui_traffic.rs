//! Live traffic per edge: the seed demo's two `legate connect proxy`
//! sidecars stream their counters to the agent's metrics service, and
//! `/v1/internal/ui/traffic/:service` shows the web -> db edge with the
//! connections, bytes and denials that went through it. The metrics
//! service refuses streams that name no proxy or one the agent does not
//! serve.

mod common;

use std::time::Duration;

use common::mesh::{demo_logs, echo, eventually, start_proxy, SeedDemo};
use common::TestAgent;
use serde_json::Value;

/// The web -> db edge as `/v1/internal/ui/traffic/<service>` shows it
/// (`Downstreams` of db, `Upstreams` of web).
fn edge(agent: &TestAgent, service: &str, direction: &str) -> Option<Value> {
    let traffic = agent
        .get(&format!("/v1/internal/ui/traffic/{service}"))
        .unwrap();
    traffic[direction]
        .as_array()?
        .iter()
        .find(|e| e["Source"] == "web" && e["Destination"] == "db")
        .cloned()
}

fn count(edge: &Value, field: &str) -> u64 {
    edge[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {edge}"))
}

/// The edge once two reads 2.5 s apart (more than a report interval) agree.
fn settled(agent: &TestAgent, logs: &dyn Fn() -> String) -> Value {
    let mut last: Option<Value> = None;
    for _ in 0..12 {
        let now = edge(agent, "db", "Downstreams");
        if let (Some(a), Some(b)) = (&last, &now) {
            let totals = |e: &Value| {
                [
                    "Connections",
                    "Denied",
                    "BytesToDestination",
                    "BytesToSource",
                ]
                .map(|f| count(e, f))
            };
            if totals(a) == totals(b) {
                return b.clone();
            }
        }
        last = now;
        std::thread::sleep(Duration::from_millis(2500));
    }
    panic!("the web -> db edge never settled: {last:?}\n{}", logs());
}

#[test]
fn the_seed_demo_traffic_shows_on_its_edge() {
    let demo = SeedDemo::new();
    let (dir, upstream) = (&demo.dir, demo.upstream);
    let agent = demo.start_agent();
    let _web = start_proxy(&agent, "web", &dir.path().join("web.log"));
    let _db = start_proxy(&agent, "db", &dir.path().join("db.log"));
    let logs = || demo_logs(dir.path(), &agent);
    eventually(
        "echo through web -> db",
        Duration::from_secs(20),
        &logs,
        || echo(upstream, "warm up\n").as_deref() == Some("warm up\n"),
    );
    let before = settled(&agent, &logs);
    assert_eq!(
        before["MeasuredAt"],
        serde_json::json!(["destination", "source"])
    );

    // Five echoed connections of 17 bytes each way.
    let line = "0123456789abcdef\n";
    for _ in 0..5 {
        assert_eq!(echo(upstream, line).as_deref(), Some(line));
    }
    let mut seen_rate = false;
    eventually(
        "the five connections on the edge",
        Duration::from_secs(15),
        &logs,
        || {
            let Some(now) = edge(&agent, "db", "Downstreams") else {
                return false;
            };
            seen_rate |= now["ConnectionsPerSecond"].as_f64().unwrap_or(0.0) > 0.0;
            count(&now, "Connections") == count(&before, "Connections") + 5
                && count(&now, "BytesToDestination") == count(&before, "BytesToDestination") + 85
                && count(&now, "BytesToSource") == count(&before, "BytesToSource") + 85
        },
    );
    assert!(seen_rate, "the edge had a rate while traffic flowed");
    // web's side names the same edge among its upstreams.
    let from_web = edge(&agent, "web", "Upstreams").expect("web's upstream edge");
    assert!(count(&from_web, "Connections") >= count(&before, "Connections") + 5);
    let db = agent.get("/v1/internal/ui/traffic/db").unwrap();
    assert_eq!(db["ReportedBy"], serde_json::json!(["db-sidecar-proxy"]));
    assert_eq!(db["FilteredByACLs"], false);
    // The sidecar's own TCP check connects and closes: not a failed handshake.
    assert_eq!(db["InboundHandshakeFailures"], 0, "{db}");
    // Bytes that are no TLS at db's public listener are one.
    let sidecar = agent.get("/v1/agent/service/db-sidecar-proxy").unwrap();
    let port = sidecar["Port"].as_u64().unwrap() as u16;
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut raw, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let _ = std::io::Read::read(&mut raw, &mut [0u8; 64]);
    eventually(
        "the failed handshake counted",
        Duration::from_secs(10),
        &logs,
        || agent.get("/v1/internal/ui/traffic/db").unwrap()["InboundHandshakeFailures"] == 1,
    );

    // A deny intention: once it holds, exactly one more denied connection.
    let out = agent.cli(&["intention", "create", "-deny", "web", "db"]);
    assert!(out.status.success(), "{out:?}");
    eventually(
        "the deny to take effect",
        Duration::from_secs(10),
        &logs,
        || echo(upstream, "probe\n").is_none(),
    );
    let denied = settled(&agent, &logs);
    assert!(count(&denied, "Denied") >= 1);
    assert!(echo(upstream, "secret\n").is_none());
    eventually(
        "one more denial on the edge",
        Duration::from_secs(15),
        &logs,
        || {
            edge(&agent, "db", "Downstreams")
                .is_some_and(|now| count(&now, "Denied") == count(&denied, "Denied") + 1)
        },
    );
    let after = edge(&agent, "db", "Downstreams").unwrap();
    assert_eq!(count(&after, "Connections"), count(&denied, "Connections"));

    // The proxy's page: its configuration's resources and its pushes,
    // which the built-in proxy acknowledged.
    let status = agent
        .get("/v1/internal/ui/proxy/web-sidecar-proxy")
        .unwrap();
    let resources = status["Resources"].as_array().unwrap();
    let cluster = resources
        .iter()
        .find(|r| {
            r["TypeUrl"].as_str().unwrap().ends_with("Cluster")
                && r["Name"].as_str().unwrap().starts_with("db.")
        })
        .unwrap_or_else(|| panic!("db's cluster in {status}"));
    assert!(
        cluster["Bytes"].as_u64().unwrap() > 0 && !cluster["Version"].as_str().unwrap().is_empty()
    );
    let pushes = status["Pushes"].as_array().unwrap();
    assert!(pushes.iter().any(|p| p["Status"] == "acked"), "{status}");
    assert!(
        !status.to_string().contains("PRIVATE KEY"),
        "no content is shown"
    );
    let (code, _, body) = agent.request("GET", "/v1/internal/ui/proxy/nobody", None);
    assert_eq!((code, body.as_str()), (404, "unknown service ID: nobody"));

    // A service nobody reports for: no edges, an empty list.
    let empty = agent.get("/v1/internal/ui/traffic/nothing-here").unwrap();
    assert_eq!(empty["Upstreams"], serde_json::json!([]));
    assert_eq!(empty["ReportedBy"], serde_json::json!([]));
}

#[test]
fn the_metrics_service_refuses_streams_it_cannot_place() {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::metrics::v3::metrics_service_client::MetricsServiceClient;
    use envoy_types::pb::envoy::service::metrics::v3::stream_metrics_message::Identifier;
    use envoy_types::pb::envoy::service::metrics::v3::StreamMetricsMessage;

    let demo = SeedDemo::new();
    let agent = demo.start_agent();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let grpc = format!("http://127.0.0.1:{}", demo.grpc);
    let send = |first: StreamMetricsMessage| {
        runtime.block_on(async {
            let mut client = MetricsServiceClient::connect(grpc.clone()).await.unwrap();
            client
                .stream_metrics(tokio_stream::iter(vec![first]))
                .await
                .map(|_| ())
        })
    };
    let named = |id: &str| StreamMetricsMessage {
        identifier: Some(Identifier {
            node: Some(Node {
                id: id.into(),
                ..Default::default()
            }),
        }),
        envoy_metrics: vec![],
    };
    let no_node = send(StreamMetricsMessage::default()).unwrap_err();
    assert_eq!(no_node.code(), tonic::Code::InvalidArgument, "{no_node:?}");
    let unknown = send(named("no-such-proxy")).unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    // A proxy the agent serves may report (nothing to count yet).
    send(named("web-sidecar-proxy")).unwrap();
    assert!(agent.get("/v1/agent/self").is_ok());
}
