//! Anti-entropy: keeps the catalog's view of this node equal to the
//! agent's local state. A full sync (compare with the catalog, then push
//! differences) runs at start and every minute (plus jitter); a partial
//! sync (push what is marked out of sync) runs on every local change,
//! and looks only at what changed: the local state keeps the ids of what
//! may be out of sync (its dirty sets), so a registration on an agent
//! with 60,000 services costs what it costs on one with ten.
//! Failures are retried with a short backoff.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use legate_types::{DeregisterRequest, QueryOptions, RegisterRequest, RpcError, WriteOptions};
use rand::Rng;

use crate::Agent;

/// Services and checks that belong to the servers, not the agent.
const SERVER_OWNED_SERVICES: &[&str] = &["consul"];
const SERVER_OWNED_CHECKS: &[&str] = &["serfHealth"];

const FULL_SYNC_INTERVAL: Duration = Duration::from_secs(60);
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) fn spawn(agent: Arc<Agent>) {
    tokio::spawn(async move {
        let mut shutdown = agent.shutdown.subscribe();
        let mut full_needed = true;
        loop {
            let result = if full_needed {
                agent.sync_full().await
            } else {
                agent.sync_changes().await
            };
            let wait = match result {
                Ok(()) => {
                    full_needed = false;
                    let jitter =
                        rand::rng().random_range(0..=FULL_SYNC_INTERVAL.as_millis() as u64 / 4);
                    FULL_SYNC_INTERVAL + Duration::from_millis(jitter)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "anti-entropy sync failed; retrying");
                    full_needed = true;
                    RETRY_INTERVAL
                }
            };
            let deferred = agent.lock_local().next_deferred();
            let deferred = async move {
                match deferred {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = agent.sync_now.notified() => {}
                _ = deferred => {
                    agent.lock_local().release_deferred(std::time::Instant::now());
                }
                _ = tokio::time::sleep(wait) => { full_needed = true; }
                _ = shutdown.wait_for(|v| *v) => return,
            }
        }
    });
}

impl Agent {
    fn node_registration(&self) -> RegisterRequest {
        let lan = self.config.advertise();
        let address = lan.to_string();
        // The address other datacenters reach this node at
        // (`advertise_addr_wan`, else the LAN one).
        let wan = self.config.wan.advertise_addr_wan.unwrap_or(lan);
        let tagged =
            crate::tagged_addresses::tagged_addresses(lan, wan, &self.config.family_addresses);
        let mut meta = self.config.node_meta.clone();
        meta.insert("consul-network-segment".to_string(), String::new());
        meta.insert(
            "consul-version".to_string(),
            legate_types::CONSUL_API_VERSION.to_string(),
        );
        RegisterRequest {
            id: self.node_id.clone(),
            node: self.config.node_name.clone(),
            address,
            datacenter: self.config.datacenter.clone(),
            tagged_addresses: tagged,
            node_meta: meta,
            locality: self.config.locality.clone(),
            ..Default::default()
        }
    }

    /// Compares with the catalog, then pushes every difference.
    pub(crate) async fn sync_full(&self) -> Result<(), RpcError> {
        let opts = QueryOptions::default();
        let node = self.config.node_name.clone();
        let remote_services = self
            .rpc
            .catalog_node_services(&opts, node.clone())
            .await?
            .value;
        let remote_checks = self.rpc.health_node_checks(&opts, node).await?.value;
        let expected_node = self.node_registration();
        {
            let mut local = self.lock_local();
            local.node_in_sync = remote_services.as_ref().is_some_and(|ns| {
                ns.node.address == expected_node.address
                    && ns.node.tagged_addresses == expected_node.tagged_addresses
                    && ns.node.meta == expected_node.node_meta
                    && ns.node.locality == expected_node.locality
                    && ns.node.id == expected_node.id
            });
            let mut remote: BTreeMap<String, legate_types::NodeService> =
                remote_services.map(|ns| ns.services).unwrap_or_default();
            for (id, service) in remote.iter_mut() {
                if SERVER_OWNED_SERVICES.contains(&id.as_str()) {
                    continue;
                }
                match local.services.get_mut(id) {
                    Some(l) => {
                        // Compared without their Raft indexes, and without
                        // a copy of either (a full sync compares every
                        // local service).
                        service.raft = l.service.raft;
                        l.in_sync = l.service == *service;
                    }
                    None => {
                        local.deleted_services.insert(id.clone());
                    }
                }
            }
            for l in local.services.values_mut() {
                if !remote.contains_key(&l.service.id) {
                    l.in_sync = false;
                }
            }
            let remote_checks: BTreeMap<String, legate_types::HealthCheck> = remote_checks
                .into_iter()
                .map(|c| (c.check_id.clone(), c))
                .collect();
            for (id, check) in &remote_checks {
                if SERVER_OWNED_CHECKS.contains(&id.as_str()) {
                    continue;
                }
                match local.checks.get_mut(id) {
                    Some(l) => {
                        // An output change still deferred does not make
                        // the check out of sync (Consul's exception).
                        let mut remote = comparable(check);
                        if l.deferred_until.is_some() {
                            remote.output = l.check.output.clone();
                        }
                        l.in_sync = comparable(&l.check) == remote
                    }
                    None => {
                        local.deleted_checks.insert(id.clone());
                    }
                }
            }
            for l in local.checks.values_mut() {
                if !remote_checks.contains_key(&l.check.check_id) {
                    l.in_sync = false;
                }
            }
            local.rebuild_dirty_sets();
        }
        self.sync_changes().await
    }

    /// Pushes what is out of sync.
    pub(crate) async fn sync_changes(&self) -> Result<(), RpcError> {
        let node = self.config.node_name.clone();
        let (deleted_services, deleted_checks, services, checks, node_in_sync) = {
            let mut local = self.lock_local();
            let local = &mut *local;
            // What may have changed: entries found in sync (or gone) leave
            // the dirty sets here, the rest once the catalog has them.
            local
                .dirty_services
                .retain(|id| local.services.get(id).is_some_and(|s| !s.in_sync));
            local
                .dirty_checks
                .retain(|id| local.checks.get(id).is_some_and(|c| !c.in_sync));
            let services: Vec<_> = local
                .dirty_services
                .iter()
                .filter_map(|id| local.services.get(id))
                .map(|s| {
                    let checks: Vec<_> = local
                        .check_ids_of(&s.service.id)
                        .filter_map(|id| local.checks.get(id))
                        .map(|c| c.check.clone())
                        .collect();
                    (
                        s.service.clone(),
                        self.tokens.registration_token(&s.token, s.from_config),
                        checks,
                    )
                })
                .collect();
            let checks: Vec<_> = local
                .dirty_checks
                .iter()
                .filter_map(|id| local.checks.get(id))
                .map(|c| {
                    (
                        c.check.clone(),
                        self.tokens.registration_token(&c.token, c.from_config),
                    )
                })
                .collect();
            (
                local.deleted_services.iter().cloned().collect::<Vec<_>>(),
                local.deleted_checks.iter().cloned().collect::<Vec<_>>(),
                services,
                checks,
                local.node_in_sync,
            )
        };
        // Node updates and deregistrations go with the agent token.
        let agent_opts = WriteOptions {
            token: self.tokens.agent_token(),
            ..Default::default()
        };
        for id in deleted_services {
            let req = DeregisterRequest {
                node: node.clone(),
                service_id: id.clone(),
                ..Default::default()
            };
            self.rpc.catalog_deregister(&agent_opts, req).await?;
            tracing::info!(service = %id, "Deregistered service");
            self.lock_local().deleted_services.remove(&id);
        }
        for id in deleted_checks {
            let req = DeregisterRequest {
                node: node.clone(),
                check_id: id.clone(),
                ..Default::default()
            };
            self.rpc.catalog_deregister(&agent_opts, req).await?;
            tracing::info!(check = %id, "Deregistered check");
            self.lock_local().deleted_checks.remove(&id);
        }
        if !node_in_sync {
            self.rpc
                .catalog_register(&agent_opts, self.node_registration())
                .await?;
            self.lock_local().node_in_sync = true;
        }
        for (service, token, service_checks) in services {
            let mut req = self.node_registration();
            req.skip_node_update = true;
            req.service = Some(service.clone());
            req.checks = service_checks.clone();
            let opts = WriteOptions {
                token,
                ..Default::default()
            };
            self.rpc.catalog_register(&opts, req).await?;
            tracing::info!(service = %service.id, "Synced service");
            let mut local = self.lock_local();
            if let Some(l) = local.services.get_mut(&service.id) {
                if l.service.without_index() == service.without_index() {
                    l.in_sync = true;
                    local.dirty_services.remove(&service.id);
                }
            }
            for sent in &service_checks {
                if let Some(l) = local.checks.get_mut(&sent.check_id) {
                    if comparable(&l.check) == comparable(sent) {
                        l.in_sync = true;
                        local.dirty_checks.remove(&sent.check_id);
                    }
                }
            }
        }
        for (check, token) in checks {
            // Checks of a service still waiting for its own sync went with it.
            let already = self
                .lock_local()
                .checks
                .get(&check.check_id)
                .is_some_and(|c| c.in_sync);
            if already {
                continue;
            }
            if !check.service_id.is_empty()
                && !self.lock_local().services.contains_key(&check.service_id)
            {
                continue;
            }
            let mut req = self.node_registration();
            req.skip_node_update = true;
            req.check = Some(check.clone());
            let opts = WriteOptions {
                token,
                ..Default::default()
            };
            self.rpc.catalog_register(&opts, req).await?;
            tracing::info!(check = %check.check_id, "Synced check");
            let mut local = self.lock_local();
            if let Some(l) = local.checks.get_mut(&check.check_id) {
                if comparable(&l.check) == comparable(&check) {
                    l.in_sync = true;
                    local.dirty_checks.remove(&check.check_id);
                }
            }
        }
        Ok(())
    }
}

/// A check as the catalog stores it, for comparison (indexes cleared, and
/// node/service fields the catalog fills in itself).
fn comparable(check: &legate_types::HealthCheck) -> legate_types::HealthCheck {
    let mut c = check.without_index();
    c.node.clear();
    c.service_name.clear();
    c.service_tags.clear();
    c
}
