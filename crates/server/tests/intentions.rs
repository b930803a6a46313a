//! Intentions on a real (in-memory Raft) server: the legacy ID API, the
//! by-name API and config-entry writes over one store, in every order;
//! evaluation; blocking check answers; and the upgrade feature flag.

use std::sync::Arc;
use std::time::Duration;

use legate_server::{Server, ServerConfig, INTENTIONS_READ_ONLY};
use legate_types::config_entry::{from_json, ConfigEntry};
use legate_types::intention::{Intention, IntentionLookup, IntentionOp, MatchBy};
use legate_types::rpc::ServerRpc;
use legate_types::{QueryOptions, RpcError, WriteOptions};
use serde_json::json;

async fn start(config: ServerConfig) -> Arc<Server> {
    let server = Server::start(config).await.unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    // The leader enables features, then initialises the CA, when it takes office.
    assert!(server.wait_for_ca(Duration::from_secs(10)).await);
    server
}

fn legacy(source: &str, destination: &str, action: &str) -> Intention {
    Intention {
        source_name: source.into(),
        destination_name: destination.into(),
        action: action.into(),
        ..Default::default()
    }
}

async fn create(server: &Server, i: Intention) -> Result<String, RpcError> {
    server
        .intention_apply(&WriteOptions::default(), IntentionOp::Create(i))
        .await
}

async fn list(server: &Server) -> Vec<Intention> {
    server
        .intention_list(&QueryOptions::default())
        .await
        .unwrap()
        .value
}

async fn exact(server: &Server, source: &str, destination: &str) -> Option<Intention> {
    server
        .intention_get(
            &QueryOptions::default(),
            IntentionLookup::Exact {
                source: source.into(),
                destination: destination.into(),
            },
        )
        .await
        .unwrap()
        .value
}

async fn allowed(server: &Server, source: &str, destination: &str) -> bool {
    server
        .intention_check(&QueryOptions::default(), source.into(), destination.into())
        .await
        .unwrap()
        .value
        .allowed
}

async fn write_entry(server: &Server, value: serde_json::Value) -> Result<bool, RpcError> {
    let entry: ConfigEntry = from_json(value).unwrap();
    server
        .config_apply(&WriteOptions::default(), entry, None)
        .await
}

async fn entry(server: &Server, name: &str) -> Option<ConfigEntry> {
    server
        .config_get(
            &QueryOptions::default(),
            "service-intentions".into(),
            name.into(),
        )
        .await
        .unwrap()
        .value
}

fn bad_request(result: Result<impl std::fmt::Debug, RpcError>, needle: &str) {
    match result {
        Err(RpcError::BadRequest(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected a 400 mentioning {needle:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn legacy_api_writes_config_entries_and_reads_them_back() {
    let server = start(ServerConfig::in_memory("dc1", "intentions")).await;
    let mut web_db = legacy("web", "db", "deny");
    web_db.meta.insert("owner".into(), "team-a".into());
    web_db.description = "no web to db".into();
    let id = create(&server, web_db).await.unwrap();
    let id2 = create(&server, legacy("*", "db", "allow")).await.unwrap();
    let id3 = create(&server, legacy("web", "*", "allow")).await.unwrap();

    // One entry per destination, holding the legacy fields.
    let db = entry(&server, "db").await.unwrap();
    let sources = db.body["Sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0]["Name"], "web");
    assert_eq!(sources[0]["LegacyID"], json!(id));
    assert_eq!(sources[0]["LegacyMeta"], json!({"owner": "team-a"}));
    assert!(sources[0]["LegacyCreateTime"].is_string());
    assert_eq!(sources[1]["Precedence"], 8);
    assert!(entry(&server, "*").await.is_some());

    // Flattened list in Consul's order.
    let all = list(&server).await;
    let order: Vec<(String, String, i64)> = all
        .iter()
        .map(|i| {
            (
                i.source_name.clone(),
                i.destination_name.clone(),
                i.precedence,
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("web".to_string(), "db".to_string(), 9),
            ("*".to_string(), "db".to_string(), 8),
            ("web".to_string(), "*".to_string(), 6),
        ]
    );
    assert_eq!(all[0].id, id);
    assert_eq!(all[0].meta["owner"], "team-a");
    assert!(all[0].created_at.is_some());

    // By id, and by name.
    let by_id = server
        .intention_get(&QueryOptions::default(), IntentionLookup::Id(id.clone()))
        .await
        .unwrap()
        .value
        .unwrap();
    assert_eq!(by_id.description, "no web to db");
    assert_eq!(exact(&server, "web", "db").await.unwrap().id, id);

    // Evaluation.
    assert!(!allowed(&server, "web", "db").await);
    assert!(allowed(&server, "api", "db").await);
    assert!(allowed(&server, "web", "cache").await);

    // Update by id keeps the id and creation time; changing the
    // destination is refused.
    let mut update = legacy("web", "db", "allow");
    update.id = id.clone();
    server
        .intention_apply(
            &WriteOptions::default(),
            IntentionOp::Update(update.clone()),
        )
        .await
        .unwrap();
    let after = exact(&server, "web", "db").await.unwrap();
    assert_eq!(after.action, "allow");
    assert_eq!(after.created_at, by_id.created_at);
    assert!(allowed(&server, "web", "db").await);
    update.destination_name = "cache".into();
    bad_request(
        server
            .intention_apply(&WriteOptions::default(), IntentionOp::Update(update))
            .await,
        "Cannot modify Destination",
    );

    // Duplicates, bad input, unknown ids.
    bad_request(
        create(&server, legacy("web", "db", "deny")).await,
        "defines \"web\" more than once",
    );
    bad_request(
        create(&server, legacy("web", "db", "maybe")).await,
        "Action must be set to 'allow' or 'deny'",
    );
    bad_request(
        create(&server, legacy("", "db", "allow")).await,
        "SourceName must be set",
    );
    bad_request(
        create(&server, legacy("we*", "db", "allow")).await,
        "wildcard character '*' cannot be used with partial values",
    );
    let missing = server
        .intention_apply(
            &WriteOptions::default(),
            IntentionOp::Delete("00000000-0000-0000-0000-000000000000".into()),
        )
        .await;
    assert!(matches!(missing, Err(RpcError::NotFound(m)) if m.contains("non-existent")));

    // Delete by id: the last source of an entry takes the entry with it.
    for gone in [&id, &id2] {
        server
            .intention_apply(
                &WriteOptions::default(),
                IntentionOp::Delete(gone.to_string()),
            )
            .await
            .unwrap();
    }
    assert!(entry(&server, "db").await.is_none());
    assert_eq!(list(&server).await.len(), 1);
    assert_eq!(list(&server).await[0].id, id3);
    server.shutdown().await;
}

#[tokio::test]
async fn config_entries_and_exact_api_share_the_store_in_every_order() {
    let server = start(ServerConfig::in_memory("dc1", "intentions")).await;
    // Config entry first: readable through both APIs, without a legacy id.
    write_entry(
        &server,
        json!({"Kind": "service-intentions", "Name": "db", "Meta": {"team": "data"},
               "Sources": [{"Name": "web", "Action": "deny"}, {"Name": "*", "Action": "allow"}]}),
    )
    .await
    .unwrap();
    let web = exact(&server, "web", "db").await.unwrap();
    assert!(web.id.is_empty());
    assert_eq!(
        web.meta["team"], "data",
        "entry meta shows on its intentions"
    );
    assert!(web.created_at.is_none());
    assert!(server
        .intention_get(&QueryOptions::default(), IntentionLookup::Id(String::new()))
        .await
        .unwrap()
        .value
        .is_none());
    assert!(!allowed(&server, "web", "db").await);
    // The legacy API may not edit a destination owned by a config entry.
    bad_request(
        create(&server, legacy("api", "db", "allow")).await,
        "cannot use legacy intention API",
    );

    // The exact API edits the same entry.
    let upsert = Intention {
        source_name: "web".into(),
        destination_name: "db".into(),
        action: "allow".into(),
        ..Default::default()
    };
    server
        .intention_apply(&WriteOptions::default(), IntentionOp::Upsert(upsert))
        .await
        .unwrap();
    assert!(allowed(&server, "web", "db").await);
    let db = entry(&server, "db").await.unwrap();
    assert_eq!(db.body["Sources"].as_array().unwrap().len(), 2);
    assert_eq!(db.body["Meta"], json!({"team": "data"}), "entry meta kept");
    server
        .intention_apply(
            &WriteOptions::default(),
            IntentionOp::DeleteExact {
                source: "web".into(),
                destination: "db".into(),
            },
        )
        .await
        .unwrap();
    assert!(exact(&server, "web", "db").await.is_none());
    // Deleting what is not there is fine.
    server
        .intention_apply(
            &WriteOptions::default(),
            IntentionOp::DeleteExact {
                source: "web".into(),
                destination: "db".into(),
            },
        )
        .await
        .unwrap();

    // Legacy first, then the exact API on the same destination: the
    // entry stays one, and the by-name write clears the legacy ids (as
    // Consul does), so the legacy API no longer owns it.
    let id = create(&server, legacy("web", "cache", "deny"))
        .await
        .unwrap();
    assert_eq!(exact(&server, "web", "cache").await.unwrap().id, id);
    let upsert = Intention {
        source_name: "api".into(),
        destination_name: "cache".into(),
        action: "allow".into(),
        ..Default::default()
    };
    server
        .intention_apply(&WriteOptions::default(), IntentionOp::Upsert(upsert))
        .await
        .unwrap();
    let cache = entry(&server, "cache").await.unwrap();
    assert_eq!(cache.body["Sources"].as_array().unwrap().len(), 2);
    assert!(exact(&server, "web", "cache").await.unwrap().id.is_empty());
    assert!(!allowed(&server, "web", "cache").await);
    assert!(allowed(&server, "api", "cache").await);

    // Config write of an entry that still has legacy fields is refused.
    bad_request(
        write_entry(
            &server,
            json!({"Kind": "service-intentions", "Name": "x",
                   "Sources": [{"Name": "web", "Action": "deny", "LegacyMeta": {"a": "b"}}]}),
        )
        .await,
        "LegacyMeta must be omitted",
    );

    // Match, in evaluation order, with wildcards.
    write_entry(
        &server,
        json!({"Kind": "service-intentions", "Name": "*",
               "Sources": [{"Name": "web", "Action": "allow"}, {"Name": "*", "Action": "deny"}]}),
    )
    .await
    .unwrap();
    let matched = server
        .intention_match(
            &QueryOptions::default(),
            MatchBy::Destination,
            vec!["db".into(), "cache".into()],
        )
        .await
        .unwrap()
        .value;
    let names = |list: &[Intention]| -> Vec<(String, String)> {
        list.iter()
            .map(|i| (i.source_name.clone(), i.destination_name.clone()))
            .collect()
    };
    assert_eq!(
        names(&matched[0].1),
        [
            ("*".to_string(), "db".to_string()),
            ("web".to_string(), "*".to_string()),
            ("*".to_string(), "*".to_string())
        ]
    );
    assert_eq!(matched[1].0, "cache");
    assert_eq!(matched[1].1.len(), 4);
    let by_source = server
        .intention_match(
            &QueryOptions::default(),
            MatchBy::Source,
            vec!["web".into()],
        )
        .await
        .unwrap()
        .value;
    assert_eq!(by_source[0].1[0].precedence, 9);
    assert!(by_source[0]
        .1
        .iter()
        .all(|i| i.source_name == "web" || i.source_name == "*"));
    server.shutdown().await;
}

#[tokio::test]
async fn l7_intentions_need_http_and_deny_at_l4() {
    let server = start(ServerConfig::in_memory("dc1", "intentions")).await;
    let l7 = json!({"Kind": "service-intentions", "Name": "api",
                    "Sources": [{"Name": "web", "Permissions": [
                        {"Action": "allow", "HTTP": {"PathPrefix": "/v1", "Methods": ["get"]}}]}]});
    bad_request(
        write_entry(&server, l7.clone()).await,
        "HTTP-family protocol",
    );
    write_entry(
        &server,
        json!({"Kind": "service-defaults", "Name": "api", "Protocol": "http"}),
    )
    .await
    .unwrap();
    write_entry(&server, l7).await.unwrap();
    // An L4 check cannot see HTTP: the L7 intention counts as deny.
    assert!(!allowed(&server, "web", "api").await);
    let check = server
        .intention_check(&QueryOptions::default(), "web".into(), "api".into())
        .await
        .unwrap()
        .value;
    assert!(
        check.reason.starts_with("Matched L7 intention"),
        "{}",
        check.reason
    );
    assert!(allowed(&server, "other", "api").await);
    // The protocol cannot be taken away while L7 intentions need it.
    bad_request(
        write_entry(
            &server,
            json!({"Kind": "service-defaults", "Name": "api", "Protocol": "tcp"}),
        )
        .await,
        "HTTP-family protocol",
    );
    // Legacy writes may not carry permissions.
    let mut with_perms = legacy("billing", "orders", "");
    with_perms.permissions = vec![json!({"Action": "allow", "HTTP": {"PathPrefix": "/"}})];
    bad_request(
        create(&server, with_perms).await,
        "Permissions must not be set",
    );
    server.shutdown().await;
}

#[tokio::test]
async fn check_answers_change_within_one_blocking_round_trip() {
    let server = start(ServerConfig::in_memory("dc1", "intentions")).await;
    let first = server
        .intention_check(&QueryOptions::default(), "web".into(), "db".into())
        .await
        .unwrap();
    assert!(first.value.allowed);
    let waiter = {
        let server = server.clone();
        let index = first.meta.index;
        tokio::spawn(async move {
            server
                .intention_check(
                    &QueryOptions {
                        min_index: index,
                        max_wait: Some(Duration::from_secs(30)),
                        ..Default::default()
                    },
                    "web".into(),
                    "db".into(),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    create(&server, legacy("web", "db", "deny")).await.unwrap();
    let after = waiter.await.unwrap().unwrap();
    assert!(!after.value.allowed);
    assert!(started.elapsed() < Duration::from_secs(2));
    server.shutdown().await;
}

#[tokio::test]
async fn default_deny_when_acls_default_to_deny() {
    let config = ServerConfig {
        default_intention_allow: false,
        ..ServerConfig::in_memory("dc1", "intentions")
    };
    let server = start(config).await;
    assert!(!allowed(&server, "web", "db").await);
    create(&server, legacy("web", "db", "allow")).await.unwrap();
    assert!(allowed(&server, "web", "db").await);
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_without_the_feature_keeps_intentions_read_only() {
    // Rehearse a mixed-version cluster: this server does not advertise `si`.
    let config = ServerConfig {
        masked_features: vec![legate_server::features::INTENTIONS_AS_CONFIG_ENTRIES.into()],
        ..ServerConfig::in_memory("dc1", "old-server")
    };
    let server = start(config).await;
    let read_only = |r: Result<String, RpcError>| match r {
        Err(RpcError::Internal(m)) => assert_eq!(m, INTENTIONS_READ_ONLY),
        other => panic!("expected the read-only error, got {other:?}"),
    };
    read_only(create(&server, legacy("web", "db", "deny")).await);
    read_only(
        server
            .intention_apply(
                &WriteOptions::default(),
                IntentionOp::Upsert(legacy("web", "db", "deny")),
            )
            .await,
    );
    match write_entry(
        &server,
        json!({"Kind": "service-intentions", "Name": "db", "Sources": [{"Name": "web", "Action": "deny"}]}),
    )
    .await
    {
        Err(RpcError::Internal(m)) => assert_eq!(m, INTENTIONS_READ_ONLY),
        other => panic!("{other:?}"),
    }
    // Reads keep working, and nothing was written.
    assert!(list(&server).await.is_empty());
    assert!(allowed(&server, "web", "db").await);
    // Other config entries are unaffected.
    write_entry(
        &server,
        json!({"Kind": "service-defaults", "Name": "db", "Protocol": "tcp"}),
    )
    .await
    .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_secondary_waits_for_every_server_of_the_primary() {
    use legate_types::federation::{WanServer, WanStatus, WanView};
    let server_of = |node: &str, features: &[&str]| WanServer {
        node: node.into(),
        rpc_addr: format!("{node}:8300"),
        status: WanStatus::Alive,
        coord: None,
        features: features.iter().map(|f| f.to_string()).collect(),
    };
    let view = |primary_features: &[&str]| {
        let mut view = WanView::default();
        view.datacenters.insert(
            "dc1".into(),
            vec![
                server_of("a1", &["si", "fs"]),
                server_of("a2", primary_features),
            ],
        );
        view.datacenters
            .insert("dc2".into(), vec![server_of("b1", &["si", "fs"])]);
        view
    };
    let (wan, wan_rx) = tokio::sync::watch::channel(view(&["fs"]));
    let config = ServerConfig {
        primary_datacenter: "dc1".into(),
        wan: wan_rx,
        ..ServerConfig::in_memory("dc2", "secondary")
    };
    // A secondary's CA comes from the primary, which this test lacks.
    let server = Server::start(config).await.unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    // Every dc2 server supports them, one dc1 server does not: read only.
    tokio::time::sleep(Duration::from_secs(2)).await;
    match create(&server, legacy("web", "db", "deny")).await {
        Err(RpcError::Internal(m)) => assert_eq!(m, INTENTIONS_READ_ONLY),
        other => panic!("expected the read-only error, got {other:?}"),
    }
    // The primary's last server is upgraded: the secondary switches (its
    // writes then go to the primary, which this test has no way to reach).
    wan.send_replace(view(&["si", "fs"]));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match create(&server, legacy("web", "db", "deny")).await {
            Err(RpcError::NoPathToDatacenter(dc)) => {
                assert_eq!(dc, "dc1");
                break;
            }
            Err(RpcError::Internal(m)) if m == INTENTIONS_READ_ONLY => {}
            other => panic!("{other:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never switched");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.shutdown().await;
}
