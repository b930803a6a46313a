//! Property tests: for random command sequences the store never panics,
//! is deterministic (two stores applying the same log end up identical),
//! indexes never go backwards, and snapshot -> restore round-trips.

use legate_state::{Command, StateStore, Table};
use legate_types::rpc::TxnOp;
use legate_types::*;
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "a/b", "a/c", "b", "b/x/y", "c"]).prop_map(String::from)
}

fn node() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["n1", "n2", "n3"]).prop_map(String::from)
}

fn status() -> impl Strategy<Value = HealthStatus> {
    prop::sample::select(vec![
        HealthStatus::Passing,
        HealthStatus::Warning,
        HealthStatus::Critical,
    ])
}

fn verb() -> impl Strategy<Value = KvVerb> {
    prop::sample::select(vec![
        KvVerb::Set,
        KvVerb::Cas,
        KvVerb::Lock,
        KvVerb::Unlock,
        KvVerb::Delete,
        KvVerb::DeleteTree,
        KvVerb::DeleteCas,
        KvVerb::CheckIndex,
        KvVerb::Get,
    ])
}

fn kv_op() -> impl Strategy<Value = KvOp> {
    (
        verb(),
        key(),
        0u64..20,
        prop::sample::select(vec!["s1", "s2", ""]),
    )
        .prop_map(|(verb, key, index, session)| KvOp {
            verb,
            key,
            value: b"v".to_vec().into(),
            flags: index,
            index,
            session: session.to_string(),
        })
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (
            node(),
            prop::option::of(prop::sample::select(vec!["web", "db"])),
            status(),
            any::<bool>()
        )
            .prop_map(|(node, service, status, with_check)| {
                let service_id = service.map(|s| format!("{s}-1"));
                Command::Register(Box::new(RegisterRequest {
                    node: node.clone(),
                    address: "127.0.0.1".into(),
                    service: service.map(|s| NodeService {
                        id: format!("{s}-1"),
                        service: s.to_string(),
                        port: 80,
                        ..Default::default()
                    }),
                    check: with_check.then(|| HealthCheck {
                        check_id: "c".into(),
                        status,
                        service_id: service_id.unwrap_or_default(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }))
            }),
        (
            node(),
            prop::option::of(prop::sample::select(vec!["web-1", "db-1"]))
        )
            .prop_map(|(node, service_id)| {
                Command::Deregister(DeregisterRequest {
                    node,
                    service_id: service_id.unwrap_or("").to_string(),
                    ..Default::default()
                })
            }),
        kv_op().prop_map(Command::Kv),
        (node(), prop::sample::select(vec!["s1", "s2"])).prop_map(|(node, id)| {
            Command::SessionCreate(Session {
                id: id.to_string(),
                node,
                lock_delay: 0,
                ..Default::default()
            })
        }),
        prop::sample::select(vec!["s1", "s2"])
            .prop_map(|id| Command::SessionDestroy(id.to_string())),
        prop::collection::vec(kv_op().prop_map(TxnOp::kv), 0..4).prop_map(Command::Txn),
        prop::collection::vec(txn_op(), 0..5).prop_map(Command::TxnWithCatalog),
    ]
}

fn catalog_verb() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["set", "cas", "get", "delete", "delete-cas", "bogus"])
        .prop_map(String::from)
}

/// Any transaction operation, on the same few nodes, services, checks,
/// sessions and keys as the other commands.
fn txn_op() -> impl Strategy<Value = TxnOp> {
    prop_oneof![
        kv_op().prop_map(TxnOp::kv),
        (catalog_verb(), node(), 0u64..20).prop_map(|(verb, node, index)| TxnOp {
            node: Some(legate_types::txn::TxnNodeOp {
                verb,
                node: Node {
                    node,
                    address: format!("10.0.0.{index}"),
                    raft: RaftIndex {
                        create_index: 0,
                        modify_index: index,
                    },
                    ..Default::default()
                },
            }),
            ..Default::default()
        }),
        (
            catalog_verb(),
            node(),
            prop::sample::select(vec!["web", "db"]),
            0u64..20
        )
            .prop_map(|(verb, node, name, index)| TxnOp {
                service: Some(legate_types::txn::TxnServiceOp {
                    verb,
                    node,
                    service: NodeService {
                        id: format!("{name}-1"),
                        service: name.to_string(),
                        port: index as u16,
                        raft: RaftIndex {
                            create_index: 0,
                            modify_index: index,
                        },
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }),
        (catalog_verb(), node(), status(), any::<bool>(), 0u64..20).prop_map(
            |(verb, node, status, on_service, index)| TxnOp {
                check: Some(legate_types::txn::TxnCheckOp {
                    verb,
                    check: HealthCheck {
                        node,
                        check_id: "c".into(),
                        status,
                        service_id: if on_service {
                            "web-1".into()
                        } else {
                            String::new()
                        },
                        raft: RaftIndex {
                            create_index: 0,
                            modify_index: index,
                        },
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }
        ),
        prop::sample::select(vec!["s1", "s2"]).prop_map(|id| TxnOp {
            session: Some(legate_types::txn::TxnSessionOp {
                verb: "delete".into(),
                session: Session {
                    id: id.to_string(),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }),
    ]
}

/// Everything a transaction could change, as the API sees it.
fn observable(store: &StateStore) -> Vec<u8> {
    let tables = store.read();
    let mut seen = store.snapshot().unwrap();
    for table in Table::ALL {
        seen.extend(tables.table_index(table).to_be_bytes());
    }
    for service in ["web", "db"] {
        seen.extend(tables.service_index(service).to_be_bytes());
        seen.extend(format!("{:?}", tables.check_service_nodes(service, false)).into_bytes());
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A transaction that fails leaves nothing behind: whatever its other
    /// operations did (session invalidation and lock releases included)
    /// is undone, indexes too.
    #[test]
    fn failed_transactions_leave_no_trace(
        before in prop::collection::vec(command(), 0..30),
        ops in prop::collection::vec(txn_op(), 0..8),
    ) {
        let store = StateStore::new();
        for (i, command) in before.iter().enumerate() {
            store.apply(i as u64 + 1, command);
        }
        let seen = observable(&store);
        let mut ops = ops;
        ops.push(TxnOp::kv(KvOp {
            verb: KvVerb::Get,
            ..KvOp::set("never/there", Vec::new())
        }));
        let result = store.apply(1_000, &Command::TxnWithCatalog(ops));
        let legate_state::CommandResult::Txn(response) = result else {
            panic!("{result:?}")
        };
        prop_assert!(response.errors.is_some());
        prop_assert!(observable(&store) == seen, "the failed transaction changed the store");
    }

    #[test]
    fn replicas_agree_and_snapshots_round_trip(commands in prop::collection::vec(command(), 1..60)) {
        let a = StateStore::new();
        let b = StateStore::new();
        let mut last_indexes = vec![0u64; Table::ALL.len()];
        for (i, command) in commands.iter().enumerate() {
            let index = i as u64 + 1;
            let ra = a.apply(index, command);
            let rb = b.apply(index, command);
            prop_assert_eq!(ra, rb);
            let tables = a.read();
            for (slot, table) in Table::ALL.iter().enumerate() {
                let now = tables.table_index(*table);
                prop_assert!(now >= last_indexes[slot], "{:?} went backwards", table);
                prop_assert!(now <= index);
                last_indexes[slot] = now;
            }
        }
        let snapshot = a.snapshot().unwrap();
        prop_assert_eq!(&snapshot, &b.snapshot().unwrap());
        let restored = StateStore::new();
        restored.restore(&snapshot).unwrap();
        prop_assert_eq!(restored.snapshot().unwrap(), snapshot);
        for service in ["web", "db"] {
            prop_assert_eq!(restored.read().check_service_nodes(service, false), a.read().check_service_nodes(service, false));
        }
    }
}
