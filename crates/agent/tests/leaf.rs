//! The leaf certificate manager against a real in-process server: blocking
//! fetches, re-issue within the rotation window, and back-off under the
//! servers' CSR rate limit with no request lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use legate_agent::leaf::{LeafManager, LeafSettings};
use legate_ca::verify::verify_leaf;
use legate_server::{Server, ServerConfig};
use legate_types::connect::CaConfiguration;
use legate_types::rpc::ServerRpc;
use legate_types::{QueryOptions, RpcError, WriteOptions};
use serde_json::json;

async fn start_server() -> Arc<Server> {
    let server = Server::start(ServerConfig::in_memory("dc1", "leaf-test"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    // The first leader initialises the CA.
    assert!(server.wait_for_ca(Duration::from_secs(10)).await);
    server
}

async fn set_ca_config(server: &Server, config: serde_json::Value) {
    server
        .ca_config_set(
            &WriteOptions::default(),
            CaConfiguration {
                provider: "consul".into(),
                config: config.as_object().unwrap().clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

fn settings(rotation: Duration, rate_limit: Duration) -> LeafSettings {
    LeafSettings {
        rotation_window: rotation,
        rate_limit_window: rate_limit,
        ..Default::default()
    }
}

#[tokio::test]
async fn blocking_fetch_returns_a_new_leaf_within_the_rotation_window() {
    let server = start_server().await;
    let window = Duration::from_secs(3);
    let leaves = LeafManager::start(
        server.clone(),
        "dc1".into(),
        settings(window, Duration::from_secs(30)),
    );
    let first = leaves.get("web", 0, Duration::from_secs(30)).await.unwrap();
    assert!(first.private_key_pem.contains("PRIVATE KEY"));
    let roots = server
        .ca_roots(&QueryOptions::default())
        .await
        .unwrap()
        .value;
    let old_root = roots.roots[0].root_cert.clone();
    assert_eq!(
        verify_leaf(&[&old_root], &first.cert_pem)
            .unwrap()
            .to_string(),
        first.service_uri
    );
    // Same service again: the cached certificate, not a new one.
    let again = leaves.get("web", 0, Duration::from_secs(1)).await.unwrap();
    assert_eq!(again.serial_number, first.serial_number);
    assert_eq!(server.ca_sign_counts().signed, 1);
    // A blocking fetch past the current index times out with the same one.
    let started = Instant::now();
    let same = leaves
        .get("web", first.raft.modify_index, Duration::from_millis(500))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert_eq!(same.serial_number, first.serial_number);

    // Rotate; the blocked fetch wakes with a leaf from the new root within
    // the window, and it verifies against the old root alone.
    let waiter = {
        let leaves = leaves.clone();
        let index = first.raft.modify_index;
        tokio::spawn(async move { leaves.get("web", index, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rotated_at = Instant::now();
    set_ca_config(&server, json!({"PrivateKeyType": "rsa"})).await;
    let renewed = waiter.await.unwrap().unwrap();
    let took = rotated_at.elapsed();
    assert!(
        took < window + Duration::from_secs(2),
        "re-issued after {took:?}"
    );
    assert!(renewed.raft.modify_index > first.raft.modify_index);
    assert_ne!(renewed.serial_number, first.serial_number);
    assert_eq!(renewed.raft.create_index, first.raft.create_index);
    assert!(verify_leaf(&[&old_root], &renewed.cert_pem).is_ok());
    let new_roots = server
        .ca_roots(&QueryOptions::default())
        .await
        .unwrap()
        .value;
    assert!(verify_leaf(&[&new_roots.roots[0].root_cert], &renewed.cert_pem).is_ok());
    assert_eq!(leaves.services(), vec!["web".to_string()]);
    leaves.stop();
    server.shutdown().await;
}

#[tokio::test]
async fn rate_limited_agents_back_off_and_every_one_gets_its_leaf() {
    let server = start_server().await;
    set_ca_config(&server, json!({"CSRMaxPerSecond": 5})).await;
    // 50 agents (one manager each), each asking for its own service's leaf
    // at once, with a 2 s back-off window instead of 30 s to keep the test short.
    let agents: Vec<Arc<LeafManager>> = (0..50)
        .map(|_| {
            LeafManager::start(
                server.clone(),
                "dc1".into(),
                settings(Duration::from_secs(30), Duration::from_secs(2)),
            )
        })
        .collect();
    let started = Instant::now();
    let tasks: Vec<_> = agents
        .iter()
        .enumerate()
        .map(|(i, agent)| {
            let agent = agent.clone();
            // A first request the servers refuse is answered with the
            // refusal, as Consul's; clients retry, as proxies do.
            tokio::spawn(async move {
                loop {
                    match agent
                        .get(&format!("svc-{i}"), 0, Duration::from_secs(60))
                        .await
                    {
                        Err(RpcError::RateLimited) => {
                            tokio::time::sleep(Duration::from_millis(200)).await
                        }
                        other => return other,
                    }
                }
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let cert = task.await.unwrap().unwrap();
        assert_eq!(cert.service, format!("svc-{i}"));
    }
    let counts = server.ca_sign_counts();
    assert_eq!(counts.signed, 50, "every request signed exactly once");
    assert!(
        counts.rate_limited >= 30,
        "the burst was limited: {counts:?}"
    );
    // 50 at 5/s cannot finish much before 9 s.
    assert!(started.elapsed() >= Duration::from_secs(7));
    for agent in agents {
        agent.stop();
    }
    server.shutdown().await;
}
