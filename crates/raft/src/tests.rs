use std::sync::Arc;
use std::time::Duration;

use legate_state::{Command, CommandResult, StateStore};
use legate_types::KvOp;

use super::*;

pub(crate) fn options(dir: Option<PathBuf>) -> RaftOptions {
    RaftOptions {
        node_id: 1,
        address: "127.0.0.1:8300".into(),
        data_dir: dir,
        bootstrap: true,
        raft_multiplier: 1,
        snapshot_threshold: 16,
        trailing_logs: crate::DEFAULT_TRAILING_LOGS,
        snapshot_interval: crate::DEFAULT_SNAPSHOT_INTERVAL,
        transport: Default::default(),
    }
}

#[tokio::test]
async fn single_server_elects_itself_and_applies() {
    let store = Arc::new(StateStore::new());
    let node = RaftNode::start(options(None), store.clone()).await.unwrap();
    assert!(node.wait_for_leader(Duration::from_secs(5)).await);
    assert!(node.is_leader());
    assert_eq!(node.leader_address().as_deref(), Some("127.0.0.1:8300"));
    let (index, result) = node
        .apply(Command::Kv(KvOp::set("k", b"v".to_vec())))
        .await
        .unwrap();
    assert_eq!(result, CommandResult::Applied(true));
    assert_eq!(store.read().kv_get("k").1.unwrap().modify_index, index);
    node.ensure_linearizable().await.unwrap();
    node.shutdown().await;
}

#[tokio::test]
async fn state_survives_restart_from_log_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let last_index;
    {
        let store = Arc::new(StateStore::new());
        let node = RaftNode::start(options(Some(dir.path().into())), store.clone())
            .await
            .unwrap();
        assert!(node.wait_for_leader(Duration::from_secs(5)).await);
        // Enough writes to cross the snapshot threshold, then a few more in the log only.
        let mut index = 0;
        for i in 0..40 {
            index = node
                .apply(Command::Kv(KvOp::set(
                    format!("k{i}"),
                    format!("v{i}").into_bytes(),
                )))
                .await
                .unwrap()
                .0;
        }
        last_index = index;
        node.shutdown().await;
    }
    let store = Arc::new(StateStore::new());
    let node = RaftNode::start(options(Some(dir.path().into())), store.clone())
        .await
        .unwrap();
    assert!(node.wait_for_leader(Duration::from_secs(5)).await);
    // Wait for the replayed log to be applied.
    for _ in 0..100 {
        if store.read().kv_get("k39").1.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.read().kv_list("k").1.len(), 40);
    assert_eq!(
        store.read().kv_get("k39").1.unwrap().modify_index,
        last_index
    );
    assert!(
        dir.path().join("raft/snapshot.meta").exists(),
        "a snapshot should have been written"
    );
    let (next, _) = node
        .apply(Command::Kv(KvOp::set("after", vec![])))
        .await
        .unwrap();
    assert!(next > last_index);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_are_batched_and_each_gets_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(StateStore::new());
    let node = RaftNode::start(options(Some(dir.path().into())), store.clone())
        .await
        .unwrap();
    assert!(node.wait_for_leader(Duration::from_secs(5)).await);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            // Writes come in pairs to the same key; all of them succeed.
            node.apply(Command::Kv(KvOp::set(format!("k{}", i / 2), b"v".to_vec())))
                .await
        }));
    }
    let mut indexes = std::collections::BTreeSet::new();
    for task in tasks {
        let (index, result) = task.await.unwrap().unwrap();
        assert_eq!(result, CommandResult::Applied(true));
        indexes.insert(index);
    }
    assert_eq!(store.read().kv_list("k").1.len(), 100);
    // Fewer log entries than writes: they were grouped.
    assert!(indexes.len() < 200, "{} distinct indexes", indexes.len());
    node.shutdown().await;
}
