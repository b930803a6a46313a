//! `changes_since` on a real (in-memory Raft) server: one blocking call
//! for many services and the config entries, answering the positions that
//! changed; unrelated writes never end it; its answer's index covers every
//! entry it was asked about.

use std::sync::Arc;
use std::time::{Duration, Instant};

use legate_server::{Server, ServerConfig};
use legate_types::config_entry::from_json;
use legate_types::rpc::{ServerRpc, Watched, MAX_WATCHED};
use legate_types::{NodeService, QueryOptions, RegisterRequest, RpcError, WriteOptions};
use serde_json::json;

async fn start() -> Arc<Server> {
    let server = Server::start(ServerConfig::in_memory("dc1", "batched-watch"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    server
}

async fn register(server: &Server, service: &str) -> u64 {
    server
        .catalog_register(
            &WriteOptions::default(),
            RegisterRequest {
                node: "n1".into(),
                address: "10.0.0.1".into(),
                service: Some(NodeService {
                    id: service.into(),
                    service: service.into(),
                    port: 8080,
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap()
}

fn blocking(wait: Duration) -> QueryOptions {
    QueryOptions {
        min_index: 1,
        max_wait: Some(wait),
        ..Default::default()
    }
}

fn service(name: &str, since: u64) -> (Watched, u64) {
    (Watched::Service(name.into()), since)
}

#[tokio::test]
async fn one_call_names_the_services_that_changed() {
    let server = start().await;
    let at = register(&server, "db").await;
    register(&server, "web").await;
    // Answered at once: `web` changed after `at`, `db` did not.
    let answer = server
        .changes_since(
            &blocking(Duration::from_secs(5)),
            vec![service("db", at), service("web", at), service("never", at)],
        )
        .await
        .unwrap();
    assert_eq!(answer.value, vec![1]);
    let current = answer.meta.index;
    assert!(current > at);

    // Nothing changed since `current`: the call blocks, and a write to a
    // service nobody asked about does not end it.
    let waiting = {
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = server
                .changes_since(
                    &blocking(Duration::from_secs(20)),
                    vec![
                        service("db", current),
                        service("web", current),
                        service("never", current),
                    ],
                )
                .await
                .unwrap();
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    register(&server, "other").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "an unrelated write ended the wait");
    // The first write of a service asked about ends it, naming its position.
    register(&server, "never").await;
    let (answer, waited) = waiting.await.unwrap();
    assert_eq!(answer.value, vec![2]);
    assert!(waited >= Duration::from_millis(600));
    // Woken by the write, after the unrelated one had woken it for
    // nothing; not by its 20 s running out.
    assert!(
        waited < Duration::from_secs(10),
        "the write did not end the wait"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn config_entries_and_the_answer_index() {
    let server = start().await;
    let at = register(&server, "db").await;
    let answer = server
        .changes_since(
            &QueryOptions::default(),
            vec![(Watched::ConfigEntries, at), service("db", 0)],
        )
        .await
        .unwrap();
    // Without a min_index the answer comes at once.
    assert_eq!(answer.value, vec![1]);
    assert!(answer.meta.index >= at);
    let current = answer.meta.index;
    let waiting = {
        let server = server.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = server
                .changes_since(
                    &blocking(Duration::from_secs(20)),
                    vec![service("db", current), (Watched::ConfigEntries, current)],
                )
                .await
                .unwrap();
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let entry =
        from_json(json!({"Kind": "service-defaults", "Name": "db", "Protocol": "http"})).unwrap();
    server
        .config_apply(&WriteOptions::default(), entry, None)
        .await
        .unwrap();
    let (answer, waited) = waiting.await.unwrap();
    assert_eq!(answer.value, vec![1]);
    assert!(answer.meta.index > current);
    assert!(
        waited < Duration::from_secs(10),
        "the write did not end the wait"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_nothing_changed() {
    let server = start().await;
    let at = register(&server, "db").await;
    let started = Instant::now();
    let answer = server
        .changes_since(
            &blocking(Duration::from_millis(300)),
            vec![service("db", at)],
        )
        .await
        .unwrap();
    assert!(answer.value.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The index answered covers the entry asked about.
    assert!(answer.meta.index >= at);
    server.shutdown().await;
}

#[tokio::test]
async fn too_many_entries_are_refused() {
    let server = start().await;
    let watched = vec![service("db", 0); MAX_WATCHED + 1];
    match server
        .changes_since(&QueryOptions::default(), watched)
        .await
    {
        Err(RpcError::BadRequest(m)) => assert!(m.contains("100000"), "{m}"),
        other => panic!("expected a 400, got {other:?}"),
    }
    server.shutdown().await;
}

/// Once the server stops, blocking calls answer at once; a caller that asks
/// again straight away (the agent's watch loops) must still give the other
/// tasks on its thread their turn, or the stop never finishes.
#[tokio::test(flavor = "current_thread")]
async fn calls_answered_by_a_stop_still_yield_to_other_tasks() {
    let server = start().await;
    let at = register(&server, "db").await;
    server.begin_shutdown();
    let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = other_ran.clone();
    tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::SeqCst) });
    let mut calls = 0;
    while !other_ran.load(std::sync::atomic::Ordering::SeqCst) && calls < 10_000 {
        let answer = server
            .changes_since(&blocking(Duration::from_secs(300)), vec![service("db", at)])
            .await
            .unwrap();
        assert!(answer.value.is_empty());
        calls += 1;
    }
    assert!(
        other_ran.load(std::sync::atomic::Ordering::SeqCst),
        "{calls} calls answered by the stop without yielding once"
    );
    server.shutdown().await;
}
