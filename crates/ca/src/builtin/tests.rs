use std::process::Command;
use std::time::Duration;

use x509_parser::prelude::*;

use super::*;

const TD: &str = "11111111-2222-3333-4444-555555555555.consul";

fn pem_der(pem: &str) -> Vec<u8> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    parsed.contents
}

fn uri_sans(der: &[u8]) -> Vec<String> {
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    cert.subject_alternative_name()
        .unwrap()
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::URI(u) => Some(u.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `openssl verify` as the independent verifier.
fn openssl_verify(dir: &std::path::Path, roots: &[&str], untrusted: &[&str], leaf: &str) -> bool {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca = write("roots.pem", &roots.concat());
    let leaf_path = write("leaf.pem", leaf);
    let mut cmd = Command::new("openssl");
    cmd.arg("verify").arg("-CAfile").arg(&ca);
    if !untrusted.is_empty() {
        cmd.arg("-untrusted")
            .arg(write("untrusted.pem", &untrusted.concat()));
    }
    let out = cmd
        .arg(&leaf_path)
        .output()
        .expect("openssl is installed (scripts/test installs it)");
    out.status.success()
}

#[test]
fn leaves_carry_the_identity_and_verify_independently() {
    let root = generate_root(TD, "Legate CA 1", Duration::from_secs(87600 * 3600)).unwrap();
    assert_eq!(
        uri_sans(&pem_der(&root.cert_pem)),
        vec![format!("spiffe://{TD}")]
    );
    let id = SpiffeId::service(TD, "dc1", "web");
    let (csr, _key) = make_csr(&id).unwrap();
    let leaf = sign_leaf(&root, &csr, &id, Duration::from_secs(72 * 3600)).unwrap();
    let der = pem_der(&leaf);
    assert_eq!(uri_sans(&der), vec![id.to_string()]);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    assert!(!cert.is_ca());
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    let lifetime = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert_eq!(
        lifetime,
        72 * 3600 + 60,
        "validity is set by the CA, not the CSR"
    );
    let dir = tempfile::tempdir().unwrap();
    assert!(openssl_verify(dir.path(), &[&root.cert_pem], &[], &leaf));
    let other = generate_root(TD, "Legate CA other", Duration::from_secs(3600)).unwrap();
    assert!(
        !openssl_verify(dir.path(), &[&other.cert_pem], &[], &leaf),
        "a foreign root must not verify it"
    );
}

#[test]
fn csrs_asking_for_another_identity_are_refused() {
    let root = generate_root(TD, "Legate CA", Duration::from_secs(3600)).unwrap();
    let web = SpiffeId::service(TD, "dc1", "web");
    let (db_csr, _) = make_csr(&SpiffeId::service(TD, "dc1", "db")).unwrap();
    let err = sign_leaf(&root, &db_csr, &web, Duration::from_secs(3600)).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    let (foreign_csr, _) = make_csr(&SpiffeId::service("other.consul", "dc1", "web")).unwrap();
    let err = sign_leaf(&root, &foreign_csr, &web, Duration::from_secs(3600)).unwrap_err();
    assert!(err.to_string().contains("different trust domain"), "{err}");
    let err = sign_leaf(
        &root,
        "-----BEGIN CERTIFICATE REQUEST-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE REQUEST-----\n",
        &web,
        Duration::from_secs(60),
    )
    .unwrap_err();
    assert!(matches!(err, CaError::BadCsr(_)), "{err}");
    assert!(matches!(
        sign_leaf(&root, "not pem at all", &web, Duration::from_secs(60)),
        Err(CaError::BadCsr(_))
    ));
}

#[test]
fn cross_signed_intermediate_bridges_old_and_new_roots() {
    let old = generate_root(TD, "Legate CA 1", Duration::from_secs(3600 * 24)).unwrap();
    let new = generate_root(TD, "Legate CA 2", Duration::from_secs(3600 * 24)).unwrap();
    let bridge = cross_sign(&old, &new).unwrap();
    let id = SpiffeId::service(TD, "dc1", "web");
    let (csr, _) = make_csr(&id).unwrap();
    let leaf = sign_leaf(&new, &csr, &id, Duration::from_secs(3600)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A peer that trusts only the old root accepts the new leaf through the bridge.
    assert!(openssl_verify(
        dir.path(),
        &[&old.cert_pem],
        &[&bridge],
        &leaf
    ));
    assert!(!openssl_verify(dir.path(), &[&old.cert_pem], &[], &leaf));
    // A peer that trusts the new root accepts it directly.
    assert!(openssl_verify(dir.path(), &[&new.cert_pem], &[], &leaf));
}

#[test]
fn builtin_provider_passes_the_conformance_suite_with_ec_and_rsa() {
    use crate::conformance::check_provider;
    check_provider(&crate::BuiltinProvider, &crate::CaConfig::default()).unwrap();
    let rsa = crate::CaConfig {
        private_key_type: "rsa".into(),
        private_key_bits: 2048,
        ..Default::default()
    };
    check_provider(&crate::BuiltinProvider, &rsa).unwrap();
}

#[test]
fn operator_supplied_roots_from_openssl_are_used_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("ca.key");
    let cert_path = dir.path().join("ca.pem");
    let status = Command::new("openssl")
        .args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ])
        .arg(&key_path)
        .status()
        .unwrap();
    assert!(status.success());
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-new",
            "-days",
            "30",
            "-subj",
            "/O=Example/CN=Example Root",
        ])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args([
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ])
        .arg("-key")
        .arg(&key_path)
        .arg("-out")
        .arg(&cert_path)
        .status()
        .unwrap();
    assert!(status.success());
    let key = std::fs::read_to_string(&key_path).unwrap();
    let cert = std::fs::read_to_string(&cert_path).unwrap();
    let config = crate::CaConfig {
        private_key: Some(key.clone()),
        root_cert: Some(cert.clone()),
        ..Default::default()
    };
    crate::conformance::check_provider(&crate::BuiltinProvider, &config).unwrap();
    // Another key than the certificate's is refused.
    let (_, other_key) = make_csr(&SpiffeId::service(TD, "dc1", "x")).unwrap();
    let err = root_from_pem(&cert, &other_key).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    // A leaf certificate is not a root.
    let root = generate_root(TD, "r", Duration::from_secs(3600 * 24)).unwrap();
    let id = SpiffeId::service(TD, "dc1", "web");
    let (csr, leaf_key) = make_csr(&id).unwrap();
    let leaf = sign_leaf(&root, &csr, &id, Duration::from_secs(3600)).unwrap();
    let err = root_from_pem(&leaf, &leaf_key).unwrap_err();
    assert!(err.to_string().contains("not a CA"), "{err}");
}

#[test]
fn root_descriptions_match_consul_formats() {
    let root = generate_root(TD, &root_common_name(TD), Duration::from_secs(3600)).unwrap();
    let info = crate::info::describe(&root.cert_pem).unwrap();
    assert!(info.common_name.starts_with("pri-"), "{}", info.common_name);
    assert!(info.common_name.ends_with(".consul.ca.11111111.consul"));
    assert_eq!(info.fingerprint.len(), 32 * 3 - 1);
    assert!(info.serial_u64() > 0);
    assert!(!info.subject_key_id.is_empty());
    assert_eq!(info.uris, vec![format!("spiffe://{TD}")]);
}
