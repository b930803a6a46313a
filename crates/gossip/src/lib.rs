//! LAN gossip: SWIM membership (foca) over UDP for every agent of a
//! datacenter, with typed member tags, graceful leave, failure detection,
//! immediate rejoin after a crash, and optional encryption.
//!
//! Each member's identity carries its gossip address, node name, a "bump"
//! that grows on every start (so a `kill -9`-restarted node replaces its
//! old self at once), and its tags (role, datacenter, server RPC address,
//! Raft id, build, supported features): new members learn every tag from
//! the membership itself. A graceful leave first marks the identity as
//! leaving, so peers record "left" rather than "failed". Membership never
//! depends on the catalog: the server's leader reconciles from here.
//!
//! Not wire-compatible with Consul's serf.

mod changes;
mod coordinates;
mod keyring;
mod pushpull;
mod table;
mod wire;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foca::{AccumulatingRuntime, Config, Foca, Identity, OwnedNotification, PostcardCodec, Timer};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

pub use changes::ClusterChange;
pub use coordinates::CoordinateView;
pub use keyring::{load_keyring, save_keyring, Key, Keyring, OVERHEAD};
use table::Table;
pub use wire::Relay;
use wire::Wire;

/// The largest datagram sent (a conservative path MTU).
const MAX_DATAGRAM: usize = 1400;

/// What a member is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Tags {
    /// `server` or `client`.
    pub role: String,
    /// Datacenter.
    pub dc: String,
    /// The server RPC address (`ip:port`; servers only).
    pub rpc_addr: String,
    /// The Raft id (servers only).
    pub raft_id: u64,
    /// Build version.
    pub build: String,
    /// Supported feature flags (e.g. `si`, `fs`).
    pub features: Vec<String>,
    /// The node id (UUID).
    pub node_id: String,
    /// Set just before a graceful leave.
    pub leaving: bool,
    /// Fingerprints of the installed gossip keys (`keyring -list` counts
    /// members by them).
    pub keys: Vec<String>,
}

/// A member's identity on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    /// Gossip address (the key of a member).
    pub addr: SocketAddr,
    /// Node name.
    pub name: String,
    /// Grows on every start and on every tag change.
    pub bump: u64,
    /// Tags.
    pub tags: Tags,
}

impl Identity for NodeId {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(NodeId {
            bump: self.bump.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.bump > adversary.bump
    }
}

/// A member's status, as `legate members` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Reachable.
    Alive,
    /// Stopped answering.
    Failed,
    /// Left gracefully (or was forced out).
    Left,
}

impl Status {
    /// Consul's word for it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Alive => "alive",
            Status::Failed => "failed",
            Status::Left => "left",
        }
    }
}

/// One member as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Node name.
    pub name: String,
    /// Gossip address.
    pub addr: SocketAddr,
    /// Tags.
    pub tags: Tags,
    /// Status.
    pub status: Status,
}

/// How fast failures are noticed.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Probe period.
    pub probe_period: Duration,
    /// Probe round trip.
    pub probe_rtt: Duration,
    /// Suspicion before a member is declared failed.
    pub suspect_to_down_after: Duration,
    /// How often a failed member is asked to rejoin (serf's reconnect):
    /// after a partition heals, the two sides find each other again.
    pub reconnect_interval: Duration,
    /// How often the whole membership is exchanged with a random member
    /// (serf's push-pull).
    pub push_pull_interval: Duration,
    /// How long a failed member is asked to rejoin before it is forgotten
    /// (serf's reap; Consul's `reconnect_timeout`, 72h). A member's own
    /// `rc_tm=<duration>` tag wins (`advertise_reconnect_timeout`).
    pub reconnect_timeout: Duration,
    /// How long a member that left is remembered (serf's tombstone
    /// timeout, 24h).
    pub tombstone_timeout: Duration,
}

/// The tag (in the features list) a member advertises its own reconnect
/// timeout with (serf's `rc_tm`).
pub const RECONNECT_TIMEOUT_TAG: &str = "rc_tm";

impl Timing {
    /// Consul's LAN defaults (1 s probes, 500 ms round trip).
    pub fn lan() -> Timing {
        Timing {
            probe_period: Duration::from_secs(1),
            probe_rtt: Duration::from_millis(500),
            suspect_to_down_after: Duration::from_secs(4),
            reconnect_interval: Duration::from_secs(3),
            push_pull_interval: Duration::from_secs(30),
            reconnect_timeout: Duration::from_secs(72 * 3600),
            tombstone_timeout: Duration::from_secs(24 * 3600),
        }
    }

    /// Quick failure detection for tests on loopback.
    pub fn fast() -> Timing {
        Timing {
            probe_period: Duration::from_millis(200),
            probe_rtt: Duration::from_millis(100),
            suspect_to_down_after: Duration::from_millis(800),
            reconnect_interval: Duration::from_millis(500),
            push_pull_interval: Duration::from_secs(2),
            reconnect_timeout: Duration::from_secs(72 * 3600),
            tombstone_timeout: Duration::from_secs(24 * 3600),
        }
    }
}

/// How to start gossip.
#[derive(Clone, Debug)]
pub struct GossipConfig {
    /// Where to listen (UDP).
    pub bind: SocketAddr,
    /// The address others reach us at (default: `bind`).
    pub advertise: Option<SocketAddr>,
    /// Node name.
    pub name: String,
    /// Tags.
    pub tags: Tags,
    /// Where the last bump is kept across restarts (`None`: the clock alone).
    pub bump_file: Option<PathBuf>,
    /// Encryption keys, primary first (empty: plain text).
    pub keyring: Keyring,
    /// Where the keyring is saved after every change (`None`: not kept).
    pub keyring_file: Option<PathBuf>,
    /// Failure detection timing.
    pub timing: Timing,
    /// Which pool this member is in: datagrams of another pool (a WAN
    /// join aimed at a LAN port, say) are dropped, so pools never merge.
    pub pool: Pool,
    /// Sources datagrams are taken from (`serf_lan_allowed_cidrs`; empty:
    /// any). Others are dropped unread.
    pub allowed_sources: Vec<legate_types::cidr::Cidr>,
}

/// A gossip pool, marked in every datagram's kind byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pool {
    /// A datacenter's agents (unmarked, as every earlier version sent).
    #[default]
    Lan,
    /// Every datacenter's servers.
    Wan,
}

impl Pool {
    const MARK: u8 = 0x80;

    /// The `network` label of Consul's serf and memberlist metrics.
    pub fn label(self) -> &'static str {
        match self {
            Pool::Lan => "lan",
            Pool::Wan => "wan",
        }
    }

    fn mark(self) -> u8 {
        match self {
            Pool::Lan => 0,
            Pool::Wan => Pool::MARK,
        }
    }

    /// Marks a plaintext datagram as this pool's.
    fn marked(self, mut datagram: Vec<u8>) -> Vec<u8> {
        if let Some(kind) = datagram.first_mut() {
            *kind |= self.mark();
        }
        datagram
    }

    /// The plaintext with its mark removed, when it is this pool's.
    fn unmarked(self, mut datagram: Vec<u8>) -> Option<Vec<u8>> {
        let kind = datagram.first_mut()?;
        if *kind & Pool::MARK != self.mark() {
            return None;
        }
        *kind &= !Pool::MARK;
        Some(datagram)
    }
}

enum Command {
    /// Join through a member (reached through the relay: its name).
    Announce(SocketAddr, Option<String>),
    SetTags(Tags),
    Leave(oneshot::Sender<()>),
    ForceLeave(String, oneshot::Sender<bool>),
    Broadcast(ClusterChange, Option<oneshot::Sender<Result<(), String>>>),
}

/// A running gossip member.
#[derive(Clone)]
pub struct Gossip {
    task: Arc<tokio::task::JoinHandle<()>>,
    commands: mpsc::Sender<Command>,
    members: watch::Receiver<Vec<Member>>,
    coordinates: watch::Receiver<CoordinateView>,
    events: tokio::sync::broadcast::Sender<legate_types::event::UserEvent>,
    event_clock: Arc<std::sync::atomic::AtomicU64>,
    keyring: Arc<Mutex<Keyring>>,
    local: SocketAddr,
}

/// A bump larger than any this node used before.
fn next_bump(file: Option<&PathBuf>) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(1);
    let stored = file
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let bump = now.max(stored + 1);
    if let Some(f) = file {
        let tmp = f.with_extension("tmp");
        let written = std::fs::write(&tmp, bump.to_string()).and_then(|_| std::fs::rename(&tmp, f));
        if let Err(e) = written {
            tracing::warn!(file = %f.display(), error = %e, "cannot persist the gossip incarnation");
        }
    }
    bump
}

impl Gossip {
    /// Binds the socket and starts gossiping (alone until [`Gossip::join`]).
    pub async fn start(config: GossipConfig) -> std::io::Result<Gossip> {
        Gossip::start_with(config, None).await
    }

    /// [`Gossip::start`] with members of other datacenters reached through
    /// `relay` (WAN federation through mesh gateways).
    pub async fn start_relayed(config: GossipConfig, relay: Relay) -> std::io::Result<Gossip> {
        Gossip::start_with(config, Some(relay)).await
    }

    async fn start_with(config: GossipConfig, relay: Option<Relay>) -> std::io::Result<Gossip> {
        let socket = UdpSocket::bind(config.bind).await?;
        let local = socket.local_addr()?;
        let addr = config.advertise.unwrap_or(local);
        let me = NodeId {
            addr,
            name: config.name.clone(),
            bump: next_bump(config.bump_file.as_ref()),
            tags: Tags {
                keys: config.keyring.fingerprints(),
                ..config.tags.clone()
            },
        };
        let (commands, receiver) = mpsc::channel(64);
        let members = watch::channel(vec![Member {
            name: me.name.clone(),
            addr,
            tags: me.tags.clone(),
            status: Status::Alive,
        }])
        .0;
        let watcher = members.subscribe();
        let keyring = Arc::new(Mutex::new(config.keyring.clone()));
        let coords = coordinates::Coordinates::new(me.name.clone());
        let (coordinates_tx, coordinates) = watch::channel(coords.view());
        let events = tokio::sync::broadcast::channel(256).0;
        let event_clock = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = tokio::spawn(run(
            Wire::new(socket, relay, config.pool.label()),
            me,
            config,
            receiver,
            (members, coordinates_tx, coords),
            (events.clone(), event_clock.clone()),
            keyring.clone(),
        ));
        Ok(Gossip {
            task: Arc::new(task),
            commands,
            members: watcher,
            coordinates,
            events,
            event_clock,
            keyring,
            local: addr,
        })
    }

    /// This member's gossip address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Every member known (this one included), sorted by name.
    pub fn members(&self) -> Vec<Member> {
        self.members.borrow().clone()
    }

    /// Membership changes.
    pub fn watch(&self) -> watch::Receiver<Vec<Member>> {
        self.members.clone()
    }

    /// Spreads a user event to every member (this one included); its
    /// Lamport time is this member's event clock, moved forward.
    pub async fn fire_event(
        &self,
        mut event: legate_types::event::UserEvent,
    ) -> Result<legate_types::event::UserEvent, String> {
        use std::sync::atomic::Ordering;
        event.ltime = self
            .event_clock
            .fetch_add(1, Ordering::SeqCst)
            .wrapping_add(1);
        self.spread(ClusterChange::UserEvent(event.clone())).await?;
        Ok(event)
    }

    /// User events as they arrive (each once, this member's own included).
    pub fn user_events(&self) -> tokio::sync::broadcast::Receiver<legate_types::event::UserEvent> {
        self.events.subscribe()
    }

    /// This member's network coordinate and the others' it has seen,
    /// updated with every measured round trip.
    pub fn coordinates(&self) -> watch::Receiver<CoordinateView> {
        self.coordinates.clone()
    }

    /// Contacts each address and waits up to `timeout` for members there to
    /// answer; the number of addresses that did.
    pub async fn join(&self, addresses: &[SocketAddr], timeout: Duration) -> usize {
        for a in addresses {
            let _ = self.commands.send(Command::Announce(*a, None)).await;
        }
        self.wait_for(addresses, timeout).await
    }

    /// [`Gossip::join`] to members reached through the relay (their
    /// addresses and WAN names, as a gateway's tunnel met them).
    pub async fn join_relayed(&self, members: &[(SocketAddr, String)], timeout: Duration) -> usize {
        for (addr, name) in members {
            let _ = self
                .commands
                .send(Command::Announce(*addr, Some(name.clone())))
                .await;
        }
        let addresses: Vec<SocketAddr> = members.iter().map(|(a, _)| *a).collect();
        self.wait_for(&addresses, timeout).await
    }

    /// Waits up to `timeout` for a live member at each address; the number
    /// there are.
    async fn wait_for(&self, addresses: &[SocketAddr], timeout: Duration) -> usize {
        let mut watch = self.members.clone();
        let reached = |members: &[Member]| {
            addresses
                .iter()
                .filter(|a| {
                    members
                        .iter()
                        .any(|m| m.addr == **a && m.status == Status::Alive)
                })
                .count()
        };
        let deadline = Instant::now() + timeout;
        loop {
            let now = reached(&watch.borrow_and_update());
            if now == addresses.len() {
                return now;
            }
            match tokio::time::timeout_at(deadline, watch.changed()).await {
                Ok(Ok(())) => {}
                _ => return reached(&watch.borrow()),
            }
        }
    }

    /// Changes this member's tags.
    pub async fn set_tags(&self, tags: Tags) {
        let _ = self.commands.send(Command::SetTags(tags)).await;
    }

    /// Leaves gracefully: peers record this member as left.
    pub async fn leave(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Leave(done)).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(5), wait).await;
        }
    }

    /// `force-leave`: on every member (through gossip) a failed member is
    /// marked left at once, one not failed there yet as soon as it fails
    /// (within a minute); `false` when no member has that name here.
    pub async fn force_leave(&self, name: &str) -> bool {
        let (done, wait) = oneshot::channel();
        if self
            .commands
            .send(Command::ForceLeave(name.to_string(), done))
            .await
            .is_err()
        {
            return false;
        }
        let found = wait.await.unwrap_or(false);
        if found {
            let _ = self
                .spread(ClusterChange::ForceLeave(name.to_string()))
                .await;
        }
        found
    }

    /// `force-leave -prune`: as [`Gossip::force_leave`], and every member
    /// then forgets the member altogether once it left or failed.
    pub async fn prune(&self, name: &str) -> bool {
        let found = self.force_leave(name).await;
        if found {
            let _ = self.spread(ClusterChange::Prune(name.to_string())).await;
        }
        found
    }

    /// Installs a gossip key here and on every member.
    pub async fn install_key(&self, encoded: &str) -> Result<(), String> {
        let key = Key::parse(encoded)?;
        self.encrypted()?;
        self.spread(ClusterChange::KeyInstall(key.encoded().to_string()))
            .await
    }

    /// Makes an installed key primary here and on every member.
    pub async fn use_key(&self, encoded: &str) -> Result<(), String> {
        self.encrypted()?;
        self.allowed_here(|keyring| keyring.use_key(encoded))?;
        self.spread(ClusterChange::KeyUse(encoded.trim().to_string()))
            .await
    }

    /// Removes a key (not the primary one) here and on every member.
    pub async fn remove_key(&self, encoded: &str) -> Result<(), String> {
        self.encrypted()?;
        self.allowed_here(|keyring| keyring.remove(encoded))?;
        self.spread(ClusterChange::KeyRemove(encoded.trim().to_string()))
            .await
    }

    /// Tries a keyring change on a copy of this member's keyring, so it is
    /// refused by the keyring's own rules before it is spread.
    fn allowed_here(
        &self,
        change: impl FnOnce(&mut Keyring) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut copy = self
            .keyring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        change(&mut copy)
    }

    fn encrypted(&self) -> Result<(), String> {
        if self
            .keyring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_enabled()
        {
            Ok(())
        } else {
            Err("gossip encryption is not enabled (start the agents with encrypt)".into())
        }
    }

    /// Broadcasts a change; returns once it is applied here, so changes
    /// made one after another apply here in that order.
    async fn spread(&self, change: ClusterChange) -> Result<(), String> {
        let (done, applied) = oneshot::channel();
        self.commands
            .send(Command::Broadcast(change, Some(done)))
            .await
            .map_err(|_| "gossip has stopped".to_string())?;
        applied
            .await
            .map_err(|_| "gossip has stopped".to_string())?
    }

    /// Stops at once without telling anyone, as a crash would (peers
    /// notice the failure).
    pub fn stop(&self) {
        self.task.abort();
    }

    /// The keyring (for `keyring` operations).
    pub fn keyring(&self) -> Arc<Mutex<Keyring>> {
        self.keyring.clone()
    }
}

/// How many times an update is retransmitted in a cluster of `members`
/// (foca's LAN rule: 4 × log10(n + 1), at least 4 as for 16 members).
fn max_transmissions_for(members: usize) -> std::num::NonZeroU8 {
    let n = NonZeroU32::new((members.max(16)).min(u32::MAX as usize) as u32).expect("non-zero");
    Config::new_lan(n).max_transmissions
}

/// Sends this member's whole membership table to `to`.
async fn send_state<B: foca::BroadcastHandler<NodeId>>(
    (wire, table): (&Wire, &Table),
    (keyring, pool): (&Mutex<Keyring>, Pool),
    foca: &Foca<NodeId, PostcardCodec, StdRng, B>,
    to: SocketAddr,
    wants_answer: bool,
) {
    let mut state: Vec<foca::Member<NodeId>> = foca.iter_membership_state().cloned().collect();
    // Our own entry, as we are now (foca's table holds the others).
    state.push(foca::Member::alive(foca.identity().clone()));
    let chunks = pushpull::encode_state(state.iter(), rand::random(), wants_answer);
    for chunk in chunks {
        let sealed = keyring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seal(&pool.marked(chunk));
        wire.send(table, to, sealed).await;
    }
}

/// Whether gossip takes datagrams from `from` (no ranges: from anyone).
fn admitted(allowed: &[legate_types::cidr::Cidr], from: SocketAddr) -> bool {
    allowed.is_empty() || allowed.iter().any(|range| range.contains(from.ip()))
}

/// How long a change that cannot apply yet is retried.
const CHANGE_RETRY: Duration = Duration::from_secs(30);

/// Applies a change received by gossip (or made here).
fn apply_change(
    change: &ClusterChange,
    table: &mut Table,
    keyring: &Mutex<Keyring>,
) -> Result<(), String> {
    let mut keyring = keyring.lock().unwrap_or_else(|e| e.into_inner());
    match change {
        ClusterChange::KeyState { member, keys } => {
            if *member != table.me.name {
                table.key_states.insert(member.clone(), keys.clone());
            }
            Ok(())
        }
        ClusterChange::ForceLeave(name) if *name == table.me.name => Ok(()),
        ClusterChange::ForceLeave(name) => {
            table.force_leave(name);
            Ok(())
        }
        ClusterChange::Prune(name) if *name == table.me.name => Ok(()),
        ClusterChange::Prune(name) => {
            table.prune(name);
            Ok(())
        }
        // Never turn encryption on by a broadcast a plain-text member got.
        ClusterChange::KeyInstall(_) if !keyring.is_enabled() => Ok(()),
        ClusterChange::KeyInstall(encoded) => Key::parse(encoded).map(|k| keyring.install(k)),
        ClusterChange::KeyUse(encoded) => keyring.use_key(encoded),
        // Already gone is done.
        ClusterChange::KeyRemove(encoded)
            if !keyring.keys().iter().any(|k| k.encoded() == encoded.trim()) =>
        {
            Ok(())
        }
        ClusterChange::KeyRemove(encoded) => keyring.remove(encoded),
        // Delivered by the loop, not applied to the table.
        ClusterChange::UserEvent(_) => Ok(()),
    }
}

async fn run(
    mut wire: Wire,
    me: NodeId,
    config: GossipConfig,
    mut commands: mpsc::Receiver<Command>,
    (members, coordinates_tx, mut coords): (
        watch::Sender<Vec<Member>>,
        watch::Sender<CoordinateView>,
        coordinates::Coordinates,
    ),
    (events, event_clock): (
        tokio::sync::broadcast::Sender<legate_types::event::UserEvent>,
        Arc<std::sync::atomic::AtomicU64>,
    ),
    keyring: Arc<Mutex<Keyring>>,
) {
    let mut foca_config = Config::new_lan(NonZeroU32::new(16).expect("non-zero"));
    foca_config.probe_period = config.timing.probe_period;
    foca_config.probe_rtt = config.timing.probe_rtt;
    foca_config.suspect_to_down_after = config.timing.suspect_to_down_after;
    foca_config.max_packet_size = NonZeroUsize::new(MAX_DATAGRAM - OVERHEAD).expect("non-zero");
    // Members declared down are asked to rejoin as often as our own
    // reconnect runs (foca's LAN default is every 65 s).
    foca_config.periodic_announce_to_down_members = Some(foca::PeriodicParams {
        frequency: config.timing.reconnect_interval,
        num_members: NonZeroUsize::new(1).expect("non-zero"),
    });
    let rng: StdRng = rand::SeedableRng::from_os_rng();
    let received = Arc::new(Mutex::new(Vec::new()));
    let mut foca = Foca::with_custom_broadcast(
        me.clone(),
        foca_config.clone(),
        rng,
        PostcardCodec,
        changes::ChangeHandler::new(received.clone()),
    );
    let mut runtime = AccumulatingRuntime::new();
    let mut timers: BinaryHeap<Reverse<(Instant, Timer<NodeId>)>> = BinaryHeap::new();
    let mut table = Table {
        me,
        by_addr: BTreeMap::new(),
        leave_intents: Default::default(),
        prune_intents: Default::default(),
        key_states: Default::default(),
        gone_since: Default::default(),
    };
    // Members reaped since the membership was last published.
    let mut reaped_any = false;
    let mut buf = vec![0u8; 65536];
    let mut leaving: Option<oneshot::Sender<()>> = None;
    // Callers waiting for their change to apply here; changes that could
    // not apply yet (a key removal that arrived before the `use` of
    // another key) are retried for a while.
    let mut waiting: Vec<oneshot::Sender<Result<(), String>>> = Vec::new();
    let mut retry: Vec<(ClusterChange, Instant)> = Vec::new();
    let mut tags_refresh_at: Option<Instant> = None;
    let mut reconnect = tokio::time::interval(config.timing.reconnect_interval);
    reconnect.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut turn = 0usize;
    let mut coordinate_probe = tokio::time::interval(config.timing.probe_period);
    coordinate_probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut push_pull = tokio::time::interval(config.timing.push_pull_interval);
    push_pull.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Pushes already answered (each chunk of a push asks for an answer).
    let mut answered: std::collections::VecDeque<u64> = Default::default();
    loop {
        let next = timers.peek().map(|Reverse((at, _))| *at);
        let result = tokio::select! {
            received = wire.recv(&mut buf) => {
                match received {
                    Ok((_, from)) if !admitted(&config.allowed_sources, from) => {
                        tracing::debug!(%from, "dropped a gossip datagram from outside the allowed ranges");
                        Ok(())
                    }
                    Ok((datagram, from)) => {
                        let opened = keyring
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .open(&datagram)
                            .map(|data| config.pool.unmarked(data).ok_or(from));
                        let opened = match opened {
                            Some(Err(from)) => {
                                tracing::debug!(%from, "dropped a datagram of another gossip pool");
                                Some(Vec::new())
                            }
                            Some(Ok(data)) => Some(data),
                            None => None,
                        };
                        match opened {
                            Some(data) if data.is_empty() => Ok(()),
                            Some(data) if data.first() == Some(&pushpull::FOCA) => {
                                foca.handle_data(&data[1..], &mut runtime)
                            }
                            Some(data) if matches!(data.first(), Some(&coordinates::PING | &coordinates::ACK)) => {
                                // Only members are answered and learned from
                                // (no reflection to spoofed sources, no
                                // coordinate under another member's name).
                                let member = table.by_addr.get(&from).map(|m| m.name.clone());
                                let (answer, changed) = coords.receive(&data, from, member.as_deref());
                                if let Some(answer) = answer {
                                    let sealed = keyring
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .seal(&config.pool.marked(answer));
                                    wire.send(&table, from, sealed).await;
                                }
                                if changed {
                                    coordinates_tx.send_replace(coords.view());
                                }
                                Ok(())
                            }
                            Some(data) => match pushpull::decode_state(&data) {
                                Some(chunk) => {
                                    if chunk.wants_answer && !answered.contains(&chunk.id) {
                                        answered.push_back(chunk.id);
                                        if answered.len() > 256 {
                                            answered.pop_front();
                                        }
                                        send_state((&wire, &table), (&keyring, config.pool), &foca, from, false).await;
                                    }
                                    foca.apply_many(chunk.members.into_iter(), false, &mut runtime)
                                }
                                None => {
                                    tracing::debug!(%from, "dropped an undecodable gossip packet");
                                    Ok(())
                                }
                            },
                            None => {
                                tracing::debug!(%from, "dropped a gossip packet no installed key opens");
                                Ok(())
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "gossip receive failed");
                        Ok(())
                    }
                }
            }
            _ = async { tokio::time::sleep_until(next.expect("guarded")).await }, if next.is_some() => {
                let now = Instant::now();
                let mut result = Ok(());
                while timers.peek().is_some_and(|Reverse((at, _))| *at <= now) {
                    let Reverse((_, timer)) = timers.pop().expect("peeked");
                    result = result.and(foca.handle_timer(timer, &mut runtime));
                }
                result
            }
            _ = coordinate_probe.tick() => {
                // A round trip to one random live member per probe period.
                let alive: Vec<SocketAddr> = table
                    .by_addr
                    .values()
                    .filter(|m| m.status == Status::Alive && m.name != table.me.name)
                    .map(|m| m.addr)
                    .collect();
                if !alive.is_empty() {
                    let to = alive[rand::random::<u64>() as usize % alive.len()];
                    let sealed = keyring
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .seal(&config.pool.marked(coords.ping(to)));
                    wire.send(&table, to, sealed).await;
                }
                Ok(())
            }
            _ = push_pull.tick() => {
                let active: Vec<SocketAddr> = foca.iter_members().map(|m| m.id().addr).collect();
                if !active.is_empty() {
                    let to = active[rand::random::<u64>() as usize % active.len()];
                    send_state((&wire, &table), (&keyring, config.pool), &foca, to, true).await;
                }
                Ok(())
            }
            _ = reconnect.tick() => {
                let reaped = table.reap(
                    Instant::now(),
                    config.timing.reconnect_timeout,
                    config.timing.tombstone_timeout,
                );
                for name in &reaped {
                    tracing::info!(member = %name, "gossip: reaped a member gone for longer than its timeout");
                    coords.forget(name);
                }
                reaped_any |= !reaped.is_empty();
                // One failed member per tick, in turn.
                let failed: Vec<SocketAddr> = table
                    .by_addr
                    .values()
                    .filter(|m| m.status == Status::Failed)
                    .map(|m| m.addr)
                    .collect();
                match failed.get(turn % failed.len().max(1)) {
                    Some(addr) => {
                        turn = turn.wrapping_add(1);
                        foca.announce(
                            NodeId { addr: *addr, name: String::new(), bump: 0, tags: Tags::default() },
                            &mut runtime,
                        )
                    }
                    None => Ok(()),
                }
            }
            command = commands.recv() => match command {
                Some(Command::Announce(seed, relayed_name)) => {
                    if let Some(name) = relayed_name {
                        wire.heard_of(seed, Some(name));
                    }
                    // A joiner also swaps whole states with the seed.
                    send_state((&wire, &table), (&keyring, config.pool), &foca, seed, true).await;
                    foca.announce(
                        NodeId { addr: seed, name: String::new(), bump: 0, tags: Tags::default() },
                        &mut runtime,
                    )
                }
                Some(Command::SetTags(tags)) => {
                    let mut id = foca.identity().clone();
                    id.bump += 1;
                    // The key fingerprints are this loop's to keep.
                    id.tags = Tags {
                        keys: table.me.tags.keys.clone(),
                        ..tags
                    };
                    table.me = id.clone();
                    foca.change_identity(id, &mut runtime)
                }
                Some(Command::Leave(done)) => {
                    // Tell peers we are leaving (a new identity), then go.
                    let mut id = foca.identity().clone();
                    id.bump += 1;
                    id.tags.leaving = true;
                    table.me = id.clone();
                    let result = foca.change_identity(id, &mut runtime).and_then(|_| foca.leave_cluster(&mut runtime));
                    leaving = Some(done);
                    result
                }
                Some(Command::Broadcast(change, done)) => {
                    // A change foca cannot carry (too large for a datagram)
                    // is refused to its caller, not dropped in silence.
                    match foca.add_broadcast(&changes::encode(change)) {
                        Ok(_) => waiting.extend(done),
                        Err(e) => {
                            if let Some(done) = done {
                                let _ = done.send(Err(format!("the change cannot be spread: {e}")));
                            }
                        }
                    }
                    Ok(())
                }
                Some(Command::ForceLeave(name, done)) => {
                    // Any member known here but this one (Consul refuses
                    // only unknown names); the broadcast applies it.
                    let found = name != table.me.name
                        && table.by_addr.values().any(|m| m.name == name && m.status != Status::Left);
                    let _ = done.send(found);
                    Ok(())
                }
                None => return,
            },
        };
        if let Err(e) = result {
            tracing::trace!(error = %e, "gossip");
        }
        while let Some((to, data)) = runtime.to_send() {
            let sealed = keyring
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .seal(&config.pool.marked(pushpull::foca_datagram(&data)));
            wire.send(&table, to.addr, sealed).await;
        }
        let now = Instant::now();
        while let Some((after, timer)) = runtime.to_schedule() {
            timers.push(Reverse((now + after, timer)));
        }
        let mut changed = std::mem::take(&mut reaped_any);
        let mut applied: Vec<(ClusterChange, Instant)> =
            std::mem::take(&mut *received.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .map(|c| (c, Instant::now() + CHANGE_RETRY))
                .collect();
        applied.append(&mut retry);
        for (change, until) in applied {
            if let ClusterChange::UserEvent(event) = change {
                // Serf's event clock witnesses every time it sees.
                event_clock.fetch_max(event.ltime, std::sync::atomic::Ordering::SeqCst);
                let _ = events.send(event);
                continue;
            }
            let keys_before = keyring
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .fingerprints();
            changed |= matches!(
                change,
                ClusterChange::ForceLeave(_)
                    | ClusterChange::Prune(_)
                    | ClusterChange::KeyState { .. }
            );
            if let Err(e) = apply_change(&change, &mut table, &keyring) {
                if Instant::now() < until {
                    retry.push((change, until));
                } else {
                    tracing::warn!(%change, error = %e, "gossip: a cluster change could not be applied here");
                }
            }
            let keys_after = keyring
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .fingerprints();
            if keys_after != keys_before {
                if let Some(file) = &config.keyring_file {
                    let current = keyring.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Err(e) = save_keyring(file, &current) {
                        tracing::error!(file = %file.display(), error = %e, "gossip: saving the keyring failed");
                    }
                }
                // Tell everyone what this member holds now (`keyring
                // -list` counts by it). The identity (whose tags members
                // that join later read) follows later, at a random point
                // 10–30 s on: every member's keyring changes at once in a
                // rotation, and identity changes all at once stall gossip.
                table.me.tags.keys = keys_after.clone();
                tags_refresh_at = Some(
                    Instant::now()
                        + config.timing.reconnect_interval * 3
                        + Duration::from_millis(rand::random::<u64>() % 20_000),
                );
                let state = ClusterChange::KeyState {
                    member: table.me.name.clone(),
                    keys: keys_after,
                };
                if let Err(e) = foca.add_broadcast(&changes::encode(state)) {
                    tracing::debug!(error = %e, "gossip: announcing new key fingerprints failed");
                }
                changed = true;
            }
        }
        if tags_refresh_at.is_some_and(|at| at <= Instant::now()) {
            tags_refresh_at = None;
            if foca.identity().tags.keys != table.me.tags.keys {
                let mut id = foca.identity().clone();
                id.bump += 1;
                id.tags.keys = table.me.tags.keys.clone();
                table.me = id.clone();
                if let Err(e) = foca.change_identity(id, &mut runtime) {
                    tracing::debug!(error = %e, "gossip: refreshing key fingerprints in the tags failed");
                }
            }
        }
        for done in waiting.drain(..) {
            let _ = done.send(Ok(()));
        }
        while let Some(notification) = runtime.to_notify() {
            match notification {
                OwnedNotification::MemberUp(id) => {
                    table.up(&id);
                    metrics::counter!("serf.member.join", "network" => config.pool.label())
                        .increment(1);
                    changed = true;
                }
                OwnedNotification::MemberDown(id) => {
                    table.down(&id);
                    let left = table
                        .by_addr
                        .get(&id.addr)
                        .is_some_and(|m| m.status == Status::Left);
                    let event = if left {
                        "serf.member.left"
                    } else {
                        "serf.member.failed"
                    };
                    metrics::counter!(event, "network" => config.pool.label()).increment(1);
                    if table
                        .by_addr
                        .get(&id.addr)
                        .is_some_and(|m| m.status == Status::Left)
                    {
                        coords.forget(&id.name);
                        coordinates_tx.send_replace(coords.view());
                    }
                    changed = true;
                }
                OwnedNotification::Rename(_, new) => {
                    // A new identity at the same address: liveness is
                    // reported by MemberUp/MemberDown, not by the rename.
                    table.renamed(&new);
                    changed = true;
                }
                OwnedNotification::Rejoin(id) => {
                    table.me = id;
                    changed = true;
                }
                OwnedNotification::Active
                | OwnedNotification::Idle
                | OwnedNotification::Defunct => {}
            }
        }
        if changed {
            members.send_replace(table.snapshot());
            // Updates are retransmitted as often as the cluster's size
            // asks for (foca's LAN rule), not as for the 16 it started with.
            let wanted = max_transmissions_for(foca.num_members() + 1);
            if wanted != foca_config.max_transmissions {
                foca_config.max_transmissions = wanted;
                if let Err(e) = foca.set_config(foca_config.clone()) {
                    tracing::debug!(error = %e, "gossip: resizing the retransmissions failed");
                }
            }
        }
        if let Some(done) = leaving.take() {
            let _ = done.send(());
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn retransmissions_grow_with_the_cluster() {
        let small = super::max_transmissions_for(3).get();
        let sixteen = super::max_transmissions_for(16).get();
        let large = super::max_transmissions_for(1000).get();
        assert_eq!(small, sixteen, "never fewer than for 16 members");
        assert!(large > sixteen + 5, "{large} vs {sixteen}");
    }
}
