use std::time::Duration;

use legate_types::rpc::TxnOp;
use legate_types::*;
use serde_json::json;

use super::*;

fn register(node: &str, service: Option<(&str, &str)>, checks: Vec<HealthCheck>) -> Command {
    Command::Register(Box::new(RegisterRequest {
        node: node.to_string(),
        address: "127.0.0.1".to_string(),
        service: service.map(|(id, name)| NodeService {
            id: id.to_string(),
            service: name.to_string(),
            port: 8080,
            ..Default::default()
        }),
        checks,
        ..Default::default()
    }))
}

fn check(id: &str, service_id: &str, status: HealthStatus) -> HealthCheck {
    HealthCheck {
        check_id: id.to_string(),
        name: id.to_string(),
        service_id: service_id.to_string(),
        status,
        ..Default::default()
    }
}

fn kv(verb: KvVerb, key: &str, value: &str, index: u64, session: &str) -> Command {
    Command::Kv(KvOp {
        verb,
        key: key.to_string(),
        value: value.as_bytes().to_vec().into(),
        flags: 0,
        index,
        session: session.to_string(),
    })
}

#[test]
fn command_numbers_are_pinned() {
    let samples = vec![
        (register("n", None, vec![]), 0),
        (Command::Deregister(DeregisterRequest::default()), 1),
        (kv(KvVerb::Set, "k", "v", 0, ""), 2),
        (Command::SessionCreate(Session::default()), 3),
        (Command::SessionDestroy("x".into()), 4),
        (Command::Txn(vec![]), 5),
        (Command::Batch(vec![]), 6),
        (Command::ReapTombstones(9), 7),
        (
            Command::ConfigEntrySet {
                entry: Box::new(entry("service-defaults", "web")),
                cas: None,
            },
            8,
        ),
        (
            Command::ConfigEntryDelete {
                kind: "mesh".into(),
                name: "mesh".into(),
                cas: Some(1),
            },
            9,
        ),
        (
            Command::SystemMetadataInit {
                key: "cluster-id".into(),
                value: "x".into(),
            },
            10,
        ),
        (
            Command::CaSet {
                roots: Some(vec![]),
                config: None,
                cas: Some(0),
            },
            11,
        ),
        (
            Command::Restore(legate_types::rpc::SnapshotArchive(b"x".to_vec())),
            12,
        ),
        (
            Command::RestorePiece {
                id: "u".into(),
                offset: 0,
                data: legate_types::rpc::SnapshotArchive(b"x".to_vec()),
            },
            13,
        ),
        (
            Command::RestoreCommit {
                id: "u".into(),
                length: 1,
            },
            14,
        ),
        (Command::CoordinateBatchUpdate(vec![]), 15),
        (
            Command::FederationStateSet(Box::new(
                legate_types::federation_state::FederationState {
                    datacenter: "dc2".into(),
                    ..Default::default()
                },
            )),
            16,
        ),
        (Command::FederationStateDelete("dc2".into()), 17),
        (
            Command::PreparedQuerySet(Box::new(legate_types::prepared_query::PreparedQuery {
                id: "q".into(),
                ..Default::default()
            })),
            25,
        ),
        (Command::PreparedQueryDelete("q".into()), 26),
        (Command::TxnWithCatalog(vec![]), 27),
        (
            Command::AutopilotConfigSet {
                config: Box::default(),
                cas: None,
            },
            28,
        ),
    ];
    for (command, number) in samples {
        assert_eq!(command.type_number(), number);
        let encoded = serde_json::to_value(&command).unwrap();
        assert_eq!(encoded["Type"], json!(number.to_string()), "{encoded}");
        let decoded: Command = serde_json::from_value(encoded).unwrap();
        assert_eq!(decoded, command);
    }
}

#[test]
fn register_is_idempotent_and_tracks_indexes() {
    let store = StateStore::new();
    assert_eq!(
        store.apply(5, &register("n1", Some(("web-1", "web")), vec![])),
        CommandResult::Done
    );
    let (index, rows) = store.read().service_nodes("web", false);
    assert_eq!(index, 5);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].raft, RaftIndex::at(5));
    // The same registration again changes nothing.
    store.apply(6, &register("n1", Some(("web-1", "web")), vec![]));
    let (index, rows) = store.read().service_nodes("web", false);
    assert_eq!(index, 5);
    assert_eq!(rows[0].raft, RaftIndex::at(5));
    // A registration of another service does not move web's index.
    store.apply(7, &register("n1", Some(("db-1", "db")), vec![]));
    assert_eq!(store.read().service_index("web"), 5);
    assert_eq!(store.read().service_index("db"), 7);
    let (_, services) = store.read().services();
    assert_eq!(services.keys().collect::<Vec<_>>(), vec!["db", "web"]);
}

#[test]
fn checks_need_a_known_service_and_failed_commands_change_nothing() {
    let store = StateStore::new();
    let result = store.apply(
        3,
        &register(
            "n1",
            None,
            vec![check("c", "missing", HealthStatus::Passing)],
        ),
    );
    assert!(
        matches!(result, CommandResult::Failed(ref m) if m.contains("Unknown service")),
        "{result:?}"
    );
    assert!(store.read().nodes().1.is_empty());
}

#[test]
fn health_rows_carry_node_and_service_checks() {
    let store = StateStore::new();
    store.apply(
        1,
        &register(
            "n1",
            Some(("web-1", "web")),
            vec![
                check("serfHealth", "", HealthStatus::Passing),
                check("web-check", "web-1", HealthStatus::Critical),
            ],
        ),
    );
    let (_, rows) = store.read().check_service_nodes("web", false);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].checks.len(), 2);
    assert_eq!(rows[0].aggregate_status(), HealthStatus::Critical);
    assert_eq!(rows[0].checks[1].service_name, "web");
    // Deregistering the service removes its checks too.
    store.apply(
        2,
        &Command::Deregister(DeregisterRequest {
            node: "n1".into(),
            service_id: "web-1".into(),
            ..Default::default()
        }),
    );
    assert_eq!(store.read().node_checks("n1").1.len(), 1);
    assert!(store.read().check_service_nodes("web", false).1.is_empty());
    assert_eq!(store.read().service_index("web"), 2);
}

#[test]
fn kv_cas_and_delete_tree_keep_indexes_moving_forward() {
    let store = StateStore::new();
    assert_eq!(
        store.apply(1, &kv(KvVerb::Cas, "a/b", "1", 0, "")),
        CommandResult::Applied(true)
    );
    assert_eq!(
        store.apply(2, &kv(KvVerb::Cas, "a/b", "2", 0, "")),
        CommandResult::Applied(false)
    );
    assert_eq!(
        store.apply(3, &kv(KvVerb::Cas, "a/b", "2", 1, "")),
        CommandResult::Applied(true)
    );
    store.apply(4, &kv(KvVerb::Set, "a/c/d", "x", 0, ""));
    let (index, entry) = store.read().kv_get("a/b");
    assert_eq!(
        (index, entry.unwrap().value),
        (3, bytes::Bytes::from_static(b"2"))
    );
    assert_eq!(store.read().kv_keys("a/", "/").1, vec!["a/b", "a/c/"]);
    store.apply(9, &kv(KvVerb::DeleteTree, "a/", "", 0, ""));
    let (index, entries) = store.read().kv_list("a/");
    assert!(entries.is_empty());
    assert_eq!(index, 9, "deletes must advance the prefix's index");
    assert_eq!(
        store.apply(10, &kv(KvVerb::DeleteCas, "zzz", "", 5, "")),
        CommandResult::Applied(true)
    );
}

#[test]
fn locks_follow_sessions() {
    let store = StateStore::new();
    store.apply(
        1,
        &register(
            "n1",
            None,
            vec![check("serfHealth", "", HealthStatus::Passing)],
        ),
    );
    let session = Session {
        id: "s1".into(),
        node: "n1".into(),
        node_checks: vec!["serfHealth".into()],
        lock_delay: Duration::from_secs(15).as_nanos() as u64,
        ..Default::default()
    };
    assert_eq!(
        store.apply(2, &Command::SessionCreate(session)),
        CommandResult::Done
    );
    assert_eq!(
        store.apply(3, &kv(KvVerb::Lock, "lock", "me", 0, "s1")),
        CommandResult::Applied(true)
    );
    assert_eq!(store.read().kv_get("lock").1.unwrap().lock_index, 1);
    assert!(matches!(
        store.apply(4, &kv(KvVerb::Lock, "lock", "x", 0, "nope")),
        CommandResult::Failed(_)
    ));
    // The node check turning critical invalidates the session and releases the lock.
    store.apply(
        5,
        &register(
            "n1",
            None,
            vec![check("serfHealth", "", HealthStatus::Critical)],
        ),
    );
    assert!(store.read().session("s1").1.is_none());
    let entry = store.read().kv_get("lock").1.unwrap();
    assert_eq!(entry.session, "");
    assert_eq!(entry.modify_index, 5);
    // The lock delay keeps a new session from taking it at once.
    store.apply(
        6,
        &register(
            "n1",
            None,
            vec![check("serfHealth", "", HealthStatus::Passing)],
        ),
    );
    store.apply(
        7,
        &Command::SessionCreate(Session {
            id: "s2".into(),
            node: "n1".into(),
            ..Default::default()
        }),
    );
    assert_eq!(
        store.apply(8, &kv(KvVerb::Lock, "lock", "me", 0, "s2")),
        CommandResult::Applied(false)
    );
}

#[test]
fn a_lock_its_holder_wrote_again_is_released_with_its_session() {
    let store = StateStore::new();
    store.apply(1, &register("n1", None, vec![]));
    let session = Session {
        id: "s1".into(),
        node: "n1".into(),
        ..Default::default()
    };
    assert_eq!(
        store.apply(2, &Command::SessionCreate(session)),
        CommandResult::Done
    );
    for (index, value) in [(3, "first"), (4, "second")] {
        assert_eq!(
            store.apply(index, &kv(KvVerb::Lock, "lock", value, 0, "s1")),
            CommandResult::Applied(true)
        );
    }
    store.apply(5, &Command::SessionDestroy("s1".into()));
    let entry = store.read().kv_get("lock").1.unwrap();
    assert_eq!(entry.session, "", "the lock outlived its session");
    assert_eq!(entry.value, "second".as_bytes());
}

#[test]
fn failed_transactions_roll_back() {
    let store = StateStore::new();
    store.apply(1, &kv(KvVerb::Set, "x", "1", 0, ""));
    let ops = vec![
        TxnOp::kv(KvOp::set("y", b"2".to_vec())),
        TxnOp::kv(KvOp {
            verb: KvVerb::DeleteTree,
            ..KvOp::set("x", vec![])
        }),
        TxnOp::kv(KvOp {
            verb: KvVerb::CheckIndex,
            index: 99,
            ..KvOp::set("z", vec![])
        }),
    ];
    let result = store.apply(2, &Command::Txn(ops.clone()));
    let CommandResult::Txn(response) = result else {
        panic!("{result:?}")
    };
    assert_eq!(response.errors.as_ref().unwrap()[0].op_index, 2);
    assert!(store.read().kv_get("y").1.is_none());
    assert!(store.read().kv_get("x").1.is_some());
    assert_eq!(store.read().table_index(Table::Kvs), 1);
    // Without the failing check it commits.
    let result = store.apply(3, &Command::Txn(ops[..2].to_vec()));
    let CommandResult::Txn(response) = result else {
        panic!()
    };
    assert!(response.errors.is_none());
    assert_eq!(store.read().kv_get("y").1.unwrap().modify_index, 3);
    assert!(store.read().kv_get("x").1.is_none());
}

#[test]
fn snapshot_restore_round_trip() {
    let store = StateStore::new();
    store.apply(
        1,
        &register(
            "n1",
            Some(("web-1", "web")),
            vec![check("c1", "web-1", HealthStatus::Passing)],
        ),
    );
    store.apply(2, &kv(KvVerb::Set, "k", "v", 0, ""));
    store.apply(
        3,
        &Command::SessionCreate(Session {
            id: "s".into(),
            node: "n1".into(),
            ..Default::default()
        }),
    );
    store.apply(4, &kv(KvVerb::Delete, "k", "", 0, ""));
    let bytes = store.snapshot().unwrap();
    let copy = StateStore::new();
    copy.restore(&bytes).unwrap();
    assert_eq!(copy.snapshot().unwrap(), bytes);
    assert_eq!(
        copy.read().service_nodes("web", false),
        store.read().service_nodes("web", false)
    );
    assert_eq!(copy.read().kv_get("k").0, 4);
}

#[tokio::test]
async fn watches_wake_only_the_touched_service_and_prefix() {
    let store = std::sync::Arc::new(StateStore::new());
    let web = store.watches().service("web");
    let db = store.watches().service("db");
    let key = store.watches().kv_prefix("app/config");
    let other_key = store.watches().kv_prefix("other/");
    store.apply(1, &register("n1", Some(("web-1", "web")), vec![]));
    store.apply(2, &kv(KvVerb::Set, "app/config", "v", 0, ""));
    assert!(web.wait(Duration::from_millis(200)).await);
    assert!(!db.wait(Duration::from_millis(50)).await);
    assert!(key.wait(Duration::from_millis(200)).await);
    assert!(!other_key.wait(Duration::from_millis(50)).await);
}

#[test]
fn batches_apply_in_order_at_one_index() {
    let store = StateStore::new();
    let batch = Command::Batch(vec![
        kv(KvVerb::Cas, "k", "first", 0, ""),
        kv(KvVerb::Cas, "k", "second", 0, ""),
        kv(KvVerb::Set, "j", "x", 0, ""),
        Command::Batch(vec![]),
    ]);
    let result = store.apply(7, &batch);
    assert_eq!(
        result,
        CommandResult::Batch(vec![
            CommandResult::Applied(true),
            CommandResult::Applied(false),
            CommandResult::Applied(true),
            CommandResult::Failed("nested batches are not allowed".into()),
        ])
    );
    assert_eq!(store.read().kv_get("k").1.unwrap().value, b"first".to_vec());
    assert_eq!(store.read().kv_get("j").1.unwrap().modify_index, 7);
}

#[test]
fn reaping_tombstones_never_moves_indexes_back() {
    let store = StateStore::new();
    store.apply(1, &kv(KvVerb::Set, "p/a", "1", 0, ""));
    store.apply(2, &kv(KvVerb::Set, "p/b", "1", 0, ""));
    store.apply(3, &kv(KvVerb::Delete, "p/b", "", 0, ""));
    assert_eq!(store.read().kv_list("p/").0, 3);
    assert_eq!(store.read().max_tombstone_index(), Some(3));
    store.apply(4, &Command::ReapTombstones(3));
    assert_eq!(store.read().max_tombstone_index(), None);
    assert_eq!(
        store.read().kv_list("p/").0,
        3,
        "the prefix index must not drop back to 1"
    );
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(copy.read().kv_list("p/").0, 3);
}

fn entry(kind: &str, name: &str) -> legate_types::config_entry::ConfigEntry {
    let mut body = serde_json::Map::new();
    body.insert("Protocol".into(), json!("http"));
    legate_types::config_entry::ConfigEntry {
        kind: kind.into(),
        name: name.into(),
        body,
        raft: RaftIndex::default(),
    }
}

#[test]
fn config_entries_cas_and_kind_aware_listing() {
    let store = StateStore::new();
    let set = |e, cas| Command::ConfigEntrySet {
        entry: Box::new(e),
        cas,
    };
    assert_eq!(
        store.apply(1, &set(entry("service-defaults", "web"), Some(0))),
        CommandResult::Applied(true)
    );
    assert_eq!(
        store.apply(2, &set(entry("service-defaults", "web"), Some(0))),
        CommandResult::Applied(false)
    );
    assert_eq!(
        store.apply(3, &set(entry("service-defaults", "web"), Some(2))),
        CommandResult::Applied(false)
    );
    let mut changed = entry("service-defaults", "web");
    changed.body.insert("Protocol".into(), json!("grpc"));
    assert_eq!(
        store.apply(4, &set(changed, Some(1))),
        CommandResult::Applied(true)
    );
    let (_, got) = store.read().config_entry("service-defaults", "web");
    let got = got.unwrap();
    assert_eq!(
        got.raft,
        RaftIndex {
            create_index: 1,
            modify_index: 4
        }
    );
    store.apply(5, &set(entry("service-router", "web"), None));
    store.apply(6, &set(entry("proxy-defaults", "global"), None));
    let (index, all) = store.read().config_entries_of_kinds(&[]);
    assert_eq!((index, all.len()), (6, 3));
    let (_, known) = store
        .read()
        .config_entries_of_kinds(&["service-defaults".into(), "proxy-defaults".into()]);
    assert_eq!(
        known.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        vec!["proxy-defaults", "service-defaults"]
    );
    assert_eq!(
        store
            .read()
            .config_entries_of_kind("service-router")
            .1
            .len(),
        1
    );
    let delete = |cas| Command::ConfigEntryDelete {
        kind: "service-router".into(),
        name: "web".into(),
        cas,
    };
    assert_eq!(
        store.apply(7, &delete(Some(1))),
        CommandResult::Applied(false)
    );
    assert_eq!(
        store.apply(8, &delete(Some(5))),
        CommandResult::Applied(true)
    );
    assert_eq!(store.apply(9, &delete(None)), CommandResult::Applied(true));
    assert!(store
        .read()
        .config_entry("service-router", "web")
        .1
        .is_none());
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(
        copy.read().config_entries_of_kinds(&[]),
        store.read().config_entries_of_kinds(&[])
    );
}

#[test]
fn system_metadata_is_set_once() {
    let store = StateStore::new();
    let init = |v: &str| Command::SystemMetadataInit {
        key: "cluster-id".into(),
        value: v.into(),
    };
    assert_eq!(store.apply(1, &init("first")), CommandResult::Applied(true));
    assert_eq!(
        store.apply(2, &init("second")),
        CommandResult::Applied(false)
    );
    assert_eq!(store.read().system_metadata("cluster-id"), Some("first"));
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(copy.read().system_metadata("cluster-id"), Some("first"));
}

fn stored_root(id: &str, active: bool) -> crate::StoredCaRoot {
    crate::StoredCaRoot {
        root: legate_types::connect::CaRoot {
            id: id.into(),
            active,
            ..Default::default()
        },
        private_key: format!("key of {id}"),
        signing_cert: None,
    }
}

#[test]
fn ca_roots_check_and_set_keep_create_indexes_and_survive_snapshots() {
    let store = StateStore::new();
    let set = |roots: Vec<crate::StoredCaRoot>, cas| Command::CaSet {
        roots: Some(roots),
        config: Some(Box::new(legate_types::connect::CaConfiguration {
            provider: "consul".into(),
            ..Default::default()
        })),
        cas,
    };
    assert_eq!(
        store.apply(3, &set(vec![stored_root("a", true)], Some(0))),
        CommandResult::Applied(true)
    );
    // A second initialiser loses the race.
    assert_eq!(
        store.apply(4, &set(vec![stored_root("z", true)], Some(0))),
        CommandResult::Applied(false)
    );
    // Rotation: the new root becomes active and is listed first.
    assert_eq!(
        store.apply(
            7,
            &set(
                vec![stored_root("a", false), stored_root("b", true)],
                Some(3)
            )
        ),
        CommandResult::Applied(true)
    );
    let read = store.read();
    let (index, roots) = read.ca_roots();
    assert_eq!(index, 7);
    let ids: Vec<_> = roots.iter().map(|r| r.root.id.as_str()).collect();
    assert_eq!(ids, ["b", "a"]);
    assert_eq!(roots[1].root.raft.create_index, 3);
    assert_eq!(roots[1].root.raft.modify_index, 7);
    assert_eq!(read.ca_config().1.unwrap().raft.create_index, 3);
    assert!(!format!("{:?}", roots[0]).contains("key of"));
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(copy.read().ca_roots().1, roots);
    assert_eq!(copy.read().ca_config().0, 7);
}

#[tokio::test]
async fn restore_replaces_tables_and_moves_every_index_forward() {
    let source = StateStore::new();
    source.apply(3, &register("n1", Some(("db1", "db")), vec![]));
    source.apply(4, &kv(KvVerb::Set, "kept", "old", 0, ""));
    let archive = archive::write_archive(&source.snapshot_data(), 4, 1).unwrap();

    let target = StateStore::new();
    target.apply(10, &register("n2", Some(("web1", "web")), vec![]));
    target.apply(11, &kv(KvVerb::Set, "gone", "x", 0, ""));
    let kv_watch = target.watches().kv_prefix("kept");
    let web_watch = target.watches().service("web");
    assert_eq!(target.read().restores(), 0);

    let result = target.apply(
        20,
        &Command::Restore(legate_types::rpc::SnapshotArchive(archive)),
    );
    assert_eq!(result, CommandResult::Done);
    assert!(
        kv_watch.wait(Duration::from_millis(10)).await,
        "KV watcher woke"
    );
    assert!(
        web_watch.wait(Duration::from_millis(10)).await,
        "service watcher woke"
    );

    let tables = target.read();
    assert_eq!(tables.restores(), 1);
    assert!(tables.kv_get("gone").1.is_none());
    let (_, kept) = tables.kv_get("kept");
    assert_eq!(kept.unwrap().modify_index, 4, "rows keep their own indexes");
    assert_eq!(tables.kv_list("").0, 20, "list indexes move forward");
    assert!(tables.node("n2").is_none());
    assert!(tables.node("n1").is_some());
    for table in Table::ALL {
        assert_eq!(tables.table_index(table), 20, "{table:?}");
    }
    let (index, web) = tables.service_nodes("web", false);
    assert!(web.is_empty());
    assert_eq!(index, 20, "a service that vanished still moves forward");
    drop(tables);

    let refused = target.apply(
        21,
        &Command::Restore(legate_types::rpc::SnapshotArchive(b"garbage".to_vec())),
    );
    assert!(matches!(refused, CommandResult::Failed(m) if m.contains("not a valid archive")));
    assert!(
        target.read().node("n1").is_some(),
        "a bad archive changes nothing"
    );
}

#[test]
fn coordinates_belong_to_catalog_nodes_and_survive_snapshots() {
    use legate_types::coordinate::{Coordinate, CoordinateConfig, CoordinateEntry};
    let store = StateStore::new();
    store.apply(1, &register("a", None, vec![]));
    let mut coord = Coordinate::new(&CoordinateConfig::default());
    coord.vec[0] = 0.002;
    let entry = |node: &str, coord: &Coordinate| CoordinateEntry {
        node: node.into(),
        segment: String::new(),
        coord: coord.clone(),
    };
    let mut nan = coord.clone();
    nan.height = f64::NAN;
    store.apply(
        2,
        &Command::CoordinateBatchUpdate(vec![
            entry("a", &coord),
            entry("ghost", &coord),
            entry("a", &nan),
        ]),
    );
    {
        let tables = store.read();
        assert_eq!(tables.coordinate("a"), Some(&coord));
        assert_eq!(tables.coordinate("ghost"), None, "no such node");
        assert_eq!(tables.table_index(Table::Coordinates), 2);
    }
    // Only unknown nodes: nothing changes, not even the index.
    store.apply(
        3,
        &Command::CoordinateBatchUpdate(vec![entry("ghost", &coord)]),
    );
    assert_eq!(store.read().table_index(Table::Coordinates), 2);
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(copy.read().coordinate("a"), Some(&coord));
    // Deregistering the node removes its coordinate.
    store.apply(
        4,
        &Command::Deregister(DeregisterRequest {
            node: "a".into(),
            ..Default::default()
        }),
    );
    assert_eq!(store.read().coordinate("a"), None);
    assert_eq!(store.read().table_index(Table::Coordinates), 4);
}

#[test]
fn federation_states_keep_their_create_index_and_survive_snapshots() {
    use legate_types::federation_state::FederationState;
    let store = StateStore::new();
    let state = |dc: &str, primary_index: u64| {
        Command::FederationStateSet(Box::new(FederationState {
            datacenter: dc.into(),
            updated_at: "2026-12-02T10:00:00Z".into(),
            primary_modify_index: primary_index,
            ..Default::default()
        }))
    };
    assert_eq!(store.apply(1, &state("dc2", 7)), CommandResult::Done);
    assert_eq!(store.apply(2, &state("dc1", 0)), CommandResult::Done);
    assert_eq!(store.apply(3, &state("dc2", 9)), CommandResult::Done);
    assert!(matches!(
        store.apply(4, &state("", 0)),
        CommandResult::Failed(m) if m == "Missing datacenter name"
    ));
    {
        let tables = store.read();
        let (index, all) = tables.federation_states();
        assert_eq!(index, 3);
        let names: Vec<&str> = all.iter().map(|s| s.datacenter.as_str()).collect();
        assert_eq!(names, ["dc1", "dc2"]);
        let dc2 = tables.federation_state("dc2").1.unwrap();
        assert_eq!((dc2.raft.create_index, dc2.raft.modify_index), (1, 3));
        assert_eq!(dc2.primary_modify_index, 9);
    }
    let copy = StateStore::new();
    copy.restore(&store.snapshot().unwrap()).unwrap();
    assert_eq!(copy.read().federation_states().1.len(), 2);
    // Deleting an absent state changes nothing, not even the index.
    store.apply(5, &Command::FederationStateDelete("dc9".into()));
    assert_eq!(store.read().table_index(Table::FederationStates), 3);
    store.apply(6, &Command::FederationStateDelete("dc2".into()));
    assert!(store.read().federation_state("dc2").1.is_none());
    assert!(store.read().has_federation_states());
    assert_eq!(store.read().table_index(Table::FederationStates), 6);
}

#[test]
fn shared_texts_follow_the_rows_and_leave_with_them() {
    let store = StateStore::new();
    let tagged = |tags: &[&str], index: u64| {
        let mut service = NodeService {
            id: format!("web-{index}"),
            service: "web".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        };
        service.meta.insert("team".into(), "payments".into());
        Command::Register(Box::new(RegisterRequest {
            node: "n1".into(),
            address: "127.0.0.1".into(),
            service: Some(service),
            checks: vec![HealthCheck {
                check_id: format!("c-{index}"),
                name: "alive".into(),
                service_id: format!("web-{index}"),
                status: HealthStatus::Passing,
                ..Default::default()
            }],
            ..Default::default()
        }))
    };
    store.apply(1, &tagged(&["v1", "web"], 1));
    store.apply(2, &tagged(&["v1"], 2));
    // A tag change reaches the instance's check, which shares the texts.
    store.apply(3, &tagged(&["v2"], 1));
    let (_, checks) = store.read().node_checks("n1");
    let tags_of = |id: &str| {
        checks
            .iter()
            .find(|c| c.check_id == id)
            .map(|c| (c.service_name.clone(), c.service_tags.clone()))
    };
    assert_eq!(tags_of("c-1"), Some(("web".into(), vec!["v2".into()])));
    assert_eq!(tags_of("c-2"), Some(("web".into(), vec!["v1".into()])));
    // web, v1, v2, team, and the check's name and its empty texts.
    assert_eq!(store.read().names.len(), 6);
    // A failed transaction restores the rows, and their texts.
    let failing = vec![
        serde_json::from_value::<TxnOp>(
            json!({"Node": {"Verb": "delete", "Node": {"Node": "n1"}}}),
        )
        .expect("an op"),
        serde_json::from_value::<TxnOp>(
            json!({"KV": {"Verb": "check-index", "Key": "missing", "Index": 1}}),
        )
        .expect("an op"),
    ];
    store.apply(4, &Command::Txn(failing));
    assert_eq!(store.read().node_checks("n1").1, checks);
    assert_eq!(store.read().names.len(), 6);
    store.apply(
        5,
        &Command::Deregister(DeregisterRequest {
            node: "n1".into(),
            ..Default::default()
        }),
    );
    assert_eq!(store.read().names.len(), 0, "no row is left to hold a text");
}
