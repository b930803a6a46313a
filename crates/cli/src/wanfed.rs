//! WAN federation through mesh gateways in a server: the gateway locator
//! computed from its inputs and published on a channel (the transports
//! read it; nothing calls back), the WAN gossip tunnel between gossip and
//! the server port, a secondary's join through the primary's gateways,
//! and the leader's probe of its path to the primary.
//!
//! Each input has one task that owns it and writes it into the inputs
//! channel; one task turns the inputs into the locator:
//! - `primary_gateways`, looked up again every `primary_gateways_interval`;
//! - the federation states this server holds (a blocking read of its own
//!   store, so stored states count at once after a restart: #9342);
//! - leadership;
//! - on a secondary's leader, a probe every [`PROBE_INTERVAL`] of the path
//!   to the primary through this datacenter's gateways.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use legate_agent::config::AgentConfig;
use legate_gossip::{Gossip, Relay, Status};
use legate_rpc::tls::ClientTls;
use legate_rpc::tunnel::{GossipTunnel, Peer};
use legate_rpc::{Leadership, Pool, RemoteRpc, Route};
use legate_server::Server;
use legate_types::gateway_locator::{GatewayLocator, LocatorInputs};
use legate_types::rpc::ServerRpc;
use legate_types::{Consistency, QueryOptions};
use tokio::sync::watch;

/// How often a secondary's leader probes its path to the primary.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// How long the tunnel waits for a gateway and a server's hello.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// A server's federation through mesh gateways, before its server runs.
pub struct Federation {
    /// The locator, as last computed.
    pub locator: watch::Receiver<GatewayLocator>,
    /// The WAN gossip tunnel (route the server port's WAN gossip to it).
    pub tunnel: GossipTunnel,
    /// The gossip side of the tunnel, for the WAN pool.
    pub relay: std::sync::Mutex<Option<Relay>>,
    inputs: watch::Sender<LocatorInputs>,
}

/// Sets up federation through mesh gateways for a server (`None` when it
/// is not enabled).
pub fn prepare(
    config: &AgentConfig,
    tls: Option<Arc<ClientTls>>,
) -> Result<Option<Federation>, String> {
    if !config.mesh_federation.enabled || !config.server || config.dev {
        return Ok(None);
    }
    let tls = tls
        .ok_or("cannot dial via a mesh gateway when outgoing TLS is disabled (verify_outgoing)")?;
    let inputs = LocatorInputs {
        datacenter: config.datacenter.clone(),
        primary_datacenter: config.primary_datacenter.clone(),
        ..Default::default()
    };
    let (locator_tx, locator) = watch::channel(GatewayLocator::compute(&inputs));
    let (inputs, inputs_rx) = watch::channel(inputs);
    tokio::spawn(publish(inputs_rx, locator_tx));
    let me = Peer {
        addr: SocketAddr::new(
            config.wan.advertise_addr_wan.unwrap_or(config.advertise()),
            config.ports.serf_wan.unwrap_or(8302),
        ),
        name: format!("{}.{}", config.node_name, config.datacenter),
    };
    let (tunnel, inbound) = GossipTunnel::new(me, tls, locator.clone(), DIAL_TIMEOUT);
    let (outbound, to_send) = tokio::sync::mpsc::channel(4096);
    tokio::spawn(tunnel.clone().run(to_send));
    Ok(Some(Federation {
        locator,
        tunnel,
        relay: std::sync::Mutex::new(Some(Relay {
            datacenter: config.datacenter.clone(),
            outbound,
            inbound,
        })),
        inputs,
    }))
}

impl Federation {
    /// The gossip side of the tunnel (once).
    pub fn take_relay(&self) -> Option<Relay> {
        self.relay.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Starts the tasks that own the locator's inputs, and a secondary's
    /// join through the primary's gateways.
    pub fn run(&self, config: &AgentConfig, server: Arc<Server>, pool: Arc<Pool>, wan: Gossip) {
        let interval = config.mesh_federation.primary_gateways_interval;
        tokio::spawn(resolve_primary_gateways(
            config.mesh_federation.primary_gateways.clone(),
            interval,
            self.inputs.clone(),
        ));
        tokio::spawn(follow_federation_states(
            server.clone(),
            self.inputs.clone(),
        ));
        tokio::spawn(follow_leadership(server.clone(), self.inputs.clone()));
        let primary = config.primary_datacenter.clone();
        if config.datacenter != primary {
            tokio::spawn(probe_primary_path(
                server,
                pool,
                self.locator.clone(),
                self.inputs.clone(),
            ));
            tokio::spawn(join_primary(
                self.tunnel.clone(),
                wan,
                primary,
                self.locator.clone(),
                interval.min(Duration::from_secs(5)),
            ));
        }
    }
}

/// Turns every change of the inputs into the locator, logging a changed
/// choice and keeping its gauges.
async fn publish(
    mut inputs: watch::Receiver<LocatorInputs>,
    locator: watch::Sender<GatewayLocator>,
) {
    loop {
        let computed = GatewayLocator::compute(&inputs.borrow_and_update());
        metrics::gauge!("wanfed.primary_gateways").set(computed.primary_gateways.len() as f64);
        metrics::gauge!("wanfed.local_gateways").set(computed.local_gateways.len() as f64);
        metrics::gauge!("wanfed.primary_through_local")
            .set(f64::from(u8::from(computed.primary_through_local)));
        metrics::gauge!("wanfed.local_path_failures").set(f64::from(computed.local_path_failures));
        locator.send_if_modified(|current| {
            if *current == computed {
                return false;
            }
            if current.reason != computed.reason
                || current.primary_gateways != computed.primary_gateways
                || current.local_gateways != computed.local_gateways
            {
                tracing::info!(
                    primary_gateways = ?computed.primary_gateways,
                    local_gateways = ?computed.local_gateways,
                    reason = %computed.reason,
                    "WAN federation: gateway locator"
                );
            }
            *current = computed;
            true
        });
        if inputs.changed().await.is_err() {
            return;
        }
    }
}

/// Looks `primary_gateways` up now and every `interval` (names may move).
async fn resolve_primary_gateways(
    configured: Vec<String>,
    interval: Duration,
    inputs: watch::Sender<LocatorInputs>,
) {
    if configured.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // An entry whose lookup fails keeps its last good addresses: a DNS
    // outage must not strand a secondary (#7339's lesson).
    let mut last_good: std::collections::HashMap<&str, Vec<String>> = Default::default();
    loop {
        tick.tick().await;
        let mut resolved = Vec::new();
        for entry in &configured {
            match tokio::net::lookup_host(entry.as_str()).await {
                Ok(found) => {
                    let found: Vec<String> = found.map(|a| a.to_string()).collect();
                    last_good.insert(entry, found);
                }
                Err(e) => {
                    tracing::warn!(gateway = %entry, error = %e, "WAN federation: a primary gateway could not be looked up; keeping its last addresses")
                }
            }
            resolved.extend(last_good.get(entry.as_str()).cloned().unwrap_or_default());
        }
        resolved.sort();
        resolved.dedup();
        inputs.send_if_modified(|i| {
            let changed = i.configured_primary != resolved;
            i.configured_primary = resolved;
            changed
        });
    }
}

/// Follows the federation states in this server's own store.
async fn follow_federation_states(server: Arc<Server>, inputs: watch::Sender<LocatorInputs>) {
    let mut index = 0;
    loop {
        let opts = QueryOptions {
            consistency: Consistency::Stale,
            min_index: index,
            max_wait: Some(Duration::from_secs(300)),
            ..Default::default()
        };
        match server.federation_states_held(&opts).await {
            Ok(answer) => {
                index = answer.meta.index;
                inputs.send_if_modified(|i| {
                    let changed = i.states != answer.value;
                    i.states = answer.value;
                    changed
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "WAN federation: reading federation states failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Follows this server's leadership.
async fn follow_leadership(server: Arc<Server>, inputs: watch::Sender<LocatorInputs>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let leader = server.is_leader();
        inputs.send_if_modified(|i| {
            let changed = i.leader != leader;
            i.leader = leader;
            changed
        });
    }
}

/// On a secondary's leader: every [`PROBE_INTERVAL`], asks a server of
/// the primary for its leader through one of this datacenter's gateways;
/// failures in a row are the locator's `local_path_failures`.
async fn probe_primary_path(
    server: Arc<Server>,
    pool: Arc<Pool>,
    locator: watch::Receiver<GatewayLocator>,
    inputs: watch::Sender<LocatorInputs>,
) {
    let mut turn = 0usize;
    loop {
        tokio::time::sleep(PROBE_INTERVAL).await;
        let (gateways, primary) = {
            let l = locator.borrow();
            (l.local_gateways.clone(), l.primary_datacenter.clone())
        };
        if !server.is_leader() || gateways.is_empty() {
            continue;
        }
        let gateway = gateways[turn % gateways.len()].clone();
        turn = turn.wrapping_add(1);
        let route = Route {
            server: format!("server.{primary}"),
            datacenter: primary,
            node: None,
            gateway: Some(gateway.clone()),
        };
        let remote = RemoteRpc::routed(&route, pool.clone());
        let ok = matches!(
            tokio::time::timeout(DIAL_TIMEOUT * 2, remote.status_leader()).await,
            Ok(Ok(_))
        );
        metrics::counter!("wanfed.path_probes", "result" => if ok { "ok" } else { "failed" })
            .increment(1);
        if !ok {
            tracing::warn!(%gateway, "WAN federation: the path to the primary through this datacenter's gateway failed");
        }
        inputs.send_if_modified(|i| {
            let before = i.local_path_failures;
            i.local_path_failures = if ok { 0 } else { before.saturating_add(1) };
            before != i.local_path_failures
        });
    }
}

/// A secondary's join: while its WAN pool has no live server of the
/// primary, reaches any of them through the gateways the locator names
/// and joins it; flood joins and gossip do the rest.
async fn join_primary(
    tunnel: GossipTunnel,
    wan: Gossip,
    primary: String,
    locator: watch::Receiver<GatewayLocator>,
    retry: Duration,
) {
    let mut reported = String::new();
    loop {
        let joined = wan
            .members()
            .iter()
            .any(|m| m.tags.dc == primary && m.status == Status::Alive);
        if !joined {
            let waiting = if locator.borrow().candidates(&primary).is_empty() {
                Err(format!(
                    "waiting for a gateway of {primary} (primary_gateways, or the federation states)"
                ))
            } else {
                match tunnel.discover(&primary).await {
                    Ok(peer) => {
                        let reached = wan
                            .join_relayed(
                                &[(peer.addr, peer.name.clone())],
                                Duration::from_secs(10),
                            )
                            .await;
                        if reached > 0 {
                            tracing::info!(server = %peer.name, "WAN federation: joined the primary datacenter through its gateways");
                            Ok(())
                        } else {
                            Err(format!(
                                "{} answered through the gateways but did not join",
                                peer.name
                            ))
                        }
                    }
                    Err(e) => Err(format!(
                        "cannot reach a server of {primary} through its gateways yet: {e}"
                    )),
                }
            };
            match waiting {
                Ok(()) => reported.clear(),
                Err(why) if why != reported => {
                    tracing::warn!("WAN federation: {why}");
                    reported = why;
                }
                Err(_) => {}
            }
        }
        tokio::time::sleep(retry).await;
    }
}
