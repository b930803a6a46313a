//! The agent's local state: the services and checks registered with this
//! agent, what anti-entropy still has to push to the catalog, sidecar
//! expansion, and persistence of API registrations in the data dir.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use legate_types::duration::format_go_duration;
use legate_types::{
    CheckDefinition, ConnectProxyConfig, HealthCheck, HealthCheckDefinition, HealthStatus,
    NodeService, ServiceDefinition,
};
use serde::{Deserialize, Serialize};

use crate::gateway_validation::{validate_gateway, GATEWAY_KINDS};
use crate::AgentError;

/// Suffix of generated sidecar ids and names.
pub const SIDECAR_SUFFIX: &str = "-sidecar-proxy";
/// Id of the node maintenance check.
pub const NODE_MAINT_CHECK: &str = "_node_maintenance";
/// Prefix of service maintenance check ids.
pub const SERVICE_MAINT_PREFIX: &str = "_service_maintenance:";

/// A service registered with this agent.
#[derive(Debug, Clone)]
pub struct LocalService {
    /// The instance as the catalog should hold it.
    pub service: NodeService,
    /// The definition it was registered with (persisted and re-registered).
    pub definition: ServiceDefinition,
    /// The token it was registered with.
    pub token: String,
    /// Whether the catalog already has this exact instance.
    pub in_sync: bool,
    /// Registered from a config file (not persisted).
    pub from_config: bool,
    /// Id of the sidecar generated from this service's definition.
    pub sidecar_id: Option<String>,
    /// Id of the parent when this is a generated sidecar.
    pub parent_id: Option<String>,
}

/// A check registered with this agent.
#[derive(Debug, Clone)]
pub struct LocalCheck {
    /// The check as the catalog should hold it (status, output, ...).
    pub check: HealthCheck,
    /// How to run it.
    pub definition: CheckDefinition,
    /// The token it was registered with.
    pub token: String,
    /// Whether the catalog already has this exact check.
    pub in_sync: bool,
    /// Registered from a config file (not persisted).
    pub from_config: bool,
    /// When the check last turned critical (for DeregisterCriticalServiceAfter).
    pub critical_since: Option<std::time::Instant>,
    /// An output change waiting to be synced (`check_update_interval`):
    /// when it goes out.
    pub deferred_until: Option<std::time::Instant>,
}

/// All local registrations.
#[derive(Debug, Default, Clone)]
pub struct LocalState {
    /// Services by id.
    pub services: BTreeMap<String, LocalService>,
    /// Checks by id.
    pub checks: BTreeMap<String, LocalCheck>,
    /// Services removed locally that the catalog may still hold.
    pub deleted_services: BTreeSet<String>,
    /// Checks removed locally that the catalog may still hold.
    pub deleted_checks: BTreeSet<String>,
    /// Whether the catalog's node row matches.
    pub node_in_sync: bool,
    /// `check_update_interval`: output changes without a status change
    /// reach the catalog within this (zero: at once).
    pub check_update_interval: std::time::Duration,
    /// Services that may be out of sync: every service whose `in_sync` is
    /// false is here (some here may be in sync or gone), so a sync of
    /// what changed looks at what changed, not at every service.
    pub dirty_services: BTreeSet<String>,
    /// The same for checks.
    pub dirty_checks: BTreeSet<String>,
    /// Checks whose output change waits (`deferred_until` is set).
    pub(crate) deferred_checks: BTreeSet<String>,
    /// Check ids by the service they belong to (`""`: the node's).
    pub(crate) checks_by_service: BTreeMap<String, BTreeSet<String>>,
    /// Bumped whenever a service that makes a proxy (a proxy or gateway
    /// kind, or a Connect-native service) is added, replaced or removed.
    pub proxy_version: u64,
}

/// Whether a service is one the proxy manager follows.
pub fn makes_a_proxy(service: &NodeService) -> bool {
    !service.kind.is_empty() || service.connect.as_ref().is_some_and(|c| c.native)
}

/// The result of a registration: which checks start and stop.
#[derive(Debug, Default)]
pub struct RegistrationDelta {
    /// Checks to (re)start.
    pub started: Vec<String>,
    /// Checks to stop.
    pub stopped: Vec<String>,
}

impl RegistrationDelta {
    /// Adds another delta's changes.
    pub fn extend(&mut self, other: RegistrationDelta) {
        self.merge(other);
    }

    fn merge(&mut self, other: RegistrationDelta) {
        self.started.extend(other.started);
        self.stopped.extend(other.stopped);
    }
}

/// What the local agent allows and uses when registering.
pub struct RegistrationPolicy {
    /// The agent's node name.
    pub node_name: String,
    /// Script checks allowed for this registration.
    pub allow_scripts: bool,
    /// Sidecar port range.
    pub sidecar_ports: (u16, u16),
    /// The agent's locality, for services that name none.
    pub locality: Option<legate_types::Locality>,
}

/// Validates a check definition and turns it into a catalog check.
pub fn build_check(
    node: &str,
    def: &CheckDefinition,
    default_id: &str,
    service: Option<&NodeService>,
    allow_scripts: bool,
) -> Result<(CheckDefinition, HealthCheck), AgentError> {
    let mut def = def.clone();
    let check_type = def.check_type().map_err(AgentError::BadRequest)?;
    if check_type == "script" && !allow_scripts {
        return Err(AgentError::BadRequest(
            "Scripts are disabled on this agent; to enable, configure 'enable_script_checks' or 'enable_local_script_checks' to true".into(),
        ));
    }
    if matches!(check_type, "docker" | "os_service" | "udp" | "h2ping") {
        return Err(AgentError::BadRequest(format!(
            "{check_type} checks are not supported by Legate yet"
        )));
    }
    if let Some(service) = service {
        def.service_id = service.id.clone();
    }
    if def.check_id.is_empty() {
        def.check_id = if default_id.is_empty() {
            def.name.clone()
        } else {
            default_id.to_string()
        };
    }
    if def.check_id.is_empty() {
        return Err(AgentError::BadRequest("Missing check name".into()));
    }
    if def.name.is_empty() {
        def.name = match service {
            Some(s) => format!("Service '{}' check", s.service),
            None => def.check_id.clone(),
        };
    }
    let status = if def.status.is_empty() {
        HealthStatus::Critical
    } else {
        HealthStatus::parse(&def.status)
            .filter(|s| *s != HealthStatus::Maintenance)
            .ok_or_else(|| {
                AgentError::BadRequest(format!("Invalid check status {:?}", def.status))
            })?
    };
    let check = HealthCheck {
        node: node.to_string(),
        check_id: def.check_id.clone(),
        name: def.name.clone(),
        status,
        notes: def.notes.clone(),
        output: String::new(),
        service_id: service.map(|s| s.id.clone()).unwrap_or_default(),
        service_name: service.map(|s| s.service.clone()).unwrap_or_default(),
        service_tags: service.map(|s| s.tags.clone()).unwrap_or_default(),
        check_type: check_type.to_string(),
        interval: def.interval.map(format_go_duration).unwrap_or_default(),
        timeout: def.timeout.map(format_go_duration).unwrap_or_default(),
        exposed_port: 0,
        definition: HealthCheckDefinition {
            http: def.http.clone(),
            tls_server_name: def.tls_server_name.clone(),
            tls_skip_verify: def.tls_skip_verify,
            header: def.header.clone(),
            method: def.method.clone(),
            body: def.body.clone(),
            tcp: def.tcp.clone(),
            grpc: def.grpc.clone(),
            grpc_use_tls: def.grpc_use_tls,
            interval: def.interval,
            timeout: def.timeout,
            deregister_critical_service_after: def.deregister_critical_service_after,
            script_args: def.script_args.clone(),
        },
        raft: Default::default(),
    };
    Ok((def, check))
}

pub(crate) fn node_service_from(def: &ServiceDefinition) -> Result<NodeService, AgentError> {
    if def.name.is_empty() {
        return Err(AgentError::BadRequest("Missing service name".into()));
    }
    let gateway = GATEWAY_KINDS.contains(&def.kind.as_str());
    if !gateway && !matches!(def.kind.as_str(), "" | "connect-proxy") {
        return Err(AgentError::BadRequest(format!(
            "Invalid service kind {:?}",
            def.kind
        )));
    }
    legate_types::meta::validate_service(&def.kind, &def.meta)
        .map_err(|e| AgentError::BadRequest(format!("Invalid Service Meta: {e}")))?;
    let id = if def.id.is_empty() {
        def.name.clone()
    } else {
        def.id.clone()
    };
    let mut connect = def.connect.clone();
    if let Some(c) = connect.as_mut() {
        c.sidecar_service = None;
        if c.is_empty() {
            connect = None;
        }
    }
    let service = NodeService {
        kind: def.kind.clone(),
        id,
        service: def.name.clone(),
        tags: def.tags.clone(),
        address: def.address.clone(),
        tagged_addresses: def.tagged_addresses.clone(),
        meta: def.meta.clone(),
        port: def.port.unwrap_or(0),
        socket_path: def.socket_path.clone(),
        weights: def.weights.unwrap_or_default(),
        enable_tag_override: def.enable_tag_override,
        proxy: def.proxy.clone().map(Box::new),
        connect,
        locality: def.locality.clone(),
        raft: Default::default(),
    };
    if gateway {
        validate_gateway(def, &service)?;
    } else if service.is_sidecar_proxy() {
        let proxy = service.proxy.as_ref();
        if proxy.is_none_or(|p| p.destination_service_name.is_empty()) {
            return Err(AgentError::BadRequest(
                "Proxy.DestinationServiceName must be set for a service of kind connect-proxy"
                    .into(),
            ));
        }
        if service.port == 0 && service.socket_path.is_empty() {
            return Err(AgentError::BadRequest(
                "Port or SocketPath must be set for a connect-proxy".into(),
            ));
        }
        check_upstreams(proxy.map(|p| p.upstreams.as_slice()).unwrap_or_default())?;
    } else if service
        .proxy
        .as_ref()
        .is_some_and(|p| !p.destination_service_name.is_empty())
    {
        return Err(AgentError::BadRequest(format!(
            "Proxy may only be set for a service of kind connect-proxy, not {:?}",
            def.kind
        )));
    }
    if let Some(sidecar) = def
        .connect
        .as_ref()
        .and_then(|c| c.sidecar_service.as_ref())
        .and_then(|s| s.proxy.as_ref())
    {
        check_upstreams(&sidecar.upstreams)?;
    }
    if def.weights.is_some_and(|w| w.passing < 1) {
        return Err(AgentError::BadRequest(
            "Passing weight must be greater than 0".into(),
        ));
    }
    Ok(service)
}

impl LocalState {
    /// Ports held by local sidecars, except the one with `except_id`.
    fn sidecar_ports_in_use(&self, except_id: &str) -> BTreeSet<u16> {
        self.services
            .values()
            .filter(|s| s.service.is_sidecar_proxy() && s.service.id != except_id)
            .map(|s| s.service.port)
            .collect()
    }

    /// Builds the sidecar definition of `parent`, as Consul documents it.
    fn expand_sidecar(
        &self,
        parent: &NodeService,
        sidecar: &ServiceDefinition,
        policy: &RegistrationPolicy,
    ) -> Result<ServiceDefinition, AgentError> {
        let mut def = sidecar.clone();
        if def
            .connect
            .as_ref()
            .is_some_and(|c| c.sidecar_service.is_some())
        {
            return Err(AgentError::BadRequest(
                "sidecar_service may not itself contain a sidecar_service".into(),
            ));
        }
        if !def.kind.is_empty() && def.kind != "connect-proxy" {
            return Err(AgentError::BadRequest(format!(
                "sidecar_service kind must be connect-proxy, not {:?}",
                def.kind
            )));
        }
        let id = format!("{}{}", parent.id, SIDECAR_SUFFIX);
        def.kind = "connect-proxy".to_string();
        def.id = id.clone();
        if def.name.is_empty() {
            def.name = format!("{}{}", parent.service, SIDECAR_SUFFIX);
        }
        if def.tags.is_empty() {
            def.tags = parent.tags.clone();
        }
        if def.meta.is_empty() {
            def.meta = parent.meta.clone();
        }
        if def.port.is_none() || def.port == Some(0) {
            let existing = self
                .services
                .get(&id)
                .map(|s| s.service.port)
                .filter(|p| *p != 0);
            let port = match existing {
                Some(p) => p,
                None => {
                    let used = self.sidecar_ports_in_use(&id);
                    (policy.sidecar_ports.0..=policy.sidecar_ports.1)
                        .find(|p| !used.contains(p))
                        .ok_or_else(|| {
                            AgentError::BadRequest(format!(
                                "No sidecar port available in the range {}..{}",
                                policy.sidecar_ports.0, policy.sidecar_ports.1
                            ))
                        })?
                }
            };
            def.port = Some(port);
        }
        let mut proxy: ConnectProxyConfig = def.proxy.clone().unwrap_or_default();
        proxy.destination_service_name = parent.service.clone();
        proxy.destination_service_id = parent.id.clone();
        if proxy.local_service_address.is_empty() {
            proxy.local_service_address = "127.0.0.1".to_string();
        }
        if proxy.local_service_port == 0 && proxy.local_service_socket_path.is_empty() {
            proxy.local_service_port = parent.port;
        }
        def.proxy = Some(proxy);
        if def.check.is_none() && def.checks.is_empty() {
            let address = if def.address.is_empty() {
                "127.0.0.1".to_string()
            } else {
                def.address.clone()
            };
            def.checks = vec![
                CheckDefinition {
                    name: crate::checks::SIDECAR_LISTENING_CHECK.into(),
                    tcp: format!("{address}:{}", def.port.unwrap_or(0)),
                    interval: Some(std::time::Duration::from_secs(10)),
                    ..Default::default()
                },
                CheckDefinition {
                    name: format!("Connect Sidecar Aliasing {}", parent.id),
                    alias_service: parent.id.clone(),
                    ..Default::default()
                },
            ];
        }
        Ok(def)
    }

    /// Registers (or replaces) a service with its checks and sidecar.
    pub fn add_service(
        &mut self,
        definition: ServiceDefinition,
        token: &str,
        from_config: bool,
        replace_existing_checks: bool,
        policy: &RegistrationPolicy,
    ) -> Result<RegistrationDelta, AgentError> {
        let mut service = node_service_from(&definition)?;
        if service.locality.is_none() {
            service.locality = policy.locality.clone();
        }
        if self
            .services
            .get(&service.id)
            .is_some_and(|s| s.parent_id.is_some())
        {
            return Err(AgentError::BadRequest(format!(
                "Service {:?} is a generated sidecar; change it through its parent's sidecar_service",
                service.id
            )));
        }
        // Build and validate everything before changing anything.
        let sidecar_def = match definition
            .connect
            .as_ref()
            .and_then(|c| c.sidecar_service.as_deref())
        {
            Some(sidecar) => Some(self.expand_sidecar(&service, sidecar, policy)?),
            None => None,
        };
        let checks = self.build_service_checks(&definition, &service, policy)?;
        let sidecar = match &sidecar_def {
            Some(def) => {
                let mut node_service = node_service_from(def)?;
                if node_service.locality.is_none() {
                    node_service.locality = policy.locality.clone();
                }
                let checks = self.build_service_checks(def, &node_service, policy)?;
                Some((def.clone(), node_service, checks))
            }
            None => None,
        };

        let mut delta = RegistrationDelta::default();
        let previous_sidecar = self
            .services
            .get(&service.id)
            .and_then(|s| s.sidecar_id.clone());
        if let Some(old) = previous_sidecar {
            if sidecar.as_ref().is_none_or(|(_, s, _)| s.id != old) {
                delta.merge(self.remove_service(&old, true));
            }
        }
        let sidecar_id = sidecar.as_ref().map(|(_, s, _)| s.id.clone());
        delta.merge(self.put_service(
            service.clone(),
            definition,
            token,
            from_config,
            checks,
            replace_existing_checks,
        ));
        if let Some(id) = &sidecar_id {
            if let Some(local) = self.services.get_mut(&service.id) {
                local.sidecar_id = Some(id.clone());
            }
        }
        if let Some((def, node_service, checks)) = sidecar {
            let id = node_service.id.clone();
            delta.merge(self.put_service(node_service, def, token, from_config, checks, true));
            if let Some(local) = self.services.get_mut(&id) {
                local.parent_id = Some(service.id.clone());
            }
        }
        Ok(delta)
    }

    fn build_service_checks(
        &self,
        definition: &ServiceDefinition,
        service: &NodeService,
        policy: &RegistrationPolicy,
    ) -> Result<Vec<(CheckDefinition, HealthCheck)>, AgentError> {
        let mut defs: Vec<CheckDefinition> = definition.check.iter().cloned().collect();
        defs.extend(definition.checks.iter().cloned());
        let many = defs.len() > 1;
        defs.iter()
            .enumerate()
            .map(|(i, def)| {
                let default_id = if many {
                    format!("service:{}:{}", service.id, i + 1)
                } else {
                    format!("service:{}", service.id)
                };
                build_check(
                    &policy.node_name,
                    def,
                    &default_id,
                    Some(service),
                    policy.allow_scripts,
                )
            })
            .collect()
    }

    fn put_service(
        &mut self,
        service: NodeService,
        definition: ServiceDefinition,
        token: &str,
        from_config: bool,
        checks: Vec<(CheckDefinition, HealthCheck)>,
        replace_existing_checks: bool,
    ) -> RegistrationDelta {
        let mut delta = RegistrationDelta::default();
        let id = service.id.clone();
        let new_ids: BTreeSet<String> = checks.iter().map(|(d, _)| d.check_id.clone()).collect();
        if replace_existing_checks {
            let stale: Vec<String> = self
                .check_ids_of(&id)
                .filter(|cid| !new_ids.contains(*cid) && !cid.starts_with(SERVICE_MAINT_PREFIX))
                .cloned()
                .collect();
            for cid in stale {
                delta.merge(self.remove_check(&cid));
            }
        }
        self.deleted_services.remove(&id);
        self.dirty_services.insert(id.clone());
        if makes_a_proxy(&service) {
            self.proxy_version += 1;
        }
        let replaced = self.services.insert(
            id.clone(),
            LocalService {
                service,
                definition,
                token: token.to_string(),
                in_sync: false,
                from_config,
                // `add_service` links the sidecar after inserting both.
                sidecar_id: None,
                parent_id: None,
            },
        );
        if replaced.is_some_and(|old| makes_a_proxy(&old.service)) {
            self.proxy_version += 1;
        }
        for (def, check) in checks {
            delta.merge(self.put_check(def, check, token, from_config));
        }
        delta
    }

    /// Adds or replaces a check, keeping the status of an existing check
    /// with the same id when the new definition sets none.
    pub fn put_check(
        &mut self,
        def: CheckDefinition,
        mut check: HealthCheck,
        token: &str,
        from_config: bool,
    ) -> RegistrationDelta {
        let id = check.check_id.clone();
        if let Some(existing) = self.checks.get(&id) {
            if def.status.is_empty() {
                check.status = existing.check.status;
                check.output = existing.check.output.clone();
            }
        }
        self.deleted_checks.remove(&id);
        self.dirty_checks.insert(id.clone());
        self.deferred_checks.remove(&id);
        self.checks_by_service
            .entry(check.service_id.clone())
            .or_default()
            .insert(id.clone());
        let critical_since = (check.status == HealthStatus::Critical).then(std::time::Instant::now);
        let replaced = self.checks.insert(
            id.clone(),
            LocalCheck {
                check,
                definition: def,
                token: token.to_string(),
                in_sync: false,
                from_config,
                critical_since,
                deferred_until: None,
            },
        );
        if let Some(old) = replaced {
            if old.check.service_id != self.checks[&id].check.service_id {
                self.unindex_check(&old.check.service_id, &id);
            }
        }
        RegistrationDelta {
            started: vec![id],
            stopped: Vec::new(),
        }
    }

    /// Removes a service, its checks, and (when `with_sidecar`) its sidecar.
    pub fn remove_service(&mut self, id: &str, with_sidecar: bool) -> RegistrationDelta {
        let mut delta = RegistrationDelta::default();
        let Some(removed) = self.services.remove(id) else {
            return delta;
        };
        self.deleted_services.insert(id.to_string());
        if makes_a_proxy(&removed.service) {
            self.proxy_version += 1;
        }
        let check_ids: Vec<String> = self.check_ids_of(id).cloned().collect();
        for cid in check_ids {
            delta.merge(self.remove_check(&cid));
        }
        if with_sidecar {
            if let Some(sidecar) = removed.sidecar_id {
                delta.merge(self.remove_service(&sidecar, false));
            }
        }
        delta
    }

    /// Removes a check.
    pub fn remove_check(&mut self, id: &str) -> RegistrationDelta {
        let mut delta = RegistrationDelta::default();
        if let Some(removed) = self.checks.remove(id) {
            self.unindex_check(&removed.check.service_id, id);
            self.deferred_checks.remove(id);
            self.deleted_checks.insert(id.to_string());
            delta.stopped.push(id.to_string());
        }
        delta
    }

    /// The ids of a service's checks (`""`: the node's own checks).
    pub fn check_ids_of<'a>(&'a self, service_id: &str) -> impl Iterator<Item = &'a String> + 'a {
        self.checks_by_service.get(service_id).into_iter().flatten()
    }

    fn unindex_check(&mut self, service_id: &str, check_id: &str) {
        if let Some(ids) = self.checks_by_service.get_mut(service_id) {
            ids.remove(check_id);
            if ids.is_empty() {
                self.checks_by_service.remove(service_id);
            }
        }
    }

    /// Sets a check's status and output; true when anything changed.
    pub fn update_check(&mut self, id: &str, status: HealthStatus, output: &str) -> bool {
        let Some(local) = self.checks.get_mut(id) else {
            return false;
        };
        if local.check.status == status && local.check.output == output {
            return false;
        }
        let interval = self.check_update_interval;
        if !interval.is_zero() && local.check.status == status {
            // Consul's deferred check update: the new output waits
            // between half and one and a half intervals.
            local.check.output = output.to_string();
            if local.deferred_until.is_none() {
                let stagger = interval.mul_f64(rand::random::<f64>());
                local.deferred_until = Some(std::time::Instant::now() + interval / 2 + stagger);
                self.deferred_checks.insert(id.to_string());
            }
            return true;
        }
        if local.deferred_until.take().is_some() {
            self.deferred_checks.remove(id);
        }
        if status == HealthStatus::Critical {
            if local.check.status != HealthStatus::Critical || local.critical_since.is_none() {
                local.critical_since = Some(std::time::Instant::now());
            }
        } else {
            local.critical_since = None;
        }
        local.check.status = status;
        local.check.output = output.to_string();
        local.in_sync = false;
        self.dirty_checks.insert(id.to_string());
        true
    }

    /// The earliest deferred output update.
    pub fn next_deferred(&self) -> Option<std::time::Instant> {
        (self.deferred_checks.iter())
            .filter_map(|id| self.checks.get(id)?.deferred_until)
            .min()
    }

    /// Marks the checks whose deferred output is due out of sync; true
    /// when there were any.
    pub fn release_deferred(&mut self, now: std::time::Instant) -> bool {
        let mut released = false;
        let checks = &mut self.checks;
        self.deferred_checks.retain(|id| {
            let Some(check) = checks.get_mut(id) else {
                return false;
            };
            if check.deferred_until.is_none_or(|at| at > now) {
                return check.deferred_until.is_some();
            }
            check.deferred_until = None;
            check.in_sync = false;
            self.dirty_checks.insert(id.clone());
            released = true;
            false
        });
        released
    }

    /// The worst status among a local service's checks; `None` when the
    /// service is not registered here.
    pub fn service_health(&self, service_id: &str) -> Option<HealthStatus> {
        self.services.get(service_id)?;
        Some(legate_types::aggregate_status(
            self.check_ids_of(service_id)
                .chain(self.check_ids_of(""))
                .filter_map(|id| self.checks.get(id))
                .map(|c| &c.check),
        ))
    }

    /// Marks everything for a full re-sync.
    pub fn mark_all_out_of_sync(&mut self) {
        self.node_in_sync = false;
        for s in self.services.values_mut() {
            s.in_sync = false;
        }
        for c in self.checks.values_mut() {
            c.in_sync = false;
        }
        self.rebuild_dirty_sets();
    }

    /// Makes the dirty sets exactly what is out of sync (after a full
    /// comparison has set every `in_sync`).
    pub fn rebuild_dirty_sets(&mut self) {
        self.dirty_services = (self.services.iter())
            .filter(|(_, s)| !s.in_sync)
            .map(|(id, _)| id.clone())
            .collect();
        self.dirty_checks = (self.checks.iter())
            .filter(|(_, c)| !c.in_sync)
            .map(|(id, _)| id.clone())
            .collect();
    }
}

// ----- persistence -----

/// What the data dir keeps of API registrations.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PersistedState {
    /// Service definitions registered through the API.
    pub services: Vec<PersistedService>,
    /// Check definitions registered through the API.
    pub checks: Vec<PersistedCheck>,
    /// Last known status of every check (TTL checks keep theirs across restarts).
    pub check_status: BTreeMap<String, (HealthStatus, String)>,
}

/// A persisted service.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PersistedService {
    /// The definition.
    pub definition: ServiceDefinition,
    /// Its token.
    pub token: String,
}

/// A persisted check.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PersistedCheck {
    /// The definition.
    pub definition: CheckDefinition,
    /// Its token.
    pub token: String,
}

impl LocalState {
    /// The persisted form of the API registrations.
    pub fn to_persisted(&self) -> PersistedState {
        PersistedState {
            services: self
                .services
                .values()
                .filter(|s| !s.from_config && s.parent_id.is_none())
                .map(|s| PersistedService {
                    definition: s.definition.clone(),
                    token: s.token.clone(),
                })
                .collect(),
            checks: self
                .checks
                .values()
                .filter(|c| {
                    !c.from_config
                        && c.check.service_id.is_empty()
                        && !c.check.check_id.starts_with('_')
                })
                .map(|c| PersistedCheck {
                    definition: c.definition.clone(),
                    token: c.token.clone(),
                })
                .collect(),
            check_status: self
                .checks
                .iter()
                .map(|(id, c)| (id.clone(), (c.check.status, c.check.output.clone())))
                .collect(),
        }
    }
}

/// Where the local state file lives.
pub fn state_path(data_dir: &Path) -> PathBuf {
    data_dir.join("agent-local-state.json")
}

/// Writes the state atomically (temp file, fsync, rename).
pub fn save(data_dir: &Path, state: &PersistedState) -> std::io::Result<()> {
    std::fs::create_dir_all(data_dir)?;
    let path = state_path(data_dir);
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)
}

/// Reads the state file, if any.
pub fn load(data_dir: &Path) -> std::io::Result<Option<PersistedState>> {
    let path = state_path(data_dir);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))
}

/// The most upstreams one proxy may have: each is a chain and its
/// targets' endpoints followed for as long as the proxy is registered.
pub const MAX_UPSTREAMS: usize = 10_000;

/// Refuses upstreams of unknown types or without a name, and more than
/// [`MAX_UPSTREAMS`].
fn check_upstreams(upstreams: &[legate_types::Upstream]) -> Result<(), AgentError> {
    if upstreams.len() > MAX_UPSTREAMS {
        return Err(AgentError::BadRequest(format!(
            "Upstreams: {} upstreams is more than the {MAX_UPSTREAMS} one proxy may have",
            upstreams.len()
        )));
    }
    for (i, u) in upstreams.iter().enumerate() {
        match u.destination_type.as_str() {
            "" | "service" | "prepared_query" => {}
            other => {
                return Err(AgentError::BadRequest(format!(
                    "Upstreams[{i}] ({}): unknown destination_type {other:?} (service or prepared_query)",
                    u.destination_name
                )))
            }
        }
        if u.destination_name.is_empty() {
            return Err(AgentError::BadRequest(format!(
                "Upstreams[{i}]: DestinationName must be set"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(range: (u16, u16)) -> RegistrationPolicy {
        RegistrationPolicy {
            node_name: "n".into(),
            allow_scripts: false,
            sidecar_ports: range,
            locality: None,
        }
    }

    fn with_sidecar(name: &str) -> ServiceDefinition {
        ServiceDefinition {
            name: name.into(),
            port: Some(8080),
            connect: Some(legate_types::ServiceConnect {
                native: false,
                sidecar_service: Some(Box::default()),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sidecar_links_ports_and_removal() {
        let mut local = LocalState::default();
        let p = policy((21000, 21001));
        local
            .add_service(with_sidecar("web"), "", false, false, &p)
            .unwrap();
        assert_eq!(
            local.services["web"].sidecar_id.as_deref(),
            Some("web-sidecar-proxy")
        );
        assert_eq!(
            local.services["web-sidecar-proxy"].parent_id.as_deref(),
            Some("web")
        );
        assert_eq!(local.services["web-sidecar-proxy"].service.port, 21000);
        // Re-registering keeps the sidecar's port.
        local
            .add_service(with_sidecar("web"), "", false, false, &p)
            .unwrap();
        assert_eq!(local.services["web-sidecar-proxy"].service.port, 21000);
        local
            .add_service(with_sidecar("db"), "", false, false, &p)
            .unwrap();
        assert_eq!(local.services["db-sidecar-proxy"].service.port, 21001);
        // The range is exhausted, and a failed registration changes nothing.
        let err = local
            .add_service(with_sidecar("api"), "", false, false, &p)
            .unwrap_err();
        assert!(err.to_string().contains("No sidecar port"), "{err}");
        assert!(!local.services.contains_key("api"));
        // Dropping the block removes the sidecar and unlinks it.
        let plain = ServiceDefinition {
            name: "web".into(),
            port: Some(8080),
            ..Default::default()
        };
        let delta = local.add_service(plain, "", false, false, &p).unwrap();
        assert!(delta
            .stopped
            .iter()
            .any(|c| c.starts_with("service:web-sidecar-proxy")));
        assert!(!local.services.contains_key("web-sidecar-proxy"));
        assert_eq!(local.services["web"].sidecar_id, None);
        assert!(local.deleted_services.contains("web-sidecar-proxy"));
        // A generated sidecar cannot be overwritten directly.
        let direct = ServiceDefinition {
            id: "db-sidecar-proxy".into(),
            name: "x".into(),
            ..Default::default()
        };
        assert!(local.add_service(direct, "", false, false, &p).is_err());
    }

    #[test]
    fn check_ids_and_status_carry_over() {
        let mut local = LocalState::default();
        let p = policy((21000, 21255));
        let def = ServiceDefinition {
            name: "api".into(),
            checks: vec![
                CheckDefinition {
                    ttl: Some(std::time::Duration::from_secs(30)),
                    ..Default::default()
                },
                CheckDefinition {
                    ttl: Some(std::time::Duration::from_secs(30)),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        local
            .add_service(def.clone(), "", false, false, &p)
            .unwrap();
        assert!(
            local.checks.contains_key("service:api:1")
                && local.checks.contains_key("service:api:2")
        );
        assert!(local.update_check("service:api:1", HealthStatus::Passing, "ok"));
        // Re-registration without a status keeps the current one.
        local.add_service(def, "", false, false, &p).unwrap();
        assert_eq!(
            local.checks["service:api:1"].check.status,
            HealthStatus::Passing
        );
        // replace-existing-checks drops checks missing from the new definition.
        let fewer = ServiceDefinition {
            name: "api".into(),
            check: Some(CheckDefinition {
                ttl: Some(std::time::Duration::from_secs(30)),
                ..Default::default()
            }),
            ..Default::default()
        };
        local.add_service(fewer, "", false, true, &p).unwrap();
        assert_eq!(local.checks.keys().collect::<Vec<_>>(), vec!["service:api"]);
    }
}

#[cfg(test)]
#[path = "local_bookkeeping_tests.rs"]
mod bookkeeping_tests;
