//! `ServerRpc` over the server port: a real server behind a real listener
//! on loopback, called through `RemoteRpc`. Every answer must equal what
//! the server gives in process (same JSON), errors keep their variant,
//! blocking reads block, and a restarted listener is redialled.

use std::sync::Arc;
use std::time::Duration;

use legate_rpc::{serve_rpc, Kind, Listener, Pool, RemoteRpc};
use legate_server::{Server, ServerConfig};
use legate_types::config_entry::from_json;
use legate_types::intention::MatchBy;
use legate_types::rpc::{ChainOverrides, ServerRpc, ServiceQuery, TxnOp};
use legate_types::{KvOp, KvVerb, QueryOptions, RegisterRequest, RpcError, WriteOptions};
use serde_json::json;

async fn listen(server: Arc<Server>, address: &str) -> (String, tokio::task::JoinHandle<()>) {
    let mut listener = Listener::bind(address.parse().unwrap()).await.unwrap();
    let rpc: Arc<dyn ServerRpc> = server;
    listener.route(Kind::Rpc, serve_rpc(rpc));
    let address = listener.local_addr().unwrap().to_string();
    (address, tokio::spawn(listener.serve()))
}

/// A one-server cluster (in-memory Raft) once it leads.
async fn leader() -> Arc<Server> {
    let server = Server::start(ServerConfig::in_memory("dc1", "s1"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    server
}

fn same<T: serde::Serialize>(local: T, remote: T) {
    assert_eq!(
        serde_json::to_value(local).unwrap(),
        serde_json::to_value(remote).unwrap()
    );
}

fn put(key: &str, value: &str) -> KvOp {
    serde_json::from_value(json!({"Verb": "set", "Key": key, "Value": base64(value)})).unwrap()
}

fn base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_call_answers_as_in_process() {
    let server = leader().await;
    assert!(server.wait_for_ca(Duration::from_secs(10)).await);
    let (address, _task) = listen(server.clone(), "127.0.0.1:0").await;
    let remote = RemoteRpc::new(address, Arc::new(Pool::default()));
    let w = WriteOptions::default();
    let q = QueryOptions::default();

    same(
        server.status_leader().await.unwrap(),
        remote.status_leader().await.unwrap(),
    );
    let register: RegisterRequest = serde_json::from_value(json!({
        "Node": "n1", "Address": "10.0.0.1",
        "Service": {"ID": "web1", "Service": "web", "Port": 80, "Tags": ["v1"]},
        "Check": {"CheckID": "c", "Name": "c", "Status": "passing", "ServiceID": "web1"}
    }))
    .unwrap();
    assert!(remote.catalog_register(&w, register).await.unwrap() > 0);
    let query = ServiceQuery {
        service: "web".into(),
        ..Default::default()
    };
    same(
        server
            .health_service_nodes(&q, query.clone())
            .await
            .unwrap()
            .value,
        remote.health_service_nodes(&q, query).await.unwrap().value,
    );
    same(
        server.catalog_nodes(&q).await.unwrap().value,
        remote.catalog_nodes(&q).await.unwrap().value,
    );

    // KV and a transaction (whose index travels beside its body).
    assert!(remote.kv_apply(&w, put("a/b", "hello")).await.unwrap());
    same(
        server.kv_get(&q, "a/b".into()).await.unwrap().value,
        remote.kv_get(&q, "a/b".into()).await.unwrap().value,
    );
    let txn = remote
        .txn(&w, vec![TxnOp::kv(put("a/c", "x"))])
        .await
        .unwrap();
    assert!(txn.errors.is_none());
    assert!(txn.index > 0, "the transaction's index crossed the wire");

    // Config entries (custom deserializer) and the discovery chain.
    let entry =
        from_json(json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http"})).unwrap();
    assert!(remote.config_apply(&w, entry, None).await.unwrap());
    same(
        server
            .config_get(&q, "service-defaults".into(), "web".into())
            .await
            .unwrap()
            .value,
        remote
            .config_get(&q, "service-defaults".into(), "web".into())
            .await
            .unwrap()
            .value,
    );
    same(
        server
            .discovery_chain(&q, "web".into(), "dc1".into(), ChainOverrides::default())
            .await
            .unwrap()
            .value,
        remote
            .discovery_chain(&q, "web".into(), "dc1".into(), ChainOverrides::default())
            .await
            .unwrap()
            .value,
    );
    same(
        server.ca_roots(&q).await.unwrap().value,
        remote.ca_roots(&q).await.unwrap().value,
    );
    same(
        server
            .intention_match(&q, MatchBy::Destination, vec!["web".into()])
            .await
            .unwrap()
            .value,
        remote
            .intention_match(&q, MatchBy::Destination, vec!["web".into()])
            .await
            .unwrap()
            .value,
    );

    // Errors keep their variant and message.
    let huge = KvOp {
        value: vec![b'x'; 600 * 1024].into(),
        ..put("big", "")
    };
    let local = server.kv_apply(&w, huge.clone()).await.unwrap_err();
    let over_wire = remote.kv_apply(&w, huge).await.unwrap_err();
    assert!(matches!(local, RpcError::TooLarge(_)), "{local:?}");
    assert_eq!(local, over_wire);
    let missing = KvOp {
        verb: KvVerb::Cas,
        ..put("a/b", "new")
    };
    assert!(
        !remote.kv_apply(&w, missing).await.unwrap(),
        "CAS at index 0 on an existing key fails"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_reads_block_and_wake_over_the_wire() {
    let server = leader().await;
    let (address, _task) = listen(server.clone(), "127.0.0.1:0").await;
    let remote = Arc::new(RemoteRpc::new(address, Arc::new(Pool::default())));
    let w = WriteOptions::default();
    server.kv_apply(&w, put("k", "1")).await.unwrap();
    let first = remote
        .kv_get(&QueryOptions::default(), "k".into())
        .await
        .unwrap();
    let opts = QueryOptions {
        min_index: first.meta.index,
        max_wait: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let waiter = {
        let remote = remote.clone();
        tokio::spawn(async move { remote.kv_get(&opts, "k".into()).await })
    };
    // Other calls proceed while one blocks (a second pooled connection).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    remote.status_peers().await.unwrap();
    remote.kv_apply(&w, put("k", "2")).await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the blocking read woke")
        .unwrap()
        .unwrap();
    assert!(woke.meta.index > first.meta.index);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_listener_is_redialled_and_a_dead_one_is_unreachable() {
    let server = leader().await;
    let (address, task) = listen(server.clone(), "127.0.0.1:0").await;
    let pool = Arc::new(Pool::new(Duration::from_secs(2)));
    let remote = RemoteRpc::new(address.clone(), pool);
    remote.status_leader().await.unwrap();
    task.abort();
    let _ = task.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    match remote.status_leader().await {
        Err(RpcError::Unreachable(message)) => assert!(message.contains(&address), "{message}"),
        other => panic!("expected Unreachable, got {other:?}"),
    }
    let (_again, _task) = listen(server.clone(), &address).await;
    remote.status_leader().await.unwrap();
}

/// Leadership as a test sets it: the leader's address and how long ago
/// this follower last heard from it.
struct FakeLeadership(std::sync::Mutex<Option<String>>, std::sync::Mutex<Duration>);

impl legate_rpc::Leadership for FakeLeadership {
    fn is_leader(&self) -> bool {
        false
    }
    fn leader_address(&self) -> Option<String> {
        self.0.lock().unwrap().clone()
    }
    fn last_contact(&self) -> Duration {
        *self.1.lock().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_goes_to_the_leader_once_this_server_lags_more_than_it_accepts() {
    // Two separate one-server clusters: "here" answers locally, "there"
    // stands for the leader; only the leader holds the key.
    let here = leader().await;
    let there = leader().await;
    there
        .kv_apply(&WriteOptions::default(), put("k", "v"))
        .await
        .unwrap();
    let (there_address, _task) = listen(there.clone(), "127.0.0.1:0").await;
    let leadership = Arc::new(FakeLeadership(
        std::sync::Mutex::new(Some(there_address)),
        std::sync::Mutex::new(Duration::from_secs(1)),
    ));
    let local: Arc<dyn ServerRpc> = here.clone();
    let forwarding = legate_rpc::Forwarding::new(
        local,
        leadership.clone(),
        Arc::new(Pool::new(Duration::from_secs(2))),
    );
    let stale = |max_stale: Option<Duration>| QueryOptions {
        consistency: legate_types::Consistency::Stale,
        max_stale,
        ..Default::default()
    };
    let found = |opts: QueryOptions| {
        let forwarding = &forwarding;
        async move {
            forwarding
                .kv_get(&opts, "k".into())
                .await
                .unwrap()
                .value
                .is_some()
        }
    };
    assert!(!found(stale(None)).await, "a stale read is answered here");
    assert!(
        !found(stale(Some(Duration::from_secs(5)))).await,
        "within the limit"
    );
    *leadership.1.lock().unwrap() = Duration::from_secs(10);
    assert!(
        found(stale(Some(Duration::from_secs(5)))).await,
        "past it: the leader answers"
    );
    assert!(
        !found(stale(None)).await,
        "without a limit, any lag is accepted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_to_a_leader_that_loses_its_place_end_at_once() {
    let server = leader().await;
    // A "leader" that takes requests and never answers (cut off mid-call).
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_address = silent.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = silent.accept().await {
            held.push(connection);
        }
    });
    let (live_address, _task) = listen(server.clone(), "127.0.0.1:0").await;
    let leadership = Arc::new(FakeLeadership(
        std::sync::Mutex::new(Some(silent_address.clone())),
        std::sync::Mutex::new(Duration::ZERO),
    ));
    let local: Arc<dyn ServerRpc> = server.clone();
    let forwarding = Arc::new(legate_rpc::Forwarding::new(
        local,
        leadership.clone(),
        Arc::new(Pool::new(Duration::from_secs(2))),
    ));
    let elect = |address: String| {
        let leadership = leadership.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            *leadership.0.lock().unwrap() = Some(address);
        })
    };

    // A write ends, as "may have been applied", when the leader moves on.
    elect(live_address.clone());
    let started = std::time::Instant::now();
    match forwarding
        .kv_apply(&WriteOptions::default(), put("w", "1"))
        .await
    {
        Err(RpcError::Indeterminate(message)) => {
            assert!(message.contains("may have been applied"), "{message}")
        }
        other => panic!("expected Indeterminate, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // A read is simply asked again of the new leader.
    *leadership.0.lock().unwrap() = Some(silent_address);
    elect(live_address);
    let started = std::time::Instant::now();
    let read = forwarding
        .kv_get(&QueryOptions::default(), "w".into())
        .await
        .unwrap();
    assert!(
        read.value.is_none(),
        "the write never reached a real server"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_watches_answer_over_the_wire_and_unknown_calls_name_themselves() {
    use legate_types::rpc::{Watched, UNDECODABLE_CALL};
    let server = leader().await;
    // The leader's own first writes are done.
    assert!(server.wait_for_ca(Duration::from_secs(10)).await);
    let (address, _task) = listen(server.clone(), "127.0.0.1:0").await;
    let pool = Arc::new(Pool::default());
    let remote = RemoteRpc::new(address.clone(), pool.clone());
    let register: RegisterRequest = serde_json::from_value(json!({
        "Node": "n1", "Address": "10.0.0.1",
        "Service": {"ID": "db1", "Service": "db", "Port": 80}
    }))
    .unwrap();
    let at = remote
        .catalog_register(&WriteOptions::default(), register)
        .await
        .unwrap();
    let watched = vec![
        (Watched::Service("db".into()), at - 1),
        (Watched::Service("web".into()), 0),
        (Watched::ConfigEntries, at),
    ];
    let q = QueryOptions::default();
    let local = server.changes_since(&q, watched.clone()).await.unwrap();
    let answered = remote.changes_since(&q, watched).await.unwrap();
    assert_eq!(answered.value, vec![0]);
    same(local.value, answered.value);
    // The leader may have written (its CA) between the two calls.
    assert!(answered.meta.index >= local.meta.index);

    // What an older server answers to a call it does not know: clients
    // recognise it and fall back.
    let answer = pool
        .call(
            &address,
            Kind::Rpc,
            br#"{"a_call_from_the_future":{}}"#,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let answer: Result<serde_json::Value, RpcError> = serde_json::from_slice(&answer).unwrap();
    match answer {
        Err(RpcError::BadRequest(m)) => assert!(m.starts_with(UNDECODABLE_CALL), "{m}"),
        other => panic!("expected a 400, got {other:?}"),
    }
    server.shutdown().await;
}

/// Answers after a minute, recording when a call's handling is dropped.
struct Slow(Arc<std::sync::atomic::AtomicUsize>);

struct DroppedGuard(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for DroppedGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl legate_rpc::FrameHandler for Slow {
    async fn handle(&self, _peer: std::net::SocketAddr, _request: Vec<u8>) -> Vec<u8> {
        let _guard = DroppedGuard(self.0.clone());
        tokio::time::sleep(Duration::from_secs(60)).await;
        b"late".to_vec()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_its_caller_gave_up_on_stops_at_the_server() {
    let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    listener.route(Kind::Rpc, Arc::new(Slow(dropped.clone())));
    let address = listener.local_addr().unwrap().to_string();
    let _task = tokio::spawn(listener.serve());
    let pool = Pool::default();
    // The caller stops waiting after 200 ms (as a batched watch restarted
    // with new keys does) and its connection closes.
    let gave_up = pool
        .call(&address, Kind::Rpc, b"{}", Duration::from_millis(200))
        .await;
    assert!(gave_up.is_err());
    let started = std::time::Instant::now();
    while dropped.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the server still handles a call nobody waits for"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
