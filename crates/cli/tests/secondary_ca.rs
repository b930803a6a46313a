//! The Connect CA of a secondary datacenter, through the binary: dc2 adopts
//! dc1's trust domain, signs its leaves with an intermediate made in dc2
//! and signed by dc1 (checked with `openssl verify` against dc1's roots),
//! renews it before it expires, follows a root rotation in dc1, and keeps
//! issuing leaves while dc1 is gone.

mod common;

use std::time::{Duration, Instant};

use common::certs::{certs, openssl_verify, openssl_x509};
use common::{eventually, TestAgent};

fn server(
    name: &str,
    ip: &str,
    dc: &str,
    join: Option<&str>,
    env: &[(&str, &str)],
) -> (TestAgent, tempfile::TempDir) {
    let started = common::DatacenterServer::start(name, ip, dc, join, env);
    (started.agent, started.data)
}

/// The intermediate dc2 signs with: the first of its active root's.
fn dc2_intermediate(dc2: &TestAgent) -> Option<String> {
    let roots = dc2.get("/v1/connect/ca/roots?stale").ok()?;
    let active = roots["Roots"]
        .as_array()?
        .iter()
        .find(|r| r["Active"] == true)?
        .clone();
    let first = active["IntermediateCerts"].as_array()?.first()?.as_str()?;
    Some(first.to_string())
}

#[test]
fn a_secondary_signs_with_its_own_intermediate_renews_it_and_follows_rotations() {
    // dc1 signs intermediates for 12 s: dc2 renews after about 6 s.
    let (mut dc1, _d1) = server(
        "ca1",
        "127.0.0.181",
        "dc1",
        None,
        &[("LEGATE_TEST_INTERMEDIATE_CERT_TTL", "12s")],
    );
    let (dc2, _d2) = server("ca2", "127.0.0.182", "dc2", Some("127.0.0.181"), &[]);
    let primary = dc1.get("/v1/connect/ca/roots").unwrap();
    let trust_domain = primary["TrustDomain"].as_str().unwrap().to_string();
    let root_pem = primary["Roots"][0]["RootCert"]
        .as_str()
        .unwrap()
        .to_string();

    // dc2 adopts dc1's trust domain and active root, with its own intermediate.
    let intermediate = eventually(Duration::from_secs(30), || dc2_intermediate(&dc2));
    let roots = dc2.get("/v1/connect/ca/roots?stale").unwrap();
    assert_eq!(roots["TrustDomain"], trust_domain.as_str());
    assert_eq!(roots["ActiveRootID"], primary["ActiveRootID"]);
    assert!(!roots.to_string().contains("PRIVATE KEY"));
    let subject = openssl_x509(&intermediate, &["-subject"]);
    assert!(subject.contains("sec-dc2"), "{subject}");
    let text = openssl_verify(&root_pem, &[], &intermediate);
    assert!(
        text.contains(": OK"),
        "the intermediate chains to dc1's root: {text}"
    );

    // A dc2 leaf: dc2's SPIFFE id, issued by dc2's intermediate, verified
    // against dc1's roots alone with the chain the leaf response carries.
    let leaf = dc2.get("/v1/agent/connect/ca/leaf/db").unwrap();
    let chain = certs(leaf["CertPEM"].as_str().unwrap());
    assert!(chain.len() >= 2, "{chain:?}");
    let sans = openssl_x509(&chain[0], &["-ext", "subjectAltName"]);
    assert!(
        sans.contains(&format!("spiffe://{trust_domain}/ns/default/dc/dc2/svc/db")),
        "{sans}"
    );
    let issuer = openssl_x509(&chain[0], &["-issuer"]);
    assert!(issuer.contains("sec-dc2"), "{issuer}");
    let text = openssl_verify(&root_pem, &chain[1..], &chain[0]);
    assert!(text.contains(": OK"), "{text}");
    assert!(!openssl_verify(&root_pem, &[], &chain[0]).contains(": OK"));
    // The leaf never outlives the intermediate that signed it.
    let leaf_end = openssl_x509(&chain[0], &["-enddate"]);
    let inter_end = openssl_x509(&intermediate, &["-enddate"]);
    assert_eq!(leaf_end, inter_end);

    // Renewal at half of its life, before it expires.
    let first_serial = openssl_x509(&intermediate, &["-serial"]);
    let started = Instant::now();
    let renewed = eventually(Duration::from_secs(20), || {
        let now = dc2_intermediate(&dc2)?;
        (openssl_x509(&now, &["-serial"]) != first_serial).then_some(now)
    });
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "renewed only after {:?}",
        started.elapsed()
    );
    assert!(openssl_verify(&root_pem, &[], &renewed).contains(": OK"));

    // A root rotation in dc1: dc2 follows with an intermediate of the new root.
    let (status, body) = dc1.put(
        "/v1/connect/ca/configuration",
        r#"{"Provider":"consul","Config":{"PrivateKeyType":"rsa","PrivateKeyBits":2048}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let rotated = dc1.get("/v1/connect/ca/roots").unwrap();
    let new_id = rotated["ActiveRootID"].as_str().unwrap().to_string();
    assert_ne!(new_id, primary["ActiveRootID"].as_str().unwrap());
    let new_root_pem = rotated["Roots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ID"] == new_id.as_str())
        .unwrap()["RootCert"]
        .as_str()
        .unwrap()
        .to_string();
    let after = eventually(Duration::from_secs(20), || {
        let roots = dc2.get("/v1/connect/ca/roots?stale").ok()?;
        (roots["ActiveRootID"] == new_id.as_str()).then_some(())?;
        dc2_intermediate(&dc2)
    });
    let text = openssl_verify(&new_root_pem, &[], &after);
    assert!(text.contains(": OK"), "{text}");

    // dc1 gone: dc2 keeps issuing leaves with what it holds.
    dc1.kill9();
    let leaf = dc2.get("/v1/agent/connect/ca/leaf/cache").unwrap();
    let chain = certs(leaf["CertPEM"].as_str().unwrap());
    let text = openssl_verify(&new_root_pem, &chain[1..], &chain[0]);
    assert!(text.contains(": OK"), "{text}");
}
