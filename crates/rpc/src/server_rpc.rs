//! `ServerRpc` over the server port: every trait method is a variant of
//! [`Call`] (generated from one list, so client and server cannot drift);
//! the answer is `Result<serde_json::Value, RpcError>`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_types::config_entry::ConfigEntry;
use legate_types::connect::{CaConfiguration, CaSignRequest, IndexedCaRoots, IssuedCert};
use legate_types::intention::{Intention, IntentionCheck, IntentionLookup, IntentionOp, MatchBy};
use legate_types::rpc::{
    AutopilotConfiguration, AutopilotHealth, ChainOverrides, RaftConfiguration, ServerRpc,
    ServiceQuery, SnapshotArchive, TxnOp, TxnResponse, Watched, UNDECODABLE_CALL,
};
use legate_types::{
    CheckServiceNode, Consistency, DeregisterRequest, HealthCheck, HealthStatus, KvEntry, KvOp,
    Node, NodeServices, Queried, QueryOptions, RegisterRequest, RpcError, ServiceNode, Session,
    WriteOptions,
};
use serde::{Deserialize, Serialize};

use crate::listener::FrameHandler;
use crate::pool::{Dial, Pool};
use crate::router::{Route, Router};
use crate::Kind;

/// Extra time a call gets beyond its blocking wait.
const CALL_SLACK: Duration = Duration::from_secs(30);

macro_rules! server_rpc_calls {
    ($( $name:ident ( $( $opts:ident : & $oty:ty )? ; $( $arg:ident : $aty:ty ),* ) -> $ret:ty; )*) => {
        /// One `ServerRpc` call on the wire.
        // Variants are named as the trait's methods; a call lives only
        // while it is encoded or dispatched, so its size does not matter.
        #[derive(Debug, Serialize, Deserialize)]
        #[allow(non_camel_case_types, clippy::large_enum_variant)]
        pub enum Call {
            $( $name { $( $opts: $oty, )? $( $arg: $aty ),* }, )*
            /// `txn`, whose result carries its index beside the body.
            txn { opts: WriteOptions, ops: Vec<TxnOp> },
        }

        /// Every call the dispatcher answers, by its `ServerRpc` method's
        /// name: what the permission table (`legate_acl::doors::RPC`)
        /// must cover.
        pub const CALLS: &[&str] = &[ $( stringify!($name), )* "txn" ];

        impl Call {
            /// How long the caller waits for the answer.
            fn timeout(&self) -> Duration {
                let wait = match self {
                    $( Call::$name { $( $opts, )? .. } => {
                        let _wait: Option<Duration> = None;
                        $( let _wait = blocking_wait(&*$opts); )?
                        _wait
                    } )*
                    Call::txn { .. } => None,
                };
                wait.unwrap_or(Duration::ZERO) + CALL_SLACK
            }
        }

        /// Runs one call against the local server.
        async fn dispatch(rpc: &dyn ServerRpc, call: Call) -> Result<serde_json::Value, RpcError> {
            let encode = |v: Result<_, serde_json::Error>| v.map_err(|e| RpcError::Internal(e.to_string()));
            match call {
                $( Call::$name { $( $opts, )? $( $arg ),* } => {
                    let out = rpc.$name( $( &$opts, )? $( $arg ),* ).await?;
                    encode(serde_json::to_value(out))
                } )*
                Call::txn { opts, ops } => {
                    let out = rpc.txn(&opts, ops).await?;
                    let index = out.index;
                    encode(serde_json::to_value((out, index)))
                }
            }
        }

        #[async_trait]
        impl ServerRpc for Forwarding {
            $( async fn $name(&self, $( $opts: &$oty, )? $( $arg: $aty ),*) -> Result<$ret, RpcError> {
                let forward = false $( || forwards($opts) || self.too_stale(max_stale_of($opts)) )?;
                let read = false $( || idempotent($opts) )?;
                let cross: Option<&CrossDatacenter> = None $( .or_else(|| self.cross_for(datacenter_of($opts))) )?;
                if let Some(cross) = cross {
                    return cross.$name( $( $opts, )? $( $arg ),* ).await;
                }
                let mut attempt = 0;
                let started = tokio::time::Instant::now();
                loop {
                    let result = match self.target(forward) {
                        Target::Local => self.local.$name( $( $opts, )? $( $arg.clone() ),* ).await,
                        Target::Leader(address) => {
                            let remote = RemoteRpc::new(address.clone(), self.pool.clone());
                            if moves_the_leader(stringify!($name)) {
                                remote.$name( $( $opts, )? $( $arg.clone() ),* ).await
                            } else {
                                tokio::select! {
                                    result = remote.$name( $( $opts, )? $( $arg.clone() ),* ) => result,
                                    moved = self.leader_moved(&address) => Err(moved),
                                }
                            }
                        }
                        Target::NoLeader => Err(RpcError::NoLeader),
                    };
                    if !self.retry(forward, read, &result, &mut attempt, started).await {
                        return result;
                    }
                }
            } )*

            async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError> {
                if let Some(cross) = self.cross_for(&opts.datacenter) {
                    return cross.txn(opts, ops).await;
                }
                let mut attempt = 0;
                let started = tokio::time::Instant::now();
                loop {
                    let result = match self.target(true) {
                        Target::Local => self.local.txn(opts, ops.clone()).await,
                        Target::Leader(address) => {
                            let remote = RemoteRpc::new(address.clone(), self.pool.clone());
                            tokio::select! {
                                result = remote.txn(opts, ops.clone()) => result,
                                moved = self.leader_moved(&address) => Err(moved),
                            }
                        }
                        Target::NoLeader => Err(RpcError::NoLeader),
                    };
                    if !self.retry(true, false, &result, &mut attempt, started).await {
                        return result;
                    }
                }
            }
        }

        #[async_trait]
        impl ServerRpc for CrossDatacenter {
            $( async fn $name(&self, $( $opts: &$oty, )? $( $arg: $aty ),*) -> Result<$ret, RpcError> {
                let read = false $( || idempotent($opts) )?;
                let datacenter: Option<&str> = None $( .or(Some(datacenter_of($opts))) )?;
                let datacenter = self.remote(datacenter)?;
                let mut tried = Vec::new();
                loop {
                    let route = self.router.route(datacenter, &tried)?;
                    let result = RemoteRpc::routed(&route, self.pool.clone())
                        .$name( $( $opts, )? $( $arg.clone() ),* )
                        .await;
                    if !self.failed(&route, read, &result, &mut tried) {
                        return result;
                    }
                }
            } )*

            async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError> {
                let datacenter = self.remote(Some(&opts.datacenter))?;
                let mut tried = Vec::new();
                loop {
                    let route = self.router.route(datacenter, &tried)?;
                    let result = RemoteRpc::routed(&route, self.pool.clone())
                        .txn(opts, ops.clone())
                        .await;
                    if !self.failed(&route, false, &result, &mut tried) {
                        return result;
                    }
                }
            }
        }

        #[async_trait]
        impl ServerRpc for ServerPool {
            $( async fn $name(&self, $( $opts: &$oty, )? $( $arg: $aty ),*) -> Result<$ret, RpcError> {
                let read = false $( || idempotent($opts) )?;
                let mut tried = Vec::new();
                loop {
                    let address = self.pick(&tried).await?;
                    let result = RemoteRpc::new(address.clone(), self.pool.clone())
                        .$name( $( $opts, )? $( $arg.clone() ),* )
                        .await;
                    if !self.failed_over(&address, read, &result, &mut tried) {
                        return result;
                    }
                }
            } )*

            async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError> {
                let mut tried = Vec::new();
                loop {
                    let address = self.pick(&tried).await?;
                    let result = RemoteRpc::new(address.clone(), self.pool.clone())
                        .txn(opts, ops.clone())
                        .await;
                    if !self.failed_over(&address, false, &result, &mut tried) {
                        return result;
                    }
                }
            }
        }

        #[async_trait]
        impl ServerRpc for Prepared {
            $( async fn $name(&self, $( $opts: &$oty, )? $( $arg: $aty ),*) -> Result<$ret, RpcError> {
                $( self.hook.prepare(token_of($opts)).await; )?
                self.inner.$name( $( $opts, )? $( $arg ),* ).await
            } )*

            async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError> {
                self.hook.prepare(&opts.token).await;
                self.inner.txn(opts, ops).await
            }
        }

        #[async_trait]
        impl ServerRpc for RemoteRpc {
            $( async fn $name(&self, $( $opts: &$oty, )? $( $arg: $aty ),*) -> Result<$ret, RpcError> {
                self.call(Call::$name { $( $opts: $opts.clone(), )? $( $arg ),* }).await
            } )*

            async fn txn(&self, opts: &WriteOptions, ops: Vec<TxnOp>) -> Result<TxnResponse, RpcError> {
                let (mut out, index): (TxnResponse, u64) =
                    self.call(Call::txn { opts: opts.clone(), ops }).await?;
                out.index = index;
                Ok(out)
            }
        }
    };
}

/// The blocking wait a read asks for (none for writes).
trait BlockingWait {
    fn wait(&self) -> Option<Duration>;
}

impl BlockingWait for QueryOptions {
    fn wait(&self) -> Option<Duration> {
        // The server's own wait, plus its jitter of up to wait/16.
        (self.min_index > 0).then(|| self.effective_wait() * 17 / 16)
    }
}

impl BlockingWait for WriteOptions {
    fn wait(&self) -> Option<Duration> {
        None
    }
}

fn blocking_wait<T: BlockingWait>(opts: &T) -> Option<Duration> {
    opts.wait()
}

/// Whether a call goes to the leader: writes, and reads that are not
/// `?stale` (Consul's default and `?consistent` reads).
trait Forwards {
    fn forwards(&self) -> bool;
}

impl Forwards for QueryOptions {
    fn forwards(&self) -> bool {
        self.consistency != Consistency::Stale
    }
}

impl Forwards for WriteOptions {
    fn forwards(&self) -> bool {
        true
    }
}

fn forwards<T: Forwards>(opts: &T) -> bool {
    opts.forwards()
}

/// The staleness a read accepts (writes: none asked).
trait StaleLimit {
    fn max_stale(&self) -> Option<Duration>;
}

impl StaleLimit for QueryOptions {
    fn max_stale(&self) -> Option<Duration> {
        self.max_stale
    }
}

impl StaleLimit for WriteOptions {
    fn max_stale(&self) -> Option<Duration> {
        None
    }
}

fn max_stale_of<T: StaleLimit>(opts: &T) -> Option<Duration> {
    opts.max_stale()
}

/// The datacenter a call is for (empty: the local one).
trait Routed {
    fn datacenter(&self) -> &str;
}

impl Routed for QueryOptions {
    fn datacenter(&self) -> &str {
        &self.datacenter
    }
}

impl Routed for WriteOptions {
    fn datacenter(&self) -> &str {
        &self.datacenter
    }
}

fn datacenter_of<T: Routed>(opts: &T) -> &str {
    opts.datacenter()
}

/// The token a call carries.
trait Authenticated {
    fn token(&self) -> &str;
}

impl Authenticated for QueryOptions {
    fn token(&self) -> &str {
        &self.token
    }
}

impl Authenticated for WriteOptions {
    fn token(&self) -> &str {
        &self.token
    }
}

fn token_of<T: Authenticated>(opts: &T) -> &str {
    opts.token()
}

/// Work a server does with a call's token before answering it, such as
/// a secondary fetching from its primary a token it does not hold (so
/// the synchronous checks inside the call find it resolved).
#[async_trait]
pub trait TokenHook: Send + Sync + 'static {
    /// Readies `token` (a SecretID; empty for the anonymous token).
    async fn prepare(&self, token: &str);
}

/// `ServerRpc` over a local server whose calls first let a
/// [`TokenHook`] ready their tokens.
pub struct Prepared {
    inner: Arc<dyn ServerRpc>,
    hook: Arc<dyn TokenHook>,
}

impl Prepared {
    /// Calls to `inner`, each after `hook` readied its token.
    pub fn new(inner: Arc<dyn ServerRpc>, hook: Arc<dyn TokenHook>) -> Prepared {
        Prepared { inner, hook }
    }
}

/// Whether a call only reads, so repeating it after an unknown outcome
/// is harmless.
trait Idempotent {
    fn idempotent(&self) -> bool;
}

impl Idempotent for QueryOptions {
    fn idempotent(&self) -> bool {
        true
    }
}

impl Idempotent for WriteOptions {
    fn idempotent(&self) -> bool {
        false
    }
}

fn idempotent<T: Idempotent>(opts: &T) -> bool {
    opts.idempotent()
}

/// What a server knows about its cluster's leader.
pub trait Leadership: Send + Sync + 'static {
    /// This server leads.
    fn is_leader(&self) -> bool;
    /// The leader's server-port address, when one is known.
    fn leader_address(&self) -> Option<String>;
    /// Time since this server last heard from the leader (zero on the
    /// leader, or when unknown).
    fn last_contact(&self) -> Duration {
        Duration::ZERO
    }
}

/// Whether a call moves the leadership itself: its answer comes from
/// the leader it was sent to once another server leads, so a leader that
/// moves while it runs is its success, not a call lost in flight.
fn moves_the_leader(call: &str) -> bool {
    call == "raft_transfer_leader"
}

/// How many times a read lost in flight is asked again.
const MAX_READ_RETRIES: u32 = 10;

/// How often a call forwarded to the leader checks it still leads.
const LEADER_CHECK: Duration = Duration::from_millis(50);

/// How long a forwarded call keeps retrying while there is no leader or it
/// cannot be reached (Consul's `rpc_hold_timeout`).
const HOLD: Duration = Duration::from_secs(7);

enum Target {
    Local,
    Leader(String),
    NoLeader,
}

/// `ServerRpc` for a server in a cluster: writes and non-stale reads go to
/// the leader (this server's endpoints when it leads, the leader's over
/// the server port otherwise); stale reads and status calls are answered
/// here. While there is no leader, or it cannot be reached before the
/// request is sent, the call is retried for up to 7 s; a request that may
/// have reached a server is never retried. With a [`Router`], a call for
/// another datacenter goes through [`CrossDatacenter`].
pub struct Forwarding {
    local: Arc<dyn ServerRpc>,
    leadership: Arc<dyn Leadership>,
    pool: Arc<Pool>,
    cross: Option<Arc<CrossDatacenter>>,
}

impl Forwarding {
    /// Forwarding over `local` (this server's endpoints).
    pub fn new(
        local: Arc<dyn ServerRpc>,
        leadership: Arc<dyn Leadership>,
        pool: Arc<Pool>,
    ) -> Forwarding {
        Forwarding {
            local,
            leadership,
            pool,
            cross: None,
        }
    }

    /// Calls for other datacenters go where `router` says.
    pub fn with_router(self, router: Arc<Router>) -> Forwarding {
        let pool = self.pool.clone();
        self.with_cross(Arc::new(CrossDatacenter::new(router, pool)))
    }

    /// Calls for other datacenters go through `cross`.
    pub fn with_cross(mut self, cross: Arc<CrossDatacenter>) -> Forwarding {
        self.cross = Some(cross);
        self
    }

    /// Where a call for `datacenter` goes when it is not this one.
    fn cross_for(&self, datacenter: &str) -> Option<&CrossDatacenter> {
        let cross = self.cross.as_deref()?;
        cross.router.is_remote(datacenter).then_some(cross)
    }

    /// Whether this server lags the leader by more than a stale read
    /// accepts (Consul re-runs such reads on the leader).
    fn too_stale(&self, limit: Option<Duration>) -> bool {
        limit.is_some_and(|limit| {
            !self.leadership.is_leader() && self.leadership.last_contact() > limit
        })
    }

    fn target(&self, forward: bool) -> Target {
        if !forward || self.leadership.is_leader() {
            return Target::Local;
        }
        match self.leadership.leader_address() {
            Some(address) => Target::Leader(address),
            None => Target::NoLeader,
        }
    }

    /// Resolves once `address` is no longer the leader this server knows
    /// (an election started or ended elsewhere), with the error a call in
    /// flight to it ends with: a leader that lost its place may never
    /// answer, and waiting for the call's timeout would stall every
    /// forwarded request for that long.
    async fn leader_moved(&self, address: &str) -> RpcError {
        loop {
            tokio::time::sleep(LEADER_CHECK).await;
            if self.leadership.leader_address().as_deref() != Some(address) {
                return RpcError::Indeterminate(format!(
                    "the leader ({address}) changed while the request was in flight; it may have been applied"
                ));
            }
        }
    }

    /// Waits before another attempt when `result` says the leader was
    /// missing or unreachable (or, for a `read`, lost in flight); `false`
    /// when the caller should return it (including once `HOLD` has passed
    /// since the first attempt).
    async fn retry<T>(
        &self,
        forward: bool,
        read: bool,
        result: &Result<T, RpcError>,
        attempt: &mut u32,
        started: tokio::time::Instant,
    ) -> bool {
        let retriable = match result {
            Err(RpcError::NoLeader | RpcError::Unreachable(_)) => started.elapsed() < HOLD,
            // A read lost in flight (a blocking query may have waited for
            // minutes) is asked again, a bounded number of times.
            Err(RpcError::Indeterminate(_)) => read && *attempt < MAX_READ_RETRIES,
            _ => false,
        };
        if !forward || !retriable {
            return false;
        }
        tokio::time::sleep(backoff(*attempt)).await;
        *attempt += 1;
        true
    }
}

/// `ServerRpc` for calls to other datacenters: each goes to a server of
/// the datacenter its options name, which answers it as its own
/// (forwarding to its leader); a server that cannot be dialed is skipped
/// for the next, and a read lost in flight is asked of another. A call
/// that names no other datacenter is refused: this handle never reaches
/// the local one.
pub struct CrossDatacenter {
    router: Arc<Router>,
    pool: Arc<Pool>,
}

impl CrossDatacenter {
    /// Calls leave through `pool` to the servers `router` picks.
    pub fn new(router: Arc<Router>, pool: Arc<Pool>) -> CrossDatacenter {
        CrossDatacenter { router, pool }
    }

    /// The datacenter a call is for, when it is another one.
    fn remote<'a>(&self, datacenter: Option<&'a str>) -> Result<&'a str, RpcError> {
        match datacenter {
            Some(dc) if self.router.is_remote(dc) => Ok(dc),
            _ => Err(RpcError::Internal(
                "a cross-datacenter call must name another datacenter".into(),
            )),
        }
    }

    /// `true` when a call along `route` should go to another server of
    /// its datacenter: this one could not be reached, or (for a `read`) it
    /// never answered.
    fn failed<T>(
        &self,
        route: &Route,
        read: bool,
        result: &Result<T, RpcError>,
        tried: &mut Vec<String>,
    ) -> bool {
        let lost = lost_before_an_answer(read, result);
        if lost {
            self.router.failed_route(route);
            tried.push(route.server.clone());
        }
        lost
    }
}

/// `ServerRpc` for a client agent: every call goes to one of the servers
/// gossip knows (the last one that answered, else any); a server that
/// cannot be reached before the request is sent is skipped for the next.
/// The servers forward to their leader themselves.
pub struct ServerPool {
    servers: tokio::sync::watch::Receiver<Vec<String>>,
    pool: Arc<Pool>,
    preferred: std::sync::Mutex<Option<String>>,
}

impl ServerPool {
    /// Calls the servers in `servers` (their server-port addresses).
    pub fn new(servers: tokio::sync::watch::Receiver<Vec<String>>, pool: Arc<Pool>) -> ServerPool {
        ServerPool {
            servers,
            pool,
            preferred: std::sync::Mutex::new(None),
        }
    }

    /// A server not yet tried: the preferred one first. Waits up to 7 s for
    /// servers to be known (an agent that just joined).
    async fn pick(&self, tried: &[String]) -> Result<String, RpcError> {
        let mut servers = self.servers.clone();
        let deadline = tokio::time::Instant::now() + HOLD;
        loop {
            let known = servers.borrow_and_update().clone();
            let preferred = self
                .preferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .filter(|p| known.contains(p) && !tried.contains(p));
            let candidate = preferred.or_else(|| {
                let fresh: Vec<&String> = known.iter().filter(|s| !tried.contains(s)).collect();
                // Spread clients over servers.
                let at = (std::process::id() as usize + tried.len()) % fresh.len().max(1);
                fresh.get(at).map(|s| s.to_string())
            });
            if let Some(address) = candidate {
                return Ok(address);
            }
            if !tried.is_empty() {
                return Err(RpcError::Unreachable(format!(
                    "no server answered (tried {})",
                    tried.join(", ")
                )));
            }
            // A closed list (gossip stopped) ends the wait as a timeout does.
            match tokio::time::timeout_at(deadline, servers.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(RpcError::Internal("No known Consul servers".into())),
            }
        }
    }

    /// Records the outcome; `true` when another server should be tried:
    /// this one could not be reached, or (for a `read`) it was reached but
    /// never answered.
    fn failed_over<T>(
        &self,
        address: &str,
        read: bool,
        result: &Result<T, RpcError>,
        tried: &mut Vec<String>,
    ) -> bool {
        let mut preferred = self.preferred.lock().unwrap_or_else(|e| e.into_inner());
        let lost = lost_before_an_answer(read, result);
        if lost {
            if preferred.as_deref() == Some(address) {
                *preferred = None;
            }
            tried.push(address.to_string());
            return true;
        }
        *preferred = Some(address.to_string());
        false
    }
}

/// Whether another server should be asked: this one could not be
/// reached, or (for a `read`) it was reached but never answered.
fn lost_before_an_answer<T>(read: bool, result: &Result<T, RpcError>) -> bool {
    match result {
        Err(RpcError::Unreachable(_)) => true,
        Err(RpcError::Indeterminate(_)) => read,
        _ => false,
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((50u64 << attempt.min(4)).min(500))
}

server_rpc_calls! {
    status_leader(;) -> String;
    status_peers(;) -> Vec<String>;
    raft_configuration(opts: &QueryOptions;) -> RaftConfiguration;
    raft_remove_peer(opts: &WriteOptions; id_or_address: String) -> ();
    raft_transfer_leader(opts: &WriteOptions; id: String) -> ();
    autopilot_health(opts: &QueryOptions;) -> AutopilotHealth;
    autopilot_config(opts: &QueryOptions;) -> AutopilotConfiguration;
    autopilot_set_config(opts: &WriteOptions; config: AutopilotConfiguration, cas: Option<u64>) -> bool;
    operator_usage(opts: &QueryOptions;) -> Queried<legate_types::rpc::ServiceUsage>;
    snapshot_save(opts: &QueryOptions;) -> Queried<SnapshotArchive>;
    snapshot_restore(opts: &WriteOptions; archive: SnapshotArchive) -> ();
    catalog_register(opts: &WriteOptions; req: RegisterRequest) -> u64;
    catalog_deregister(opts: &WriteOptions; req: DeregisterRequest) -> u64;
    catalog_datacenters(;) -> Vec<String>;
    event_fire(opts: &QueryOptions; event: legate_types::event::UserEvent) -> ();
    coordinate_datacenters(;) -> Vec<legate_types::coordinate::DatacenterCoordinates>;
    coordinate_nodes(opts: &QueryOptions;) -> Queried<Vec<legate_types::coordinate::CoordinateEntry>>;
    coordinate_node(opts: &QueryOptions; node: String) -> Queried<Vec<legate_types::coordinate::CoordinateEntry>>;
    coordinate_update(opts: &WriteOptions; entry: legate_types::coordinate::CoordinateEntry) -> ();
    catalog_nodes(opts: &QueryOptions;) -> Queried<Vec<Node>>;
    catalog_services(opts: &QueryOptions;) -> Queried<BTreeMap<String, Vec<String>>>;
    catalog_service_nodes(opts: &QueryOptions; query: ServiceQuery) -> Queried<Vec<ServiceNode>>;
    catalog_node_services(opts: &QueryOptions; node: String) -> Queried<Option<NodeServices>>;
    health_node_checks(opts: &QueryOptions; node: String) -> Queried<Vec<HealthCheck>>;
    health_service_checks(opts: &QueryOptions; service: String) -> Queried<Vec<HealthCheck>>;
    health_checks_in_state(opts: &QueryOptions; state: Option<HealthStatus>) -> Queried<Vec<HealthCheck>>;
    health_service_nodes(opts: &QueryOptions; query: ServiceQuery) -> Queried<Vec<CheckServiceNode>>;
    kv_get(opts: &QueryOptions; key: String) -> Queried<Option<KvEntry>>;
    kv_list(opts: &QueryOptions; prefix: String) -> Queried<Vec<KvEntry>>;
    kv_keys(opts: &QueryOptions; prefix: String, separator: String) -> Queried<Vec<String>>;
    kv_apply(opts: &WriteOptions; op: KvOp) -> bool;
    session_create(opts: &WriteOptions; session: Session) -> String;
    session_destroy(opts: &WriteOptions; id: String) -> ();
    session_renew(opts: &WriteOptions; id: String) -> Option<Session>;
    session_info(opts: &QueryOptions; id: String) -> Queried<Vec<Session>>;
    session_list(opts: &QueryOptions;) -> Queried<Vec<Session>>;
    session_node(opts: &QueryOptions; node: String) -> Queried<Vec<Session>>;
    config_apply(opts: &WriteOptions; entry: ConfigEntry, cas: Option<u64>) -> bool;
    config_get(opts: &QueryOptions; kind: String, name: String) -> Queried<Option<ConfigEntry>>;
    config_list(opts: &QueryOptions; kind: String) -> Queried<Vec<ConfigEntry>>;
    config_list_all(opts: &QueryOptions; kinds: Vec<String>) -> Queried<Vec<ConfigEntry>>;
    discovery_chain(opts: &QueryOptions; service: String, compile_datacenter: String, overrides: ChainOverrides) -> Queried<serde_json::Value>;
    changes_since(opts: &QueryOptions; watched: Vec<(Watched, u64)>) -> Queried<Vec<u32>>;
    config_delete(opts: &WriteOptions; kind: String, name: String, cas: Option<u64>) -> bool;
    ca_roots(opts: &QueryOptions;) -> Queried<IndexedCaRoots>;
    ca_config_get(opts: &QueryOptions;) -> Queried<CaConfiguration>;
    ca_config_set(opts: &WriteOptions; config: CaConfiguration) -> ();
    ca_sign(opts: &WriteOptions; request: CaSignRequest) -> IssuedCert;
    ca_sign_intermediate(opts: &WriteOptions; csr: String) -> String;
    federation_state_apply(opts: &WriteOptions; op: legate_types::federation_state::FederationStateOp) -> ();
    federation_state_get(opts: &QueryOptions; datacenter: String) -> Queried<Option<legate_types::federation_state::FederationState>>;
    federation_state_list(opts: &QueryOptions;) -> Queried<Vec<legate_types::federation_state::FederationState>>;
    federation_state_mesh_gateways(opts: &QueryOptions;) -> Queried<BTreeMap<String, Vec<CheckServiceNode>>>;
    prepared_query_apply(opts: &WriteOptions; op: legate_types::prepared_query::PreparedQueryOp, query: legate_types::prepared_query::PreparedQuery) -> String;
    prepared_query_get(opts: &QueryOptions; id: String) -> Queried<Vec<legate_types::prepared_query::PreparedQuery>>;
    prepared_query_list(opts: &QueryOptions;) -> Queried<Vec<legate_types::prepared_query::PreparedQuery>>;
    prepared_query_execute(opts: &QueryOptions; request: legate_types::prepared_query::ExecuteRequest) -> Queried<legate_types::prepared_query::ExecuteResponse>;
    prepared_query_execute_remote(opts: &QueryOptions; request: legate_types::prepared_query::ExecuteRemoteRequest) -> Queried<legate_types::prepared_query::ExecuteResponse>;
    prepared_query_explain(opts: &QueryOptions; id_or_name: String) -> Queried<legate_types::prepared_query::ExplainResponse>;
    acl_bootstrap(opts: &WriteOptions;) -> legate_types::acl::AclToken;
    acl_token_set(opts: &WriteOptions; token: legate_types::acl::AclToken, create: bool) -> legate_types::acl::AclToken;
    acl_token_get(opts: &QueryOptions; accessor_id: String) -> Queried<Option<legate_types::acl::AclToken>>;
    acl_token_self(opts: &QueryOptions;) -> legate_types::acl::AclToken;
    acl_token_list(opts: &QueryOptions; filter: legate_types::acl::AclTokenFilter) -> Queried<Vec<legate_types::acl::AclToken>>;
    acl_token_delete(opts: &WriteOptions; accessor_id: String) -> ();
    acl_token_clone(opts: &WriteOptions; accessor_id: String, description: String) -> legate_types::acl::AclToken;
    acl_policy_set(opts: &WriteOptions; policy: legate_types::acl::AclPolicy, create: bool) -> legate_types::acl::AclPolicy;
    acl_policy_get(opts: &QueryOptions; id_or_name: String, by_name: bool) -> Queried<Option<legate_types::acl::AclPolicy>>;
    acl_policy_list(opts: &QueryOptions;) -> Queried<Vec<legate_types::acl::AclPolicy>>;
    acl_policy_delete(opts: &WriteOptions; id: String) -> ();
    acl_role_set(opts: &WriteOptions; role: legate_types::acl::AclRole, create: bool) -> legate_types::acl::AclRole;
    acl_role_get(opts: &QueryOptions; id_or_name: String, by_name: bool) -> Queried<Option<legate_types::acl::AclRole>>;
    acl_role_list(opts: &QueryOptions; policy: String) -> Queried<Vec<legate_types::acl::AclRole>>;
    acl_role_delete(opts: &WriteOptions; id: String) -> ();
    acl_auth_method_set(opts: &WriteOptions; method: legate_types::acl_auth::AclAuthMethod) -> legate_types::acl_auth::AclAuthMethod;
    acl_auth_method_get(opts: &QueryOptions; name: String) -> Queried<Option<legate_types::acl_auth::AclAuthMethod>>;
    acl_auth_method_list(opts: &QueryOptions;) -> Queried<Vec<legate_types::acl_auth::AclAuthMethod>>;
    acl_auth_method_delete(opts: &WriteOptions; name: String) -> ();
    acl_binding_rule_set(opts: &WriteOptions; rule: legate_types::acl_auth::AclBindingRule) -> legate_types::acl_auth::AclBindingRule;
    acl_binding_rule_get(opts: &QueryOptions; id: String) -> Queried<Option<legate_types::acl_auth::AclBindingRule>>;
    acl_binding_rule_list(opts: &QueryOptions; auth_method: String) -> Queried<Vec<legate_types::acl_auth::AclBindingRule>>;
    acl_binding_rule_delete(opts: &WriteOptions; id: String) -> ();
    acl_login(opts: &WriteOptions; request: legate_types::acl_auth::LoginRequest) -> legate_types::acl::AclToken;
    acl_logout(opts: &WriteOptions;) -> ();
    acl_resolve(opts: &QueryOptions;) -> legate_types::acl::AclIdentity;
    acl_resolve_for(opts: &QueryOptions; datacenter: String) -> legate_types::acl::AclIdentity;
    acl_replication_status(opts: &QueryOptions;) -> legate_types::acl::AclReplicationStatus;
    catalog_service_dump(opts: &QueryOptions; kind: String) -> Queried<Vec<CheckServiceNode>>;
    catalog_service_dump_all(opts: &QueryOptions;) -> Queried<Vec<CheckServiceNode>>;
    catalog_node_dump(opts: &QueryOptions; node: Option<String>) -> Queried<Vec<legate_types::ui::NodeInfo>>;
    catalog_service_topology(opts: &QueryOptions; service: String, kind: String) -> Queried<legate_types::ui::ServiceTopology>;
    catalog_overview(opts: &QueryOptions;) -> legate_types::ui::CatalogSummary;
    acl_authorize(opts: &QueryOptions; checks: Vec<legate_types::acl::AclAuthorizationCheck>) -> Vec<legate_types::acl::AclAuthorizationCheck>;
    intention_apply(opts: &WriteOptions; op: IntentionOp) -> String;
    intention_list(opts: &QueryOptions;) -> Queried<Vec<Intention>>;
    intention_get(opts: &QueryOptions; lookup: IntentionLookup) -> Queried<Option<Intention>>;
    intention_match(opts: &QueryOptions; by: MatchBy, names: Vec<String>) -> Queried<Vec<(String, Vec<Intention>)>>;
    intention_check(opts: &QueryOptions; source: String, destination: String) -> Queried<IntentionCheck>;
}

/// `ServerRpc` answered by a server at `address` over the server port.
pub struct RemoteRpc {
    address: String,
    pool: Arc<Pool>,
    datacenter: Option<String>,
    /// Through a mesh gateway: the gateway and the server's node name.
    gateway: Option<(String, Option<String>)>,
}

impl RemoteRpc {
    /// Calls go to `address` (`host:port`) through `pool`.
    pub fn new(address: impl Into<String>, pool: Arc<Pool>) -> RemoteRpc {
        RemoteRpc {
            address: address.into(),
            pool,
            datacenter: None,
            gateway: None,
        }
    }

    /// Calls go along `route` (to a server of another datacenter, maybe
    /// through a mesh gateway).
    pub fn routed(route: &Route, pool: Arc<Pool>) -> RemoteRpc {
        RemoteRpc {
            gateway: route.gateway.clone().map(|g| (g, route.node.clone())),
            ..RemoteRpc::new(route.server.clone(), pool).in_datacenter(&route.datacenter)
        }
    }

    /// Calls go to a server of another datacenter, whose TLS certificate
    /// must name `datacenter` (`server.<datacenter>.<domain>`).
    pub fn in_datacenter(mut self, datacenter: &str) -> RemoteRpc {
        self.datacenter = Some(datacenter.to_string());
        self
    }

    /// The server this client calls.
    pub fn address(&self) -> &str {
        &self.address
    }

    async fn call<T: serde::de::DeserializeOwned>(&self, call: Call) -> Result<T, RpcError> {
        let timeout = call.timeout();
        let request = serde_json::to_vec(&call).map_err(|e| RpcError::Internal(e.to_string()))?;
        // Consul's client-side counters: every RPC made, those that failed,
        // and those sent to another datacenter.
        metrics::counter!("client.rpc").increment(1);
        if let Some(datacenter) = &self.datacenter {
            metrics::counter!("rpc.cross-dc", "datacenter" => datacenter.clone()).increment(1);
        }
        let dial = Dial {
            address: &self.address,
            datacenter: self.datacenter.as_deref(),
            gateway: self.gateway.as_ref().map(|(g, _)| g.as_str()),
            node: self.gateway.as_ref().and_then(|(_, n)| n.as_deref()),
        };
        let answer = self
            .pool
            .call_dial(&dial, Kind::Rpc, &request, timeout)
            .await
            .map_err(|e| {
                metrics::counter!("client.rpc.failed").increment(1);
                if e.sent {
                    // Never retried as if it had not happened (reads may be).
                    RpcError::Indeterminate(format!(
                        "no answer from {} ({e}); the request may have been applied",
                        self.address
                    ))
                } else {
                    RpcError::Unreachable(format!("{}: {e}", self.address))
                }
            })?;
        let result: Result<serde_json::Value, RpcError> = serde_json::from_slice(&answer)
            .map_err(|e| RpcError::Internal(format!("bad answer from {}: {e}", self.address)))?;
        serde_json::from_value(result?)
            .map_err(|e| RpcError::Internal(format!("bad answer from {}: {e}", self.address)))
    }
}

/// Answers RPC frames with a local `ServerRpc`.
pub struct RpcHandler {
    rpc: Arc<dyn ServerRpc>,
}

/// The handler to route [`Kind::Rpc`] connections to.
pub fn serve_rpc(rpc: Arc<dyn ServerRpc>) -> Arc<RpcHandler> {
    Arc::new(RpcHandler { rpc })
}

#[async_trait]
impl FrameHandler for RpcHandler {
    async fn handle(&self, peer: SocketAddr, request: Vec<u8>) -> Vec<u8> {
        let result = match serde_json::from_slice::<Call>(&request) {
            Ok(call) => {
                metrics::counter!("rpc.request").increment(1);
                let result = dispatch(&*self.rpc, call).await;
                if result.is_err() {
                    metrics::counter!("rpc.request_error").increment(1);
                }
                result
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "{UNDECODABLE_CALL}");
                Err(RpcError::BadRequest(format!("{UNDECODABLE_CALL}: {e}")))
            }
        };
        serde_json::to_vec(&result).unwrap_or_else(|e| {
            serde_json::to_vec(&Err::<serde_json::Value, _>(RpcError::Internal(
                e.to_string(),
            )))
            .unwrap_or_default()
        })
    }
}
