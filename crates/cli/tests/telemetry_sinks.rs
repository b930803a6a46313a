//! `telemetry { }` end to end: statsd and DogStatsD lines reach UDP
//! listeners, `metrics_prefix` and `prefix_filter` shape the names every
//! sink sees, gauges carry the host name unless `disable_hostname`, the
//! JSON form is go-metrics' interval summary, and an unusable statsd
//! address stops the agent with a clear error.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::TestAgent;

/// Everything `socket` receives until `done` says enough, or 20 s pass.
fn collect(socket: &UdpSocket, done: impl Fn(&str) -> bool) -> String {
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    let mut buf = [0u8; 65_536];
    while Instant::now() < deadline && !done(&text) {
        if let Ok(n) = socket.recv(&mut buf) {
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    text
}

#[test]
fn statsd_and_dogstatsd_get_lines_in_the_configured_names() {
    let statsd = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dogstatsd = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hcl = format!(
        "telemetry {{ statsd_address = \"{}\" dogstatsd_addr = \"{}\" dogstatsd_tags = [\"env:ci\"] \
         metrics_prefix = \"legate\" prefix_filter = [\"-legate.raft\", \"+legate.raft.apply\"] \
         prometheus_retention_time = \"1m\" }}",
        statsd.local_addr().unwrap(),
        dogstatsd.local_addr().unwrap()
    );
    let agent = TestAgent::dev(&[&format!("-hcl={hcl}")]);
    assert_eq!(agent.put("/v1/kv/a", "1").0, 200);

    let lines = collect(&statsd, |t| {
        t.contains("legate.kvs.apply:") && t.contains("|c")
    });
    // Timers in ms, counters, label values flattened into the name.
    assert!(lines.contains("legate.kvs.apply:"), "{lines}");
    assert!(
        lines
            .lines()
            .any(|l| l.starts_with("legate.api.http.PUT.v1_kv_:") && l.ends_with("|ms")),
        "{lines}"
    );
    assert!(lines.contains("legate.raft.apply:"), "{lines}");
    // `-legate.raft` blocks the rest of raft; the longer `+` wins for apply.
    assert!(!lines.contains("legate.raft.commitTime"), "{lines}");
    assert!(!lines.contains("consul."), "{lines}");

    let tagged = collect(&dogstatsd, |t| t.contains("legate.api.http:"));
    assert!(
        tagged.lines().any(|l| l.starts_with("legate.api.http:")
            && l.contains("|ms|#env:ci,")
            && l.contains("method:PUT")
            && l.contains("path:v1_kv_")),
        "{tagged}"
    );

    // The same names in the Prometheus form: the filter applies to every sink.
    let text = agent
        .get_text("/v1/agent/metrics?format=prometheus")
        .unwrap();
    assert!(text.contains("legate_raft_apply "), "{text}");
    assert!(!text.contains("legate_raft_commitTime"), "{text}");
}

#[test]
fn gauges_carry_the_host_name_unless_disabled_and_json_is_an_interval_summary() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let agent = TestAgent::dev(&[]);
    let gauge = format!("consul.{host}.runtime.sys_bytes");
    let metrics = common::eventually(Duration::from_secs(30), || {
        let m = agent.get("/v1/agent/metrics").ok()?;
        m["Gauges"]
            .as_array()?
            .iter()
            .any(|g| g["Name"] == gauge.as_str())
            .then_some(m)
    });
    assert!(metrics["Timestamp"]
        .as_str()
        .unwrap()
        .ends_with(" +0000 UTC"));
    assert_eq!(metrics["Points"], serde_json::json!([]));
    for sample in metrics["Samples"].as_array().unwrap() {
        for field in [
            "Name", "Count", "Rate", "Sum", "Min", "Max", "Mean", "Stddev", "Labels",
        ] {
            assert!(sample.get(field).is_some(), "{field} in {sample}");
        }
        assert!(sample["Labels"].is_object());
    }

    let bare = TestAgent::dev(&["-hcl=telemetry { disable_hostname = true }"]);
    common::eventually(Duration::from_secs(30), || {
        let m = bare.get("/v1/agent/metrics").ok()?;
        m["Gauges"]
            .as_array()?
            .iter()
            .any(|g| g["Name"] == "consul.runtime.sys_bytes")
            .then_some(())
    });
}

#[test]
fn an_unusable_statsd_address_stops_the_agent() {
    let text = common::run_agent_expecting_failure(&[
        "-dev",
        "-dns-port=-1",
        "-grpc-port=-1",
        "-hcl=telemetry { statsd_address = \"no-port-here\" }",
    ]);
    assert!(text.contains("invalid statsd address"), "{text}");
}

/// `rpc.query` counts every read a server answers and
/// `rpc.queries_blocking` the blocking queries it holds now.
#[test]
fn reads_and_blocking_queries_in_flight_are_counted() {
    let agent = TestAgent::dev(&[
        "-hcl=telemetry { prometheus_retention_time = \"1h\" disable_hostname = true }",
    ]);
    let scrape = || {
        agent
            .get_text("/v1/agent/metrics?format=prometheus")
            .unwrap()
    };
    let blocking = || common::prometheus::sum(&scrape(), "consul_rpc_queries_blocking", &[]);
    let queries = || common::prometheus::sum(&scrape(), "consul_rpc_query", &[]);
    // The agent's own watches hold blocking queries too: count from theirs.
    let (before, asked) = (blocking(), queries());
    let port = agent.http_port;
    let waiting = std::thread::spawn(move || {
        common::http_request(port, "GET", "/v1/kv/held?index=100000&wait=5s", None)
    });
    let during = common::eventually(Duration::from_secs(4), || {
        let now = blocking();
        (now >= before + 1.0).then_some(now)
    });
    waiting.join().unwrap();
    common::eventually(Duration::from_secs(5), || {
        (blocking() <= during - 1.0).then_some(())
    });
    assert!(queries() >= asked + 1.0);
}

/// A timer dropped by the Prometheus sink after its retention time comes
/// back with the next request: the agent looks it up again rather than
/// recording into the dropped series.
#[test]
fn a_timer_dropped_after_its_retention_comes_back_with_the_next_request() {
    let agent = TestAgent::dev(&[
        "-hcl=telemetry { prometheus_retention_time = \"2s\" disable_hostname = true }",
    ]);
    let kv_gets = || {
        let text = agent
            .get_text("/v1/agent/metrics?format=prometheus")
            .unwrap();
        common::prometheus::sum(
            &text,
            "consul_api_http_count",
            &[("method", "GET"), ("path", "v1_kv_")],
        )
    };
    agent.request("GET", "/v1/kv/timed", None);
    assert!(kv_gets() >= 1.0);
    // Idle past the retention: gone from the next scrape.
    common::eventually(Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(500));
        (kv_gets() == 0.0).then_some(())
    });
    agent.request("GET", "/v1/kv/timed", None);
    assert!(kv_gets() >= 1.0, "the timer did not come back");
}
