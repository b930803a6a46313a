//! The Legate agent: local services and checks, check runners,
//! anti-entropy with the catalog, maintenance mode, user events, and the
//! agent configuration loader. It reaches servers only through
//! [`ServerRpc`], so it runs the same beside an in-process server (`-dev`)
//! or a remote one.
//!
//! Depends on types and hcl; never on the server, state store or HTTP.

pub mod acl;
pub mod acl_config;
pub mod acl_tokens;
mod authorize;
pub mod cache_config;
pub mod cached_reads;
pub mod central_config;
mod changes_rpc;
pub mod check_output;
pub mod check_sni;
pub mod checks;
pub mod config;
mod config_keys;
pub mod config_sources;
pub mod coordinate_sync;
pub mod dns_config;
pub mod gateway_validation;
pub mod gossip_admission;
pub mod http_config;
pub mod intention_cache;
pub mod leaf;
pub mod limits;
pub mod local;
pub mod locality_config;
pub mod log_file_config;
pub mod log_stream;
pub mod membership;
pub mod proxy_acl;
pub mod proxy_sources;
pub mod query_cache;
pub mod raft_config;
pub mod reconnect_config;
mod remote_exec;
pub mod shared_watch;
mod sync;
pub mod syslog_config;
pub mod tagged_addresses;
pub mod telemetry_config;
pub mod tls_config;
pub mod ui_config;
pub mod unix_socket_config;
pub mod wan_config;
pub mod wanfed_config;
pub mod xds_config;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use legate_types::rpc::ServerRpc;
use legate_types::{CheckDefinition, HealthCheck, HealthStatus, NodeService, ServiceDefinition};
use tokio::sync::{watch, Notify};

pub use config::AgentConfig;
use local::{
    LocalState, RegistrationDelta, RegistrationPolicy, NODE_MAINT_CHECK, SERVICE_MAINT_PREFIX,
};

/// Agent-level errors; the HTTP layer maps them to status codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// Invalid input (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// Unknown service or check (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// Failure persisting state (HTTP 500).
    #[error("{0}")]
    Internal(String),
}

pub use legate_types::event::UserEvent;

const MAX_EVENTS: usize = 256;

/// Consul's answer for a check ID the agent does not have (a 404).
fn unknown_check(id: &str) -> AgentError {
    AgentError::NotFound(format!(
        "Unknown check ID {id:?}. Ensure that the check ID is passed, not the check name."
    ))
}

/// Re-reads the agent's configuration (files and flags) for
/// `/v1/agent/reload` and SIGHUP.
pub type ConfigLoader = Box<dyn Fn() -> Result<AgentConfig, String> + Send + Sync>;

/// The agent.
pub struct Agent {
    config: AgentConfig,
    node_id: String,
    rpc: Arc<dyn ServerRpc>,
    local: Mutex<LocalState>,
    sync_now: Notify,
    runners: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    ttl_resets: Mutex<HashMap<String, Arc<Notify>>>,
    changes: watch::Sender<u64>,
    events: Mutex<VecDeque<UserEvent>>,
    events_changed: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    started: Instant,
    config_loader: Mutex<Option<ConfigLoader>>,
    leaf_certs: Arc<leaf::LeafManager>,
    intentions: Arc<intention_cache::IntentionCache>,
    acl: Arc<acl::AclResolver>,
    tokens: Arc<acl_tokens::TokenStore>,
    cached: cached_reads::CachedReads,
    query_cache: query_cache::QueryCache,
    proxycfg: std::sync::OnceLock<Arc<legate_proxycfg::Manager>>,
    traffic: Arc<legate_types::traffic::TrafficStore>,
    proxy_status: std::sync::OnceLock<Arc<dyn legate_types::proxy_status::ProxyStatusSource>>,
    membership: std::sync::OnceLock<Arc<dyn membership::Membership>>,
    wan_membership: std::sync::OnceLock<Arc<dyn membership::Membership>>,
    federation_warnings: std::sync::OnceLock<tokio::sync::watch::Receiver<Vec<String>>>,
    gateway_locator: std::sync::OnceLock<
        tokio::sync::watch::Receiver<legate_types::gateway_locator::GatewayLocator>,
    >,
}

impl Agent {
    /// Starts an agent: restores persisted registrations, registers config
    /// services and checks, and starts anti-entropy.
    pub async fn start(
        config: AgentConfig,
        node_id: String,
        rpc: Arc<dyn ServerRpc>,
    ) -> Result<Arc<Agent>, AgentError> {
        let leaf_certs =
            leaf::LeafManager::start(rpc.clone(), config.datacenter.clone(), Default::default());
        let mut token_warnings = Vec::new();
        let tokens = Arc::new(acl_tokens::TokenStore::new(
            &config.acl.tokens,
            config.acl.enable_token_persistence,
            config.data_dir.as_deref(),
            &mut token_warnings,
        ));
        let intentions = intention_cache::IntentionCache::new(
            rpc.clone(),
            tokens.clone(),
            config.datacenter.clone(),
            &config.cache,
        );
        for warning in token_warnings {
            tracing::warn!("{warning}");
        }
        let acl = acl::AclResolver::new(
            rpc.clone(),
            config.datacenter.clone(),
            config.node_name.clone(),
            config.acl.clone(),
            tokens.clone(),
        );
        let cached =
            cached_reads::CachedReads::new(rpc.clone(), tokens.clone(), acl.clone(), &config.cache);
        let query_cache = query_cache::QueryCache::new(
            rpc.clone(),
            tokens.clone(),
            acl.clone(),
            config
                .cache
                .limits("cached_queries", config.cache.idle_timeout),
        );
        let check_update_interval = config.check_output.update_interval;
        let agent = Arc::new(Agent {
            acl,
            tokens,
            cached,
            query_cache,
            proxycfg: std::sync::OnceLock::new(),
            traffic: Arc::default(),
            proxy_status: std::sync::OnceLock::new(),
            membership: std::sync::OnceLock::new(),
            wan_membership: std::sync::OnceLock::new(),
            federation_warnings: std::sync::OnceLock::new(),
            gateway_locator: std::sync::OnceLock::new(),
            intentions,
            leaf_certs,
            config,
            node_id,
            rpc,
            local: Mutex::new(LocalState {
                check_update_interval,
                ..LocalState::default()
            }),
            sync_now: Notify::new(),
            runners: Mutex::new(HashMap::new()),
            ttl_resets: Mutex::new(HashMap::new()),
            changes: watch::channel(0).0,
            events: Mutex::new(VecDeque::new()),
            events_changed: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            started: Instant::now(),
            config_loader: Mutex::new(None),
        });
        // Read before the config's services are registered: each
        // registration rewrites the file.
        let persisted = agent.load_persisted()?;
        for def in agent.config.services.clone() {
            agent
                .add_service(def, "", true, false)
                .map_err(|e| AgentError::BadRequest(format!("service from config: {e}")))?;
        }
        for def in agent.config.checks.clone() {
            agent
                .add_check(def, "", true)
                .map_err(|e| AgentError::BadRequest(format!("check from config: {e}")))?;
        }
        if let Some(state) = persisted {
            agent.restore_persisted(state);
        }
        let manager = agent.start_proxycfg();
        let _ = agent.proxycfg.set(manager);
        sync::spawn(agent.clone());
        if !agent.config.disable_coordinates {
            coordinate_sync::spawn(agent.clone());
        }
        agent.spawn_acl_follower();
        spawn_reaper(agent.clone());
        Ok(agent)
    }

    /// The API registrations saved in the data dir, if any.
    fn load_persisted(&self) -> Result<Option<local::PersistedState>, AgentError> {
        let Some(dir) = &self.config.data_dir else {
            return Ok(None);
        };
        local::load(dir).map_err(|e| AgentError::Internal(e.to_string()))
    }

    /// Registers saved API registrations again; a service whose ID a
    /// config file now defines keeps the config's definition (Consul's
    /// "service exists, not restoring").
    fn restore_persisted(self: &Arc<Self>, state: local::PersistedState) {
        for service in state.services {
            let defined_by_config = local::node_service_from(&service.definition)
                .ok()
                .is_some_and(|s| {
                    self.lock_local()
                        .services
                        .get(&s.id)
                        .is_some_and(|existing| existing.from_config)
                });
            if defined_by_config {
                continue;
            }
            if let Err(e) = self.add_service(service.definition, &service.token, false, false) {
                tracing::warn!(error = %e, "dropping a persisted service that no longer validates");
            }
        }
        for check in state.checks {
            if let Err(e) = self.add_check(check.definition, &check.token, false) {
                tracing::warn!(error = %e, "dropping a persisted check that no longer validates");
            }
        }
        {
            let mut local = self.lock_local();
            for (id, (status, output)) in state.check_status {
                local.update_check(&id, status, &output);
            }
        }
    }

    /// The agent's token resolver.
    pub fn acl(&self) -> &Arc<acl::AclResolver> {
        &self.acl
    }

    /// The tokens this agent holds.
    pub fn tokens(&self) -> &Arc<acl_tokens::TokenStore> {
        &self.tokens
    }

    /// The `?cached` reads (background-refresh kind).
    pub fn cached(&self) -> &cached_reads::CachedReads {
        &self.cached
    }

    /// The `?cached` prepared-query answers (simple kind).
    pub fn query_cache(&self) -> &query_cache::QueryCache {
        &self.query_cache
    }

    /// `PUT /v1/agent/token/<kind>`: sets one of the agent's tokens; a new
    /// `default` or `agent` token resyncs everything with it.
    pub fn set_token(&self, kind: &str, token: String) -> Result<(), AgentError> {
        let kind = self.tokens.set(kind, token).map_err(|e| {
            if e.starts_with("Token ") {
                AgentError::NotFound(e)
            } else {
                AgentError::Internal(e)
            }
        })?;
        if matches!(kind, "default" | "agent") {
            self.lock_local().mark_all_out_of_sync();
            self.sync_now.notify_one();
        }
        Ok(())
    }

    /// Follows ACL changes at the servers until the agent shuts down.
    fn spawn_acl_follower(self: &Arc<Self>) {
        if !self.config.acl.enabled {
            return;
        }
        let follower = tokio::spawn(self.acl.clone().follow_changes());
        let mut shutdown = self.shutdown.subscribe();
        tokio::spawn(async move {
            let _ = shutdown.wait_for(|s| *s).await;
            follower.abort();
        });
    }

    /// `Ok` when `token` may have `access` to `resource` `name` (always
    /// with ACLs off here); Consul's permission error when not.
    pub async fn check_acl(
        &self,
        token: &str,
        resource: legate_acl::Resource,
        name: &str,
        access: legate_acl::Access,
    ) -> Result<(), legate_types::RpcError> {
        self.acl.authorize(token, resource, name, access).await
    }

    /// The agent's configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The node id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// How long the agent has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// The server endpoints.
    pub fn rpc(&self) -> &Arc<dyn ServerRpc> {
        &self.rpc
    }

    /// Cluster membership, when gossip runs.
    pub fn membership(&self) -> Option<&Arc<dyn membership::Membership>> {
        self.membership.get()
    }

    /// Plugs in cluster membership (once; later calls are ignored).
    pub fn set_membership(&self, membership: Arc<dyn membership::Membership>) {
        let _ = self.membership.set(membership);
    }

    /// The WAN pool (servers only), when plugged in.
    pub fn wan_membership(&self) -> Option<&Arc<dyn membership::Membership>> {
        self.wan_membership.get()
    }

    /// What is wrong with this server's place among the datacenters (a
    /// secondary without `primary_datacenter`, or one whose primary the
    /// WAN pool does not hold); empty when nothing is.
    pub fn federation_warnings(&self) -> Vec<String> {
        self.federation_warnings
            .get()
            .map(|w| w.borrow().clone())
            .unwrap_or_default()
    }

    /// The gateway locator of a server federating through mesh gateways:
    /// its inputs, its choice and why.
    pub fn gateway_locator(&self) -> Option<legate_types::gateway_locator::GatewayLocator> {
        self.gateway_locator.get().map(|l| l.borrow().clone())
    }

    /// Plugs in the gateway locator (once; later calls are ignored).
    pub fn set_gateway_locator(
        &self,
        locator: tokio::sync::watch::Receiver<legate_types::gateway_locator::GatewayLocator>,
    ) {
        let _ = self.gateway_locator.set(locator);
    }

    /// Plugs in the federation warnings (once; later calls are ignored).
    pub fn set_federation_warnings(&self, warnings: tokio::sync::watch::Receiver<Vec<String>>) {
        let _ = self.federation_warnings.set(warnings);
    }

    /// Plugs in the WAN pool (once; later calls are ignored).
    pub fn set_wan_membership(&self, membership: Arc<dyn membership::Membership>) {
        let _ = self.wan_membership.set(membership);
    }

    /// The proxy configuration manager, when proxies are served.
    pub fn proxycfg(&self) -> Option<&Arc<legate_proxycfg::Manager>> {
        self.proxycfg.get()
    }

    /// What the local proxies report of their traffic per edge.
    pub fn traffic(&self) -> &Arc<legate_types::traffic::TrafficStore> {
        &self.traffic
    }

    /// Plugs in where local proxies' xDS status is read (once; later
    /// calls are ignored).
    pub fn set_proxy_status(&self, source: Arc<dyn legate_types::proxy_status::ProxyStatusSource>) {
        let _ = self.proxy_status.set(source);
    }

    /// A local proxy's xDS status, when this agent serves xDS and has
    /// served that proxy.
    pub fn proxy_status(
        &self,
        proxy_id: &str,
    ) -> Option<legate_types::proxy_status::ProxyXdsStatus> {
        self.proxy_status.get()?.status(proxy_id)
    }

    /// The intention cache (`/v1/agent/connect/authorize`).
    pub fn intentions(&self) -> &Arc<intention_cache::IntentionCache> {
        &self.intentions
    }

    /// What intentions decide when none matches: allow unless ACLs are on
    /// with a `deny` default policy.
    pub fn default_intention_allow(&self) -> bool {
        !(self.config.acl.enabled && self.config.acl.default_policy == "deny")
    }

    /// The leaf certificate manager (`/v1/agent/connect/ca/leaf/:service`).
    pub fn leaf_certs(&self) -> &Arc<leaf::LeafManager> {
        &self.leaf_certs
    }

    fn lock_local(&self) -> MutexGuard<'_, LocalState> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn policy(&self, from_config: bool) -> RegistrationPolicy {
        RegistrationPolicy {
            node_name: self.config.node_name.clone(),
            allow_scripts: self.config.enable_script_checks
                || (from_config && self.config.enable_local_script_checks),
            sidecar_ports: (
                self.config.ports.sidecar_min_port,
                self.config.ports.sidecar_max_port,
            ),
            locality: self.config.locality.clone(),
        }
    }

    /// Registers a service (with its checks and sidecar) through the API.
    pub fn register_service(
        self: &Arc<Self>,
        def: ServiceDefinition,
        token: &str,
        replace_existing_checks: bool,
    ) -> Result<(), AgentError> {
        self.add_service(def, token, false, replace_existing_checks)
    }

    fn add_service(
        self: &Arc<Self>,
        def: ServiceDefinition,
        token: &str,
        from_config: bool,
        replace_existing_checks: bool,
    ) -> Result<(), AgentError> {
        let policy = self.policy(from_config);
        let delta = self.lock_local().add_service(
            def,
            token,
            from_config,
            replace_existing_checks,
            &policy,
        )?;
        self.after_change(delta)
    }

    /// Removes a service, its checks and its sidecar.
    pub fn deregister_service(self: &Arc<Self>, id: &str) -> Result<(), AgentError> {
        let delta = {
            let mut local = self.lock_local();
            match local.services.get(id) {
                None => return Err(AgentError::NotFound(format!("Unknown service ID {id:?}. Ensure that the service ID is passed, not the service name."))),
                Some(s) if s.parent_id.is_some() => {
                    let parent = s.parent_id.clone().unwrap_or_default();
                    // Deregistering a generated sidecar directly is allowed, as in Consul;
                    // the parent forgets it.
                    if let Some(p) = local.services.get_mut(&parent) {
                        p.sidecar_id = None;
                    }
                }
                Some(_) => {}
            }
            local.remove_service(id, true)
        };
        self.after_change(delta)
    }

    /// Registers a check through the API.
    pub fn register_check(
        self: &Arc<Self>,
        def: CheckDefinition,
        token: &str,
    ) -> Result<(), AgentError> {
        self.add_check(def, token, false)
    }

    fn add_check(
        self: &Arc<Self>,
        def: CheckDefinition,
        token: &str,
        from_config: bool,
    ) -> Result<(), AgentError> {
        let policy = self.policy(from_config);
        let delta = {
            let mut local = self.lock_local();
            let service = if def.service_id.is_empty() {
                None
            } else {
                Some(
                    local
                        .services
                        .get(&def.service_id)
                        .map(|s| s.service.clone())
                        .ok_or_else(|| {
                            AgentError::NotFound(format!(
                                "ServiceID {:?} does not exist",
                                def.service_id
                            ))
                        })?,
                )
            };
            let (def, check) = local::build_check(
                &policy.node_name,
                &def,
                "",
                service.as_ref(),
                policy.allow_scripts,
            )?;
            local.put_check(def, check, token, from_config)
        };
        self.after_change(delta)
    }

    /// Removes a check.
    pub fn deregister_check(self: &Arc<Self>, id: &str) -> Result<(), AgentError> {
        let delta = {
            let mut local = self.lock_local();
            if !local.checks.contains_key(id) {
                return Err(unknown_check(id));
            }
            local.remove_check(id)
        };
        self.after_change(delta)
    }

    /// Sets a TTL check's status (`pass`, `warn`, `fail`, `update`).
    pub fn update_ttl_check(
        &self,
        id: &str,
        status: HealthStatus,
        output: &str,
    ) -> Result<(), AgentError> {
        {
            let local = self.lock_local();
            let check = local.checks.get(id).ok_or_else(|| unknown_check(id))?;
            if check.definition.ttl.is_none() {
                // Consul's 500.
                return Err(AgentError::Internal(format!(
                    "CheckID {id:?} does not have associated TTL"
                )));
            }
        }
        if let Some(reset) = self
            .ttl_resets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
        {
            reset.notify_one();
        }
        self.set_check_status(id, status, output);
        self.persist();
        Ok(())
    }

    pub(crate) fn ttl_reset_signal(&self, id: &str) -> Arc<Notify> {
        self.ttl_resets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone()
    }

    /// Records a check result and schedules a sync when it changed.
    pub(crate) fn set_check_status(&self, id: &str, status: HealthStatus, output: &str) {
        let output = self.config.check_output.apply(output);
        let changed = self.lock_local().update_check(id, status, &output);
        if changed {
            self.changed();
        }
    }

    /// Records new output without a status change.
    pub(crate) fn set_check_output(&self, id: &str, output: &str) {
        let status = self.lock_local().checks.get(id).map(|c| c.check.status);
        if let Some(status) = status {
            self.set_check_status(id, status, output);
        }
    }

    fn after_change(self: &Arc<Self>, delta: RegistrationDelta) -> Result<(), AgentError> {
        {
            let mut runners = self.runners.lock().unwrap_or_else(|e| e.into_inner());
            for id in &delta.stopped {
                if let Some(handle) = runners.remove(id) {
                    handle.abort();
                }
                self.ttl_resets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(id);
            }
            for id in &delta.started {
                if let Some(handle) = runners.remove(id) {
                    handle.abort();
                }
                let def = self
                    .lock_local()
                    .checks
                    .get(id)
                    .map(|c| c.definition.clone());
                if let Some(def) = def {
                    if let Some(handle) = checks::spawn(self.clone(), id.clone(), def) {
                        runners.insert(id.clone(), handle);
                    }
                }
            }
        }
        self.persist();
        self.changed();
        Ok(())
    }

    fn changed(&self) {
        self.changes.send_modify(|v| *v += 1);
        self.sync_now.notify_one();
    }

    /// Writes API registrations and check states to the data dir.
    fn persist(&self) {
        let Some(dir) = &self.config.data_dir else {
            return;
        };
        let state = self.lock_local().to_persisted();
        if let Err(e) = local::save(dir, &state) {
            tracing::error!(error = %e, "persisting local agent state failed");
        }
    }

    /// A receiver that changes whenever local state changes.
    pub fn local_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Local services by id, as the catalog should hold them.
    pub fn services(&self) -> BTreeMap<String, NodeService> {
        self.lock_local()
            .services
            .iter()
            .map(|(id, s)| (id.clone(), s.service.clone()))
            .collect()
    }

    /// One local service.
    pub fn service(&self, id: &str) -> Option<NodeService> {
        self.lock_local()
            .services
            .get(id)
            .map(|s| s.service.clone())
    }

    /// Local checks by id.
    pub fn checks(&self) -> BTreeMap<String, HealthCheck> {
        self.lock_local()
            .checks
            .iter()
            .map(|(id, c)| (id.clone(), c.check.clone()))
            .collect()
    }

    /// The worst status of a local service's checks (node checks included).
    pub fn local_service_health(&self, id: &str) -> Option<HealthStatus> {
        self.lock_local().service_health(id)
    }

    /// A local service with its checks (node checks included).
    pub fn service_with_checks(&self, id: &str) -> Option<(NodeService, Vec<HealthCheck>)> {
        let local = self.lock_local();
        let service = local.services.get(id)?.service.clone();
        let checks = local
            .checks
            .values()
            .filter(|c| c.check.service_id == id || c.check.service_id.is_empty())
            .map(|c| c.check.clone())
            .collect();
        Some((service, checks))
    }

    /// Puts a service in or out of maintenance mode.
    pub fn service_maintenance(
        self: &Arc<Self>,
        id: &str,
        enable: bool,
        reason: &str,
    ) -> Result<(), AgentError> {
        let check_id = format!("{SERVICE_MAINT_PREFIX}{id}");
        let delta = {
            let mut local = self.lock_local();
            let service = local
                .services
                .get(id)
                .map(|s| s.service.clone())
                .ok_or_else(|| {
                    AgentError::NotFound(format!("No service registered with ID {id:?}"))
                })?;
            if enable {
                let notes = if reason.is_empty() {
                    "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.".to_string()
                } else {
                    reason.to_string()
                };
                let check = HealthCheck {
                    node: self.config.node_name.clone(),
                    check_id: check_id.clone(),
                    name: "Service Maintenance Mode".into(),
                    status: HealthStatus::Critical,
                    notes,
                    service_id: service.id.clone(),
                    service_name: service.service.clone(),
                    service_tags: service.tags.clone(),
                    check_type: "maintenance".into(),
                    ..Default::default()
                };
                let def = CheckDefinition {
                    check_id: check_id.clone(),
                    service_id: service.id.clone(),
                    status: "critical".into(),
                    ..Default::default()
                };
                local.put_check(def, check, "", true)
            } else {
                local.remove_check(&check_id)
            }
        };
        self.after_change(delta)
    }

    /// Puts the node in or out of maintenance mode.
    pub fn node_maintenance(
        self: &Arc<Self>,
        enable: bool,
        reason: &str,
    ) -> Result<(), AgentError> {
        let delta = {
            let mut local = self.lock_local();
            if enable {
                let notes = if reason.is_empty() {
                    "Maintenance mode is enabled for this node, but no reason was provided. This is a default message.".to_string()
                } else {
                    reason.to_string()
                };
                let check = HealthCheck {
                    node: self.config.node_name.clone(),
                    check_id: NODE_MAINT_CHECK.into(),
                    name: "Node Maintenance Mode".into(),
                    status: HealthStatus::Critical,
                    notes,
                    check_type: "maintenance".into(),
                    ..Default::default()
                };
                let def = CheckDefinition {
                    check_id: NODE_MAINT_CHECK.into(),
                    status: "critical".into(),
                    ..Default::default()
                };
                local.put_check(def, check, "", true)
            } else {
                local.remove_check(NODE_MAINT_CHECK)
            }
        };
        self.after_change(delta)
    }

    /// Fires a user event in `datacenter` (empty: this one): a server
    /// there spreads it to every agent of its datacenter by gossip.
    pub async fn fire_event(
        &self,
        datacenter: &str,
        token: &str,
        mut event: UserEvent,
    ) -> Result<UserEvent, legate_types::RpcError> {
        event.id = uuid::Uuid::new_v4().to_string();
        event.version = 1;
        let opts = legate_types::QueryOptions {
            datacenter: datacenter.to_string(),
            token: token.to_string(),
            // Any server can spread it: gossip does the rest.
            consistency: legate_types::Consistency::Stale,
            ..Default::default()
        };
        self.rpc.event_fire(&opts, event.clone()).await?;
        Ok(event)
    }

    /// Takes in an event gossip delivered: kept (the last 256) when its
    /// node, service and tag filters match this agent (Consul's rules).
    /// A `_rexec` event is remote execution's, never kept.
    pub fn receive_event(self: &Arc<Self>, mut event: UserEvent) {
        // Ids are UUIDs (the list's index derives from them); anything
        // else came from a member that does not follow the protocol.
        if uuid::Uuid::parse_str(&event.id).is_err() || !self.event_matches(&event) {
            return;
        }
        if event.name == remote_exec::REMOTE_EXEC_EVENT {
            self.handle_remote_exec(event);
            return;
        }
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if events.iter().any(|e| e.id == event.id) {
            return;
        }
        if event.ltime == 0 {
            event.ltime = events.back().map(|e| e.ltime + 1).unwrap_or(1);
        }
        events.push_back(event);
        while events.len() > MAX_EVENTS {
            events.pop_front();
        }
        self.events_changed.send_modify(|v| *v += 1);
    }

    fn event_matches(&self, event: &UserEvent) -> bool {
        let matches = |pattern: &str, text: &str| {
            pattern.is_empty() || regex::Regex::new(pattern).is_ok_and(|re| re.is_match(text))
        };
        if !matches(&event.node_filter, &self.config.node_name) {
            return false;
        }
        if event.service_filter.is_empty() {
            return true;
        }
        let local = self.lock_local();
        local.services.values().any(|s| {
            matches(&event.service_filter, &s.service.service)
                && (event.tag_filter.is_empty()
                    || s.service.tags.iter().any(|t| matches(&event.tag_filter, t)))
        })
    }

    /// Recent user events, optionally by name.
    pub fn events(&self, name: &str) -> Vec<UserEvent> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|e| name.is_empty() || e.name == name)
            .cloned()
            .collect()
    }

    /// A receiver that changes whenever an event is fired.
    pub fn event_changes(&self) -> watch::Receiver<u64> {
        self.events_changed.subscribe()
    }

    /// Asks the agent to stop (`/v1/agent/leave`).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits until shutdown is requested.
    pub async fn shutdown_requested(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }

    /// Installs how to re-read the configuration on reload.
    pub fn set_config_loader(&self, loader: ConfigLoader) {
        *self.config_loader.lock().unwrap_or_else(|e| e.into_inner()) = Some(loader);
    }

    /// Reloads the services and checks defined in config files
    /// (`/v1/agent/reload`, SIGHUP): new ones are registered, changed ones
    /// replaced, removed ones deregistered; API registrations are left
    /// alone. An invalid configuration changes nothing and is reported.
    /// Other settings (ports, addresses, data dir) need a restart.
    pub fn reload(self: &Arc<Self>) -> Result<(), AgentError> {
        let loaded = {
            let loader = self.config_loader.lock().unwrap_or_else(|e| e.into_inner());
            match loader.as_ref() {
                Some(load) => Some(
                    load().map_err(|e| AgentError::BadRequest(format!("Failed reloading: {e}")))?,
                ),
                None => None,
            }
        };
        let delta = {
            let mut local = self.lock_local();
            let mut scratch = local.clone();
            let mut delta = RegistrationDelta::default();
            if let Some(config) = loaded {
                let policy = self.policy(true);
                let wanted_services: Vec<String> = config
                    .services
                    .iter()
                    .map(|s| {
                        if s.id.is_empty() {
                            s.name.clone()
                        } else {
                            s.id.clone()
                        }
                    })
                    .collect();
                let stale: Vec<String> = scratch
                    .services
                    .values()
                    .filter(|s| {
                        s.from_config
                            && s.parent_id.is_none()
                            && !wanted_services.contains(&s.service.id)
                    })
                    .map(|s| s.service.id.clone())
                    .collect();
                for id in stale {
                    delta.extend(scratch.remove_service(&id, true));
                }
                for def in config.services {
                    delta.extend(scratch.add_service(def, "", true, true, &policy).map_err(
                        |e| AgentError::BadRequest(format!("Failed reloading: service: {e}")),
                    )?);
                }
                let mut wanted_checks = Vec::new();
                for def in config.checks {
                    let (def, check) =
                        local::build_check(&policy.node_name, &def, "", None, policy.allow_scripts)
                            .map_err(|e| {
                                AgentError::BadRequest(format!("Failed reloading: check: {e}"))
                            })?;
                    wanted_checks.push(def.check_id.clone());
                    delta.extend(scratch.put_check(def, check, "", true));
                }
                let stale: Vec<String> = scratch
                    .checks
                    .values()
                    .filter(|c| {
                        c.from_config
                            && c.check.service_id.is_empty()
                            && !c.check.check_id.starts_with('_')
                            && !wanted_checks.contains(&c.check.check_id)
                    })
                    .map(|c| c.check.check_id.clone())
                    .collect();
                for id in stale {
                    delta.extend(scratch.remove_check(&id));
                }
            }
            scratch.mark_all_out_of_sync();
            *local = scratch;
            delta
        };
        self.after_change(delta)
    }

    /// Stops check runners.
    pub fn stop(&self) {
        self.shutdown.send_replace(true);
        self.leaf_certs.stop();
        self.intentions.stop();
        for (_, handle) in self
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            handle.abort();
        }
    }
}

/// Removes services whose check has been critical for longer than its
/// `DeregisterCriticalServiceAfter`.
fn spawn_reaper(agent: Arc<Agent>) {
    tokio::spawn(async move {
        let mut shutdown = agent.shutdown.subscribe();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.wait_for(|v| *v) => return,
            }
            let doomed: Vec<String> = {
                let local = agent.lock_local();
                local
                    .checks
                    .values()
                    .filter(|c| !c.check.service_id.is_empty())
                    .filter(|c| {
                        match (
                            c.definition.deregister_critical_service_after,
                            c.critical_since,
                        ) {
                            (Some(after), Some(since)) => {
                                c.check.status == HealthStatus::Critical && since.elapsed() >= after
                            }
                            _ => false,
                        }
                    })
                    .map(|c| c.check.service_id.clone())
                    .collect()
            };
            for id in doomed {
                tracing::info!(service = %id, "removing service: critical for longer than DeregisterCriticalServiceAfter");
                let _ = agent.deregister_service(&id);
            }
        }
    });
}
