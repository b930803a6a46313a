//! The server endpoints: validation, authorization, then Raft for writes
//! or a (blocking) state-store read.

use legate_types::coordinate::{CoordinateEntry, DatacenterCoordinates};
use legate_types::event::UserEvent;
use std::collections::BTreeMap;

use async_trait::async_trait;
use legate_state::{Command, CommandResult, Table};
use legate_types::config_entry::ConfigEntry;
use legate_types::rpc::{ServerRpc, ServiceQuery, TxnOp, TxnResponse, Watched};
use legate_types::*;

use crate::blocking::{apply_filter, parse_filter};
use crate::{Access, Resource, Server};
use legate_types::connect::{CaConfiguration, CaSignRequest, IndexedCaRoots, IssuedCert};
use legate_types::intention::{Intention, IntentionCheck, IntentionLookup, IntentionOp, MatchBy};

/// What reading a session needs: `session:read` on its node.
pub(crate) fn session_target(session: &Session) -> Vec<(legate_acl::Resource, String)> {
    vec![(legate_acl::Resource::Session, session.node.clone())]
}

/// What reading a health check needs: its node, and its service if any.
pub(crate) fn check_targets(check: &HealthCheck) -> Vec<(legate_acl::Resource, String)> {
    let mut targets = vec![(legate_acl::Resource::Node, check.node.clone())];
    if !check.service_name.is_empty() {
        targets.push((legate_acl::Resource::Service, check.service_name.clone()));
    }
    targets
}

pub(crate) fn has_all_tags(tags: &[String], wanted: &[String]) -> bool {
    wanted
        .iter()
        .all(|w| tags.iter().any(|t| t.eq_ignore_ascii_case(w)))
}

impl Server {
    fn validate_register(&self, req: &mut RegisterRequest) -> Result<(), RpcError> {
        if req.node.is_empty() {
            return Err(RpcError::BadRequest("Must provide node".into()));
        }
        if req.address.is_empty() && !req.skip_node_update {
            return Err(RpcError::BadRequest(
                "Must provide address if SkipNodeUpdate is not set".into(),
            ));
        }
        if req.datacenter.is_empty() {
            req.datacenter = self.config.datacenter.clone();
        }
        if !req.id.is_empty() && uuid::Uuid::parse_str(&req.id).is_err() {
            return Err(RpcError::BadRequest(format!(
                "Invalid node ID: {:?} is not a UUID",
                req.id
            )));
        }
        if let Some(service) = req.service.as_mut() {
            if service.service.is_empty() {
                return Err(RpcError::BadRequest("Must provide service name".into()));
            }
            if service.id.is_empty() {
                service.id = service.service.clone();
            }
            // Consul checks service metadata (not node metadata) here,
            // answering 500 with this text.
            legate_types::meta::validate_service(&service.kind, &service.meta).map_err(|e| {
                RpcError::Internal(format!(
                    "Invalid Service Meta for node {} and serviceID {}: {e}",
                    req.node, service.id
                ))
            })?;
            if service.is_sidecar_proxy() {
                let destination = service
                    .proxy
                    .as_ref()
                    .map(|p| p.destination_service_name.as_str())
                    .unwrap_or("");
                if destination.is_empty() {
                    return Err(RpcError::BadRequest(
                        "Proxy.DestinationServiceName must be set for a Connect proxy".into(),
                    ));
                }
                if service.port == 0 && service.socket_path.is_empty() {
                    return Err(RpcError::BadRequest(
                        "Port or SocketPath must be set for a Connect proxy".into(),
                    ));
                }
            }
        }
        let node = req.node.clone();
        let fix_check = |check: &mut HealthCheck| -> Result<(), RpcError> {
            if check.node.is_empty() {
                check.node = node.clone();
            }
            if check.node != node {
                return Err(RpcError::BadRequest(format!(
                    "Check node {:?} does not match the registration node {:?}",
                    check.node, node
                )));
            }
            if check.check_id.is_empty() {
                if check.name.is_empty() {
                    return Err(RpcError::BadRequest("Must provide check ID or name".into()));
                }
                check.check_id = check.name.clone();
            }
            Ok(())
        };
        if let Some(check) = req.check.as_mut() {
            fix_check(check)?;
        }
        for check in req.checks.iter_mut() {
            fix_check(check)?;
        }
        Ok(())
    }

    /// Refuses a config-entry write or delete that would leave any
    /// discovery chain unable to compile, naming the chain.
    pub(crate) fn check_chains_after(
        &self,
        kind: &str,
        name: &str,
        proposed: Option<&ConfigEntry>,
    ) -> Result<(), RpcError> {
        let routing = legate_chain::ROUTING_KINDS.contains(&kind);
        let l7 = legate_chain::INTENTION_PROTOCOL_KINDS.contains(&kind);
        if !routing && !l7 {
            return Ok(());
        }
        let kinds: Vec<String> = legate_chain::ROUTING_KINDS
            .iter()
            .chain(legate_chain::INTENTION_PROTOCOL_KINDS)
            .map(|k| k.to_string())
            .collect();
        let (_, current) = self.store.read().config_entries_of_kinds(&kinds);
        let after = legate_chain::with_change(&current, kind, name, proposed);
        if routing {
            let routing_only: Vec<_> = after
                .iter()
                .filter(|e| legate_chain::ROUTING_KINDS.contains(&e.kind.as_str()))
                .cloned()
                .collect();
            legate_chain::validate_graph(&routing_only).map_err(RpcError::BadRequest)?;
        }
        if l7 {
            legate_chain::validate_l7_intentions(&after).map_err(RpcError::BadRequest)?;
        }
        Ok(())
    }

    fn write_index(result: (u64, CommandResult)) -> u64 {
        result.0
    }
}

#[async_trait]
impl ServerRpc for Server {
    async fn status_leader(&self) -> Result<String, RpcError> {
        Ok(self.raft.leader_address().unwrap_or_default())
    }

    async fn status_peers(&self) -> Result<Vec<String>, RpcError> {
        Ok(self.raft.peer_addresses())
    }

    async fn autopilot_health(
        &self,
        opts: &QueryOptions,
    ) -> Result<legate_types::rpc::AutopilotHealth, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        if !self.raft.is_leader() {
            return Err(RpcError::NoLeader);
        }
        Ok(self.autopilot_view())
    }

    async fn operator_usage(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<legate_types::rpc::ServiceUsage>, RpcError> {
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        self.blocking_query(opts, |w| w.tables(&[Table::Services]), |t| Ok(t.usage()))
            .await
    }

    async fn autopilot_config(
        &self,
        opts: &QueryOptions,
    ) -> Result<legate_types::rpc::AutopilotConfiguration, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        self.check_consistency(opts.consistency).await?;
        Ok(self.autopilot_configuration())
    }

    async fn autopilot_set_config(
        &self,
        opts: &WriteOptions,
        config: legate_types::rpc::AutopilotConfiguration,
        cas: Option<u64>,
    ) -> Result<bool, RpcError> {
        self.set_autopilot_configuration(opts, config, cas).await
    }

    async fn snapshot_save(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<legate_types::rpc::SnapshotArchive>, RpcError> {
        self.save_snapshot(opts).await
    }

    async fn snapshot_restore(
        &self,
        opts: &WriteOptions,
        archive: legate_types::rpc::SnapshotArchive,
    ) -> Result<(), RpcError> {
        self.restore_snapshot(opts, archive).await
    }

    async fn raft_remove_peer(
        &self,
        opts: &WriteOptions,
        id_or_address: String,
    ) -> Result<(), RpcError> {
        self.remove_raft_peer(opts, id_or_address).await
    }

    async fn raft_transfer_leader(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError> {
        self.transfer_leader(opts, id).await
    }

    async fn raft_configuration(
        &self,
        opts: &QueryOptions,
    ) -> Result<legate_types::rpc::RaftConfiguration, RpcError> {
        self.raft_configuration_named(opts)
    }

    async fn catalog_register(
        &self,
        opts: &WriteOptions,
        mut req: RegisterRequest,
    ) -> Result<u64, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.validate_register(&mut req)?;
        self.authorize_register(&opts.token, &req)?;
        self.write(Command::Register(Box::new(req)))
            .await
            .map(Self::write_index)
    }

    async fn catalog_deregister(
        &self,
        opts: &WriteOptions,
        req: DeregisterRequest,
    ) -> Result<u64, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if req.node.is_empty() {
            return Err(RpcError::BadRequest("Must provide node".into()));
        }
        self.authorize_deregister(&opts.token, &req)?;
        self.write(Command::Deregister(req))
            .await
            .map(Self::write_index)
    }

    async fn catalog_datacenters(&self) -> Result<Vec<String>, RpcError> {
        Ok(self.known_datacenters())
    }

    async fn event_fire(&self, opts: &QueryOptions, event: UserEvent) -> Result<(), RpcError> {
        self.spread_event(opts, event)
    }

    async fn coordinate_datacenters(&self) -> Result<Vec<DatacenterCoordinates>, RpcError> {
        Ok(self.wan_coordinates())
    }

    async fn coordinate_nodes(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<CoordinateEntry>>, RpcError> {
        self.coordinate_list(opts, None).await
    }

    async fn coordinate_node(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<CoordinateEntry>>, RpcError> {
        self.coordinate_list(opts, Some(node)).await
    }

    async fn coordinate_update(
        &self,
        opts: &WriteOptions,
        entry: CoordinateEntry,
    ) -> Result<(), RpcError> {
        self.coordinate_update_queued(opts, entry).await
    }

    async fn catalog_nodes(&self, opts: &QueryOptions) -> Result<Queried<Vec<Node>>, RpcError> {
        self.catalog_nodes_endpoint(opts).await
    }

    async fn catalog_services(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<BTreeMap<String, Vec<String>>>, RpcError> {
        self.catalog_services_endpoint(opts).await
    }

    async fn catalog_service_nodes(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<Queried<Vec<ServiceNode>>, RpcError> {
        self.catalog_service_nodes_endpoint(opts, query).await
    }

    async fn catalog_node_services(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Option<NodeServices>>, RpcError> {
        self.catalog_node_services_endpoint(opts, node).await
    }

    async fn health_node_checks(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError> {
        self.health_node_checks_endpoint(opts, node).await
    }

    async fn health_service_checks(
        &self,
        opts: &QueryOptions,
        service: String,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError> {
        self.health_service_checks_endpoint(opts, service).await
    }

    async fn health_checks_in_state(
        &self,
        opts: &QueryOptions,
        state: Option<HealthStatus>,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError> {
        self.health_checks_in_state_endpoint(opts, state).await
    }

    async fn health_service_nodes(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError> {
        self.health_service_nodes_endpoint(opts, query).await
    }

    async fn kv_get(
        &self,
        opts: &QueryOptions,
        key: String,
    ) -> Result<Queried<Option<KvEntry>>, RpcError> {
        self.authorize(&opts.token, Resource::Key(key.clone()), Access::Read)?;
        self.blocking_query(opts, |w| w.kv_prefix(&key), |t| Ok(t.kv_get(&key)))
            .await
    }

    async fn kv_list(
        &self,
        opts: &QueryOptions,
        prefix: String,
    ) -> Result<Queried<Vec<KvEntry>>, RpcError> {
        self.authorize_key_list(&opts.token, &prefix)?;
        let filter = parse_filter(&opts.filter, legate_filter::rows::any())?;
        let entries = self
            .blocking_query(
                opts,
                |w| w.kv_prefix(&prefix),
                |t| {
                    let (index, entries) = t.kv_list(&prefix);
                    Ok((index, apply_filter(entries, &filter)))
                },
            )
            .await?;
        self.filter_by_acl(&opts.token, entries, |e| {
            vec![(legate_acl::Resource::Key, e.key.clone())]
        })
    }

    async fn kv_keys(
        &self,
        opts: &QueryOptions,
        prefix: String,
        separator: String,
    ) -> Result<Queried<Vec<String>>, RpcError> {
        self.authorize_key_list(&opts.token, &prefix)?;
        let keys = self
            .blocking_query(
                opts,
                |w| w.kv_prefix(&prefix),
                |t| Ok(t.kv_keys(&prefix, &separator)),
            )
            .await?;
        self.filter_by_acl(&opts.token, keys, |k| {
            vec![(legate_acl::Resource::Key, k.clone())]
        })
    }

    async fn kv_apply(&self, opts: &WriteOptions, op: KvOp) -> Result<bool, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if op.key.is_empty() && op.verb != KvVerb::DeleteTree {
            return Err(RpcError::BadRequest("Missing key name".into()));
        }
        if op.value.len() > KV_MAX_VALUE_SIZE {
            return Err(RpcError::TooLarge(format!(
                "Request body(truncated): value of {} bytes exceeds the {} byte limit (kv_max_value_size)",
                op.value.len(),
                KV_MAX_VALUE_SIZE
            )));
        }
        let target = if op.verb == KvVerb::DeleteTree {
            Resource::KeyPrefix(op.key.clone())
        } else {
            Resource::Key(op.key.clone())
        };
        self.authorize(&opts.token, target, Access::Write)?;
        match self.write(Command::Kv(op)).await? {
            (_, CommandResult::Applied(applied)) => Ok(applied),
            (_, other) => Err(RpcError::Internal(format!(
                "unexpected KV result {other:?}"
            ))),
        }
    }

    async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError> {
        self.txn_run(opts, ops).await
    }

    async fn session_create(
        &self,
        opts: &WriteOptions,
        session: Session,
    ) -> Result<String, RpcError> {
        self.session_create_endpoint(opts, session).await
    }

    async fn session_destroy(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError> {
        self.session_destroy_endpoint(opts, id).await
    }

    async fn session_renew(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<Option<Session>, RpcError> {
        self.session_renew_endpoint(opts, id).await
    }

    async fn session_info(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Vec<Session>>, RpcError> {
        self.session_info_endpoint(opts, id).await
    }

    async fn session_list(&self, opts: &QueryOptions) -> Result<Queried<Vec<Session>>, RpcError> {
        self.session_list_endpoint(opts).await
    }

    async fn session_node(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<Session>>, RpcError> {
        self.session_node_endpoint(opts, node).await
    }

    async fn config_apply(
        &self,
        opts: &WriteOptions,
        entry: ConfigEntry,
        cas: Option<u64>,
    ) -> Result<bool, RpcError> {
        self.config_apply_endpoint(opts, entry, cas).await
    }

    async fn config_get(
        &self,
        opts: &QueryOptions,
        kind: String,
        name: String,
    ) -> Result<Queried<Option<ConfigEntry>>, RpcError> {
        self.config_get_endpoint(opts, kind, name).await
    }

    async fn config_list(
        &self,
        opts: &QueryOptions,
        kind: String,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError> {
        self.config_list_endpoint(opts, kind).await
    }

    async fn config_list_all(
        &self,
        opts: &QueryOptions,
        kinds: Vec<String>,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError> {
        self.config_list_all_endpoint(opts, kinds).await
    }

    async fn config_delete(
        &self,
        opts: &WriteOptions,
        kind: String,
        name: String,
        cas: Option<u64>,
    ) -> Result<bool, RpcError> {
        self.config_delete_endpoint(opts, kind, name, cas).await
    }

    async fn discovery_chain(
        &self,
        opts: &QueryOptions,
        service: String,
        compile_datacenter: String,
        overrides: legate_types::rpc::ChainOverrides,
    ) -> Result<Queried<serde_json::Value>, RpcError> {
        self.discovery_chain_endpoint(opts, service, compile_datacenter, overrides)
            .await
    }

    async fn changes_since(
        &self,
        opts: &QueryOptions,
        watched: Vec<(Watched, u64)>,
    ) -> Result<Queried<Vec<u32>>, RpcError> {
        self.changes_since_query(opts, watched).await
    }

    async fn ca_roots(&self, opts: &QueryOptions) -> Result<Queried<IndexedCaRoots>, RpcError> {
        self.ca_roots_query(opts).await
    }

    async fn ca_config_get(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<CaConfiguration>, RpcError> {
        self.ca_config_query(opts).await
    }

    async fn ca_config_set(
        &self,
        opts: &WriteOptions,
        config: CaConfiguration,
    ) -> Result<(), RpcError> {
        self.ca_config_set_inner(opts, config).await
    }

    async fn ca_sign(
        &self,
        opts: &WriteOptions,
        request: CaSignRequest,
    ) -> Result<IssuedCert, RpcError> {
        self.ca_sign_request(opts, request).await
    }

    async fn ca_sign_intermediate(
        &self,
        opts: &WriteOptions,
        csr: String,
    ) -> Result<String, RpcError> {
        self.ca_sign_intermediate_request(opts, csr).await
    }

    async fn prepared_query_apply(
        &self,
        opts: &WriteOptions,
        op: legate_types::prepared_query::PreparedQueryOp,
        query: legate_types::prepared_query::PreparedQuery,
    ) -> Result<String, RpcError> {
        self.prepared_query_write(opts, op, query).await
    }

    async fn prepared_query_get(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Vec<legate_types::prepared_query::PreparedQuery>>, RpcError> {
        self.prepared_query_read(opts, id).await
    }

    async fn prepared_query_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<legate_types::prepared_query::PreparedQuery>>, RpcError> {
        self.prepared_query_all(opts).await
    }

    async fn prepared_query_execute(
        &self,
        opts: &QueryOptions,
        request: legate_types::prepared_query::ExecuteRequest,
    ) -> Result<Queried<legate_types::prepared_query::ExecuteResponse>, RpcError> {
        self.prepared_query_run(opts, request).await
    }

    async fn prepared_query_execute_remote(
        &self,
        opts: &QueryOptions,
        request: legate_types::prepared_query::ExecuteRemoteRequest,
    ) -> Result<Queried<legate_types::prepared_query::ExecuteResponse>, RpcError> {
        self.prepared_query_run_remote(opts, request).await
    }

    async fn prepared_query_explain(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
    ) -> Result<Queried<legate_types::prepared_query::ExplainResponse>, RpcError> {
        self.prepared_query_explain_of(opts, id_or_name).await
    }

    async fn federation_state_apply(
        &self,
        opts: &WriteOptions,
        op: legate_types::federation_state::FederationStateOp,
    ) -> Result<(), RpcError> {
        self.federation_state_write(opts, op).await
    }

    async fn federation_state_get(
        &self,
        opts: &QueryOptions,
        datacenter: String,
    ) -> Result<Queried<Option<legate_types::federation_state::FederationState>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.federation_state_read(opts, datacenter).await
    }

    async fn federation_state_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<legate_types::federation_state::FederationState>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.federation_state_all(opts).await
    }

    async fn federation_state_mesh_gateways(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<std::collections::BTreeMap<String, Vec<CheckServiceNode>>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.federation_state_gateways(opts).await
    }

    async fn acl_bootstrap(&self, opts: &WriteOptions) -> Result<acl::AclToken, RpcError> {
        self.acl_bootstrap_write(opts).await
    }

    async fn acl_token_set(
        &self,
        opts: &WriteOptions,
        token: acl::AclToken,
        create: bool,
    ) -> Result<acl::AclToken, RpcError> {
        self.acl_token_write(opts, token, create).await
    }

    async fn acl_token_get(
        &self,
        opts: &QueryOptions,
        accessor_id: String,
    ) -> Result<Queried<Option<acl::AclToken>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_token_read(opts, accessor_id).await
    }

    async fn acl_token_self(&self, opts: &QueryOptions) -> Result<acl::AclToken, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_token_of_request(opts)
    }

    async fn acl_token_list(
        &self,
        opts: &QueryOptions,
        filter: acl::AclTokenFilter,
    ) -> Result<Queried<Vec<acl::AclToken>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_token_all(opts, filter).await
    }

    async fn acl_token_delete(
        &self,
        opts: &WriteOptions,
        accessor_id: String,
    ) -> Result<(), RpcError> {
        self.acl_token_remove(opts, accessor_id).await
    }

    async fn acl_token_clone(
        &self,
        opts: &WriteOptions,
        accessor_id: String,
        description: String,
    ) -> Result<acl::AclToken, RpcError> {
        self.acl_token_copy(opts, accessor_id, description).await
    }

    async fn acl_policy_set(
        &self,
        opts: &WriteOptions,
        policy: acl::AclPolicy,
        create: bool,
    ) -> Result<acl::AclPolicy, RpcError> {
        self.acl_policy_write(opts, policy, create).await
    }

    async fn acl_policy_get(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
        by_name: bool,
    ) -> Result<Queried<Option<acl::AclPolicy>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_policy_read(opts, id_or_name, by_name).await
    }

    async fn acl_policy_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<acl::AclPolicy>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_policy_all(opts).await
    }

    async fn acl_policy_delete(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError> {
        self.acl_policy_remove(opts, id).await
    }

    async fn acl_role_set(
        &self,
        opts: &WriteOptions,
        role: acl::AclRole,
        create: bool,
    ) -> Result<acl::AclRole, RpcError> {
        self.acl_role_write(opts, role, create).await
    }

    async fn acl_role_get(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
        by_name: bool,
    ) -> Result<Queried<Option<acl::AclRole>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_role_read(opts, id_or_name, by_name).await
    }

    async fn acl_role_list(
        &self,
        opts: &QueryOptions,
        policy: String,
    ) -> Result<Queried<Vec<acl::AclRole>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_role_all(opts, policy).await
    }

    async fn acl_role_delete(&self, opts: &WriteOptions, id: String) -> Result<(), RpcError> {
        self.acl_role_remove(opts, id).await
    }

    async fn acl_auth_method_set(
        &self,
        opts: &WriteOptions,
        method: acl_auth::AclAuthMethod,
    ) -> Result<acl_auth::AclAuthMethod, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_auth_method_write(opts, method).await
    }

    async fn acl_auth_method_get(
        &self,
        opts: &QueryOptions,
        name: String,
    ) -> Result<Queried<Option<acl_auth::AclAuthMethod>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_auth_method_read(opts, name).await
    }

    async fn acl_auth_method_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<acl_auth::AclAuthMethod>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_auth_method_all(opts).await
    }

    async fn acl_auth_method_delete(
        &self,
        opts: &WriteOptions,
        name: String,
    ) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_auth_method_remove(opts, name).await
    }

    async fn acl_binding_rule_set(
        &self,
        opts: &WriteOptions,
        rule: acl_auth::AclBindingRule,
    ) -> Result<acl_auth::AclBindingRule, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_binding_rule_write(opts, rule).await
    }

    async fn acl_binding_rule_get(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Option<acl_auth::AclBindingRule>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_binding_rule_read(opts, id).await
    }

    async fn acl_binding_rule_list(
        &self,
        opts: &QueryOptions,
        auth_method: String,
    ) -> Result<Queried<Vec<acl_auth::AclBindingRule>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_binding_rule_all(opts, auth_method).await
    }

    async fn acl_binding_rule_delete(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_binding_rule_remove(opts, id).await
    }

    async fn acl_login(
        &self,
        opts: &WriteOptions,
        request: acl_auth::LoginRequest,
    ) -> Result<acl::AclToken, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_login_write(opts, request).await
    }

    async fn acl_logout(&self, opts: &WriteOptions) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_logout_write(opts).await
    }

    async fn acl_resolve(&self, opts: &QueryOptions) -> Result<acl::AclIdentity, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_identity(opts)
    }

    async fn acl_replication_status(
        &self,
        opts: &QueryOptions,
    ) -> Result<acl::AclReplicationStatus, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_replication_status_of_leader()
    }

    async fn catalog_service_dump(
        &self,
        opts: &QueryOptions,
        kind: String,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError> {
        let answer = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::Nodes, Table::Services, Table::Checks]),
                |t| Ok(t.check_service_nodes_of_kind(&kind)),
            )
            .await?;
        self.filter_by_acl(&opts.token, answer, |csn: &CheckServiceNode| {
            vec![
                (legate_acl::Resource::Service, csn.service.service.clone()),
                (legate_acl::Resource::Node, csn.node.node.clone()),
            ]
        })
    }

    async fn catalog_service_dump_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError> {
        self.service_dump_all(opts).await
    }

    async fn catalog_node_dump(
        &self,
        opts: &QueryOptions,
        node: Option<String>,
    ) -> Result<Queried<Vec<legate_types::ui::NodeInfo>>, RpcError> {
        self.node_dump_of(opts, node).await
    }

    async fn catalog_service_topology(
        &self,
        opts: &QueryOptions,
        service: String,
        kind: String,
    ) -> Result<Queried<legate_types::ui::ServiceTopology>, RpcError> {
        self.service_topology(opts, service, kind).await
    }

    async fn catalog_overview(
        &self,
        opts: &QueryOptions,
    ) -> Result<legate_types::ui::CatalogSummary, RpcError> {
        self.catalog_overview_now(opts)
    }

    async fn acl_resolve_for(
        &self,
        opts: &QueryOptions,
        datacenter: String,
    ) -> Result<acl::AclIdentity, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_identity_for(opts, &datacenter)
    }

    async fn acl_authorize(
        &self,
        opts: &QueryOptions,
        checks: Vec<acl::AclAuthorizationCheck>,
    ) -> Result<Vec<acl::AclAuthorizationCheck>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.acl_authorize_checks(opts, checks)
    }

    async fn intention_apply(
        &self,
        opts: &WriteOptions,
        op: IntentionOp,
    ) -> Result<String, RpcError> {
        self.intention_write(opts, op).await
    }

    async fn intention_list(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<Intention>>, RpcError> {
        self.intention_list_query(opts).await
    }

    async fn intention_get(
        &self,
        opts: &QueryOptions,
        lookup: IntentionLookup,
    ) -> Result<Queried<Option<Intention>>, RpcError> {
        self.intention_get_query(opts, lookup).await
    }

    async fn intention_match(
        &self,
        opts: &QueryOptions,
        by: MatchBy,
        names: Vec<String>,
    ) -> Result<Queried<Vec<(String, Vec<Intention>)>>, RpcError> {
        self.intention_match_query(opts, by, names).await
    }

    async fn intention_check(
        &self,
        opts: &QueryOptions,
        source: String,
        destination: String,
    ) -> Result<Queried<IntentionCheck>, RpcError> {
        self.intention_check_query(opts, source, destination).await
    }
}

/// What a row of a service query must be readable on: its own service and
/// node, and for a Connect query also the service whose proxies are asked
/// for (Consul answers nothing to a token that may not read it).
pub(crate) fn connect_targets(
    query: &ServiceQuery,
    mut targets: Vec<(legate_acl::Resource, String)>,
) -> Vec<(legate_acl::Resource, String)> {
    if query.connect {
        targets.push((legate_acl::Resource::Service, query.service.clone()));
    }
    targets
}
