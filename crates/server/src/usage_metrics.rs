//! The gauges a Consul server publishes about what it holds and serves
//! (every 10 s, as Consul's usage reporter): `state.*` inventory,
//! `members.clients`/`.servers`; on the leader also `session_ttl.active`,
//! the autopilot gauges (`autopilot.healthy` 1/0, `.failure_tolerance`;
//! NaN once leadership is lost, as on Consul's followers) and the mesh
//! CA's `mesh.active-root-ca.expiry` / `.active-signing-ca.expiry`
//! (seconds left).

use std::time::{Duration, SystemTime};

use crate::leader::ClusterMember;
use crate::Server;

/// How often the inventory is published.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Config entry kinds whose count is published even at zero, so a gauge
/// does not keep an old count after the last entry of its kind goes.
const CONFIG_ENTRY_KINDS: &[&str] = &[
    "api-gateway",
    "exported-services",
    "ingress-gateway",
    "jwt-provider",
    "mesh",
    "proxy-defaults",
    "service-defaults",
    "service-intentions",
    "service-resolver",
    "service-router",
    "service-splitter",
    "terminating-gateway",
];

/// Replication tasks whose status gauge a former leader clears.
const REPLICATED: &[&str] = &[
    "acl-policies",
    "acl-roles",
    "acl-tokens",
    "config-entries",
    "federation-state",
];

/// Publishes the inventory of the store and the gossip membership;
/// answers the number of sessions, which the leader also publishes.
pub(crate) fn report_inventory(server: &Server) -> u64 {
    let inventory = server.store.read().inventory();
    let sessions = inventory.sessions;
    metrics::gauge!("state.nodes").set(inventory.nodes as f64);
    metrics::gauge!("state.services").set(inventory.services as f64);
    metrics::gauge!("state.service_instances").set(inventory.service_instances as f64);
    metrics::gauge!("state.kv_entries").set(inventory.kv_entries as f64);
    for (kind, count) in inventory.connect_instances {
        metrics::gauge!("state.connect_instances", "kind" => kind).set(count as f64);
    }
    let mut config_entries = inventory.config_entries;
    for kind in CONFIG_ENTRY_KINDS {
        config_entries.entry(kind.to_string()).or_insert(0);
    }
    for (kind, count) in config_entries {
        metrics::gauge!("state.config_entries", "kind" => kind).set(count as f64);
    }
    let members: Vec<ClusterMember> = server
        .members
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|m| m.datacenter == server.config.datacenter)
        .cloned()
        .collect();
    let servers = members.iter().filter(|m| m.server_port.is_some()).count();
    metrics::gauge!("members.servers").set(servers.max(1) as f64);
    metrics::gauge!("members.clients").set((members.len() - servers) as f64);
    sessions
}

/// The leader's own gauges: its `sessions` (from the inventory just
/// reported), autopilot, CA expiry.
pub(crate) fn report_leader(server: &Server, sessions: u64) {
    metrics::gauge!("session_ttl.active").set(sessions as f64);
    let state = server.store.read();
    let (_, roots) = state.ca_roots();
    if let Some(active) = roots.iter().find(|r| r.root.active) {
        if let Some(left) = seconds_left_pem(&active.root.root_cert) {
            metrics::gauge!("mesh.active-root-ca.expiry").set(left);
        }
        let signing = active
            .signing_cert
            .as_deref()
            .unwrap_or(&active.root.root_cert);
        if let Some(left) = seconds_left_pem(signing) {
            metrics::gauge!("mesh.active-signing-ca.expiry").set(left);
        }
    }
    drop(state);
    report_autopilot(server);
}

/// `autopilot.healthy` and `autopilot.failure_tolerance` from the view
/// `/v1/operator/autopilot/health` shows.
fn report_autopilot(server: &Server) {
    let health = server.autopilot_view();
    metrics::gauge!("autopilot.healthy").set(if health.healthy { 1.0 } else { 0.0 });
    metrics::gauge!("autopilot.failure_tolerance").set(health.failure_tolerance as f64);
}

/// What a follower shows for the leader-only gauges: NaN, as Consul's
/// followers show for autopilot, so a former leader's last values do not
/// linger.
pub(crate) fn report_not_leader() {
    for name in [
        "autopilot.healthy",
        "autopilot.failure_tolerance",
        "session_ttl.active",
        "mesh.active-root-ca.expiry",
        "mesh.active-signing-ca.expiry",
    ] {
        metrics::gauge!(name).set(f64::NAN);
    }
    for kind in REPLICATED {
        metrics::gauge!(format!("leader.replication.{kind}.status")).set(f64::NAN);
    }
}

/// Seconds until the first certificate of `pem` expires.
fn seconds_left_pem(pem: &str) -> Option<f64> {
    let info = legate_ca::info::describe(pem).ok()?;
    let not_after = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(info.not_after.unix_timestamp()).ok()?);
    Some(match not_after.duration_since(SystemTime::now()) {
        Ok(left) => left.as_secs_f64(),
        Err(past) => -past.duration().as_secs_f64(),
    })
}
