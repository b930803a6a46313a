//! Certificates checked with `openssl`, an implementation we did not write.

use std::process::Command;

/// The certificates of a PEM chain, each as its own PEM.
pub fn certs(chain: &str) -> Vec<String> {
    chain
        .split_inclusive("-----END CERTIFICATE-----")
        .map(|c| c.trim().to_string() + "\n")
        .filter(|c| c.contains("BEGIN CERTIFICATE"))
        .collect()
}

/// `openssl verify` of `leaf` against `roots`, with `untrusted` as the
/// intermediates; the output.
pub fn openssl_verify(roots: &str, untrusted: &[String], leaf: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("roots.pem"), roots).unwrap();
    std::fs::write(dir.path().join("leaf.pem"), leaf).unwrap();
    let mut cmd = Command::new("openssl");
    cmd.arg("verify")
        .arg("-CAfile")
        .arg(dir.path().join("roots.pem"));
    if !untrusted.is_empty() {
        std::fs::write(dir.path().join("untrusted.pem"), untrusted.concat()).unwrap();
        cmd.arg("-untrusted").arg(dir.path().join("untrusted.pem"));
    }
    let out = cmd
        .arg(dir.path().join("leaf.pem"))
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// `openssl x509 -noout <args>` of one PEM certificate; its output.
pub fn openssl_x509(pem: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cert.pem");
    std::fs::write(&path, pem).unwrap();
    let out = Command::new("openssl")
        .arg("x509")
        .arg("-noout")
        .args(args)
        .arg("-in")
        .arg(&path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}
