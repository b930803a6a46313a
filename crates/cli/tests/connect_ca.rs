//! The Connect CA through the real binary: `/v1/connect/ca/*`,
//! `/v1/agent/connect/ca/*`, `legate connect ca get-config|set-config`, and
//! the agent's `connect { ca_config {} }`; leaves checked with `openssl verify`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{binary, header, TestAgent};
use serde_json::Value;

fn openssl_verify(dir: &std::path::Path, roots_pem: &str, leaf_chain: &str) -> bool {
    let roots = dir.join("roots.pem");
    let leaf = dir.join("leaf.pem");
    let untrusted = dir.join("untrusted.pem");
    let certs: Vec<&str> = leaf_chain
        .split_inclusive("-----END CERTIFICATE-----\n")
        .collect();
    std::fs::write(&roots, roots_pem).unwrap();
    std::fs::write(&leaf, certs[0]).unwrap();
    let mut cmd = Command::new("openssl");
    cmd.arg("verify").arg("-CAfile").arg(&roots);
    if certs.len() > 1 {
        std::fs::write(&untrusted, certs[1..].concat()).unwrap();
        cmd.arg("-untrusted").arg(&untrusted);
    }
    cmd.arg(&leaf).output().unwrap().status.success()
}

#[test]
fn ca_roots_leaf_certificates_and_rotation_through_http_and_cli() {
    let agent = TestAgent::dev(&[
        "-hcl",
        r#"connect { ca_config { csr_max_per_second = 7 leaf_cert_ttl = "24h" } }"#,
    ]);
    let dir = tempfile::tempdir().unwrap();
    // Roots: one active root in the cluster's trust domain.
    let (status, headers, body) = agent.request("GET", "/v1/connect/ca/roots", None);
    assert_eq!(status, 200, "{body}");
    assert!(header(&headers, "x-consul-index").is_some());
    let roots: Value = serde_json::from_str(&body).unwrap();
    let trust_domain = roots["TrustDomain"].as_str().unwrap().to_string();
    assert!(trust_domain.ends_with(".consul"), "{trust_domain}");
    assert_eq!(roots["Roots"].as_array().unwrap().len(), 1);
    assert_eq!(roots["ActiveRootID"], roots["Roots"][0]["ID"]);
    assert!(!body.contains("PRIVATE KEY"));
    assert_eq!(
        agent.get("/v1/agent/connect/ca/roots").unwrap()["ActiveRootID"],
        roots["ActiveRootID"]
    );

    // A leaf for web, with the SPIFFE id Consul uses and the configured TTL.
    let (status, headers, body) = agent.request("GET", "/v1/agent/connect/ca/leaf/web", None);
    assert_eq!(status, 200, "{body}");
    let leaf: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        leaf["ServiceURI"],
        format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/web")
    );
    assert_eq!(leaf["Service"], "web");
    assert!(leaf["PrivateKeyPEM"]
        .as_str()
        .unwrap()
        .contains("PRIVATE KEY"));
    let index = leaf["ModifyIndex"].as_u64().unwrap();
    assert_eq!(
        header(&headers, "x-consul-index"),
        Some(index.to_string().as_str())
    );
    let parse = |v: &Value| {
        time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    let life = parse(&leaf["ValidBefore"]) - parse(&leaf["ValidAfter"]);
    assert!(
        life <= time::Duration::hours(24) + time::Duration::minutes(2),
        "{life}"
    );

    // ?pem gives a bundle openssl accepts the leaf against.
    let (status, headers, pem) = agent.request("GET", "/v1/connect/ca/roots?pem=true", None);
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/pem-certificate-chain")
    );
    let leaf_pem = leaf["CertPEM"].as_str().unwrap();
    assert!(openssl_verify(dir.path(), &pem, leaf_pem));

    // A blocking fetch with the current index waits, then returns the same leaf.
    let started = Instant::now();
    let same = agent
        .get(&format!(
            "/v1/agent/connect/ca/leaf/web?index={index}&wait=1s"
        ))
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(same["SerialNumber"], leaf["SerialNumber"]);

    // The CLI shows the configuration from the agent's config file.
    let out = agent.cli(&["connect", "ca", "get-config"]);
    assert!(out.status.success(), "{out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["Provider"], "consul");
    assert_eq!(shown["Config"]["CSRMaxPerSecond"], 7);
    assert_eq!(shown["Config"]["LeafCertTTL"], "24h0m0s");

    // Rotation through the CLI: the old leaf stays valid against the new
    // bundle, and the agent re-issues within the 30 s jitter window.
    let file = dir.path().join("new-ca.json");
    std::fs::write(
        &file,
        r#"{"Provider": "consul", "Config": {"LeafCertTTL": "24h", "PrivateKeyType": "rsa", "PrivateKeyBits": 2048}}"#,
    )
    .unwrap();
    let rotated_at = Instant::now();
    let out = agent.cli(&[
        "connect",
        "ca",
        "set-config",
        "-config-file",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Configuration updated!"
    );
    let old_active = roots["ActiveRootID"].clone();
    let roots = agent.get("/v1/connect/ca/roots").unwrap();
    assert_eq!(roots["Roots"].as_array().unwrap().len(), 2);
    assert_ne!(roots["ActiveRootID"], old_active);
    assert_eq!(roots["Roots"][1]["ID"], old_active);
    assert_eq!(roots["Roots"][1]["Active"], false);
    let (_, _, bundle) = agent.request("GET", "/v1/connect/ca/roots?pem", None);
    assert!(openssl_verify(dir.path(), &bundle, leaf_pem));
    let renewed = agent
        .get(&format!(
            "/v1/agent/connect/ca/leaf/web?index={index}&wait=60s"
        ))
        .unwrap();
    assert!(rotated_at.elapsed() < Duration::from_secs(32));
    assert_ne!(renewed["SerialNumber"], leaf["SerialNumber"]);
    // The new leaf verifies against the OLD root alone (cross-signed).
    let old_root_only = &pem;
    assert!(openssl_verify(
        dir.path(),
        old_root_only,
        renewed["CertPEM"].as_str().unwrap()
    ));

    // Bad input: clear errors naming what is wrong.
    let out = agent.cli(&["connect", "ca", "set-config"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-config-file"));
    std::fs::write(
        &file,
        r#"{"Provider": "consul", "Config": {"LeafCertTTL": "5m"}}"#,
    )
    .unwrap();
    let out = agent.cli(&[
        "connect",
        "ca",
        "set-config",
        "-config-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("leaf cert TTL"),
        "{out:?}"
    );
    let (status, body) = agent.put("/v1/connect/ca/configuration", "{not json");
    assert_eq!(status, 400, "{body}");
    let (status, body) = agent.put(
        "/v1/connect/ca/configuration",
        r#"{"Provider": "vault", "Config": {}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not supported"), "{body}");
}

#[test]
fn an_invalid_ca_config_in_the_agent_config_stops_the_agent_with_the_key_named() {
    let out = Command::new(binary())
        .args([
            "agent",
            "-dev",
            "-http-port=-1",
            "-dns-port=-1",
            "-grpc-port=-1",
            "-hcl",
            r#"connect { ca_config { leaf_cert_ttl = "10m" } }"#,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("connect.ca_config"), "{text}");
    assert!(text.contains("1h0m0s"), "{text}");
}
