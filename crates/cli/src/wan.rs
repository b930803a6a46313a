//! Wiring a server into the WAN pool: its own gossip on `serf_wan` with
//! members named `<node>.<dc>`, `start_join_wan`/`retry_join_wan`, the
//! flood join (every server WAN-joins the servers of its datacenter the
//! WAN pool lacks, so one WAN join per datacenter is enough), and the
//! pool's view of every datacenter's servers published on a channel for
//! the router and the catalog.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_agent::config::AgentConfig;
use legate_agent::membership::{KeyringOp, KeyringStatus, MemberInfo, Membership};
use legate_gossip::{CoordinateView, Gossip, Member, Status};
use legate_types::federation::{split_wan_name, WanServer, WanStatus, WanView};
use tokio::sync::watch;

use crate::cluster::{GossipMembership, PoolKind, WAN_JOIN_PORT_TAG};

/// How often every server checks the WAN pool holds its datacenter's
/// servers (Consul's flood interval), besides on every LAN change.
const FLOOD_INTERVAL: Duration = Duration::from_secs(60);

/// How soon a flood join that found no answer is tried again: a server
/// busy starting up should not stay out of the WAN pool for a minute.
const FLOOD_RETRY: Duration = Duration::from_secs(3);

/// The WAN pool of a server that cannot be in it: every operation
/// answers why.
pub struct RefusedWan {
    reason: String,
}

#[async_trait]
impl Membership for RefusedWan {
    fn members(&self) -> Vec<MemberInfo> {
        Vec::new()
    }

    async fn join(&self, _addresses: Vec<String>) -> Result<usize, String> {
        Err(self.reason.clone())
    }

    async fn force_leave(&self, _node: &str, _prune: bool) -> bool {
        false
    }

    async fn leave(&self) {}

    fn keyring(&self) -> Option<KeyringStatus> {
        None
    }

    async fn change_keyring(&self, _op: KeyringOp, _key: &str) -> Result<(), String> {
        Err(self.reason.clone())
    }
}

/// A server's WAN pool, once started.
pub struct WanPool {
    /// Membership for the agent (`members -wan`, `join -wan`, ...).
    pub membership: Arc<dyn Membership>,
    /// The gossip member, when the pool runs.
    pub gossip: Option<(Gossip, Arc<GossipMembership>)>,
    /// What is wrong with this server's place among the datacenters.
    pub warnings: watch::Receiver<Vec<String>>,
}

/// Starts the WAN pool of a server (none when `serf_wan` is disabled),
/// publishing its view of the datacenters on `view`.
pub async fn start(
    config: &AgentConfig,
    node_id: &str,
    raft_id: u64,
    rpc_address: SocketAddr,
    view: watch::Sender<WanView>,
    relay: Option<legate_gossip::Relay>,
) -> Result<Option<WanPool>, String> {
    if config.ports.serf_wan.is_none() {
        return Ok(None);
    }
    let name = format!("{}.{}", config.node_name, config.datacenter);
    if let Err(reason) = split_wan_name(&name) {
        tracing::error!(
            "{reason}: this server stays out of the WAN pool (a node name with a dot cannot be told from its datacenter there)"
        );
        return Ok(Some(WanPool {
            membership: Arc::new(RefusedWan {
                reason: reason.clone(),
            }),
            gossip: None,
            warnings: watch::channel(vec![reason]).1,
        }));
    }
    // Other datacenters dial this server at its WAN address.
    let wan_rpc = SocketAddr::new(
        config.wan.advertise_addr_wan.unwrap_or(rpc_address.ip()),
        rpc_address.port(),
    );
    let through_gateways = relay.is_some();
    let (gossip, membership) = crate::cluster::start_gossip(
        config,
        node_id,
        raft_id,
        Some(wan_rpc),
        PoolKind::Wan,
        relay,
    )
    .await?;
    let warnings = spawn_federation_warnings(view.subscribe(), config);
    spawn_view(&gossip, view);
    // Through gateways a secondary joins the primary by the tunnel
    // (`wanfed`), never by address.
    if !through_gateways {
        crate::cluster::spawn_joins(membership.clone(), crate::cluster::JoinPlan::wan(config));
    }
    Ok(Some(WanPool {
        membership: membership.clone(),
        gossip: Some((gossip, membership)),
        warnings,
    }))
}

/// The datacenters and servers in `members` (servers that left are gone;
/// a datacenter with none left is gone too).
pub fn view_of(members: &[Member], coordinates: &CoordinateView) -> WanView {
    let mut datacenters: BTreeMap<String, Vec<WanServer>> = BTreeMap::new();
    for m in members {
        if m.tags.role != "server" || m.tags.rpc_addr.is_empty() || m.tags.dc.is_empty() {
            continue;
        }
        let status = match m.status {
            Status::Alive => WanStatus::Alive,
            Status::Failed => WanStatus::Failed,
            Status::Left => continue,
        };
        let node = m
            .name
            .strip_suffix(&format!(".{}", m.tags.dc))
            .unwrap_or(&m.name)
            .to_string();
        datacenters
            .entry(m.tags.dc.clone())
            .or_default()
            .push(WanServer {
                node,
                rpc_addr: m.tags.rpc_addr.clone(),
                status,
                coord: coordinates.others.get(&m.name).cloned(),
                features: m
                    .tags
                    .features
                    .iter()
                    .filter(|f| !f.contains('='))
                    .cloned()
                    .collect(),
            });
    }
    for servers in datacenters.values_mut() {
        servers.sort_by(|a, b| a.node.cmp(&b.node));
    }
    WanView {
        datacenters,
        own: coordinates.own.clone(),
    }
}

fn spawn_view(gossip: &Gossip, view: watch::Sender<WanView>) {
    let mut members = gossip.watch();
    let mut coordinates = gossip.coordinates();
    tokio::spawn(async move {
        loop {
            let next = view_of(
                &members.borrow_and_update(),
                &coordinates.borrow_and_update(),
            );
            view.send_if_modified(|current| {
                let changed = *current != next;
                *current = next;
                changed
            });
            tokio::select! {
                changed = members.changed() => if changed.is_err() { return },
                changed = coordinates.changed() => if changed.is_err() { return },
            }
        }
    });
}

/// What is wrong with this server's place among the datacenters the WAN
/// pool knows: a datacenter without `primary_datacenter` beside others
/// silently acts as a primary of its own (Consul's trap), and a secondary
/// whose primary has no server in the pool cannot reach it.
pub fn federation_warnings(
    view: &WanView,
    local: &str,
    primary: &str,
    primary_set: bool,
) -> Vec<String> {
    let others: Vec<&str> = view
        .datacenters
        .keys()
        .map(String::as_str)
        .filter(|dc| *dc != local)
        .collect();
    let mut warnings = Vec::new();
    if !primary_set && !others.is_empty() {
        warnings.push(format!(
            "primary_datacenter is not set: datacenter {local} acts as a primary of its own (its own CA trust domain, config entries and intentions) although the WAN pool also holds {}; set primary_datacenter to the same datacenter on every server",
            others.join(", ")
        ));
    }
    if primary_set && primary != local && !view.knows(primary) {
        warnings.push(format!(
            "primary_datacenter is {primary}, but the WAN pool holds no server of {primary}: this secondary cannot reach its primary (check retry_join_wan and that {primary} is the primary's datacenter name)"
        ));
    }
    warnings
}

/// Keeps the federation warnings current from the WAN pool's view (first
/// after a grace for the joins at start), logging each new one loudly.
pub fn spawn_federation_warnings(
    mut view: watch::Receiver<WanView>,
    config: &AgentConfig,
) -> watch::Receiver<Vec<String>> {
    let (tx, rx) = watch::channel(Vec::<String>::new());
    let local = config.datacenter.clone();
    let primary = config.primary_datacenter.clone();
    let primary_set = config.wan.primary_datacenter_set;
    let grace = config.wan.retry_interval_wan.max(Duration::from_secs(10));
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        loop {
            let now = federation_warnings(&view.borrow_and_update(), &local, &primary, primary_set);
            let fresh: Vec<String> = now
                .iter()
                .filter(|w| !tx.borrow().contains(w))
                .cloned()
                .collect();
            for warning in fresh {
                tracing::error!("{warning}");
            }
            tx.send_replace(now);
            if view.changed().await.is_err() {
                return;
            }
        }
    });
    rx
}

/// The WAN gossip addresses of this datacenter's alive servers that the
/// WAN pool does not hold at all: `(WAN name, LAN address : wan_join_port)`.
pub fn missing_from_wan(
    lan: &[Member],
    wan: &[Member],
    datacenter: &str,
) -> Vec<(String, SocketAddr)> {
    let in_wan: HashSet<&str> = wan.iter().map(|m| m.name.as_str()).collect();
    lan.iter()
        .filter(|m| m.status == Status::Alive && m.tags.role == "server" && m.tags.dc == datacenter)
        .filter_map(|m| {
            let port = m.tags.features.iter().find_map(|f| {
                f.strip_prefix(WAN_JOIN_PORT_TAG)?
                    .strip_prefix('=')?
                    .parse::<u16>()
                    .ok()
            })?;
            let wan_name = format!("{}.{}", m.name, datacenter);
            (!in_wan.contains(wan_name.as_str()))
                .then(|| (wan_name, SocketAddr::new(m.addr.ip(), port)))
        })
        .collect()
}

/// Every `FLOOD_INTERVAL` and on every LAN change, WAN-joins this
/// datacenter's servers the WAN pool lacks (Consul's flood join).
pub fn spawn_flood_join(lan: Gossip, wan: Gossip, datacenter: String) {
    tokio::spawn(async move {
        let mut lan_changes = lan.watch();
        let mut next_try = FLOOD_INTERVAL;
        loop {
            tokio::select! {
                changed = lan_changes.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(next_try) => {}
            }
            let missing = missing_from_wan(&lan.members(), &wan.members(), &datacenter);
            next_try = FLOOD_INTERVAL;
            for (name, address) in missing {
                tracing::info!(server = %name, %address, "(WAN) flood join: adding a server of this datacenter");
                if wan.join(&[address], Duration::from_secs(5)).await == 0 {
                    tracing::debug!(server = %name, %address, "(WAN) flood join: no answer yet");
                    next_try = FLOOD_RETRY;
                }
            }
        }
    });
}

/// How often a server compares its LAN keyring with the one it mirrors.
const KEYRING_MIRROR_EVERY: Duration = Duration::from_secs(1);

/// Keeps the WAN pool's keyring following the LAN's: a key installed,
/// made primary or removed in this datacenter's LAN (by `keyring`, on
/// every member) is installed, made primary or removed in the WAN pool
/// too, which spreads it to every server there.
pub fn spawn_keyring_mirror(lan: Gossip, wan: Gossip) {
    let keys_of = |g: &Gossip| -> Vec<String> {
        g.keyring()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .iter()
            .map(|k| k.encoded().to_string())
            .collect()
    };
    tokio::spawn(async move {
        let mut mirrored = keys_of(&lan);
        loop {
            tokio::time::sleep(KEYRING_MIRROR_EVERY).await;
            let now = keys_of(&lan);
            if now == mirrored {
                continue;
            }
            let in_wan = keys_of(&wan);
            let mut result = Ok(());
            for key in now.iter().filter(|k| !in_wan.contains(k)) {
                result = result.and(wan.install_key(key).await);
            }
            if let Some(primary) = now.first() {
                if in_wan.first() != Some(primary) {
                    result = result.and(wan.use_key(primary).await);
                }
            }
            for key in in_wan.iter().filter(|k| !now.contains(k)) {
                result = result.and(wan.remove_key(key).await);
            }
            match result {
                Ok(()) => mirrored = now,
                Err(e) => {
                    tracing::warn!(error = %e, "(WAN) following the LAN keyring failed; retrying")
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_gossip::Tags;

    fn member(
        name: &str,
        ip: &str,
        dc: &str,
        role: &str,
        status: Status,
        wan_port: Option<u16>,
    ) -> Member {
        Member {
            name: name.into(),
            addr: format!("{ip}:8301").parse().unwrap(),
            tags: Tags {
                role: role.into(),
                dc: dc.into(),
                rpc_addr: if role == "server" {
                    format!("{ip}:8300")
                } else {
                    String::new()
                },
                features: wan_port
                    .map(|p| vec!["si".to_string(), format!("{WAN_JOIN_PORT_TAG}={p}")])
                    .unwrap_or_default(),
                ..Default::default()
            },
            status,
        }
    }

    #[test]
    fn a_secondary_without_its_primary_says_so() {
        let members = vec![
            member("a1.dc1", "127.0.0.11", "dc1", "server", Status::Alive, None),
            member("b1.dc2", "127.0.0.21", "dc2", "server", Status::Alive, None),
        ];
        let both = view_of(&members, &CoordinateView::default());
        let alone = view_of(&members[1..], &CoordinateView::default());
        assert!(federation_warnings(&both, "dc2", "dc1", true).is_empty());
        // Unset: dc2 would be a primary of its own.
        let unset = federation_warnings(&both, "dc2", "dc2", false);
        assert_eq!(unset.len(), 1);
        assert!(
            unset[0].starts_with(
                "primary_datacenter is not set: datacenter dc2 acts as a primary of its own"
            ),
            "{unset:?}"
        );
        assert!(unset[0].contains("also holds dc1"));
        // Alone, unset is fine (one datacenter); a named primary not in the pool is not.
        assert!(federation_warnings(&alone, "dc2", "dc2", false).is_empty());
        let lost = federation_warnings(&alone, "dc2", "dc1", true);
        assert!(
            lost[0]
                .starts_with("primary_datacenter is dc1, but the WAN pool holds no server of dc1"),
            "{lost:?}"
        );
        // The primary itself needs nothing else.
        assert!(federation_warnings(
            &view_of(&members[..1], &CoordinateView::default()),
            "dc1",
            "dc1",
            true
        )
        .is_empty());
    }

    #[test]
    fn the_view_groups_servers_by_datacenter_and_drops_those_that_left() {
        let members = vec![
            member("a1.dc1", "127.0.0.11", "dc1", "server", Status::Alive, None),
            member(
                "b2.dc2",
                "127.0.0.22",
                "dc2",
                "server",
                Status::Failed,
                None,
            ),
            member("b1.dc2", "127.0.0.21", "dc2", "server", Status::Alive, None),
            member("c1.dc3", "127.0.0.31", "dc3", "server", Status::Left, None),
        ];
        let view = view_of(&members, &CoordinateView::default());
        assert_eq!(
            view.datacenters.keys().collect::<Vec<_>>(),
            vec!["dc1", "dc2"]
        );
        let dc2 = &view.datacenters["dc2"];
        assert_eq!(dc2[0].node, "b1");
        assert_eq!(dc2[1].status, WanStatus::Failed);
        assert_eq!(view.alive("dc2"), vec!["127.0.0.21:8300"]);
    }

    #[test]
    fn the_flood_join_adds_only_alive_servers_missing_from_the_wan_pool() {
        let lan = vec![
            member(
                "a1",
                "127.0.0.11",
                "dc1",
                "server",
                Status::Alive,
                Some(8302),
            ),
            member(
                "a2",
                "127.0.0.12",
                "dc1",
                "server",
                Status::Alive,
                Some(9302),
            ),
            member(
                "a3",
                "127.0.0.13",
                "dc1",
                "server",
                Status::Failed,
                Some(8302),
            ),
            member(
                "c1",
                "127.0.0.14",
                "dc1",
                "client",
                Status::Alive,
                Some(8302),
            ),
            // An older server that does not say its WAN port is skipped.
            member("a4", "127.0.0.15", "dc1", "server", Status::Alive, None),
        ];
        let wan = vec![member(
            "a1.dc1",
            "127.0.0.11",
            "dc1",
            "server",
            Status::Failed,
            None,
        )];
        let missing = missing_from_wan(&lan, &wan, "dc1");
        assert_eq!(
            missing,
            vec![("a2.dc1".to_string(), "127.0.0.12:9302".parse().unwrap())]
        );
    }
}
