//! Wiring a server or client agent into its cluster: LAN gossip (joins,
//! retries, membership for the agent), the server port, and Raft
//! bootstrapping with `-bootstrap-expect`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_agent::config::AgentConfig;
use legate_agent::membership::{KeyringOp, KeyringStatus, MemberInfo, MemberStatus, Membership};
use legate_gossip::{Gossip, GossipConfig, Key, Keyring, Status, Tags, Timing};
use legate_server::Server;

/// The features this server advertises in its gossip tags (the flags the
/// intentions upgrade logic reads): this build's, minus any masked with
/// `LEGATE_MASKED_FEATURES` (a comma list; for rehearsing an upgrade from
/// an older version).
pub fn masked_features() -> Vec<String> {
    env_list("LEGATE_MASKED_FEATURES")
}

/// The config entry kinds this server claims not to understand
/// (`LEGATE_MASKED_KINDS`, a comma list; for rehearsing an older
/// secondary): its leader does not ask the primary for them.
pub fn masked_kinds() -> Vec<String> {
    env_list("LEGATE_MASKED_KINDS")
}

/// How often the primary prunes the federation states of vanished
/// datacenters: Consul's hour, or `LEGATE_TEST_FEDERATION_STATE_PRUNE`
/// (a Go duration; tests shorten it).
pub fn federation_state_prune_interval() -> Duration {
    test_duration("LEGATE_TEST_FEDERATION_STATE_PRUNE")
        .unwrap_or(legate_server::FEDERATION_STATE_PRUNE_INTERVAL)
}

/// A test-only duration from the environment (a Go duration; unset, zero
/// or malformed: `None`). `LEGATE_TEST_INTERMEDIATE_CERT_TTL` is the
/// lifetime of the intermediates a primary signs.
pub fn test_duration(name: &str) -> Option<Duration> {
    std::env::var(name)
        .ok()
        .and_then(|v| legate_types::duration::parse_go_duration(&v).ok())
        .filter(|d| !d.is_zero())
}

fn env_list(name: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect()
}

/// Resolves `host[:port]` to a gossip address (port 8301 by default).
fn gossip_address(text: &str, default_port: u16) -> Result<SocketAddr, String> {
    let with_port = if text.parse::<SocketAddr>().is_ok()
        || text
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok())
    {
        text.to_string()
    } else if text.contains(':') && !text.starts_with('[') {
        format!("[{text}]:{default_port}")
    } else {
        format!("{text}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {text:?}: {e}"))?
        .find(|a| a.is_ipv4())
        .or_else(|| with_port.to_socket_addrs().ok()?.next())
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// Membership for the agent, over gossip.
pub struct GossipMembership {
    gossip: Gossip,
    default_port: u16,
}

#[async_trait]
impl Membership for GossipMembership {
    fn members(&self) -> Vec<MemberInfo> {
        self.gossip
            .members()
            .into_iter()
            .map(|m| {
                let mut tags = BTreeMap::new();
                tags.insert(
                    "role".to_string(),
                    if m.tags.role == "server" {
                        "consul"
                    } else {
                        "node"
                    }
                    .to_string(),
                );
                tags.insert("dc".into(), m.tags.dc.clone());
                tags.insert("id".into(), m.tags.node_id.clone());
                tags.insert("build".into(), m.tags.build.clone());
                tags.insert("vsn".into(), "2".into());
                tags.insert("vsn_min".into(), "2".into());
                tags.insert("vsn_max".into(), "3".into());
                if let Some((_, port)) = m.tags.rpc_addr.rsplit_once(':') {
                    tags.insert("port".into(), port.to_string());
                }
                for f in &m.tags.features {
                    // Only the tags Legate defines this way; a member
                    // cannot override `role`, `dc` or `port` through it.
                    match f.split_once('=') {
                        Some((WAN_JOIN_PORT_TAG, value)) => {
                            tags.insert(WAN_JOIN_PORT_TAG.to_string(), value.to_string());
                        }
                        Some(_) => {}
                        None => {
                            tags.insert(format!("ft_{f}"), "1".into());
                        }
                    }
                }
                MemberInfo {
                    name: m.name,
                    addr: m.addr.ip().to_string(),
                    port: m.addr.port(),
                    tags,
                    status: match m.status {
                        Status::Alive => MemberStatus::Alive,
                        Status::Failed => MemberStatus::Failed,
                        Status::Left => MemberStatus::Left,
                    },
                }
            })
            .collect()
    }

    async fn join(&self, addresses: Vec<String>) -> Result<usize, String> {
        let resolved: Vec<SocketAddr> = addresses
            .iter()
            .map(|a| gossip_address(a, self.default_port))
            .collect::<Result<_, _>>()?;
        Ok(self.gossip.join(&resolved, Duration::from_secs(5)).await)
    }

    async fn force_leave(&self, node: &str, prune: bool) -> bool {
        if prune {
            self.gossip.prune(node).await
        } else {
            self.gossip.force_leave(node).await
        }
    }

    async fn leave(&self) {
        self.gossip.leave().await
    }

    fn keyring(&self) -> Option<KeyringStatus> {
        let keyring = self.gossip.keyring();
        let keys: Vec<(String, String)> = {
            let keyring = keyring.lock().unwrap_or_else(|e| e.into_inner());
            if !keyring.is_enabled() {
                return None;
            }
            keyring
                .keys()
                .iter()
                .map(|k| (k.encoded().to_string(), k.fingerprint()))
                .collect()
        };
        let alive: Vec<_> = self
            .gossip
            .members()
            .into_iter()
            .filter(|m| m.status == Status::Alive)
            .collect();
        Some(KeyringStatus {
            keys: keys
                .into_iter()
                .map(|(key, fingerprint)| {
                    let holders = alive
                        .iter()
                        .filter(|m| m.tags.keys.contains(&fingerprint))
                        .count();
                    (key, holders)
                })
                .collect(),
            num_nodes: alive.len(),
        })
    }

    fn coordinate(&self) -> Option<legate_types::coordinate::Coordinate> {
        self.gossip.coordinates().borrow().own.clone()
    }

    async fn change_keyring(&self, op: KeyringOp, key: &str) -> Result<(), String> {
        match op {
            KeyringOp::Install => self.gossip.install_key(key).await,
            KeyringOp::Use => self.gossip.use_key(key).await,
            KeyringOp::Remove => self.gossip.remove_key(key).await,
        }
    }
}

pub use legate_gossip::Pool as PoolKind;

/// The gossip timing for `settings` (memberlist's knobs): a suspect fails
/// after `suspicion_mult` probe intervals, failed members are asked back
/// every three, and whole states are swapped every 30 s (60 s on the WAN).
fn timing(
    settings: legate_agent::wan_config::GossipTiming,
    kind: PoolKind,
    reconnect: &legate_agent::reconnect_config::ReconnectTimeouts,
) -> Timing {
    Timing {
        probe_period: settings.probe_interval,
        probe_rtt: settings.probe_timeout,
        suspect_to_down_after: settings.probe_interval * settings.suspicion_mult,
        reconnect_interval: settings.probe_interval * 3,
        push_pull_interval: Duration::from_secs(match kind {
            PoolKind::Lan => 30,
            PoolKind::Wan => 60,
        }),
        reconnect_timeout: match kind {
            PoolKind::Lan => reconnect.lan,
            PoolKind::Wan => reconnect.wan,
        },
        tombstone_timeout: Duration::from_secs(24 * 3600),
    }
}

/// The tag a LAN member carries with its WAN gossip port (Consul's
/// `wan_join_port`), in the features list, which older members carry and
/// ignore: `key=value` entries there are tags, not feature flags.
pub const WAN_JOIN_PORT_TAG: &str = "wan_join_port";

/// Starts gossip in pool `kind` for this agent.
pub async fn start_gossip(
    config: &AgentConfig,
    node_id: &str,
    raft_id: u64,
    server_rpc: Option<SocketAddr>,
    kind: PoolKind,
    relay: Option<legate_gossip::Relay>,
) -> Result<(Gossip, Arc<GossipMembership>), String> {
    let (port, bind_ip, advertise_ip, name, settings, file_suffix) = match kind {
        PoolKind::Lan => (
            config.ports.serf_lan.unwrap_or(8301),
            config.serf_lan_bind.unwrap_or(config.bind_addr),
            config.advertise(),
            config.node_name.clone(),
            config.wan.gossip_lan,
            "",
        ),
        PoolKind::Wan => (
            config.ports.serf_wan.unwrap_or(8302),
            config.serf_wan_bind.unwrap_or(config.bind_addr),
            config.wan.advertise_addr_wan.unwrap_or(config.advertise()),
            format!("{}.{}", config.node_name, config.datacenter),
            config.wan.gossip_wan,
            "-wan",
        ),
    };
    let bind = SocketAddr::new(bind_ip, port);
    let advertise = SocketAddr::new(advertise_ip, port);
    let serf_dir = match &config.data_dir {
        Some(dir) => {
            let serf = dir.join("serf");
            std::fs::create_dir_all(&serf)
                .map_err(|e| format!("creating {}: {e}", serf.display()))?;
            Some(serf)
        }
        None => None,
    };
    let bump_file = serf_dir
        .as_ref()
        .map(|d| d.join(format!("incarnation{file_suffix}")));
    // The keyring kept in the data dir (changed by `keyring` since) wins
    // over `encrypt`, as Consul's `serf/local.keyring` (LAN) and
    // `serf/remote.keyring` (WAN) do.
    // `disable_keyring_file`: keys live in memory only; the next start
    // has `encrypt` alone, as Consul's.
    let keyring_file = serf_dir
        .as_ref()
        .filter(|_| !config.disable_keyring_file)
        .map(|d| {
            d.join(match kind {
                PoolKind::Lan => "local.keyring",
                PoolKind::Wan => "remote.keyring",
            })
        });
    let saved = match &keyring_file {
        Some(file) if file.exists() => Some(
            legate_gossip::load_keyring(file)
                .map_err(|e| format!("loading {}: {e}", file.display()))?,
        ),
        _ => None,
    };
    let keyring = match (saved, &config.encrypt) {
        (Some(saved), encrypt) => {
            if encrypt.is_some() {
                tracing::warn!(
                    pool = ?kind,
                    "the keyring in the data dir is used; the encrypt setting is ignored"
                );
            }
            saved
        }
        (None, Some(key)) => {
            Keyring::new(vec![Key::parse(key).map_err(|e| format!("encrypt: {e}"))?])
        }
        (None, None) => Keyring::default(),
    }
    .with_verification(
        config.gossip_admission.verify_incoming,
        config.gossip_admission.verify_outgoing,
    );
    let mut features: Vec<String> = legate_server::features::advertised(&masked_features())
        .into_iter()
        .collect();
    if let (PoolKind::Lan, true, Some(wan_port)) = (kind, config.server, config.ports.serf_wan) {
        features.push(format!("{WAN_JOIN_PORT_TAG}={wan_port}"));
    }
    if let (PoolKind::Lan, Some(own)) = (kind, config.reconnect.advertised) {
        features.push(format!(
            "{}={}",
            legate_gossip::RECONNECT_TIMEOUT_TAG,
            legate_types::duration::format_go_duration(own)
        ));
    }
    let gossip_config = GossipConfig {
        bind,
        advertise: Some(advertise),
        name,
        tags: Tags {
            role: if config.server { "server" } else { "client" }.into(),
            dc: config.datacenter.clone(),
            rpc_addr: server_rpc.map(|a| a.to_string()).unwrap_or_default(),
            raft_id,
            build: legate_types::LEGATE_VERSION.to_string(),
            features,
            node_id: node_id.to_string(),
            leaving: false,
            keys: Vec::new(),
        },
        bump_file,
        keyring_file,
        keyring,
        timing: timing(settings, kind, &config.reconnect),
        pool: kind,
        allowed_sources: match kind {
            PoolKind::Lan => config.gossip_admission.lan_allowed.clone(),
            PoolKind::Wan => config.gossip_admission.wan_allowed.clone(),
        },
    };
    let started = match relay {
        Some(relay) => Gossip::start_relayed(gossip_config, relay).await,
        None => Gossip::start(gossip_config).await,
    };
    let gossip = started.map_err(|e| format!("Error starting gossip on {bind}: {e}"))?;
    tracing::info!(address = %bind, pool = ?kind, "gossip listening");
    let membership = Arc::new(GossipMembership {
        gossip: gossip.clone(),
        default_port: port,
    });
    Ok((gossip, membership))
}

/// The joins of one pool: addresses tried once at start, addresses
/// retried until one answers, how often, and how many times (0: forever).
pub struct JoinPlan {
    /// `start_join` / `start_join_wan`.
    pub start: Vec<String>,
    /// `retry_join` / `retry_join_wan`.
    pub retry: Vec<String>,
    /// `retry_interval` / `retry_interval_wan`.
    pub interval: Duration,
    /// `retry_max` / `retry_max_wan` (0: forever).
    pub max_attempts: u32,
    /// The pool, as log lines name it (`LAN`, `WAN`).
    pub pool: &'static str,
}

/// Signalled once the LAN pool's `retry_max` attempts all failed: the
/// agent then exits non-zero, as Consul's does (`max join retry
/// exhausted`). A stored permit, so a give-up before the agent waits for
/// it is not lost.
pub static LAN_JOIN_EXHAUSTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

impl JoinPlan {
    /// The LAN pool's plan (`start_join`, `retry_join`, `retry_interval`,
    /// `retry_max`).
    pub fn lan(config: &AgentConfig) -> JoinPlan {
        JoinPlan {
            start: config.start_join.clone(),
            retry: config.retry_join.clone(),
            interval: config.retry_interval,
            max_attempts: config.retry_max,
            pool: "LAN",
        }
    }

    /// The WAN pool's plan (the `_wan` keys).
    pub fn wan(config: &AgentConfig) -> JoinPlan {
        JoinPlan {
            start: config.wan.start_join_wan.clone(),
            retry: config.wan.retry_join_wan.clone(),
            interval: config.wan.retry_interval_wan,
            max_attempts: config.wan.retry_max_wan,
            pool: "WAN",
        }
    }
}

/// Joins `plan.start` once, then keeps trying `plan.retry` every
/// `plan.interval` until one address answers (or the attempts run out).
pub fn spawn_joins(membership: Arc<GossipMembership>, plan: JoinPlan) {
    let JoinPlan {
        start,
        retry,
        interval,
        max_attempts,
        pool,
    } = plan;
    tokio::spawn(async move {
        if !start.is_empty() {
            match membership.join(start.clone()).await {
                Ok(n) => tracing::info!(pool, joined = n, "joined {start:?}"),
                Err(e) => tracing::error!(pool, error = %e, "join failed"),
            }
        }
        if retry.is_empty() {
            return;
        }
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match membership.join(retry.clone()).await {
                Ok(n) if n > 0 => {
                    tracing::info!(pool, joined = n, "retry-join: joined the cluster");
                    return;
                }
                Ok(_) => tracing::warn!(
                    pool,
                    attempt,
                    "retry-join: no member answered at {retry:?}; retrying in {interval:?}"
                ),
                Err(e) => tracing::warn!(
                    pool,
                    attempt,
                    error = %e,
                    "retry-join failed; retrying in {interval:?}"
                ),
            }
            if max_attempts > 0 && attempt >= max_attempts {
                tracing::error!(
                    pool,
                    attempts = attempt,
                    "retry-join: giving up after the configured attempts"
                );
                if pool == "LAN" {
                    LAN_JOIN_EXHAUSTED.notify_one();
                }
                return;
            }
            tokio::time::sleep(interval).await;
        }
    });
}

/// The server-port addresses of this datacenter's live servers, kept
/// current from gossip (what a client agent calls).
pub fn server_addresses(
    gossip: &Gossip,
    datacenter: String,
) -> tokio::sync::watch::Receiver<Vec<String>> {
    let mut members = gossip.watch();
    let pick = move |list: &[legate_gossip::Member]| -> Vec<String> {
        list.iter()
            .filter(|m| {
                m.status == Status::Alive
                    && m.tags.role == "server"
                    && m.tags.dc == datacenter
                    && !m.tags.rpc_addr.is_empty()
            })
            .map(|m| m.tags.rpc_addr.clone())
            .collect()
    };
    let (tx, rx) = tokio::sync::watch::channel(pick(&members.borrow_and_update()));
    tokio::spawn(async move {
        while members.changed().await.is_ok() {
            let servers = pick(&members.borrow_and_update());
            tx.send_if_modified(|current| {
                let changed = *current != servers;
                *current = servers;
                changed
            });
        }
    });
    rx
}

/// Keeps the server's view of membership (which its leader reconciles into
/// the catalog) equal to gossip's.
pub fn spawn_member_sync(server: Arc<Server>, gossip: &Gossip) {
    let mut members = gossip.watch();
    tokio::spawn(async move {
        loop {
            let list = members
                .borrow_and_update()
                .iter()
                .map(|m| legate_server::ClusterMember {
                    name: m.name.clone(),
                    node_id: m.tags.node_id.clone(),
                    address: m.addr.ip().to_string(),
                    datacenter: m.tags.dc.clone(),
                    server_port: (m.tags.role == "server")
                        .then(|| {
                            m.tags
                                .rpc_addr
                                .rsplit_once(':')
                                .and_then(|(_, p)| p.parse().ok())
                        })
                        .flatten(),
                    raft_id: (m.tags.role == "server" && m.tags.raft_id != 0)
                        .then_some(m.tags.raft_id),
                    features: m.tags.features.iter().cloned().collect(),
                    state: match m.status {
                        Status::Alive => legate_server::MemberState::Alive,
                        Status::Failed => legate_server::MemberState::Failed,
                        Status::Left => legate_server::MemberState::Left,
                    },
                })
                .collect();
            server.update_members(list);
            if members.changed().await.is_err() {
                return;
            }
        }
    });
}

/// With `-bootstrap-expect=N`: once exactly N servers of this datacenter
/// are alive in gossip and none of them already belongs to a Raft cluster,
/// every one of them initialises Raft with those N voters — the same set
/// everywhere, so exactly one cluster forms. More than N servers is a
/// configuration error: nothing is initialised (as Consul refuses to guess).
pub fn spawn_bootstrap_expect(
    server: Arc<Server>,
    gossip: Gossip,
    expect: u32,
    datacenter: String,
    pool: Arc<legate_rpc::Pool>,
) {
    tokio::spawn(async move {
        let mut watch = gossip.watch();
        let mut warned = false;
        loop {
            let voters: BTreeMap<u64, String> = watch
                .borrow_and_update()
                .iter()
                .filter(|m| {
                    m.status == Status::Alive
                        && m.tags.role == "server"
                        && m.tags.dc == datacenter
                        && m.tags.raft_id != 0
                })
                .map(|m| (m.tags.raft_id, m.tags.rpc_addr.clone()))
                .collect();
            if voters.len() > expect as usize && !warned {
                warned = true;
                tracing::error!(
                    servers = voters.len(),
                    expect,
                    "more servers than bootstrap_expect are alive; not bootstrapping (check -bootstrap-expect on every server)"
                );
            }
            if voters.len() == expect as usize {
                if already_bootstrapped(&voters, &server, &pool).await {
                    tracing::info!("a server already belongs to a Raft cluster; not bootstrapping");
                    return;
                }
                tracing::info!(?voters, "bootstrap-expect reached; initialising Raft");
                if let Err(e) = server.initialize_cluster(voters).await {
                    tracing::error!(error = %e, "Raft bootstrap failed");
                }
                return;
            }
            if watch.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Whether any of `voters` (other than this server) already has a Raft
/// configuration, as Consul checks before it bootstraps.
async fn already_bootstrapped(
    voters: &BTreeMap<u64, String>,
    server: &Arc<Server>,
    pool: &Arc<legate_rpc::Pool>,
) -> bool {
    use legate_types::rpc::ServerRpc;
    let own = server.raft_peers();
    for address in voters.values() {
        if own.contains(address) {
            continue;
        }
        let remote = legate_rpc::RemoteRpc::new(address.clone(), pool.clone());
        if let Ok(peers) = remote.status_peers().await {
            if !peers.is_empty() {
                return true;
            }
        }
    }
    false
}

/// User events: those this server was asked to spread go out over LAN
/// gossip (or, without gossip in `-dev`, straight to the agent), and every
/// event gossip delivers goes to the agent, which keeps it if its filters
/// match.
pub fn spawn_user_events(
    agent: Arc<legate_agent::Agent>,
    membership: Option<&Arc<GossipMembership>>,
    to_spread: Option<tokio::sync::mpsc::UnboundedReceiver<legate_types::event::UserEvent>>,
) {
    let gossip = membership.map(|m| m.gossip.clone());
    if let Some(mut to_spread) = to_spread {
        let gossip = gossip.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            while let Some(event) = to_spread.recv().await {
                match &gossip {
                    Some(gossip) => {
                        if let Err(e) = gossip.fire_event(event).await {
                            tracing::warn!(error = %e, "spreading a user event failed");
                        }
                    }
                    None => agent.receive_event(event),
                }
            }
        });
    }
    if let Some(gossip) = gossip {
        let mut delivered = gossip.user_events();
        tokio::spawn(async move {
            loop {
                match delivered.recv().await {
                    Ok(event) => agent.receive_event(event),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(
                            missed = n,
                            "user events arrived faster than they were kept"
                        );
                    }
                    Err(_) => return,
                }
            }
        });
    }
}
