//! `legate tls ca create` / `tls cert create`, checked with openssl.

mod common;

use std::process::Command;

fn legate(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(common::binary())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn openssl(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn ca_and_server_certificates_like_consul() {
    let dir = tempfile::tempdir().unwrap();
    let out = legate(dir.path(), &["tls", "ca", "create"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "==> Saved consul-agent-ca.pem\n==> Saved consul-agent-ca-key.pem\n"
    );
    // A second run refuses to overwrite.
    let out = legate(dir.path(), &["tls", "ca", "create"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));

    let out = legate(
        dir.path(),
        &[
            "tls",
            "cert",
            "create",
            "-server",
            "-dc",
            "dc1",
            "-node",
            "server-1",
            "-additional-ipaddress",
            "10.0.0.5",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("WARNING: Server Certificates grants authority"),
        "{stdout}"
    );
    assert!(
        stdout.contains("==> Saved dc1-server-consul-0.pem")
            && stdout.contains("==> Saved dc1-server-consul-0-key.pem"),
        "{stdout}"
    );
    let (ok, text) = openssl(
        dir.path(),
        &[
            "verify",
            "-CAfile",
            "consul-agent-ca.pem",
            "dc1-server-consul-0.pem",
        ],
    );
    assert!(ok, "{text}");
    let (_, sans) = openssl(
        dir.path(),
        &[
            "x509",
            "-in",
            "dc1-server-consul-0.pem",
            "-noout",
            "-ext",
            "subjectAltName",
        ],
    );
    for want in [
        "DNS:server.dc1.consul",
        "DNS:server-1.server.dc1.consul",
        "DNS:localhost",
        "IP Address:127.0.0.1",
        "IP Address:10.0.0.5",
    ] {
        assert!(sans.contains(want), "{want} missing from {sans}");
    }
    // The key matches the certificate.
    let (_, cert_pub) = openssl(
        dir.path(),
        &[
            "x509",
            "-in",
            "dc1-server-consul-0.pem",
            "-noout",
            "-pubkey",
        ],
    );
    let (_, key_pub) = openssl(
        dir.path(),
        &["pkey", "-in", "dc1-server-consul-0-key.pem", "-pubout"],
    );
    assert_eq!(cert_pub, key_pub);

    // The next certificate takes the next index; client and CLI certificates work too.
    let out = legate(dir.path(), &["tls", "cert", "create", "-server"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("dc1-server-consul-1.pem"));
    let out = legate(
        dir.path(),
        &["tls", "cert", "create", "-client", "-dc", "east"],
    );
    assert!(out.status.success());
    let (_, sans) = openssl(
        dir.path(),
        &[
            "x509",
            "-in",
            "east-client-consul-0.pem",
            "-noout",
            "-ext",
            "subjectAltName",
        ],
    );
    assert!(sans.contains("DNS:client.east.consul"), "{sans}");
    assert!(legate(dir.path(), &["tls", "cert", "create", "-cli"])
        .status
        .success());

    // Refusals name the problem.
    for (args, needle) in [
        (vec!["tls", "cert", "create"], "-server, -client, or -cli"),
        (
            vec!["tls", "cert", "create", "-client", "-node", "n1"],
            "-node requires -server",
        ),
        (
            vec![
                "tls",
                "cert",
                "create",
                "-server",
                "-additional-ipaddress",
                "nope",
            ],
            "not an IP address",
        ),
        (
            vec!["tls", "cert", "create", "-server", "-ca", "missing.pem"],
            "missing.pem",
        ),
    ] {
        let out = legate(dir.path(), &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
