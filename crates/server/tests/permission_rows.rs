//! The server port against the permission table: every call the RPC
//! dispatcher answers has a row in `legate_acl::doors::RPC` (and every row
//! is a call); then each row is tried on a real server, over its server
//! port, with a token holding exactly the row's permissions (on the
//! fixtures' names) and with tokens each lacking one of them: denied rows
//! answer `Permission denied`, filtered rows leave the fixture out and say
//! so, open rows answer the anonymous token. Config entries are tried per
//! kind, with the permissions of `CONFIG_ENTRY_KINDS`.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use legate_acl::doors::example::{name_for, EVENT, KEY, NODE, QUERY, SERVICE};
use legate_acl::doors::{config_entry_needs, rpc_door, Need, Needs, Side, CONFIG_ENTRY_KINDS, RPC};
use legate_rpc::{Listener, Pool, RemoteRpc, CALLS};
use legate_server::{AclSettings, Server, ServerConfig};
use legate_types::acl::{AclLink, AclPolicy, AclRole, AclToken};
use legate_types::rpc::{AutopilotConfiguration, ServerRpc, ServiceQuery, TxnResponse, Watched};
use legate_types::{Queried, QueryOptions, RpcError, WriteOptions};
use serde_json::json;

const ROOT: &str = "5b1f0c2e-8a4d-4e6f-9b3a-1c2d3e4f5a6b";
/// The fixtures' auth method and the public key it trusts.
const AUTH_METHOD: &str = "fx-jwt";
const AUTH_METHOD_KEY: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEOMGP3wcBiyrO+8apDOKyd/pCLa6E\ntGwMHqzRAMygIduoqqGfiwqf8+qjlOB5Dz7MtWeOqQKob9Gt8DS/+lMoGQ==\n-----END PUBLIC KEY-----\n";

/// The rules that grant `need` on its fixture name.
fn rule(need: &Need) -> String {
    need.granting_rules(name_for(need.resource))
}

/// What a call answered.
#[derive(Debug)]
enum Outcome {
    Answered {
        filtered: bool,
        text: String,
    },
    Refused(RpcError),
    /// Any other error (shown in failures).
    #[allow(dead_code)]
    Failed(RpcError),
}

fn refused(e: RpcError) -> Outcome {
    match e {
        // Refused to everyone once done: not a permission of the caller.
        RpcError::PermissionDenied(ref text)
            if text.starts_with("ACL bootstrap no longer allowed") =>
        {
            Outcome::Failed(e)
        }
        RpcError::PermissionDenied(_) | RpcError::AclNotFound => Outcome::Refused(e),
        other => Outcome::Failed(other),
    }
}

fn plain<T: Debug>(result: Result<T, RpcError>) -> Outcome {
    match result {
        Ok(value) => Outcome::Answered {
            filtered: false,
            text: format!("{value:?}"),
        },
        Err(e) => refused(e),
    }
}

fn queried<T: Debug>(result: Result<Queried<T>, RpcError>) -> Outcome {
    match result {
        Ok(q) => Outcome::Answered {
            filtered: q.meta.results_filtered_by_acls,
            text: format!("{:?}", q.value),
        },
        Err(e) => refused(e),
    }
}

/// A transaction refused per operation counts as refused.
fn txn(result: Result<TxnResponse, RpcError>) -> Outcome {
    match result {
        Ok(TxnResponse {
            errors: Some(errors),
            ..
        }) if errors
            .iter()
            .all(|e| e.what.starts_with("Permission denied")) =>
        {
            Outcome::Refused(RpcError::PermissionDenied(format!("{errors:?}")))
        }
        other => plain(other),
    }
}

fn q(token: &str) -> QueryOptions {
    QueryOptions {
        token: token.into(),
        ..Default::default()
    }
}

fn w(token: &str) -> WriteOptions {
    WriteOptions {
        token: token.into(),
        ..Default::default()
    }
}

fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// What the rows act on, made again before each row (rows delete them).
struct Fixtures {
    session: String,
    /// The prepared query named [`QUERY`].
    query: String,
    token: String,
    policy: String,
    role: String,
}

struct Harness {
    rpc: RemoteRpc,
    _server: Arc<Server>,
    minted: std::sync::atomic::AtomicUsize,
}

impl Harness {
    async fn start() -> Harness {
        let mut config = ServerConfig::in_memory("dc1", "s1");
        config.acl = AclSettings {
            enabled: true,
            default_policy: legate_acl::DefaultPolicy::Deny,
            initial_management: Some(ROOT.into()),
            ..Default::default()
        };
        let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        config.server_port = listener.local_addr().unwrap().port();
        let address = listener.local_addr().unwrap().to_string();
        let server = Server::start(config).await.unwrap();
        assert!(server.wait_for_leader(Duration::from_secs(10)).await);
        assert!(server.wait_for_ca(Duration::from_secs(10)).await);
        server.route(&mut listener, server.clone());
        tokio::spawn(listener.serve());
        let pool = Arc::new(Pool::new(Duration::from_secs(1)));
        let rpc = RemoteRpc::new(address, pool);
        for _ in 0..100 {
            if rpc.acl_token_self(&q(ROOT)).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rpc.acl_token_self(&q(ROOT))
            .await
            .expect("the initial management token");
        Harness {
            rpc,
            _server: server,
            minted: Default::default(),
        }
    }

    /// A name no earlier call of this harness used.
    fn unique_name(&self, prefix: &str) -> String {
        let n = self
            .minted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{prefix}-{n}")
    }

    /// A token with exactly `rules` (none: a token without policies).
    async fn token(&self, rules: &str) -> String {
        let n = self
            .minted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut token = AclToken {
            description: format!("row token {n}"),
            ..Default::default()
        };
        if !rules.is_empty() {
            let policy = self
                .rpc
                .acl_policy_set(
                    &w(ROOT),
                    AclPolicy {
                        name: format!("row-{n}"),
                        rules: rules.to_string(),
                        ..Default::default()
                    },
                    true,
                )
                .await
                .unwrap();
            token.policies = vec![AclLink {
                id: policy.id,
                name: String::new(),
            }];
        }
        self.rpc
            .acl_token_set(&w(ROOT), token, true)
            .await
            .unwrap()
            .secret_id
    }

    async fn fixtures(&self) -> Fixtures {
        let rpc = &self.rpc;
        let root = w(ROOT);
        rpc.catalog_register(
            &root,
            from(json!({
                "Node": NODE, "Address": "127.0.0.1",
                "Service": {"ID": SERVICE, "Service": SERVICE, "Port": 80},
                "Checks": [
                    {"CheckID": "fx-web-check", "Name": "web", "ServiceID": SERVICE, "Status": "passing"},
                    {"CheckID": "fx-node-check", "Name": "node", "Status": "passing"}
                ]
            })),
        )
        .await
        .unwrap();
        rpc.kv_apply(
            &root,
            from(json!({"Verb": "set", "Key": KEY, "Value": "dg=="})),
        )
        .await
        .unwrap();
        let session = rpc
            .session_create(&root, from(json!({"Node": NODE})))
            .await
            .unwrap();
        rpc.acl_auth_method_set(
            &root,
            from(json!({"Name": AUTH_METHOD, "Type": "jwt",
                        "Config": {"JWTValidationPubKeys": [AUTH_METHOD_KEY]}})),
        )
        .await
        .unwrap();
        for entry in [
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "http"}}),
            json!({"Kind": "service-defaults", "Name": SERVICE, "Protocol": "http"}),
        ] {
            rpc.config_apply(
                &root,
                legate_types::config_entry::from_json(entry).unwrap(),
                None,
            )
            .await
            .unwrap();
        }
        rpc.intention_apply(
                &root,
                from(json!({"Upsert": {"SourceName": "api", "DestinationName": SERVICE, "Action": "allow"}})),
            )
            .await
            .unwrap();
        rpc.coordinate_update(
            &root,
            legate_types::coordinate::CoordinateEntry {
                node: NODE.into(),
                segment: String::new(),
                coord: legate_types::coordinate::Coordinate::new(&Default::default()),
            },
        )
        .await
        .unwrap();
        // Coordinate updates are applied in batches.
        for _ in 0..200 {
            let listed = rpc.coordinate_nodes(&q(ROOT)).await.unwrap();
            if listed.value.iter().any(|c| c.node == NODE) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        rpc.federation_state_apply(
            &root,
            from(json!({"Upsert": {
                "Datacenter": "dc1",
                "MeshGateways": [{"Node": {"Node": NODE, "Address": "127.0.0.1"},
                                  "Service": {"ID": SERVICE, "Service": SERVICE, "Port": 443},
                                  "Checks": []}]
            }})),
        )
        .await
        .unwrap();
        let token = rpc
            .acl_token_set(&root, AclToken::default(), true)
            .await
            .unwrap()
            .accessor_id;
        let n = self
            .minted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let policy = rpc
            .acl_policy_set(
                &root,
                AclPolicy {
                    name: format!("spare-{n}"),
                    ..Default::default()
                },
                true,
            )
            .await
            .unwrap()
            .id;
        let role = rpc
            .acl_role_set(
                &root,
                AclRole {
                    name: format!("spare-{n}"),
                    ..Default::default()
                },
                true,
            )
            .await
            .unwrap()
            .id;
        // The query is made once (its name is unique) and again once a
        // row deleted it.
        let existing = rpc.prepared_query_list(&q(ROOT)).await.unwrap().value;
        let query = match existing.into_iter().find(|q| q.name == QUERY) {
            Some(found) => found.id,
            None => rpc
                .prepared_query_apply(
                    &root,
                    legate_types::prepared_query::PreparedQueryOp::Create,
                    from(json!({"Name": QUERY, "Service": {"Service": SERVICE}})),
                )
                .await
                .unwrap(),
        };
        Fixtures {
            session,
            query,
            token,
            policy,
            role,
        }
    }

    /// Calls `call` with `token`; `None` for a call this test has no
    /// example of.
    async fn call(&self, call: &str, token: &str, fx: &Fixtures) -> Option<Outcome> {
        let rpc = &self.rpc;
        let (q, w) = (q(token), w(token));
        let service_query = || ServiceQuery {
            service: SERVICE.into(),
            ..Default::default()
        };
        let entry = || {
            legate_types::config_entry::from_json(
                json!({"Kind": "service-defaults", "Name": SERVICE, "Protocol": "http"}),
            )
            .unwrap()
        };
        Some(match call {
            "status_leader" => plain(rpc.status_leader().await),
            "status_peers" => plain(rpc.status_peers().await),
            "raft_configuration" => plain(rpc.raft_configuration(&q).await),
            "raft_remove_peer" => plain(rpc.raft_remove_peer(&w, "no-such-peer".into()).await),
            "raft_transfer_leader" => plain(rpc.raft_transfer_leader(&w, String::new()).await),
            "autopilot_health" => plain(rpc.autopilot_health(&q).await),
            "autopilot_config" => plain(rpc.autopilot_config(&q).await),
            "autopilot_set_config" => plain(
                rpc.autopilot_set_config(&w, AutopilotConfiguration::default(), Some(u64::MAX))
                    .await,
            ),
            "operator_usage" => plain(rpc.operator_usage(&q).await),
            "snapshot_save" => queried(rpc.snapshot_save(&q).await),
            "snapshot_restore" => plain(
                rpc.snapshot_restore(&w, legate_types::rpc::SnapshotArchive(b"not an archive".to_vec()))
                    .await,
            ),
            "catalog_register" => plain(
                rpc.catalog_register(
                    &w,
                    from(json!({
                        "Node": NODE, "Address": "127.0.0.1",
                        "Service": {"ID": SERVICE, "Service": SERVICE, "Port": 80}
                    })),
                )
                .await,
            ),
            "catalog_deregister" => plain(
                rpc.catalog_deregister(&w, from(json!({"Node": NODE, "ServiceID": SERVICE})))
                    .await,
            ),
            "catalog_datacenters" => plain(rpc.catalog_datacenters().await),
            "catalog_nodes" => queried(rpc.catalog_nodes(&q).await),
            "catalog_services" => queried(rpc.catalog_services(&q).await),
            "catalog_service_nodes" => queried(rpc.catalog_service_nodes(&q, service_query()).await),
            "catalog_node_services" => queried(rpc.catalog_node_services(&q, NODE.into()).await),
            "health_node_checks" => queried(rpc.health_node_checks(&q, NODE.into()).await),
            "health_service_checks" => {
                queried(rpc.health_service_checks(&q, SERVICE.into()).await)
            }
            "health_checks_in_state" => queried(rpc.health_checks_in_state(&q, None).await),
            "health_service_nodes" => queried(rpc.health_service_nodes(&q, service_query()).await),
            "event_fire" => plain(
                rpc.event_fire(
                    &q,
                    from(json!({"ID": "", "Name": EVENT, "Payload": null, "NodeFilter": "",
                                "ServiceFilter": "", "TagFilter": "", "Version": 1, "LTime": 0})),
                )
                .await,
            ),
            "coordinate_datacenters" => plain(rpc.coordinate_datacenters().await),
            "coordinate_nodes" => queried(rpc.coordinate_nodes(&q).await),
            "coordinate_node" => queried(rpc.coordinate_node(&q, NODE.into()).await),
            "coordinate_update" => plain(
                rpc.coordinate_update(
                    &w,
                    legate_types::coordinate::CoordinateEntry {
                        node: NODE.into(),
                        segment: String::new(),
                        coord: legate_types::coordinate::Coordinate::new(&Default::default()),
                    },
                )
                .await,
            ),
            "kv_get" => queried(rpc.kv_get(&q, KEY.into()).await),
            "kv_list" => queried(rpc.kv_list(&q, "app/".into()).await),
            "kv_keys" => queried(rpc.kv_keys(&q, "app/".into(), String::new()).await),
            "kv_apply" => plain(
                rpc.kv_apply(&w, from(json!({"Verb": "set", "Key": KEY, "Value": "dg=="})))
                    .await,
            ),
            "txn" => txn(
                rpc.txn(
                    &w,
                    vec![from(json!({"KV": {"Verb": "set", "Key": KEY, "Value": "dg=="}}))],
                )
                .await,
            ),
            "session_create" => plain(rpc.session_create(&w, from(json!({"Node": NODE}))).await),
            "session_destroy" => plain(rpc.session_destroy(&w, fx.session.clone()).await),
            "session_renew" => plain(rpc.session_renew(&w, fx.session.clone()).await),
            "session_info" => queried(rpc.session_info(&q, fx.session.clone()).await),
            "session_list" => queried(rpc.session_list(&q).await),
            "session_node" => queried(rpc.session_node(&q, NODE.into()).await),
            "config_apply" => plain(rpc.config_apply(&w, entry(), None).await),
            "config_get" => queried(
                rpc.config_get(&q, "service-defaults".into(), SERVICE.into())
                    .await,
            ),
            "config_list" => queried(rpc.config_list(&q, "service-defaults".into()).await),
            "config_list_all" => queried(
                rpc.config_list_all(&q, vec!["service-defaults".into()])
                    .await,
            ),
            "config_delete" => plain(
                rpc.config_delete(&w, "service-defaults".into(), SERVICE.into(), None)
                    .await,
            ),
            "discovery_chain" => queried(
                rpc.discovery_chain(&q, SERVICE.into(), String::new(), Default::default())
                    .await,
            ),
            "changes_since" => match queried(
                rpc.changes_since(&q, vec![(Watched::Service(SERVICE.into()), 0)])
                    .await,
            ) {
                // The one watched entry changed: it was seen.
                Outcome::Answered { filtered, text } => Outcome::Answered {
                    filtered,
                    text: if text == "[0]" { SERVICE.into() } else { text },
                },
                other => other,
            },
            "ca_roots" => queried(rpc.ca_roots(&q).await),
            "ca_config_get" => queried(rpc.ca_config_get(&q).await),
            "ca_config_set" => {
                let current = rpc.ca_config_get(&self::q(ROOT)).await.unwrap().value;
                plain(rpc.ca_config_set(&w, current).await)
            }
            "ca_sign" => {
                let trust_domain = rpc.ca_roots(&self::q(ROOT)).await.unwrap().value.trust_domain;
                let id = legate_ca::spiffe::SpiffeId::service(&trust_domain, "dc1", SERVICE);
                let (csr, _) = legate_ca::builtin::make_csr(&id).unwrap();
                plain(
                    rpc.ca_sign(
                        &w,
                        legate_types::connect::CaSignRequest {
                            csr,
                            ..Default::default()
                        },
                    )
                    .await,
                )
            }
            "ca_sign_intermediate" => plain(rpc.ca_sign_intermediate(&w, "garbage".into()).await),
            "federation_state_apply" => plain(
                rpc.federation_state_apply(&w, from(json!({"Upsert": {"Datacenter": "dc1", "MeshGateways": []}})))
                    .await,
            ),
            "federation_state_get" => queried(rpc.federation_state_get(&q, "dc1".into()).await),
            "federation_state_list" => queried(rpc.federation_state_list(&q).await),
            "federation_state_mesh_gateways" => {
                queried(rpc.federation_state_mesh_gateways(&q).await)
            }
            "acl_bootstrap" => plain(rpc.acl_bootstrap(&w).await),
            "acl_replication_status" => plain(rpc.acl_replication_status(&q).await),
            "acl_token_set" => plain(rpc.acl_token_set(&w, AclToken::default(), true).await),
            "acl_token_get" => queried(rpc.acl_token_get(&q, fx.token.clone()).await),
            "acl_token_self" => plain(rpc.acl_token_self(&q).await),
            "acl_token_list" => queried(rpc.acl_token_list(&q, Default::default()).await),
            "acl_token_delete" => plain(rpc.acl_token_delete(&w, fx.token.clone()).await),
            "acl_token_clone" => plain(
                rpc.acl_token_clone(&w, fx.token.clone(), String::new())
                    .await,
            ),
            "acl_policy_set" => {
                let name = self.unique_name("made");
                plain(
                    rpc.acl_policy_set(
                        &w,
                        AclPolicy {
                            name,
                            ..Default::default()
                        },
                        true,
                    )
                    .await,
                )
            }
            "acl_policy_get" => queried(rpc.acl_policy_get(&q, fx.policy.clone(), false).await),
            "acl_policy_list" => queried(rpc.acl_policy_list(&q).await),
            "acl_policy_delete" => plain(rpc.acl_policy_delete(&w, fx.policy.clone()).await),
            "acl_role_set" => {
                let name = self.unique_name("made");
                plain(
                    rpc.acl_role_set(
                        &w,
                        AclRole {
                            name,
                            ..Default::default()
                        },
                        true,
                    )
                    .await,
                )
            }
            "acl_role_get" => queried(rpc.acl_role_get(&q, fx.role.clone(), false).await),
            "acl_role_list" => queried(rpc.acl_role_list(&q, String::new()).await),
            "acl_role_delete" => plain(rpc.acl_role_delete(&w, fx.role.clone()).await),
            "acl_auth_method_set" => plain(
                rpc.acl_auth_method_set(
                    &w,
                    from(json!({"Name": self.unique_name("made"), "Type": "jwt",
                                "Config": {"JWTValidationPubKeys": [AUTH_METHOD_KEY]}})),
                )
                .await,
            ),
            "acl_auth_method_get" => queried(rpc.acl_auth_method_get(&q, AUTH_METHOD.into()).await),
            "acl_auth_method_list" => queried(rpc.acl_auth_method_list(&q).await),
            "acl_auth_method_delete" => {
                plain(rpc.acl_auth_method_delete(&w, AUTH_METHOD.into()).await)
            }
            "acl_binding_rule_set" => plain(
                rpc.acl_binding_rule_set(
                    &w,
                    from(json!({"AuthMethod": AUTH_METHOD, "BindType": "service", "BindName": SERVICE})),
                )
                .await,
            ),
            "acl_binding_rule_get" => queried(
                rpc.acl_binding_rule_get(&q, "6c1ee7d2-0000-4000-8000-000000000000".into())
                    .await,
            ),
            "acl_binding_rule_list" => queried(rpc.acl_binding_rule_list(&q, String::new()).await),
            "acl_binding_rule_delete" => plain(
                rpc.acl_binding_rule_delete(&w, "6c1ee7d2-0000-4000-8000-000000000000".into())
                    .await,
            ),
            "acl_login" => plain(
                rpc.acl_login(
                    &w,
                    from(json!({"AuthMethod": AUTH_METHOD, "BearerToken": "not.a.jwt"})),
                )
                .await,
            ),
            "acl_logout" => plain(rpc.acl_logout(&w).await),
            "acl_resolve" => plain(rpc.acl_resolve(&q).await),
            "acl_resolve_for" => plain(rpc.acl_resolve_for(&q, "dc1".into()).await),
            "catalog_service_dump" => {
                queried(rpc.catalog_service_dump(&q, String::new()).await)
            }
            "catalog_service_dump_all" => queried(rpc.catalog_service_dump_all(&q).await),
            "catalog_node_dump" => queried(rpc.catalog_node_dump(&q, None).await),
            "catalog_service_topology" => queried(
                rpc.catalog_service_topology(&q, SERVICE.into(), String::new())
                    .await,
            ),
            "catalog_overview" => plain(rpc.catalog_overview(&q).await),
            "acl_authorize" => plain(rpc.acl_authorize(&q, Vec::new()).await),
            "intention_apply" => plain(
                rpc.intention_apply(
                    &w,
                    from(json!({"Upsert": {"SourceName": "api", "DestinationName": SERVICE, "Action": "allow"}})),
                )
                .await,
            ),
            "intention_list" => queried(rpc.intention_list(&q).await),
            "intention_get" => queried(
                rpc.intention_get(
                    &q,
                    legate_types::intention::IntentionLookup::Exact {
                        source: "api".into(),
                        destination: SERVICE.into(),
                    },
                )
                .await,
            ),
            "intention_match" => queried(
                rpc.intention_match(&q, legate_types::intention::MatchBy::Destination, vec![SERVICE.into()])
                    .await,
            ),
            "intention_check" => queried(
                rpc.intention_check(&q, "api".into(), SERVICE.into())
                    .await,
            ),
            "prepared_query_apply" => plain(
                rpc.prepared_query_apply(
                    &w,
                    legate_types::prepared_query::PreparedQueryOp::Update,
                    from(json!({"ID": fx.query, "Name": QUERY, "Service": {"Service": SERVICE}})),
                )
                .await,
            ),
            "prepared_query_get" => queried(rpc.prepared_query_get(&q, fx.query.clone()).await),
            "prepared_query_list" => queried(rpc.prepared_query_list(&q).await),
            "prepared_query_explain" => {
                queried(rpc.prepared_query_explain(&q, QUERY.into()).await)
            }
            // What the ACLs filter is the instances (the answer names the
            // service looked up whatever the token).
            "prepared_query_execute" => instances(
                rpc.prepared_query_execute(
                    &q,
                    legate_types::prepared_query::ExecuteRequest {
                        id_or_name: QUERY.into(),
                        ..Default::default()
                    },
                )
                .await,
            ),
            "prepared_query_execute_remote" => instances(
                rpc.prepared_query_execute_remote(
                    &q,
                    legate_types::prepared_query::ExecuteRemoteRequest {
                        query: from(json!({"Name": QUERY, "Service": {"Service": SERVICE}})),
                        limit: 0,
                        connect: false,
                    },
                )
                .await,
            ),
            _ => return None,
        })
    }
}

/// A query run's instances as the outcome.
fn instances(
    result: Result<Queried<legate_types::prepared_query::ExecuteResponse>, RpcError>,
) -> Outcome {
    queried(result.map(|q| Queried {
        meta: q.meta,
        value: q.value.nodes,
    }))
}

#[test]
fn every_call_has_a_row_and_every_row_is_a_call() {
    let missing: Vec<&&str> = CALLS.iter().filter(|c| rpc_door(c).is_none()).collect();
    assert!(missing.is_empty(), "calls without a row: {missing:?}");
    let calls: BTreeSet<&str> = CALLS.iter().copied().collect();
    let stale: Vec<&str> = RPC
        .iter()
        .map(|d| d.door)
        .filter(|d| !calls.contains(d))
        .collect();
    assert!(stale.is_empty(), "rows for no call: {stale:?}");
}

/// The needs a row is tried with (config entries: the example's kind).
fn row_needs(call: &str, needs: Needs) -> Needs {
    match needs {
        Needs::ByKind(side) => {
            let kind = config_entry_needs("service-defaults").unwrap();
            match (side, call) {
                (Side::Write, _) => Needs::All(std::slice::from_ref(&kind.write)),
                (Side::Read, "config_list" | "config_list_all") => {
                    Needs::Filtered(std::slice::from_ref(kind.read.as_ref().unwrap()))
                }
                (Side::Read, _) => Needs::All(std::slice::from_ref(kind.read.as_ref().unwrap())),
            }
        }
        other => other,
    }
}

/// Tokens for a row: one holding all of `needs`, and for each need one
/// holding the others and that one a level weaker (or not at all).
async fn tokens_for(h: &Harness, needs: &[Need]) -> (String, Vec<(Need, String)>) {
    let all: String = needs.iter().map(rule).collect();
    let allowed = h.token(&all).await;
    let mut denied = Vec::new();
    for (i, need) in needs.iter().enumerate() {
        let mut rules: String = needs
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| rule(n))
            .collect();
        if let Some(weaker) = need.weaker() {
            rules.push_str(&rule(&weaker));
        }
        denied.push((*need, h.token(&rules).await));
    }
    (allowed, denied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_allows_what_it_names_and_refuses_the_rest_on_the_server_port() {
    let h = Harness::start().await;
    let mut failures = Vec::new();
    // Rows that would take the fixtures (or the state) away go last.
    let mut rows: Vec<_> = RPC.iter().collect();
    rows.sort_by_key(|d| d.door == "snapshot_restore");
    for door in rows {
        let fx = h.fixtures().await;
        let call = door.door;
        let needs = row_needs(call, door.needs);
        let mut check =
            |what: &str, outcome: Option<Outcome>, ok: &dyn Fn(&Outcome) -> bool| match outcome {
                None => failures.push(format!("{call}: no example")),
                Some(o) if !ok(&o) => failures.push(format!("{call} {what}: {o:?}")),
                Some(_) => {}
            };
        match needs {
            Needs::Nothing => {
                let outcome = h.call(call, "", &fx).await;
                check("anonymous", outcome, &|o| !matches!(o, Outcome::Refused(_)));
            }
            Needs::KnownToken => {
                let known = h.token("").await;
                let outcome = h.call(call, &known, &fx).await;
                check("a known token", outcome, &|o| {
                    !matches!(o, Outcome::Refused(_))
                });
                let unknown = "00000000-1111-2222-3333-444444444444";
                let outcome = h.call(call, unknown, &fx).await;
                check("an unknown token", outcome, &|o| {
                    matches!(o, Outcome::Refused(RpcError::AclNotFound))
                });
            }
            Needs::All(list) | Needs::EachOperation(list) => {
                let (allowed, denied) = tokens_for(&h, list).await;
                let outcome = h.call(call, &allowed, &fx).await;
                check("allowed", outcome, &|o| !matches!(o, Outcome::Refused(_)));
                for (need, token) in denied {
                    let fx = h.fixtures().await;
                    let outcome = h.call(call, &token, &fx).await;
                    let what = format!(
                        "without {}:{}",
                        need.resource.as_str(),
                        need.access.as_str()
                    );
                    check(&what, outcome, &|o| {
                        matches!(o, Outcome::Refused(RpcError::PermissionDenied(_)))
                    });
                }
            }
            Needs::Filtered(list) => {
                let (allowed, denied) = tokens_for(&h, list).await;
                let outcome = h.call(call, &allowed, &fx).await;
                check("allowed", outcome, &|o| match o {
                    Outcome::Answered { text, .. } => {
                        list.iter().all(|n| text.contains(name_for(n.resource)))
                    }
                    _ => false,
                });
                for (need, token) in denied {
                    let outcome = h.call(call, &token, &fx).await;
                    let what = format!(
                        "without {}:{}",
                        need.resource.as_str(),
                        need.access.as_str()
                    );
                    let hidden = name_for(need.resource);
                    check(&what, outcome, &|o| match o {
                        Outcome::Answered { filtered, text } => *filtered && !text.contains(hidden),
                        _ => false,
                    });
                }
            }
            Needs::ByKind(_) => unreachable!("resolved by row_needs"),
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed: {failures:#?}",
        failures.len()
    );
}

/// An entry of each kind, named so that the kind's rules match the
/// fixtures.
fn entry_of(kind: &str) -> serde_json::Value {
    match kind {
        "proxy-defaults" => json!({"Kind": kind, "Name": "global", "Config": {"protocol": "http"}}),
        "mesh" => json!({"Kind": kind, "Name": "mesh"}),
        "service-defaults" => json!({"Kind": kind, "Name": SERVICE, "Protocol": "http"}),
        "service-router" => json!({"Kind": kind, "Name": SERVICE, "Routes": []}),
        "service-splitter" => json!({"Kind": kind, "Name": SERVICE, "Splits": [{"Weight": 100}]}),
        "service-resolver" => json!({"Kind": kind, "Name": SERVICE}),
        "service-intentions" => json!({"Kind": kind, "Name": SERVICE,
                                       "Sources": [{"Name": "api", "Action": "allow"}]}),
        "ingress-gateway" => json!({"Kind": kind, "Name": SERVICE, "Listeners": []}),
        "terminating-gateway" => json!({"Kind": kind, "Name": SERVICE, "Services": []}),
        "exported-services" => json!({"Kind": kind, "Name": "default", "Services": []}),
        other => panic!("no example entry of kind {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_config_entry_kind_is_read_and_written_with_its_own_permission() {
    let h = Harness::start().await;
    h.fixtures().await;
    let rpc = &h.rpc;
    let mut failures = Vec::new();
    for kind in CONFIG_ENTRY_KINDS {
        let value = entry_of(kind.kind);
        let name = value["Name"].as_str().unwrap().to_string();
        let entry = || legate_types::config_entry::from_json(value.clone()).unwrap();
        let (allowed, denied) = tokens_for(&h, std::slice::from_ref(&kind.write)).await;
        if let Err(e) = rpc.config_apply(&w(&allowed), entry(), None).await {
            failures.push(format!("{}: write allowed: {e:?}", kind.kind));
        }
        match rpc.config_apply(&w(&denied[0].1), entry(), None).await {
            Err(RpcError::PermissionDenied(_)) => {}
            other => failures.push(format!("{}: write denied: {other:?}", kind.kind)),
        }
        match rpc
            .config_delete(&w(&denied[0].1), kind.kind.into(), name.clone(), None)
            .await
        {
            Err(RpcError::PermissionDenied(_)) => {}
            other => failures.push(format!("{}: delete denied: {other:?}", kind.kind)),
        }
        let read_needs: Vec<Need> = kind.read.into_iter().collect();
        let (reader, unreaders) = tokens_for(&h, &read_needs).await;
        let anonymous = String::new();
        let unreader = unreaders.first().map(|(_, t)| t).unwrap_or(&anonymous);
        match rpc
            .config_get(&q(&reader), kind.kind.into(), name.clone())
            .await
        {
            Ok(found) if found.value.is_some() => {}
            other => failures.push(format!("{}: read allowed: {other:?}", kind.kind)),
        }
        let listed = rpc.config_list(&q(unreader), kind.kind.into()).await;
        match (
            kind.read,
            rpc.config_get(&q(unreader), kind.kind.into(), name.clone())
                .await,
        ) {
            (None, Ok(found)) if found.value.is_some() => {}
            (Some(_), Err(RpcError::PermissionDenied(_))) => {}
            (_, other) => failures.push(format!("{}: read denied: {other:?}", kind.kind)),
        }
        match (kind.read, listed) {
            (None, Ok(list)) if list.value.len() == 1 => {}
            (Some(_), Ok(list)) if list.value.is_empty() && list.meta.results_filtered_by_acls => {}
            (_, other) => failures.push(format!("{}: list denied: {other:?}", kind.kind)),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
