//! The leader's loops against a real (in-memory) Raft server.

use std::time::Duration;

use legate_server::{Server, ServerConfig};
use legate_types::rpc::ServerRpc;
use legate_types::{KvOp, KvVerb, QueryOptions, WriteOptions};

fn config(tombstone_ttl: Duration) -> ServerConfig {
    ServerConfig {
        tombstone_ttl,
        ..ServerConfig::in_memory("dc1", "leader-test")
    }
}

#[tokio::test]
async fn leader_registers_itself_and_reaps_tombstones() {
    let server = Server::start(config(Duration::from_secs(1))).await.unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let opts = WriteOptions::default();
    server
        .kv_apply(&opts, KvOp::set("gone/a", b"x".to_vec()))
        .await
        .unwrap();
    let delete = KvOp {
        verb: KvVerb::Delete,
        ..KvOp::set("gone/a", vec![])
    };
    assert!(server.kv_apply(&opts, delete).await.unwrap());
    let deleted_at = server
        .store()
        .read()
        .max_tombstone_index()
        .expect("a tombstone");
    let listed = server
        .kv_list(&QueryOptions::default(), "gone/".into())
        .await
        .unwrap();
    assert_eq!(listed.meta.index, deleted_at);

    let mut reaped = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if server.store().read().max_tombstone_index().is_none() {
            reaped = true;
            break;
        }
    }
    assert!(reaped, "the tombstone was not reaped within 10s");
    let listed = server
        .kv_list(&QueryOptions::default(), "gone/".into())
        .await
        .unwrap();
    assert!(
        listed.meta.index >= deleted_at,
        "index went backwards after reaping"
    );

    // The leader registered this server with a passing serfHealth check.
    let checks = server
        .health_node_checks(&QueryOptions::default(), "leader-test".into())
        .await
        .unwrap();
    assert!(checks.value.iter().any(|c| c.check_id == "serfHealth"));
    let consul = server
        .catalog_service_nodes(
            &QueryOptions::default(),
            legate_types::rpc::ServiceQuery {
                service: "consul".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(consul.value.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn kind_aware_listing_never_returns_unknown_kinds() {
    use legate_types::config_entry::from_json;
    let server = Server::start(config(Duration::from_secs(900)))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let opts = WriteOptions::default();
    for value in [
        serde_json::json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http"}),
        serde_json::json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "web", "Consumers": [{"Peer": "east"}]}]}),
        serde_json::json!({"Kind": "mesh", "Name": "mesh"}),
    ] {
        assert!(server
            .config_apply(&opts, from_json(value).unwrap(), None)
            .await
            .unwrap());
    }
    // An older reader that only understands service-defaults and mesh.
    let known = vec!["service-defaults".to_string(), "mesh".to_string()];
    let listed = server
        .config_list_all(&QueryOptions::default(), known.clone())
        .await
        .unwrap();
    let kinds: Vec<&str> = listed.value.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, vec!["mesh", "service-defaults"]);
    assert!(listed.value.iter().all(|e| known.contains(&e.kind)));
    // An old secondary naming no kinds gets only Consul 1.8.0's set.
    let unnamed = server
        .config_list_all(&QueryOptions::default(), vec![])
        .await
        .unwrap();
    let kinds: Vec<&str> = unnamed.value.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, vec!["service-defaults"]);
    server.shutdown().await;
}

#[tokio::test]
async fn snapshot_restore_brings_back_saved_state_and_refuses_bad_archives() {
    let server = Server::start(config(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let opts = WriteOptions::default();
    server
        .kv_apply(&opts, KvOp::set("saved", b"1".to_vec()))
        .await
        .unwrap();
    let saved = server
        .snapshot_save(&QueryOptions::default())
        .await
        .unwrap();
    let (meta, _) = legate_state::archive::read_archive(&saved.value.0).unwrap();
    assert_eq!(saved.meta.index, meta.index);
    assert!(meta.term >= 1);
    server
        .kv_apply(&opts, KvOp::set("later", b"2".to_vec()))
        .await
        .unwrap();

    server
        .snapshot_restore(&opts, saved.value.clone())
        .await
        .unwrap();
    let read = |key: &str| {
        let key = key.to_string();
        let server = &server;
        async move {
            server
                .kv_get(&QueryOptions::default(), key)
                .await
                .unwrap()
                .value
        }
    };
    assert!(read("saved").await.is_some());
    assert!(read("later").await.is_none());

    for (archive, wanted) in [
        (b"garbage".to_vec(), "not a valid archive"),
        (Vec::new(), "empty"),
    ] {
        let error = server
            .snapshot_restore(&opts, legate_types::rpc::SnapshotArchive(archive))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, legate_types::RpcError::BadRequest(m) if m.contains(wanted)),
            "{error:?}"
        );
    }
    assert!(
        read("saved").await.is_some(),
        "refused archives change nothing"
    );
    server.shutdown().await;
}

/// Bytes deflate cannot shrink, different for every seed.
fn incompressible(seed: u64, size: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_larger_than_one_raft_entry_is_restored_in_pieces() {
    use legate_types::rpc::SnapshotArchive;
    let server = Server::start(config(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let opts = WriteOptions::default();
    // 36 MiB: more than the 32 MiB that one Raft entry used to cap restores at.
    for n in 0..72u64 {
        server
            .kv_apply(
                &opts,
                KvOp::set(format!("big/{n}"), incompressible(n, 512 << 10)),
            )
            .await
            .unwrap();
    }
    let saved = server
        .snapshot_save(&QueryOptions::default())
        .await
        .unwrap();
    assert!(saved.value.0.len() > 2 * SnapshotArchive::PIECE_BYTES);
    server
        .kv_apply(&opts, KvOp::set("big/0", b"overwritten".to_vec()))
        .await
        .unwrap();
    server
        .kv_apply(&opts, KvOp::set("later", b"2".to_vec()))
        .await
        .unwrap();
    server.snapshot_restore(&opts, saved.value).await.unwrap();
    let query = QueryOptions::default();
    let get = |key: &str| server.kv_get(&query, key.to_string());
    assert!(get("later").await.unwrap().value.is_none());
    for n in [0u64, 71] {
        let entry = get(&format!("big/{n}")).await.unwrap().value.unwrap();
        assert!(
            entry.value[..] == incompressible(n, 512 << 10)[..],
            "big/{n}"
        );
    }
    server.shutdown().await;

    // A cluster with a server that cannot apply pieces keeps the old limit.
    let mut older = config(Duration::from_secs(60));
    older.masked_features = vec!["rp".into()];
    let server = Server::start(older).await.unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let error = server
        .snapshot_restore(
            &opts,
            SnapshotArchive(vec![0; SnapshotArchive::PIECE_BYTES + 1]),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, legate_types::RpcError::BadRequest(m) if m.contains("at most 4 MiB")),
        "{error:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn nodes_gossip_does_not_know_are_reaped_once_settled() {
    let server = Server::start(ServerConfig {
        reap_settle: Duration::from_millis(500),
        session_ttl_min: legate_types::DEFAULT_SESSION_TTL_MIN,
        ..config(Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let opts = WriteOptions::default();
    let node = |name: &str, serf: bool| legate_types::RegisterRequest {
        node: name.into(),
        address: "10.0.0.9".into(),
        checks: if serf {
            vec![legate_types::HealthCheck {
                check_id: "serfHealth".into(),
                name: "Serf Health Status".into(),
                status: legate_types::HealthStatus::Passing,
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    // A node from an earlier membership, an external node (no serfHealth),
    // and a member gossip knows.
    server
        .catalog_register(&opts, node("ghost", true))
        .await
        .unwrap();
    server
        .catalog_register(&opts, node("external", false))
        .await
        .unwrap();
    server
        .catalog_register(&opts, node("friend", true))
        .await
        .unwrap();
    server.update_members(vec![legate_server::ClusterMember {
        name: "friend".into(),
        node_id: String::new(),
        address: "10.0.0.9".into(),
        datacenter: "dc1".into(),
        server_port: None,
        raft_id: None,
        features: Default::default(),
        state: legate_server::MemberState::Alive,
    }]);
    let names = || {
        let (_, nodes) = server.store().read().nodes();
        nodes.into_iter().map(|n| n.node).collect::<Vec<_>>()
    };
    let mut reaped = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !names().contains(&"ghost".to_string()) {
            reaped = true;
            break;
        }
    }
    assert!(reaped, "ghost was not reaped: {:?}", names());
    let left = names();
    assert!(left.contains(&"external".to_string()), "{left:?}");
    assert!(left.contains(&"friend".to_string()), "{left:?}");
    assert!(left.contains(&"leader-test".to_string()), "{left:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn the_leader_reaps_expired_acl_tokens() {
    use legate_state::{Command, Table};
    use legate_types::acl::AclToken;
    const ROOT: &str = "6c2d9e1f-3a4b-4c5d-8e6f-7a8b9c0d1e2f";
    let mut config = config(Duration::from_secs(60));
    config.acl = legate_server::AclSettings {
        enabled: true,
        default_policy: legate_acl::DefaultPolicy::Deny,
        initial_management: Some(ROOT.into()),
        ..Default::default()
    };
    let server = Server::start(config).await.unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(5)).await);
    let token_count = || server.store().read().acl_tokens().1.count();
    for _ in 0..100 {
        if token_count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = token_count();
    // Tokens can only be made to expire at least a minute ahead over the
    // API: these two are put straight into the store, one already expired.
    let store = server.store();
    let index = store.read().max_index(&[Table::AclTokens]) + 1_000_000;
    for (n, expiry) in [("1", "2020-01-01T00:00:00Z"), ("2", "2999-01-01T00:00:00Z")] {
        let token = AclToken {
            accessor_id: format!("11111111-2222-3333-4444-00000000000{n}"),
            secret_id: format!("aaaaaaaa-2222-3333-4444-00000000000{n}"),
            expiration_time: Some(expiry.into()),
            create_time: "2019-12-31T00:00:00Z".into(),
            ..Default::default()
        };
        store.apply(
            index + n.parse::<u64>().unwrap(),
            &Command::AclTokenSet(Box::new(token)),
        );
    }
    assert_eq!(token_count(), before + 2);
    let mut reaped = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tables = store.read();
        let ids: Vec<String> = tables
            .acl_tokens()
            .1
            .map(|t| t.accessor_id.clone())
            .collect();
        if !ids.iter().any(|id| id.ends_with("0001")) {
            assert!(
                ids.iter().any(|id| id.ends_with("0002")),
                "the live token stays"
            );
            reaped = true;
            break;
        }
    }
    assert!(reaped, "the expired token was not reaped within 10s");
}
