//! Three servers replicating through Raft over real server ports on
//! loopback: one leader is elected, writes through any server (forwarded
//! to the leader) are readable everywhere, and when the leader dies the
//! other two elect a new one and keep taking writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use legate_raft::Transport;
use legate_rpc::{Forwarding, Leadership, Listener, Pool};
use legate_server::cluster::PortTransport;
use legate_server::{Server, ServerConfig};
use legate_types::rpc::ServerRpc;
use legate_types::{Consistency, KvOp, QueryOptions, WriteOptions};
use serde_json::json;

struct Member {
    server: Arc<Server>,
    port: tokio::task::JoinHandle<()>,
    rpc: Forwarding,
}

async fn cluster(n: u64) -> Vec<Member> {
    let pool = Arc::new(Pool::new(Duration::from_secs(1)));
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(
            Listener::bind("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap(),
        );
    }
    let voters: BTreeMap<u64, String> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.local_addr().unwrap().to_string()))
        .collect();
    let mut members = Vec::new();
    for (i, mut listener) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let mut config = ServerConfig::in_memory("dc1", &format!("s{id}"));
        config.raft.node_id = id;
        config.raft.address = voters[&id].clone();
        config.raft.bootstrap = false;
        config.raft.transport = Transport(Some(Arc::new(PortTransport(pool.clone()))));
        config.server_port = listener.local_addr().unwrap().port();
        let server = Server::start(config).await.unwrap();
        let local: Arc<dyn ServerRpc> = server.clone();
        let leadership: Arc<dyn Leadership> = server.clone();
        let forwarding: Arc<dyn ServerRpc> = Arc::new(Forwarding::new(
            local.clone(),
            leadership.clone(),
            pool.clone(),
        ));
        server.route(&mut listener, forwarding);
        let port = tokio::spawn(listener.serve());
        let rpc = Forwarding::new(local, leadership, pool.clone());
        members.push(Member { server, port, rpc });
    }
    for m in &members {
        m.server.initialize_cluster(voters.clone()).await.unwrap();
    }
    for m in &members {
        assert!(m.server.wait_for_leader(Duration::from_secs(10)).await);
    }
    members
}

fn set(key: &str, value: &str) -> KvOp {
    use base64::Engine;
    serde_json::from_value(json!({
        "Verb": "set", "Key": key,
        "Value": base64::engine::general_purpose::STANDARD.encode(value)
    }))
    .unwrap()
}

fn stale() -> QueryOptions {
    QueryOptions {
        consistency: Consistency::Stale,
        ..Default::default()
    }
}

/// Waits until `member` has applied `key` (a stale, local read).
async fn replicated(member: &Member, key: &str) -> bool {
    for _ in 0..100 {
        if let Ok(found) = member.rpc.kv_get(&stale(), key.to_string()).await {
            if found.value.is_some() {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The one server that is leader, once only one believes it is: Raft
/// allows a deposed leader of an older term to believe it for a moment
/// after a newer term's election (when all three initialise at once),
/// until the new leader's first heartbeat reaches it.
async fn sole_leader(members: &[Member]) -> usize {
    let mut leaders = Vec::new();
    for _ in 0..100 {
        leaders = (0..members.len())
            .filter(|i| members[*i].server.is_leader())
            .collect();
        if leaders.len() == 1 {
            return leaders[0];
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not exactly one leader after 5 s: {leaders:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_any_server_replicate_and_survive_the_leader() {
    let mut members = cluster(3).await;
    let leader = sole_leader(&members).await;
    let peers = members[0].server.raft_peers();
    assert_eq!(peers.len(), 3, "{peers:?}");

    // A write through every server (followers forward), read everywhere.
    let w = WriteOptions::default();
    for (i, m) in members.iter().enumerate() {
        assert!(m
            .rpc
            .kv_apply(&w, set(&format!("k{i}"), "v"))
            .await
            .unwrap());
    }
    for m in &members {
        for i in 0..3 {
            assert!(replicated(m, &format!("k{i}")).await, "k{i} not replicated");
        }
    }
    // A default-consistency read on a follower is answered by the leader.
    let follower = (leader + 1) % 3;
    let read = members[follower]
        .rpc
        .kv_get(&QueryOptions::default(), "k0".into())
        .await
        .unwrap();
    assert!(read.value.is_some() && read.meta.known_leader);

    // The leader dies: the other two elect a new one and keep writing.
    let dead = members.remove(leader);
    dead.port.abort();
    dead.server.shutdown().await;
    let mut new_leader = None;
    for _ in 0..100 {
        new_leader = members.iter().position(|m| m.server.is_leader());
        if new_leader.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(new_leader.is_some(), "no new leader after the old one died");
    for m in &members {
        assert!(m.rpc.kv_apply(&w, set("after", "1")).await.unwrap());
    }
    for m in &members {
        assert!(replicated(m, "after").await);
        assert!(replicated(m, "k2").await, "earlier writes kept");
    }
}
