//! The Connect CA on a real (in-memory Raft) server: initialisation, CSR
//! checks, rotation with cross-signing, pruning and the CSR limits. Leaves
//! are checked with rustls (legate-ca's verifier) and `openssl verify`.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use legate_ca::builtin::make_csr;
use legate_ca::verify::{verify_leaf, verify_leaf_at};
use legate_ca::{SpiffeId, RATE_LIMIT_ERROR};
use legate_server::{Server, ServerConfig};
use legate_types::connect::{CaConfiguration, CaSignRequest, IndexedCaRoots, IssuedCert};
use legate_types::rpc::ServerRpc;
use legate_types::{QueryOptions, RpcError, WriteOptions};
use serde_json::{json, Map, Value};

async fn start() -> Arc<Server> {
    let server = Server::start(ServerConfig::in_memory("dc1", "ca-test"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    assert!(server.wait_for_ca(Duration::from_secs(10)).await);
    server
}

async fn roots(server: &Server) -> IndexedCaRoots {
    server
        .ca_roots(&QueryOptions::default())
        .await
        .unwrap()
        .value
}

async fn sign(server: &Server, id: &SpiffeId, service: &str) -> Result<IssuedCert, RpcError> {
    let (csr, _) = make_csr(id).unwrap();
    server
        .ca_sign(
            &WriteOptions::default(),
            CaSignRequest {
                csr,
                service: service.into(),
            },
        )
        .await
}

async fn set_config(server: &Server, config: Value, force: bool) -> Result<(), RpcError> {
    let config: Map<String, Value> = config.as_object().unwrap().clone();
    server
        .ca_config_set(
            &WriteOptions::default(),
            CaConfiguration {
                provider: "consul".into(),
                config,
                force_without_cross_signing: force,
                ..Default::default()
            },
        )
        .await
}

/// `openssl verify` with `roots` trusted and `chain[1..]` untrusted.
fn openssl_verifies(roots: &[&str], chain: &str) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let certs: Vec<String> = chain
        .split_inclusive("-----END CERTIFICATE-----")
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path
    };
    let ca = write("roots.pem", &roots.join("\n"));
    let leaf = write("leaf.pem", &certs[0]);
    let mut cmd = Command::new("openssl");
    cmd.arg("verify").arg("-CAfile").arg(ca);
    if certs.len() > 1 {
        cmd.arg("-untrusted")
            .arg(write("untrusted.pem", &certs[1..].join("\n")));
    }
    cmd.arg(leaf).output().expect("openssl").status.success()
}

#[tokio::test]
async fn first_leader_initialises_the_ca_and_signs_only_what_it_should() {
    let server = start().await;
    let r = roots(&server).await;
    let cluster_id = server
        .store()
        .read()
        .system_metadata(legate_server::CLUSTER_ID_KEY)
        .unwrap()
        .to_string();
    assert_eq!(r.trust_domain, format!("{cluster_id}.consul"));
    assert_eq!(r.roots.len(), 1);
    let root = &r.roots[0];
    assert!(root.active);
    assert_eq!(r.active_root_id, root.id);
    assert!(root.name.starts_with("pri-"), "{}", root.name);
    assert_eq!(root.private_key_type, "ec");
    let roots_json = serde_json::to_string(&r).unwrap();
    assert!(
        !roots_json.contains("PRIVATE KEY"),
        "roots must never carry keys"
    );

    let web = SpiffeId::service(&r.trust_domain, "dc1", "web");
    let cert = sign(&server, &web, "web").await.unwrap();
    assert_eq!(cert.service, "web");
    assert_eq!(cert.service_uri, web.to_string());
    assert_eq!(
        verify_leaf(&[&root.root_cert], &cert.cert_pem).unwrap(),
        web
    );
    assert!(openssl_verifies(&[&root.root_cert], &cert.cert_pem));
    // A root from elsewhere does not accept it.
    let stranger = legate_ca::builtin::generate_root(
        "other.consul",
        "stranger",
        Duration::from_secs(3600 * 24),
    )
    .unwrap();
    assert!(verify_leaf(&[&stranger.cert_pem], &cert.cert_pem).is_err());
    assert!(!openssl_verifies(&[&stranger.cert_pem], &cert.cert_pem));
    // And a leaf from another trust domain is rejected by ours.
    let foreign_id = SpiffeId::service("other.consul", "dc1", "web");
    let (foreign_csr, _) = make_csr(&foreign_id).unwrap();
    let foreign_leaf = legate_ca::builtin::sign_leaf(
        &stranger,
        &foreign_csr,
        &foreign_id,
        Duration::from_secs(3600),
    )
    .unwrap();
    assert!(verify_leaf(&[&root.root_cert], &foreign_leaf).is_err());
    assert!(!openssl_verifies(&[&root.root_cert], &foreign_leaf));

    // Bad CSRs get clear errors.
    let cases: Vec<(Result<IssuedCert, RpcError>, &str)> = vec![
        (
            sign(
                &server,
                &SpiffeId::service("other.consul", "dc1", "web"),
                "web",
            )
            .await,
            "different trust domain",
        ),
        (
            sign(
                &server,
                &SpiffeId::service(&r.trust_domain, "dc2", "web"),
                "web",
            )
            .await,
            "different datacenter",
        ),
        (
            sign(
                &server,
                &SpiffeId::service(&r.trust_domain, "dc1", "db"),
                "web",
            )
            .await,
            "does not match the requested service web",
        ),
        (
            sign(
                &server,
                &SpiffeId::Signing {
                    trust_domain: r.trust_domain.clone(),
                },
                "",
            )
            .await,
            "signing CA",
        ),
        (
            server
                .ca_sign(
                    &WriteOptions::default(),
                    CaSignRequest {
                        csr: "garbage".into(),
                        service: "web".into(),
                    },
                )
                .await,
            "invalid CSR",
        ),
    ];
    for (result, needle) in cases {
        match result {
            Err(RpcError::BadRequest(message)) => {
                assert!(message.contains(needle), "{message:?} lacks {needle:?}")
            }
            other => panic!("expected a 400 mentioning {needle:?}, got {other:?}"),
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn rotation_cross_signs_so_old_and_new_leaves_verify_until_pruning() {
    let server = start().await;
    let before = roots(&server).await;
    let old_root = before.roots[0].root_cert.clone();
    let web = SpiffeId::service(&before.trust_domain, "dc1", "web");
    let old_leaf = sign(&server, &web, "web").await.unwrap();

    // Changing only the leaf TTL keeps the root.
    set_config(&server, json!({"LeafCertTTL": "24h"}), false)
        .await
        .unwrap();
    assert_eq!(roots(&server).await.active_root_id, before.active_root_id);

    // New key material (RSA) rotates the root.
    set_config(
        &server,
        json!({"LeafCertTTL": "24h", "PrivateKeyType": "rsa", "PrivateKeyBits": 2048}),
        false,
    )
    .await
    .unwrap();
    let after = roots(&server).await;
    assert_eq!(after.roots.len(), 2);
    let (new, old) = (&after.roots[0], &after.roots[1]);
    assert!(new.active && !old.active);
    assert_eq!(after.active_root_id, new.id);
    assert_ne!(new.id, before.active_root_id);
    assert_eq!(new.private_key_type, "rsa");
    assert_ne!(old.rotated_out_at, legate_types::connect::ZERO_TIME);
    assert_eq!(new.intermediate_certs.as_ref().map(Vec::len), Some(1));

    let bundle = [new.root_cert.as_str(), old.root_cert.as_str()];
    // The old leaf still verifies against the bundle.
    assert!(verify_leaf(&bundle, &old_leaf.cert_pem).is_ok());
    assert!(openssl_verifies(&bundle, &old_leaf.cert_pem));
    // A new leaf carries the cross-signed root, so a peer that only knows
    // the OLD root accepts it.
    let new_leaf = sign(&server, &web, "web").await.unwrap();
    assert_eq!(new_leaf.cert_pem.matches("BEGIN CERTIFICATE").count(), 2);
    assert_eq!(verify_leaf(&[&old_root], &new_leaf.cert_pem).unwrap(), web);
    assert!(openssl_verifies(&[&old_root], &new_leaf.cert_pem));
    assert!(verify_leaf(&[&new.root_cert], &new_leaf.cert_pem).is_ok());
    let lifetime = legate_ca::info::describe(&new_leaf.cert_pem).unwrap();
    assert!((lifetime.not_after - lifetime.not_before) <= time::Duration::hours(25));

    // Pruning: not before twice the leaf TTL has passed.
    assert_eq!(
        server
            .ca_prune_roots(SystemTime::now() + Duration::from_secs(47 * 3600), true)
            .await
            .unwrap(),
        0
    );
    let later = SystemTime::now() + Duration::from_secs(48 * 3600 + 120);
    assert_eq!(server.ca_prune_roots(later, true).await.unwrap(), 1);
    let pruned = roots(&server).await;
    assert_eq!(pruned.roots.len(), 1);
    assert_eq!(pruned.active_root_id, new.id);
    let remaining = [pruned.roots[0].root_cert.as_str()];
    // The old leaf no longer verifies against what the cluster trusts.
    assert!(verify_leaf_at(&remaining, &old_leaf.cert_pem, SystemTime::now()).is_err());
    assert!(!openssl_verifies(&remaining, &old_leaf.cert_pem));
    assert!(verify_leaf(&remaining, &new_leaf.cert_pem).is_ok());

    // ForceWithoutCrossSigning: the next root carries no bridge, so its
    // leaves do not verify against the previous root alone.
    set_config(&server, json!({"PrivateKeyType": "ec"}), true)
        .await
        .unwrap();
    let forced = roots(&server).await;
    assert_eq!(forced.roots.len(), 2);
    assert!(forced.roots[0].intermediate_certs.is_none());
    let forced_leaf = sign(&server, &web, "web").await.unwrap();
    assert!(verify_leaf(&[&new.root_cert], &forced_leaf.cert_pem).is_err());
    assert!(verify_leaf(&[&forced.roots[0].root_cert], &forced_leaf.cert_pem).is_ok());
    server.shutdown().await;
}

#[tokio::test]
async fn configuration_is_validated_and_keys_are_never_shown() {
    let server = start().await;
    for (config, needle) in [
        (
            json!({"LeafCertTTL": "10m"}),
            "greater or equal than 1h0m0s",
        ),
        (json!({"PrivateKeyType": "dsa"}), "either 'ec' or 'rsa'"),
        (json!({"Bogus": 1}), "invalid CA config key"),
    ] {
        match set_config(&server, config.clone(), false).await {
            Err(RpcError::BadRequest(m)) => assert!(m.contains(needle), "{config}: {m}"),
            other => panic!("{config}: {other:?}"),
        }
    }
    let wrong_cluster = server
        .ca_config_set(
            &WriteOptions::default(),
            CaConfiguration {
                cluster_id: "not-this-one".into(),
                provider: "consul".into(),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(wrong_cluster, Err(RpcError::BadRequest(m)) if m.contains("cluster id")));

    // An operator's own key and root (SEC1 key from openssl).
    let key = String::from_utf8(
        Command::new("openssl")
            .args(["ecparam", "-name", "prime256v1", "-genkey", "-noout"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("k.pem");
    std::fs::write(&key_path, &key).unwrap();
    let cert = String::from_utf8(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-new",
                "-days",
                "30",
                "-subj",
                "/CN=Operator Root",
            ])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            .arg("-key")
            .arg(&key_path)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    set_config(&server, json!({"PrivateKey": key, "RootCert": cert}), false)
        .await
        .unwrap();
    let r = roots(&server).await;
    assert_eq!(r.roots[0].name, "Operator Root");
    let shown = server
        .ca_config_get(&QueryOptions::default())
        .await
        .unwrap()
        .value;
    assert!(!shown.config.contains_key("PrivateKey"));
    assert!(!serde_json::to_string(&shown)
        .unwrap()
        .contains("PRIVATE KEY"));
    // Writing back what GET showed keeps the root (the key is kept).
    server
        .ca_config_set(&WriteOptions::default(), shown)
        .await
        .unwrap();
    assert_eq!(roots(&server).await.active_root_id, r.active_root_id);
    let web = SpiffeId::service(&r.trust_domain, "dc1", "web");
    let leaf = sign(&server, &web, "web").await.unwrap();
    assert!(openssl_verifies(&[&cert], &leaf.cert_pem));
    server.shutdown().await;
}

#[tokio::test]
async fn csr_rate_limit_refuses_the_excess_with_consuls_error_and_loses_nothing() {
    let server = start().await;
    set_config(&server, json!({"CSRMaxPerSecond": 5}), false)
        .await
        .unwrap();
    let td = roots(&server).await.trust_domain;
    let burst = |n: usize| {
        let server = server.clone();
        let td = td.clone();
        async move {
            let tasks: Vec<_> = (0..n)
                .map(|i| {
                    let server = server.clone();
                    let id = SpiffeId::service(&td, "dc1", &format!("svc-{i}"));
                    tokio::spawn(async move { (i, sign(&server, &id, "").await) })
                })
                .collect();
            let mut outcomes = Vec::new();
            for t in tasks {
                outcomes.push(t.await.unwrap());
            }
            outcomes
        }
    };
    let outcomes = burst(50).await;
    let refused: Vec<usize> = outcomes
        .iter()
        .filter_map(|(i, r)| match r {
            Err(e) => {
                assert_eq!(*e, RpcError::RateLimited);
                assert_eq!(e.to_string(), RATE_LIMIT_ERROR);
                Some(*i)
            }
            Ok(_) => None,
        })
        .collect();
    // A bucket of 5, refilled at 5/s during the 500 ms wait.
    assert!(
        (40..=46).contains(&refused.len()),
        "{} refused",
        refused.len()
    );
    assert_eq!(server.ca_sign_counts().rate_limited as usize, refused.len());
    // Backing off (one retry per window), every refused request succeeds.
    let mut pending = refused;
    let mut rounds = 0;
    while !pending.is_empty() {
        rounds += 1;
        assert!(rounds < 30, "requests starved");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let mut still = Vec::new();
        for i in pending {
            let id = SpiffeId::service(&td, "dc1", &format!("svc-{i}"));
            if sign(&server, &id, "").await.is_err() {
                still.push(i);
            }
        }
        pending = still;
    }
    assert_eq!(server.ca_sign_counts().signed, 50);

    // Concurrency mode: the rate limit off, one signing at a time.
    set_config(
        &server,
        json!({"CSRMaxPerSecond": 0, "CSRMaxConcurrent": 1}),
        false,
    )
    .await
    .unwrap();
    let outcomes = burst(50).await;
    assert!(outcomes
        .iter()
        .all(|(_, r)| matches!(r, Ok(_) | Err(RpcError::RateLimited))));
    let ok = outcomes.iter().filter(|(_, r)| r.is_ok()).count();
    assert!(ok > 0);
    server.shutdown().await;
}

#[tokio::test]
async fn the_primary_signs_intermediates_only_for_its_signing_identity_within_its_csr_limit() {
    use legate_ca::intermediate::make_intermediate_csr;
    let server = start().await;
    let trust_domain = roots(&server).await.trust_domain;
    let opts = WriteOptions::default();
    let (csr, _) = make_intermediate_csr(&trust_domain, "dc2", "ec", 256).unwrap();
    let cert = server
        .ca_sign_intermediate(&opts, csr)
        .await
        .expect("the primary signs its trust domain's intermediate");
    assert!(cert.contains("BEGIN CERTIFICATE"));
    // Another trust domain, a leaf CSR, garbage: refused, nothing signed.
    let (other, _) = make_intermediate_csr("0000-other.consul", "dc2", "ec", 256).unwrap();
    match server.ca_sign_intermediate(&opts, other).await {
        Err(RpcError::BadRequest(m)) => assert!(m.contains("is not our trust domain"), "{m}"),
        other => panic!("{other:?}"),
    }
    let id = SpiffeId::parse(&format!("spiffe://{trust_domain}/ns/default/dc/dc2/svc/db")).unwrap();
    let (leaf_csr, _) = make_csr(&id).unwrap();
    assert!(matches!(
        server.ca_sign_intermediate(&opts, leaf_csr).await,
        Err(RpcError::BadRequest(_))
    ));
    assert!(matches!(
        server.ca_sign_intermediate(&opts, "garbage".into()).await,
        Err(RpcError::BadRequest(_))
    ));
    // Intermediates share the primary's CSR limit: a burst past it is
    // refused with Consul's rate-limit error, and a later try succeeds.
    set_config(&server, json!({"CSRMaxPerSecond": 1}), false)
        .await
        .unwrap();
    let burst: Vec<_> = (0..8)
        .map(|i| {
            let (server, opts) = (server.clone(), opts.clone());
            let (csr, _) =
                make_intermediate_csr(&trust_domain, &format!("dc{}", i + 2), "ec", 256).unwrap();
            tokio::spawn(async move { server.ca_sign_intermediate(&opts, csr).await })
        })
        .collect();
    let mut refused = 0;
    for outcome in burst {
        match outcome.await.unwrap() {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e, RpcError::RateLimited);
                assert_eq!(e.to_string(), RATE_LIMIT_ERROR);
                refused += 1;
            }
        }
    }
    assert!(refused >= 5, "{refused} of 8 refused");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (csr, _) = make_intermediate_csr(&trust_domain, "dc2", "ec", 256).unwrap();
    assert!(server.ca_sign_intermediate(&opts, csr).await.is_ok());
    server.shutdown().await;

    // A secondary refuses with Consul's text.
    let secondary = Server::start(ServerConfig {
        primary_datacenter: "dc1".into(),
        ..ServerConfig::in_memory("dc2", "secondary")
    })
    .await
    .unwrap();
    assert!(secondary.wait_for_leader(Duration::from_secs(10)).await);
    let (csr, _) = make_intermediate_csr(&trust_domain, "dc3", "ec", 256).unwrap();
    match secondary.ca_sign_intermediate(&opts, csr).await {
        Err(RpcError::Internal(m)) => assert_eq!(m, "not the primary datacenter"),
        other => panic!("{other:?}"),
    }
    secondary.shutdown().await;
}
