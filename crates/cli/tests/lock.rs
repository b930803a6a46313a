//! `legate lock`, as Consul's lock command behaves: the child runs only
//! while the lock at `<prefix>/.lock` is held, a second contender waits or
//! gives up (`-try`), the lock is released (and the session destroyed)
//! when the child exits, `-child-exit-code` passes a failure on as 2, a
//! lost lock kills the child, and `-n` above 1 is Consul's semaphore.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, TestAgent};
use serde_json::Value;

fn lock(agent: &TestAgent, args: &[&str]) -> Command {
    let mut command = Command::new(common::binary());
    command
        .arg("lock")
        .args(args)
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .env_remove("LEGATE_HTTP_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn holder(agent: &TestAgent) -> Option<Value> {
    let entry = agent.get("/v1/kv/locks/job/.lock").ok()?;
    let entry = entry[0].clone();
    entry["Session"].as_str().filter(|s| !s.is_empty())?;
    Some(entry)
}

#[test]
fn the_child_runs_only_while_the_lock_is_held() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let first = lock(
        &agent,
        &[
            "locks/job",
            &format!(
                "echo start >> {0}; sleep 3; echo end >> {0}",
                trace.display()
            ),
        ],
    )
    .spawn()
    .unwrap();
    let entry = eventually(Duration::from_secs(10), || holder(&agent));
    assert_eq!(
        entry["Flags"], 0x2ddc_cbc0_58a5_0c18u64,
        "Consul's lock flags"
    );
    // A second contender that only tries for a second gives up.
    let second = lock(
        &agent,
        &[
            "-try=1s",
            "locks/job",
            &format!("echo second >> {}", trace.display()),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr)
            .contains("Shutdown triggered or timeout during lock acquisition"),
        "{second:?}"
    );
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "start\nend\n");
    // Released, and its session gone.
    assert!(holder(&agent).is_none());
    assert_eq!(
        agent.get("/v1/session/list").unwrap(),
        serde_json::json!([])
    );
    // A contender waiting without a limit gets the lock once it is free.
    let waiting = lock(&agent, &["locks/job", "echo after"]).output().unwrap();
    assert_eq!(waiting.status.code(), Some(0));
}

#[test]
fn child_failures_and_lost_locks() {
    let agent = TestAgent::dev(&[]);
    let failed = lock(&agent, &["locks/job", "exit 3"]).output().unwrap();
    assert_eq!(failed.status.code(), Some(0), "not passed on by default");
    let failed = lock(&agent, &["-child-exit-code", "locks/job", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(2));

    // The lock's session destroyed under a running child: it is killed.
    let held = lock(&agent, &["locks/job", "sleep 30"]).spawn().unwrap();
    let entry = eventually(Duration::from_secs(15), || holder(&agent));
    let session = entry["Session"].as_str().unwrap().to_string();
    let (status, _) = agent.put(&format!("/v1/session/destroy/{session}"), "");
    assert_eq!(status, 200);
    let started = std::time::Instant::now();
    let out = held.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Lock lost, killing child"));
}

/// `-n 2`: two holders at once, a third waits (or gives up with `-try`),
/// the slots are Consul's `.lock` JSON, and a different limit conflicts.
#[test]
fn a_semaphore_lets_n_holders_in_at_once() {
    let agent = TestAgent::dev(&[]);
    let holders: Vec<_> = (0..2)
        .map(|_| {
            lock(&agent, &["-n=2", "slots/job", "sleep 4"])
                .spawn()
                .unwrap()
        })
        .collect();
    let slots = eventually(Duration::from_secs(15), || {
        let entry = agent.get("/v1/kv/slots/job/.lock?raw").ok()?;
        (entry["Holders"].as_object()?.len() == 2).then_some(entry)
    });
    assert_eq!(slots["Limit"], 2);
    let (_, _, body) = agent.request("GET", "/v1/kv/slots/job/.lock", None);
    let entry: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        entry[0]["Flags"], 0xe0f6_9a2b_aa41_4de0u64,
        "Consul's semaphore flags"
    );
    let third = lock(&agent, &["-n=2", "-try=1s", "slots/job", "true"])
        .output()
        .unwrap();
    assert_eq!(third.status.code(), Some(1), "{third:?}");
    let conflict = lock(&agent, &["-n=3", "-try=2s", "slots/job", "true"])
        .output()
        .unwrap();
    assert_eq!(conflict.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&conflict.stderr).contains("semaphore limit conflict"),
        "{conflict:?}"
    );
    for holder in holders {
        assert_eq!(holder.wait_with_output().unwrap().status.code(), Some(0));
    }
    // Both slots given back: a waiting contender gets in.
    let after = lock(&agent, &["-n=2", "slots/job", "echo in"])
        .output()
        .unwrap();
    assert_eq!(after.status.code(), Some(0), "{after:?}");
    let slots = agent.get("/v1/kv/slots/job/.lock?raw").unwrap();
    assert_eq!(slots["Holders"], serde_json::json!({}));
}
