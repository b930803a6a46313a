//! The stored forms: an older data dir (JSON log entries and
//! `snapshot.json`) still starts, a large delete gives back the snapshot's
//! and the log's disk, and a follower behind a purged log catches up from
//! a snapshot file sent in chunks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use legate_state::{Command, StateStore};
use legate_types::{KvOp, KvVerb};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership, StoredMembership, Vote};
use redb::{Database, TableDefinition};

use super::tests::options;
use super::*;

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..400 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

/// The current snapshot file of a data dir, from `snapshot.meta`.
fn current_snapshot_file(raft_dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(raft_dir.join("snapshot.meta")).ok()?).ok()?;
    Some(raft_dir.join(meta["file"].as_str()?))
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test]
async fn a_data_dir_written_as_json_by_an_older_legate_still_starts() {
    let dir = tempfile::tempdir().unwrap();
    let raft_dir = dir.path().join("raft");
    std::fs::create_dir_all(&raft_dir).unwrap();
    let membership = Membership::new(
        vec![BTreeSet::from([1u64])],
        BTreeMap::from([(
            1u64,
            BasicNode {
                addr: "127.0.0.1:8300".into(),
            },
        )]),
    );
    // The snapshot at index 3, as the JSON single file with the state's
    // JSON as a list of numbers.
    let old_state = StateStore::new();
    old_state.apply(
        2,
        &Command::Kv(KvOp::set("old", b"from the snapshot".to_vec())),
    );
    let meta = openraft::SnapshotMeta {
        last_log_id: Some(log_id(3)),
        last_membership: StoredMembership::new(Some(log_id(1)), membership),
        snapshot_id: "3-1".into(),
    };
    let legacy = serde_json::json!({
        "meta": meta,
        "data": serde_json::to_vec(&old_state.snapshot_data()).unwrap(),
    });
    std::fs::write(
        raft_dir.join("snapshot.json"),
        serde_json::to_vec(&legacy).unwrap(),
    )
    .unwrap();
    // Two more entries in the log, JSON-encoded, after the purged ones.
    {
        const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
        const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
        let db = Database::create(raft_dir.join("raft.db")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            for index in [4u64, 5] {
                let entry = openraft::Entry::<TypeConfig> {
                    log_id: log_id(index),
                    payload: EntryPayload::Normal(Command::Kv(KvOp::set(
                        format!("new{index}"),
                        b"from the log".to_vec(),
                    ))),
                };
                log.insert(index, serde_json::to_vec(&entry).unwrap().as_slice())
                    .unwrap();
            }
            let mut meta = txn.open_table(META).unwrap();
            for (key, value) in [
                (
                    "vote",
                    serde_json::to_vec(&Vote::<u64>::new_committed(1, 1)),
                ),
                ("committed", serde_json::to_vec(&Some(log_id(5)))),
                ("last_purged", serde_json::to_vec(&Some(log_id(3)))),
            ] {
                meta.insert(key, value.unwrap().as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    for round in 0..2 {
        let store = Arc::new(StateStore::new());
        let node = RaftNode::start(options(Some(dir.path().into())), store.clone())
            .await
            .unwrap();
        assert!(node.wait_for_leader(Duration::from_secs(5)).await);
        wait_until("the log is applied", || {
            store.read().kv_get("new5").1.is_some()
        })
        .await;
        {
            let read = store.read();
            assert_eq!(
                &read.kv_get("old").1.unwrap().value[..],
                b"from the snapshot"
            );
            assert_eq!(&read.kv_get("new4").1.unwrap().value[..], b"from the log");
        }
        assert!(!raft_dir.join("snapshot.json").exists(), "round {round}");
        assert!(current_snapshot_file(&raft_dir).is_some_and(|f| f.exists()));
        // New entries go after the old ones, in the binary form.
        node.apply(Command::Kv(KvOp::set(format!("round{round}"), vec![1])))
            .await
            .unwrap();
        node.shutdown().await;
    }
}

/// A leader on disk whose entry count never calls for a snapshot.
async fn leader_without_count_snapshots(dir: &std::path::Path, store: Arc<StateStore>) -> RaftNode {
    let mut opts = options(Some(dir.into()));
    opts.snapshot_threshold = 1_000_000;
    let node = RaftNode::start(opts, store).await.unwrap();
    assert!(node.wait_for_leader(Duration::from_secs(5)).await);
    node
}

/// Writes `count` keys `prefix/<n>` of `size` bytes all at once, so they
/// are logged as batches.
async fn write_concurrently(node: &RaftNode, prefix: &str, count: usize, size: usize) {
    let writes: Vec<_> = (0..count)
        .map(|i| {
            let (node, key) = (node.clone(), format!("{prefix}/{i}"));
            tokio::spawn(async move {
                node.apply(Command::Kv(KvOp::set(key, vec![i as u8; size])))
                    .await
            })
        })
        .collect();
    for write in writes {
        write.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_delete_gives_back_the_snapshot_and_log_disk() {
    let dir = tempfile::tempdir().unwrap();
    let raft_dir = dir.path().join("raft");
    let node = leader_without_count_snapshots(dir.path(), Arc::new(StateStore::new())).await;
    // 40 MiB of values in a few large entries, then enough small entries
    // that the large ones fall out of the log kept after a snapshot.
    write_concurrently(&node, "big", 256, 160 << 10).await;
    for i in 0..300 {
        node.apply(Command::Kv(KvOp::set(format!("small/{i}"), vec![1])))
            .await
            .unwrap();
    }
    node.snapshot().await.unwrap();
    wait_until("a snapshot holds the values", || {
        current_snapshot_file(&raft_dir).is_some_and(|f| file_len(&f) > 40 << 20)
    })
    .await;
    wait_until("the purged log is compacted", || {
        file_len(&raft_dir.join("raft.db")) < log_store::COMPACT_ABOVE
    })
    .await;
    let mut delete = KvOp::set("big/", Vec::new());
    delete.verb = KvVerb::DeleteTree;
    node.apply(Command::Kv(delete)).await.unwrap();
    // No entry count is reached: the shrink alone calls for a snapshot.
    wait_until("a new, small snapshot replaces the large one", || {
        current_snapshot_file(&raft_dir).is_some_and(|f| file_len(&f) < 1 << 20)
    })
    .await;
    let files: Vec<_> = std::fs::read_dir(&raft_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snapshot-"))
        .collect();
    assert_eq!(files.len(), 1, "old snapshot files are removed: {files:?}");
    node.shutdown().await;
}

/// Carries Raft messages between nodes of one process.
#[derive(Default)]
struct Loopback {
    nodes: Mutex<HashMap<String, RaftNode>>,
}

#[async_trait::async_trait]
impl network::RaftTransport for Loopback {
    async fn send(
        &self,
        address: &str,
        message: Vec<u8>,
        _timeout: Duration,
    ) -> std::io::Result<Vec<u8>> {
        let node = self.nodes.lock().unwrap().get(address).cloned();
        match node {
            Some(node) => Ok(node.handle_message(&message).await),
            None => Err(std::io::Error::other(format!("no node at {address}"))),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_purged_log_catches_up_from_a_snapshot_file() {
    let loopback = Arc::new(Loopback::default());
    let transport = Transport(Some(loopback.clone()));
    let leader_options = RaftOptions {
        address: "n1".into(),
        transport: transport.clone(),
        ..options(None)
    };
    let leader = RaftNode::start(leader_options, Arc::new(StateStore::new()))
        .await
        .unwrap();
    loopback
        .nodes
        .lock()
        .unwrap()
        .insert("n1".into(), leader.clone());
    assert!(leader.wait_for_leader(Duration::from_secs(10)).await);
    for i in 0..400 {
        leader
            .apply(Command::Kv(KvOp::set(
                format!("k{i:03}"),
                vec![7; 2048 + i],
            )))
            .await
            .unwrap();
    }
    // openraft drops a trigger while a snapshot is being built, and under
    // load the count policy may still be building an older one: ask again
    // until a snapshot late enough to purge past index 100 is in place.
    let metrics = leader.raft.metrics();
    let mut purged = false;
    for _ in 0..40 {
        leader.snapshot().await.unwrap();
        if tokio::time::timeout(Duration::from_secs(1), async {
            let mut watch = metrics.clone();
            while watch.borrow().purged.is_none_or(|p| p.index <= 100) {
                if watch.changed().await.is_err() {
                    break;
                }
            }
        })
        .await
        .is_ok()
        {
            purged = true;
            break;
        }
    }
    assert!(purged, "the log before the snapshot was never purged");
    let follower_store = Arc::new(StateStore::new());
    let follower_options = RaftOptions {
        node_id: 2,
        address: "n2".into(),
        bootstrap: false,
        transport,
        ..options(None)
    };
    let follower = RaftNode::start(follower_options, follower_store.clone())
        .await
        .unwrap();
    loopback
        .nodes
        .lock()
        .unwrap()
        .insert("n2".into(), follower.clone());
    leader.add_learner(2, "n2".into()).await.unwrap();
    wait_until("the follower has every key", || {
        follower_store.read().kv_list("k").1.len() == 400
    })
    .await;
    let value_len = follower_store.read().kv_get("k399").1.unwrap().value.len();
    assert_eq!(value_len, 2048 + 399);
    follower.shutdown().await;
    leader.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_taken_after_64_mib_of_values_whatever_the_entry_count() {
    let dir = tempfile::tempdir().unwrap();
    let raft_dir = dir.path().join("raft");
    let node = leader_without_count_snapshots(dir.path(), Arc::new(StateStore::new())).await;
    // Concurrent writes, so they are logged as batches.
    write_concurrently(&node, "k", 288, 256 << 10).await;
    wait_until("a snapshot is taken", || {
        current_snapshot_file(&raft_dir).is_some_and(|f| f.exists())
    })
    .await;
    node.shutdown().await;
}

#[tokio::test]
async fn a_snapshot_finished_late_never_replaces_a_newer_one() {
    let dir = tempfile::tempdir().unwrap();
    let machine =
        state_machine::StateMachine::new(Arc::new(StateStore::new()), Some(dir.path().into()))
            .unwrap();
    let snapshot = |index: u64| {
        let file = format!("snapshot-{index}-1.bin");
        std::fs::write(dir.path().join(&file), b"state").unwrap();
        state_machine::CurrentSnapshot {
            meta: openraft::SnapshotMeta {
                last_log_id: Some(log_id(index)),
                last_membership: Default::default(),
                snapshot_id: format!("{index}-1"),
            },
            file,
        }
    };
    // An install at 200 lands first; a build that copied at 100 ends later.
    assert!(machine.make_current(snapshot(200)).unwrap());
    assert!(!machine.make_current(snapshot(100)).unwrap());
    assert_eq!(
        current_snapshot_file(dir.path()).unwrap(),
        dir.path().join("snapshot-200-1.bin")
    );
    assert!(!dir.path().join("snapshot-100-1.bin").exists());
    // A newer one replaces it and removes its file.
    assert!(machine.make_current(snapshot(300)).unwrap());
    assert!(!dir.path().join("snapshot-200-1.bin").exists());
    assert!(dir.path().join("snapshot-300-1.bin").exists());
}
