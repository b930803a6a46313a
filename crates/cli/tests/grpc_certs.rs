//! `legate connect grpc-certs` through the binary: the files and bootstrap
//! it writes, and clear errors (before writing anything) for bad input.
//! The files in use by a real gRPC client and their renewal are covered by
//! tests/py/test_grpc_proxyless.py.

mod common;

use common::TestAgent;
use serde_json::Value;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn grpc_certs_writes_an_identity_and_a_bootstrap_and_refuses_bad_input() {
    let agent = TestAgent::dev(&[]);
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_arg = certs.to_str().unwrap();
    let boot = dir.path().join("bootstrap.json");
    let boot_arg = boot.to_str().unwrap();

    // `connect grpc-certs -service web` plus flags; (exit code, stderr).
    let grpc_certs = |extra: &[&str]| {
        let mut args = vec!["connect", "grpc-certs", "-service", "web"];
        args.extend_from_slice(extra);
        let out = agent.cli(&args);
        (out.status.code(), stderr(&out))
    };
    let with_bootstrap = ["-dir", certs_arg, "-bootstrap", boot_arg, "-once"];

    // Missing and malformed flags are named.
    let out = agent.cli(&["connect", "grpc-certs", "-dir", certs_arg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("The -service flag is required"));
    let (_, err) = grpc_certs(&[]);
    assert!(err.contains("The -dir flag is required"), "{err}");
    let (_, err) = grpc_certs(&["-dir", certs_arg, "-refresh-interval", "soon"]);
    assert!(err.contains("Invalid -refresh-interval \"soon\""), "{err}");

    // A bootstrap needs a native instance to name; nothing is written without one.
    let (code, err) = grpc_certs(&with_bootstrap);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("No Connect-native instance of \"web\""),
        "{err}"
    );
    assert!(!boot.exists() && !certs.join("cert.pem").exists());
    for id in ["web-1", "web-2"] {
        let body = format!(r#"{{"ID": "{id}", "Name": "web", "Connect": {{"Native": true}}}}"#);
        assert_eq!(agent.put("/v1/agent/service/register", &body).0, 200);
    }
    let (_, err) = grpc_certs(&with_bootstrap);
    assert!(err.contains("choose one with -node-id"), "{err}");

    // With -node-id: the identity files and a bootstrap gRPC can read.
    let mut args = with_bootstrap.to_vec();
    args.extend(["-node-id", "web-2", "-grpc-addr", "127.0.0.1:18502"]);
    let (code, err) = grpc_certs(&args);
    assert_eq!(code, Some(0), "{err}");
    let bootstrap: Value = serde_json::from_str(&std::fs::read_to_string(&boot).unwrap()).unwrap();
    assert_eq!(bootstrap["xds_servers"][0]["server_uri"], "127.0.0.1:18502");
    assert_eq!(
        bootstrap["xds_servers"][0]["channel_creds"][0]["type"],
        "insecure"
    );
    assert_eq!(bootstrap["node"]["id"], "web-2");
    assert_eq!(
        bootstrap["node"]["metadata"]["legate.certificate_provider"],
        "legate"
    );
    let provider = &bootstrap["certificate_providers"]["legate"];
    assert_eq!(provider["plugin_name"], "file_watcher");
    let canonical = std::fs::canonicalize(&certs).unwrap();
    assert_eq!(
        provider["config"]["certificate_file"],
        canonical.join("cert.pem").to_str().unwrap()
    );
    // The leaf verifies against the roots and names web's SPIFFE id.
    let verify = std::process::Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(certs.join("roots.pem"))
        .arg(certs.join("cert.pem"))
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(certs.join("cert.pem"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("/ns/default/dc/dc1/svc/web"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(certs.join("key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
