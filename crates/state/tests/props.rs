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
        prop::collection::vec(kv_op().prop_map(|kv| TxnOp { kv }), 0..4).prop_map(Command::Txn),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

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
