//! `legate debug`, Consul's debug bundle, through the binary: the
//! archive (read back with the system's `tar`) holds the agent's own
//! views, its metrics stream and its log for the duration, and Consul's
//! `index.json`; `-archive=false` leaves the directory; bad flags are
//! refused with Consul's texts before anything is written.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::TestAgent;
use serde_json::Value;

fn debug(agent: &TestAgent, args: &[&str]) -> std::process::Child {
    Command::new(common::binary())
        .arg("debug")
        .args(args)
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .env_remove("LEGATE_HTTP_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: std::process::Child) -> (Output, String, String) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out, stdout, stderr)
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_bundle_holds_the_agents_views_metrics_and_log() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("bundle");
    let child = debug(
        &agent,
        &[
            "-interval=5s",
            "-duration=10s",
            &format!("-output={}", output.display()),
        ],
    );
    // Something to log while the capture runs.
    std::thread::sleep(Duration::from_secs(2));
    let (status, text) = agent.put("/v1/agent/service/register", r#"{"Name":"during-debug"}"#);
    assert_eq!(status, 200, "{text}");
    let (out, stdout, stderr) = finish(child);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("==> Starting debugger and capturing static information...\n"),
        "{stdout}"
    );
    assert!(stdout.contains("          Interval: '5s'\n"), "{stdout}");
    assert!(stdout.contains("          Duration: '10s'\n"), "{stdout}");
    assert!(
        stdout.contains("           Capture: 'metrics, logs, host, agent, members'\n"),
        "{stdout}"
    );
    assert!(stdout.contains("==> Capture successful "), "{stdout}");
    let archive = dir.path().join("bundle.tar.gz");
    assert!(
        stdout.ends_with(&format!("    Saved debug archive: {}\n", archive.display())),
        "{stdout}"
    );
    assert!(stderr.contains("Unable to capture pprof"), "{stderr}");
    assert!(!output.exists(), "the directory is removed once archived");
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let unpacked = tempfile::tempdir().unwrap();
    let tar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(tar.success());
    let root = unpacked.path().join("bundle");
    let index = read_json(&root.join("index.json"));
    assert_eq!(index["Version"], 1);
    assert_eq!(index["Interval"], "5s");
    assert_eq!(index["Duration"], "12s");
    assert_eq!(
        index["Targets"],
        serde_json::json!(["metrics", "logs", "host", "agent", "members"])
    );
    assert!(index["AgentVersion"]
        .as_str()
        .is_some_and(|v| !v.is_empty()));
    assert!(read_json(&root.join("agent.json"))["Config"]["NodeName"].is_string());
    assert!(read_json(&root.join("host.json"))["Host"].is_object());
    assert!(read_json(&root.join("members.json")).is_array());
    let agent_text = std::fs::read_to_string(root.join("agent.json")).unwrap();
    assert!(
        agent_text.contains("\n\t\""),
        "tab-indented as Go's MarshalIndent"
    );
    let metrics = std::fs::read_to_string(root.join("metrics.json")).unwrap();
    assert!(metrics.contains("\"Gauges\""), "{metrics}");
    let log = std::fs::read_to_string(root.join("consul.log")).unwrap();
    assert!(log.contains("during-debug"), "{log}");
}

#[test]
fn without_archive_the_directory_stays() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("plain");
    let (out, stdout, stderr) = finish(debug(
        &agent,
        &[
            "-interval=5s",
            "-duration=10s",
            "-archive=false",
            "-capture=agent",
            "-capture=cluster",
            &format!("-output={}", output.display()),
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("           Capture: 'agent, members'\n"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("Capture successful"),
        "nothing streams: {stdout}"
    );
    let mut files: Vec<String> = std::fs::read_dir(&output)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    assert_eq!(files, ["agent.json", "index.json", "members.json"]);
    assert!(!dir.path().join("plain.tar.gz").exists());
}

#[test]
fn bad_flags_are_refused_with_consuls_texts() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    let fresh = format!("-output={}", dir.path().join("fresh").display());
    for (args, text) in [
        (
            vec!["-duration=5s", fresh.as_str()],
            "Capture validation failed: duration must be longer than 10s",
        ),
        (
            vec!["-interval=2s", fresh.as_str()],
            "Capture validation failed: interval must be longer than 10s",
        ),
        (
            vec!["-interval=30s", "-duration=20s", fresh.as_str()],
            "Capture validation failed: duration (20s) must be longer than interval (30s)",
        ),
        (
            vec!["-capture=nope", fresh.as_str()],
            "Capture validation failed: target not found: nope",
        ),
        (
            vec!["-duration=soon", fresh.as_str()],
            "Error parsing flags",
        ),
        (
            vec![fresh.as_str(), "extra"],
            "debug: Too many arguments provided, expected 0",
        ),
    ] {
        let (out, _, stderr) = finish(debug(&agent, &args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr.contains(&format!("==> {text}")),
            "{args:?}: {stderr}"
        );
    }
    assert!(!dir.path().join("fresh").exists(), "nothing written");
    let taken_flag = format!("-output={}", taken.display());
    let (out, _, stderr) = finish(debug(
        &agent,
        &["-interval=5s", "-duration=10s", &taken_flag],
    ));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains(&format!(
            "output directory already exists: {}",
            taken.display()
        )),
        "{stderr}"
    );
}
