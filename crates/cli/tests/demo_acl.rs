//! The seed demo with `default_policy = "deny"`, through built-in proxies:
//! sidecars started with service-identity tokens (`-token-file`) pass
//! traffic once an intention allows it; a proxy started without a token
//! gets no configuration and the agent logs why; a proxy whose token may
//! write web but not read db gets no db endpoints, so nothing reaches db.

mod common;

use std::time::Duration;

use common::acl::{Acl, ROOT};
use common::mesh::{echo, eventually, start_proxy_with, SeedDemo};

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_seed_demo_with_default_deny_and_service_identity_tokens() {
    let seed = SeedDemo::new();
    let (dir, demo, upstream, grpc) = (&seed.dir, &seed.config, seed.upstream, seed.grpc);
    let received = &seed.received;
    let acl = Acl::start_full(
        "",
        &format!("agent = \"{ROOT}\" config_file_service_registration = \"{ROOT}\""),
        &[
            "-dns-port=-1",
            &format!("-grpc-port={grpc}"),
            "-config-file",
            demo.to_str().unwrap(),
        ],
    );
    let agent = &acl.agent;
    // Default deny: web may reach db only through an intention.
    acl.json(
        "PUT",
        "/v1/connect/intentions/exact?source=web&destination=db",
        ROOT,
        Some(r#"{"Action":"allow"}"#),
    );
    let token_file = |name: &str, body: &str| {
        let token = acl.json("PUT", "/v1/acl/token", ROOT, Some(body));
        common::write(dir.path(), name, token["SecretID"].as_str().unwrap())
    };
    let web_token = token_file(
        "web.token",
        r#"{"ServiceIdentities":[{"ServiceName":"web"}]}"#,
    );
    let db_token = token_file(
        "db.token",
        r#"{"ServiceIdentities":[{"ServiceName":"db"}]}"#,
    );
    // A service identity's rules less its reads: web and its sidecar only.
    let narrow = acl.token_with_rules(
        "web-only",
        "service \"web\" { policy = \"write\" }\nservice \"web-sidecar-proxy\" { policy = \"write\" }",
    );
    let narrow_token = common::write(dir.path(), "narrow.token", &narrow);
    let log = |name: &str| dir.path().join(name);
    // A sidecar's token may not read the agent's self: the xDS address is given.
    let grpc_addr = format!("127.0.0.1:{grpc}");
    let logs = || {
        [
            "web.log",
            "db.log",
            "anonymous.log",
            "reader.log",
            "narrow.log",
        ]
        .iter()
        .map(|n| {
            format!(
                "{n}:\n{}\n",
                std::fs::read_to_string(log(n)).unwrap_or_default()
            )
        })
        .collect::<String>()
            + "agent:\n"
            + &agent.log_text()
    };

    // db's sidecar with its own identity.
    let _db = start_proxy_with(
        agent,
        "db",
        &log("db.log"),
        &["-grpc-addr", &grpc_addr, "-token-file", path(&db_token)],
    );

    // Without a token the sidecar cannot even be found (the anonymous
    // token reads nothing); a token that reads every service but may not
    // write web finds it and is refused at the xDS door, and the agent says why.
    let anonymous = start_proxy_with(
        agent,
        "web",
        &log("anonymous.log"),
        &["-grpc-addr", &grpc_addr],
    );
    eventually(
        "the anonymous proxy to give up",
        Duration::from_secs(20),
        &logs,
        || {
            std::fs::read_to_string(log("anonymous.log"))
                .unwrap_or_default()
                .contains("No sidecar proxy registered for web")
        },
    );
    drop(anonymous);
    let reader = acl.token_with_rules("reader", "service_prefix \"\" { policy = \"read\" }");
    let reader_token = common::write(dir.path(), "reader.token", &reader);
    let reader_flags = ["-grpc-addr", &grpc_addr, "-token-file", path(&reader_token)];
    let refused = start_proxy_with(agent, "web", &log("reader.log"), &reader_flags);
    eventually(
        "the agent to log the refused stream",
        Duration::from_secs(20),
        &logs,
        || {
            let text = agent.log_text();
            text.contains("xDS stream refused by ACLs")
                && text.contains("lacks permission 'service:write' on \"web\"")
        },
    );
    assert_eq!(
        echo(upstream, "nobody\n"),
        None,
        "no listener without a config"
    );
    drop(refused);

    // A web sidecar that may write web but not read db: no db endpoints.
    let narrow_flags = ["-grpc-addr", &grpc_addr, "-token-file", path(&narrow_token)];
    let narrow_proxy = start_proxy_with(agent, "web", &log("narrow.log"), &narrow_flags);
    eventually(
        "the narrow proxy's upstream listener",
        Duration::from_secs(20),
        &logs,
        || std::net::TcpStream::connect(("127.0.0.1", upstream)).is_ok(),
    );
    for _ in 0..3 {
        assert_eq!(
            echo(upstream, "hidden\n"),
            None,
            "db must stay out of reach"
        );
    }
    assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(narrow_proxy);

    // With web's service identity: traffic flows.
    let web_flags = ["-grpc-addr", &grpc_addr, "-token-file", path(&web_token)];
    let _web = start_proxy_with(agent, "web", &log("web.log"), &web_flags);
    eventually(
        "echo through web -> db with identity tokens",
        Duration::from_secs(30),
        &logs,
        || echo(upstream, "hello\n").as_deref() == Some("hello\n"),
    );
}
