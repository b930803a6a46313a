//! The agent config's `watches`: the agent runs each against its own HTTP
//! API and calls its handler (a script with the view on stdin, or an HTTP
//! request) whenever the view changes; a bad watch stops the agent with
//! Consul's reason.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use common::{eventually, TestAgent};

#[test]
fn config_watches_run_script_and_http_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("key-changes");
    // An HTTP handler target: records each request's first line and body.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = format!("http://{}/hook", listener.local_addr().unwrap());
    let (seen_tx, seen_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0u8; length];
            let _ = reader.read_exact(&mut body);
            let _ = seen_tx.send(format!("{head}\n{}", String::from_utf8_lossy(&body)));
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    let config = format!(
        r#"watches = [
  {{ type = "key", key = "app/flag", args = ["sh", "-c", "cat >> {out}; echo >> {out}"] }},
  {{ type = "keyprefix", prefix = "app/", handler_type = "http",
     http_handler_config {{ path = "{target}", method = "PUT", header {{ x-from = ["legate"] }} }} }}
]"#,
        out = out.display()
    );
    let agent = TestAgent::dev(&["-hcl", &config]);
    let (status, _) = agent.put("/v1/kv/app/flag", "on");
    assert_eq!(status, 200);
    let text = eventually(Duration::from_secs(15), || {
        let text = std::fs::read_to_string(&out).ok()?;
        text.contains("\"Key\":\"app/flag\"").then_some(text)
    });
    // The key's pair, value in base64 ("on").
    assert!(text.contains("\"Value\":\"b24=\""), "{text}");
    let request = loop {
        let seen = seen_rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the HTTP handler was called");
        if seen.contains("app/flag") {
            break seen;
        }
    };
    assert!(request.starts_with("PUT /hook HTTP/1.1"), "{request}");
    let lower = request.to_ascii_lowercase();
    assert!(lower.contains("x-from: legate"), "{request}");
    assert!(lower.contains("x-consul-index:"), "{request}");
    // `watches` is read, not warned about as a key Legate ignores.
    assert!(
        !agent.log_text().contains("not implemented by Legate"),
        "{}",
        agent.log_text()
    );
}

#[test]
fn a_bad_watch_stops_the_agent_with_consuls_reason() {
    for (watch, reason) in [
        (
            r#"watches = [{ type = "bogus", args = ["true"] }]"#,
            "Unsupported watch type: bogus",
        ),
        (
            r#"watches = [{ type = "key", args = ["true"] }]"#,
            "Must specify a single key to watch",
        ),
        (
            r#"watches = [{ type = "nodes" }]"#,
            "Must define a watch handler",
        ),
    ] {
        let out = std::process::Command::new(common::binary())
            .args([
                "agent",
                "-dev",
                "-hcl",
                watch,
                "-http-port=-1",
                "-dns-port=-1",
                "-grpc-port=-1",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{watch}");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("Failed to parse watch") && text.contains(reason),
            "{watch}: {text}"
        );
    }
}

#[test]
fn watch_prints_each_type_once_without_a_handler() {
    let agent = TestAgent::dev(&["-node", "watcher"]);
    let (status, _) = agent.put(
        "/v1/agent/service/register",
        r#"{"Name": "web", "Port": 80, "Tags": ["v1"]}"#,
    );
    assert_eq!(status, 200);
    let watch = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["watch"];
        all.extend_from_slice(args);
        let out = agent.cli(&all);
        serde_json::from_str(&common::expect_success(&out)).unwrap()
    };
    let services = eventually(Duration::from_secs(10), || {
        let v = watch(&["-type=services"]);
        v.get("web").is_some().then_some(v)
    });
    assert_eq!(services["web"], serde_json::json!(["v1"]));
    let nodes = watch(&["-type=nodes"]);
    assert_eq!(nodes[0]["Node"], "watcher");
    let instances = watch(&["-type=service", "-service=web", "-tag=v1"]);
    assert_eq!(instances[0]["Service"]["Service"], "web");
    assert_eq!(
        watch(&["-type=service", "-service=web", "-tag=v2"]),
        serde_json::json!([])
    );
    let checks = watch(&["-type=checks", "-state=any"]);
    assert!(checks
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["CheckID"] == "serfHealth"));
    assert_eq!(
        watch(&["-type=keyprefix", "-prefix=none/"]),
        serde_json::json!([])
    );
    // Bad flags: Consul's reasons.
    let out = agent.cli(&["watch", "-type=key"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Must specify a single key to watch"));
    let out = agent.cli(&["watch", "-type=checks", "-service=web", "-state=passing"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cannot specify service and state"));
}
