//! `legate exec`, Consul's remote execution, through the binary: the job
//! runs on agents with `disable_remote_exec = false` and its output, exit
//! code and the summary come back in Consul's format; agents with the
//! default (disabled) never answer; `-shell=false`, a script on standard
//! input, output larger than one chunk, node filters, and bad flags.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::TestAgent;

const ENABLED: &str = "-hcl=disable_remote_exec = false";

fn exec(agent: &TestAgent, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(common::binary())
        .arg("exec")
        .args(args)
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .env_remove("LEGATE_HTTP_ADDR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn node_name(agent: &TestAgent) -> String {
    agent.get("/v1/agent/self").unwrap()["Config"]["NodeName"]
        .as_str()
        .unwrap()
        .to_string()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn a_job_runs_and_its_output_and_exit_code_come_back() {
    let agent = TestAgent::dev(&[ENABLED]);
    let node = node_name(&agent);
    let out = exec(
        &agent,
        &["-wait=1s", "echo hello; echo world >&2; exit 3"],
        None,
    );
    let text = stdout(&out);
    assert!(text.contains(&format!("    {node}: hello\n")), "{text}");
    assert!(text.contains(&format!("    {node}: world\n")), "{text}");
    assert!(
        text.contains(&format!("==> {node}: finished with exit code 3\n")),
        "{text}"
    );
    assert!(
        text.ends_with("1 / 1 node(s) completed / acknowledged\n"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(2), "a node failed");
    // The session and the results are gone afterwards.
    assert_eq!(agent.request("GET", "/v1/kv/_rexec?recurse", None).0, 404);
    let sessions = agent.get("/v1/session/list").unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 0, "{sessions}");

    let out = exec(&agent, &["-wait=1s", "-verbose", "true"], None);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Created remote execution session: "),
        "{text}"
    );
    assert!(text.contains("Fired remote execution event: "), "{text}");
    assert!(
        text.contains(&format!("==> {node}: acknowledged")),
        "{text}"
    );
}

#[test]
fn words_scripts_and_long_output_reach_the_agent_intact() {
    let agent = TestAgent::dev(&[ENABLED]);
    let node = node_name(&agent);
    let out = exec(
        &agent,
        &["-wait=1s", "-shell=false", "printf", "%s-%s", "a b", "c"],
        None,
    );
    assert!(
        stdout(&out).contains(&format!("    {node}: a b-c\n")),
        "{}",
        stdout(&out)
    );
    let out = exec(
        &agent,
        &["-wait=1s", "-"],
        Some("#!/bin/sh\necho from-script\n"),
    );
    assert!(
        stdout(&out).contains(&format!("    {node}: from-script\n")),
        "{}",
        stdout(&out)
    );
    assert_eq!(out.status.code(), Some(0));
    // A script without a `#!` line runs through the shell, as in Consul.
    let out = exec(
        &agent,
        &["-wait=1s", "-"],
        Some("x=plain; echo \"$x-script\"\n"),
    );
    assert!(
        stdout(&out).contains(&format!("    {node}: plain-script\n")),
        "{}",
        stdout(&out)
    );
    assert_eq!(out.status.code(), Some(0));
    // Output over several 4 KiB chunks comes back whole and in order (as
    // in Consul, each chunk is printed on its own, so a line that spans
    // two chunks prints as two).
    let out = exec(&agent, &["-wait=1s", "seq 1 3000"], None);
    let printed: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("    {node}: ")).map(str::to_string))
        .collect();
    let expected: String = (1..=3000).map(|n| n.to_string()).collect();
    assert!(printed.concat() == expected, "output lost or reordered");
    assert!(printed.len() >= 3000, "{} lines", printed.len());
}

#[test]
fn disabled_agents_and_filtered_out_nodes_never_answer() {
    let disabled = TestAgent::dev(&[]);
    let out = exec(&disabled, &["-wait=500ms", "touch /tmp/never"], None);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).ends_with("0 / 0 node(s) completed / acknowledged\n"),
        "{}",
        stdout(&out)
    );
    common::eventually(std::time::Duration::from_secs(5), || {
        disabled
            .log_text()
            .contains("ignoring remote exec event, disabled")
            .then_some(())
    });
    let enabled = TestAgent::dev(&[ENABLED]);
    let out = exec(&enabled, &["-wait=500ms", "-node=^nobody$", "true"], None);
    assert!(
        stdout(&out).ends_with("0 / 0 node(s) completed / acknowledged\n"),
        "{}",
        stdout(&out)
    );
    // The job's events are not kept as user events.
    let events = enabled.get("/v1/event/list").unwrap();
    assert_eq!(events.as_array().unwrap().len(), 0, "{events}");
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    let agent = TestAgent::dev(&[ENABLED]);
    for (args, text) in [
        (vec![], "Must specify a command to execute"),
        (
            vec!["-tag=x", "true"],
            "Cannot provide tag filter without service filter.",
        ),
        (
            vec!["-node=(", "true"],
            "Failed to compile node filter regexp",
        ),
        (
            vec!["-shell=false", "-"],
            "Cannot configure -shell=false when reading from stdin",
        ),
        (vec!["-wait=soon", "true"], "-wait"),
    ] {
        let out = exec(&agent, &args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(text), "{args:?}: {err}");
    }
    let sessions = agent.get("/v1/session/list").unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 0, "{sessions}");
}
