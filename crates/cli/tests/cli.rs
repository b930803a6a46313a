//! The `legate` CLI against a running agent: output and exit codes as
//! Consul's.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, write, TestAgent};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn version_prints_a_consul_compatible_line() {
    let out = Command::new(common::binary())
        .arg("version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("Consul v1."), "{first}");
    assert!(text.contains("Legate v"), "{text}");
}

#[test]
fn kv_commands() {
    let agent = TestAgent::dev(&[]);
    let out = agent.cli(&["kv", "put", "app/name", "legate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Success! Data written to: app/name");
    let out = agent.cli(&["kv", "get", "app/name"]);
    assert_eq!(stdout(&out), "legate\n");

    let out = agent.cli(&["kv", "get", "app/missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).trim(), "Error! No key exists at: app/missing");

    // -cas with a stale index fails with exit 1.
    let out = agent.cli(&["kv", "put", "-cas", "-modify-index=1", "app/name", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("CAS failed"), "{}", stderr(&out));
    let index = agent.get("/v1/kv/app/name").unwrap()[0]["ModifyIndex"]
        .as_u64()
        .unwrap();
    let out = agent.cli(&[
        "kv",
        "put",
        "-cas",
        &format!("-modify-index={index}"),
        "-flags=7",
        "app/name",
        "y",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = agent.cli(&["kv", "get", "-detailed", "app/name"]);
    assert!(
        stdout(&out).contains("Flags") && stdout(&out).contains("7"),
        "{}",
        stdout(&out)
    );

    // base64, stdin, @file.
    let out = agent.cli(&["kv", "put", "-base64", "app/b64", "aGVsbG8="]);
    assert!(out.status.success());
    assert_eq!(stdout(&agent.cli(&["kv", "get", "app/b64"])), "hello\n");
    assert_eq!(
        stdout(&agent.cli(&["kv", "get", "-base64", "app/b64"])),
        "aGVsbG8=\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "value.txt", "from a file");
    agent.cli(&["kv", "put", "app/file", &format!("@{}", file.display())]);
    assert_eq!(
        stdout(&agent.cli(&["kv", "get", "app/file"])),
        "from a file\n"
    );
    let mut child = Command::new(common::binary())
        .args(["kv", "put", "app/stdin", "-"])
        .env("CONSUL_HTTP_ADDR", agent.addr())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"piped").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(stdout(&agent.cli(&["kv", "get", "app/stdin"])), "piped\n");

    let out = agent.cli(&["kv", "get", "-recurse", "app/"]);
    assert!(
        stdout(&out).contains("app/file:from a file"),
        "{}",
        stdout(&out)
    );
    let out = agent.cli(&["kv", "get", "-keys", "app/"]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        vec!["app/b64", "app/file", "app/name", "app/stdin"]
    );

    // export | import round trip under a new prefix.
    let exported = stdout(&agent.cli(&["kv", "export", "app/"]));
    let parsed: serde_json::Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(parsed.as_array().unwrap().len(), 4);
    let dump = write(dir.path(), "dump.json", &exported);
    let out = agent.cli(&[
        "kv",
        "import",
        "-prefix=copy/",
        &format!("@{}", dump.display()),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Imported: copy/app/name"));
    assert_eq!(
        stdout(&agent.cli(&["kv", "get", "copy/app/b64"])),
        "hello\n"
    );
    assert_eq!(agent.get("/v1/kv/copy/app/name").unwrap()[0]["Flags"], 7);

    let out = agent.cli(&["kv", "delete", "-recurse", "copy/"]);
    assert_eq!(
        stdout(&out).trim(),
        "Success! Deleted keys with prefix: copy/"
    );
    let out = agent.cli(&["kv", "delete", "app/name"]);
    assert_eq!(stdout(&out).trim(), "Success! Deleted key: app/name");

    // Usage errors name the problem and exit 1.
    let out = agent.cli(&["kv", "put"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("Missing KEY"), "{}", stderr(&out));
    let out = agent.cli(&["kv", "put", "-bogus-flag", "k", "v"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("bogus-flag"), "{}", stderr(&out));
    let out = agent.cli(&["kv", "put", "-modify-index=abc", "k", "v"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("modify-index"), "{}", stderr(&out));
}

#[test]
fn services_catalog_members_maint() {
    let agent = TestAgent::dev(&["-node", "cli-node"]);
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "web.hcl",
        "service {\n  name = \"web\"\n  id = \"web-1\"\n  port = 8080\n  tags = [\"v1\"]\n  connect { sidecar_service {} }\n}\n",
    );
    let out = agent.cli(&["services", "register", &file.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Registered service: web");
    let out = agent.cli(&[
        "services",
        "register",
        "-name=cache",
        "-port=6379",
        "-tag=a",
        "-tag=b",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    eventually(Duration::from_secs(5), || {
        let out = agent.cli(&["catalog", "services"]);
        let text = stdout(&out);
        (text.contains("cache") && text.contains("web-sidecar-proxy")).then_some(())
    });
    let out = agent.cli(&["catalog", "services", "-tags"]);
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("cache") && l.ends_with("a,b")),
        "{}",
        stdout(&out)
    );
    let out = agent.cli(&["catalog", "nodes"]);
    assert!(stdout(&out).starts_with("Node"), "{}", stdout(&out));
    assert!(stdout(&out).contains("cli-node"));
    // -node-meta (key=value, sent as the API's key:value) and -near.
    let (status, body) = agent.put(
        "/v1/catalog/register",
        r#"{"Node":"rack-a","Address":"10.9.0.1","NodeMeta":{"rack":"a"},"Service":{"Service":"racked","Tags":["r"]}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let out = agent.cli(&[
        "catalog",
        "nodes",
        "-node-meta",
        "rack=a",
        "-near",
        "_agent",
    ]);
    let rows: Vec<String> = stdout(&out).lines().skip(1).map(String::from).collect();
    assert_eq!(rows.len(), 1, "{}", stdout(&out));
    assert!(rows[0].starts_with("rack-a"), "{rows:?}");
    let out = agent.cli(&["catalog", "services", "-node-meta=rack=a"]);
    assert_eq!(stdout(&out).trim(), "racked");
    let out = agent.cli(&["catalog", "datacenters"]);
    assert_eq!(stdout(&out).trim(), "dc1");
    let out = agent.cli(&["members"]);
    let text = stdout(&out);
    assert!(text.lines().next().unwrap().starts_with("Node"), "{text}");
    assert!(
        text.contains("cli-node") && text.contains("alive") && text.contains("server"),
        "{text}"
    );

    let out = agent.cli(&["maint", "-enable", "-service=web-1", "-reason=upgrade"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "Service maintenance is now enabled for \"web-1\""
    );
    let out = agent.cli(&["maint"]);
    assert!(stdout(&out).contains("upgrade"), "{}", stdout(&out));
    let out = agent.cli(&["maint", "-disable", "-service=web-1"]);
    assert!(out.status.success());
    let out = agent.cli(&["maint", "-enable", "-disable"]);
    assert_eq!(out.status.code(), Some(1));

    let out = agent.cli(&["services", "deregister", "-id=web-1"]);
    assert_eq!(stdout(&out).trim(), "Deregistered service: web-1");
    assert!(agent
        .get("/v1/agent/services")
        .unwrap()
        .get("web-sidecar-proxy")
        .is_none());
    let out = agent.cli(&["services", "deregister", "-id=nope"]);
    assert_eq!(out.status.code(), Some(1));

    let out = agent.cli(&["reload"]);
    assert_eq!(stdout(&out).trim(), "Configuration reload triggered");
}

#[test]
fn http_addr_flag_and_env_and_unreachable_agent() {
    let agent = TestAgent::dev(&[]);
    let out = Command::new(common::binary())
        .args([
            "kv",
            "put",
            &format!("-http-addr=http://{}", agent.addr()),
            "k",
            "v",
        ])
        .env_remove("CONSUL_HTTP_ADDR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = Command::new(common::binary())
        .args(["kv", "get", "k"])
        .env("LEGATE_HTTP_ADDR", agent.addr())
        .env_remove("CONSUL_HTTP_ADDR")
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "v\n");
    let port = common::free_port();
    let out = Command::new(common::binary())
        .args(["members", &format!("-http-addr=127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("Error"), "{}", stderr(&out));
}

/// `legate validate` as Consul's: the files merged and checked as the
/// agent would, `Configuration is valid!` or `Config validation failed:
/// ...` (exit 1), `-quiet` saying nothing.
#[test]
fn validate_checks_config_files_as_the_agent_loads_them() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("a.hcl");
    std::fs::write(
        &good,
        "data_dir = \"/tmp/legate-validate\"\ndatacenter = \"dc1\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::binary())
            .arg("validate")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    };
    let good_path = good.to_str().unwrap();
    assert_eq!(
        run(&[good_path]),
        (Some(0), "Configuration is valid!".into(), String::new())
    );
    assert_eq!(
        run(&["-quiet", good_path]),
        (Some(0), String::new(), String::new())
    );
    std::fs::write(dir.path().join("b.json"), r#"{"bogus_key": 1}"#).unwrap();
    let (code, _, err) = run(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with("Config validation failed: ")
            && err.contains("invalid config key bogus_key"),
        "{err}"
    );
    let no_data_dir = dir.path().join("c.hcl");
    std::fs::write(&no_data_dir, "datacenter = \"dc1\"\n").unwrap();
    assert_eq!(
        run(&[no_data_dir.to_str().unwrap()]),
        (
            Some(1),
            String::new(),
            "Config validation failed: data_dir cannot be empty".into()
        )
    );
    assert_eq!(
        run(&[]),
        (
            Some(1),
            String::new(),
            "Must specify at least one config file or directory".into()
        )
    );
    // A file of another extension is skipped with Consul's warning unless
    // -config-format says how to read it.
    let conf = dir.path().join("agent.conf");
    std::fs::write(&conf, "{\"data_dir\": \"/tmp/x\", \"server\": \"yes\"}").unwrap();
    let conf_path = conf.to_str().unwrap();
    let (code, out, err) = run(&[good_path, conf_path]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Configuration is valid!");
    assert!(
        err.contains(&format!(
            "skipping file {conf_path}, extension must be .hcl or .json, or config format must be set"
        )),
        "{err}"
    );
    let (code, _, err) = run(&["-config-format=json", good_path, conf_path]);
    assert_eq!(code, Some(1), "the .hcl file is read as JSON too: {err}");
    let (code, _, err) = run(&["-config-format=json", conf_path]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("server"),
        "read as JSON, its bad value named: {err}"
    );
    std::fs::write(&conf, "{\"data_dir\": \"/tmp/x\"}").unwrap();
    let (code, out, err) = run(&["-config-format=json", conf_path]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "Configuration is valid!"),
        "{err}"
    );
    let (code, _, err) = run(&["-config-format=yaml", conf_path]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "Config validation failed: -config-format must be either 'hcl' or 'json'"
    );
}
