//! The Aggregated Discovery Service: state-of-the-world
//! (`StreamAggregatedResources`) and incremental
//! (`DeltaAggregatedResources`) streams over the same snapshots.
//!
//! Per stream and type: versions are content hashes, every response gets a
//! fresh nonce, a request echoing an older nonce is stale and ignored, a
//! NACK (`error_detail`) is logged and the last good config stays (nothing
//! is resent until the snapshot changes). Delta streams remember what each
//! subscriber holds (seeded from `initial_resource_versions` on reconnect),
//! send only changed resources and name the removed ones.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use legate_proxycfg::ConnectProxySnapshot;
use tokio::sync::{mpsc, watch};
use tonic::{Status, Streaming};

use crate::held::{Held, Version};
use crate::published::{version_of, Memo, Published};
use crate::resources::{CLUSTER_TYPE, LISTENER_TYPE, TYPE_ORDER};

/// Where streams find the snapshots of a proxy.
pub trait SnapshotSource: Send + Sync + 'static {
    /// The snapshots of `proxy_id`, or `None` when no such proxy is registered.
    fn watch(&self, proxy_id: &str) -> Option<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>>;

    /// The listeners (upstream names) one session of a Connect-native
    /// service asks for; an empty set releases the session's interest.
    /// Sidecars ignore it: their upstreams are registered.
    fn want_upstreams(&self, proxy_id: &str, session: u64, names: BTreeSet<String>);
}

impl SnapshotSource for legate_proxycfg::Manager {
    fn watch(&self, proxy_id: &str) -> Option<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>> {
        legate_proxycfg::Manager::watch(self, proxy_id)
    }

    fn want_upstreams(&self, proxy_id: &str, session: u64, names: BTreeSet<String>) {
        legate_proxycfg::Manager::want_upstreams(self, proxy_id, session, names)
    }
}

/// The ACL side of ADS streams: whether a stream's token (`x-consul-token`)
/// may configure its proxy, and what that token may see of the proxy's
/// snapshots. Streams ask again whenever [`StreamAcl::changes`] moves and
/// end when the answer became a refusal.
#[tonic::async_trait]
pub trait StreamAcl: Send + Sync + 'static {
    /// Admits `token` for proxy `proxy_id` (Consul: `service:write` on its
    /// destination), or the status that ends the stream: `Unauthenticated`
    /// for an unknown token, `PermissionDenied` for a denied one.
    async fn admit(&self, proxy_id: &str, token: &str) -> Result<Arc<dyn SnapshotView>, Status>;

    /// Moves whenever tokens, policies or roles may have changed.
    fn changes(&self) -> watch::Receiver<u64>;
}

/// What one stream's token may see of its proxy's snapshots.
pub trait SnapshotView: Send + Sync {
    /// The part of `snapshot` this token may see (the same `Arc` when all).
    fn visible(&self, snapshot: &Arc<ConnectProxySnapshot>) -> Arc<ConnectProxySnapshot>;
}

/// A view that hides nothing (ACLs off).
pub struct SeeAll;

impl SnapshotView for SeeAll {
    fn visible(&self, snapshot: &Arc<ConnectProxySnapshot>) -> Arc<ConnectProxySnapshot> {
        snapshot.clone()
    }
}

/// What the ADS server records in the process metrics (`/v1/agent/metrics`):
/// pushes, NACKs and push latency per proxy, and the open streams.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Streams open now.
    streams: AtomicU64,
    /// Each proxy's recent pushes and last configuration.
    history: Arc<crate::history::PushHistory>,
}

impl Metrics {
    /// Records one response of `type_url` sent to `proxy`; `changed_at` is
    /// when the change it carries reached proxycfg: the push latency
    /// (`xds.server.push_latency`, a histogram in ms by resource type).
    fn observe_push(&self, proxy: &str, type_url: &str, changed_at: Option<std::time::Instant>) {
        metrics::counter!("xds.server.pushes", "proxy" => proxy.to_string()).increment(1);
        if let Some(at) = changed_at {
            let kind = type_url.rsplit('.').next().unwrap_or(type_url).to_string();
            metrics::histogram!(legate_telemetry::XDS_PUSH_LATENCY, "type" => kind)
                .record(legate_telemetry::millis_since(at));
        }
    }

    fn observe_nack(&self, proxy: &str) {
        metrics::counter!("xds.server.nacks", "proxy" => proxy.to_string()).increment(1);
    }

    /// Publishes the open-stream gauge (Consul's `xds.server.streams`,
    /// labelled with the xDS version).
    fn report_streams(open: u64) {
        metrics::gauge!("xds.server.streams", "version" => "v3").set(open as f64);
    }
}

/// The ADS service.
#[derive(Clone)]
pub struct AdsServer {
    source: Arc<dyn SnapshotSource>,
    acl: Option<Arc<dyn StreamAcl>>,
    metrics: Arc<Metrics>,
    memo: Arc<Memo>,
    update_rate: Arc<crate::update_rate::UpdateRate>,
}

impl AdsServer {
    /// A server over `source` that admits every stream.
    pub fn new(source: Arc<dyn SnapshotSource>) -> AdsServer {
        AdsServer {
            source,
            acl: None,
            metrics: Arc::new(Metrics::default()),
            memo: Arc::new(Memo::default()),
            update_rate: Arc::new(crate::update_rate::UpdateRate::default()),
        }
    }

    /// The same server, sending at most `per_second` new configurations
    /// a second across its streams (`xds.update_max_per_second`).
    pub fn with_update_rate(mut self, per_second: f64) -> AdsServer {
        self.update_rate = Arc::new(crate::update_rate::UpdateRate::new(per_second));
        self
    }

    /// The same server, admitting streams through `acl`.
    pub fn with_acl(mut self, acl: Arc<dyn StreamAcl>) -> AdsServer {
        self.acl = Some(acl);
        self
    }

    /// Each proxy's recent pushes and last configuration, as the agent's
    /// per-proxy page reads them.
    pub fn status_source(&self) -> Arc<dyn legate_types::proxy_status::ProxyStatusSource> {
        self.metrics.history.clone()
    }

    /// The tonic service (small per-stream buffers; see [`crate::ads_service`]).
    pub fn into_service(self) -> crate::ads_service::AdsService {
        crate::ads_service::AdsService::new(self)
    }
}

/// Types whose requests name no resources mean "all of them".
fn is_wildcard_type(type_url: &str) -> bool {
    type_url == LISTENER_TYPE || type_url == CLUSTER_TYPE
}

/// What a session queues for its stream. Boxed: a response is about 200
/// bytes, and the channel allocates a block of 32 slots per stream up
/// front, so unboxed items cost every idle stream over 6 KB.
type Outbound<R> = Box<Result<R, Status>>;

/// The responses one stream's session queues, in order; a `Status` ends
/// the stream with it.
pub(crate) type Responses<R> = mpsc::Receiver<Outbound<R>>;

/// How many responses a session may queue ahead of its stream.
const QUEUED_RESPONSES: usize = 16;

impl AdsServer {
    /// Opens a state-of-the-world stream (`StreamAggregatedResources`)
    /// for a client presenting `token`.
    pub(crate) fn open_sotw(
        &self,
        token: String,
        inbound: Streaming<DiscoveryRequest>,
    ) -> Responses<DiscoveryResponse> {
        self.open::<SotwSession>(token, inbound)
    }

    /// Opens an incremental stream (`DeltaAggregatedResources`) for a
    /// client presenting `token`.
    pub(crate) fn open_delta(
        &self,
        token: String,
        inbound: Streaming<DeltaDiscoveryRequest>,
    ) -> Responses<DeltaDiscoveryResponse> {
        self.open::<DeltaSession>(token, inbound)
    }

    /// Starts the task of one stream of protocol `P`.
    fn open<P: Protocol>(
        &self,
        token: String,
        inbound: Streaming<P::Request>,
    ) -> Responses<P::Response>
    where
        Streaming<P::Request>: Send,
    {
        let (tx, rx) = mpsc::channel(QUEUED_RESPONSES);
        tokio::spawn(drive(self.session::<P>(tx), self.gate(token), inbound));
        rx
    }

    /// A fresh session of protocol `P` sending into `tx`.
    fn session<P: Protocol>(&self, tx: mpsc::Sender<Outbound<P::Response>>) -> P {
        P::with_common(Common::new(
            self.source.clone(),
            self.metrics.clone(),
            self.memo.clone(),
            tx,
        ))
    }
}

/// Finds the proxy named by the first request's node id.
fn subscribe(
    source: &Arc<dyn SnapshotSource>,
    node_id: &str,
) -> Result<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>, Status> {
    if node_id.is_empty() {
        return Err(Status::invalid_argument(
            "the first request must carry a node id (the proxy's service id)",
        ));
    }
    source.watch(node_id).ok_or_else(|| {
        Status::not_found(format!(
            "no proxy with id {node_id:?} is registered with this agent"
        ))
    })
}

/// Waits for the next snapshot (or forever when there is no watch yet).
async fn next_snapshot(
    watch: &mut Option<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>>,
) -> Option<Option<Arc<ConnectProxySnapshot>>> {
    match watch {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(rx.borrow_and_update().clone()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// What the two ADS protocols share: finding the proxy from the first
/// request's node, following its snapshots, and ending the stream when it
/// is deregistered.
#[tonic::async_trait]
trait Protocol: Send + Sized + 'static {
    type Request: Send + Sync + 'static;
    type Response: Send + 'static;

    /// A fresh session around `common`.
    fn with_common(common: Common<Self::Response>) -> Self;
    fn node_of(request: &Self::Request) -> Option<&Node>;
    fn common(&mut self) -> &mut Common<Self::Response>;
    /// Handles one request; `false` when the stream is gone.
    async fn handle(&mut self, request: Self::Request) -> bool;
    /// Sends what a new snapshot changed; `false` when the stream is gone.
    async fn push_all(&mut self) -> bool;
}

/// Numbers sessions, for the upstream interests of native services.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

/// The certificate provider a proxyless client names in its node metadata.
fn certificate_provider_of(node: Option<&Node>) -> Option<String> {
    use envoy_types::pb::google::protobuf::value::Kind;
    let field = node?
        .metadata
        .as_ref()?
        .fields
        .get(crate::grpc::CERTIFICATE_PROVIDER_METADATA)?;
    match &field.kind {
        Some(Kind::StringValue(name)) if !name.is_empty() => Some(name.clone()),
        _ => None,
    }
}

/// The state every session has, whatever its protocol.
struct Common<R> {
    /// This session's number.
    session: u64,
    /// The certificate provider a proxyless client asked for.
    provider: Option<String>,
    changed_at: Option<std::time::Instant>,
    source: Arc<dyn SnapshotSource>,
    metrics: Arc<Metrics>,
    memo: Arc<Memo>,
    tx: mpsc::Sender<Outbound<R>>,
    node_id: String,
    resources: Option<Arc<Published>>,
    nonce: u64,
}

impl<R: Send> Common<R> {
    /// A fresh nonce for the next response of this stream.
    fn next_nonce(&mut self) -> String {
        self.nonce += 1;
        self.nonce.to_string()
    }

    /// Tells proxycfg which listeners this session wants (native services
    /// follow exactly the upstreams their clients dial).
    fn want_listeners(&self, names: &BTreeSet<String>) {
        if !self.node_id.is_empty() {
            self.source
                .want_upstreams(&self.node_id, self.session, names.clone());
        }
    }

    /// Sends one response of `type_url` (its nonce, how many resources it
    /// carries and removes) and records the push; `false` when the stream
    /// is gone.
    async fn send(&mut self, type_url: &str, shape: (&str, usize, usize), response: R) -> bool {
        let sent = self.tx.send(Box::new(Ok(response))).await.is_ok();
        self.metrics
            .observe_push(&self.node_id, type_url, self.changed_at);
        let (nonce, count, removed) = shape;
        self.metrics.history.sent(
            &self.node_id,
            self.session,
            self.resources.as_ref().map(|p| &p.resources),
            (type_url, nonce, count, removed),
        );
        sent
    }

    /// Records the proxy's answer (ACK, or NACK with `error`) to `nonce`.
    fn answered(&self, type_url: &str, nonce: &str, error: Option<&str>) {
        self.metrics
            .history
            .answered(&self.node_id, self.session, (type_url, nonce, error));
    }

    fn new(
        source: Arc<dyn SnapshotSource>,
        metrics: Arc<Metrics>,
        memo: Arc<Memo>,
        tx: mpsc::Sender<Outbound<R>>,
    ) -> Common<R> {
        Common {
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            provider: None,
            changed_at: None,
            source,
            metrics,
            memo,
            tx,
            node_id: String::new(),
            resources: None,
            nonce: 0,
        }
    }
}

/// How often an open stream's token is checked again even when no ACL
/// change was reported (Consul's xDS server checks every 5 minutes).
const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// One stream's admission: its token, what it may see, and the changes
/// that make it ask again.
struct Gate {
    acl: Option<Arc<dyn StreamAcl>>,
    token: String,
    view: Arc<dyn SnapshotView>,
    changes: Option<watch::Receiver<u64>>,
    /// When the token is checked again whatever happens meanwhile (a busy
    /// stream must not put it off).
    next_recheck: tokio::time::Instant,
    /// The pace new configurations go out at, shared by every stream.
    update_rate: Arc<crate::update_rate::UpdateRate>,
}

impl AdsServer {
    fn gate(&self, token: String) -> Gate {
        Gate {
            acl: self.acl.clone(),
            token,
            view: Arc::new(SeeAll),
            changes: None,
            next_recheck: tokio::time::Instant::now() + RECHECK_EVERY,
            update_rate: self.update_rate.clone(),
        }
    }
}

impl Gate {
    /// Asks (again) whether the token may configure `proxy_id`; the
    /// refusal is logged with its reason, since the proxy only sees a
    /// closed stream.
    async fn admit(&mut self, proxy_id: &str) -> Result<(), Status> {
        let Some(acl) = &self.acl else {
            return Ok(());
        };
        if self.changes.is_none() {
            // Followed before asking, so a change during the question is not missed.
            let mut changes = acl.changes();
            changes.borrow_and_update();
            self.changes = Some(changes);
        }
        self.next_recheck = tokio::time::Instant::now() + RECHECK_EVERY;
        match acl.admit(proxy_id, &self.token).await {
            Ok(view) => {
                self.view = view;
                Ok(())
            }
            Err(status) => {
                tracing::warn!(proxy = %proxy_id, code = ?status.code(), reason = %status.message(), "xDS stream refused by ACLs: the proxy gets no configuration");
                Err(status)
            }
        }
    }

    /// Waits until the stream's admission should be checked again.
    async fn recheck_due(&mut self) {
        let Some(changes) = &mut self.changes else {
            return std::future::pending().await;
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    self.changes = None;
                }
            }
            _ = tokio::time::sleep_until(self.next_recheck) => {}
        }
    }
}

/// What woke a stream's loop.
enum Event<R> {
    /// The next request (`None`: the client closed its side).
    Request(Result<Option<R>, Status>),
    /// A new snapshot (`Some(None)`: deregistered; `None`: proxycfg gone).
    Snapshot(Option<Option<Arc<ConnectProxySnapshot>>>),
    /// The stream's admission is due to be checked again.
    Recheck,
}

/// One stream between events: its protocol session, admission, the
/// snapshots it follows and the latest of them (before the token's view).
struct OpenStream<P> {
    session: P,
    gate: Gate,
    watch: Option<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>>,
    latest: Option<Arc<ConnectProxySnapshot>>,
}

async fn drive<P: Protocol>(session: P, gate: Gate, mut inbound: Streaming<P::Request>)
where
    Streaming<P::Request>: Send,
{
    let mut stream = OpenStream {
        session,
        gate,
        watch: None,
        latest: None,
    };
    let metrics = stream.session.common().metrics.clone();
    let open = metrics.streams.fetch_add(1, Ordering::Relaxed) + 1;
    Metrics::report_streams(open);
    loop {
        // Only the waiting lives in this task's future; each step runs in
        // a future of its own, so the tens of thousands of idle streams
        // do not each reserve room for the largest step.
        let event = tokio::select! {
            message = inbound.message() => Event::Request(message),
            snapshot = next_snapshot(&mut stream.watch) => Event::Snapshot(snapshot),
            () = stream.gate.recheck_due(), if stream.watch.is_some() => Event::Recheck,
        };
        if !Box::pin(stream.step(event)).await {
            break;
        }
    }
    stream.session.common().want_listeners(&BTreeSet::new());
    let open = metrics.streams.fetch_sub(1, Ordering::Relaxed) - 1;
    Metrics::report_streams(open);
}

impl<P: Protocol> OpenStream<P> {
    /// Handles one event; `false` when the stream ends.
    async fn step(&mut self, event: Event<P::Request>) -> bool {
        match event {
            Event::Request(message) => {
                let request = match message {
                    Ok(Some(r)) => r,
                    Ok(None) => return false,
                    Err(status) => {
                        tracing::debug!(node = %self.session.common().node_id, %status, "xDS stream ended");
                        // A request that does not decode ends the stream
                        // with its status (`Internal`, as gRPC's own
                        // servers answer), not with `OK`; to a client
                        // already gone, the send is a no-op.
                        let _ = self.session.common().tx.send(Box::new(Err(status))).await;
                        return false;
                    }
                };
                if self.watch.is_none() && !self.subscribe(&request).await {
                    return false;
                }
                self.session.handle(request).await
            }
            Event::Snapshot(snapshot) => self.follow(snapshot).await,
            Event::Recheck => self.recheck().await,
        }
    }

    /// Finds and admits the proxy the first request names; `false` (after
    /// telling the client why) when there is none or the token may not.
    async fn subscribe(&mut self, request: &P::Request) -> bool {
        let node = P::node_of(request);
        let id = node.map(|n| n.id.clone()).unwrap_or_default();
        let provider = certificate_provider_of(node);
        let admitted = match subscribe(&self.session.common().source, &id) {
            Ok(rx) => self.gate.admit(&id).await.map(|()| rx),
            Err(status) => Err(status),
        };
        match admitted {
            Ok(rx) => {
                let c = self.session.common();
                c.node_id = id;
                c.provider = provider;
                self.latest = rx.borrow().clone();
                self.watch = Some(rx);
                self.publish();
                true
            }
            Err(status) => {
                let _ = self.session.common().tx.send(Box::new(Err(status))).await;
                false
            }
        }
    }

    /// Makes the latest snapshot, as the token may see it, the resources
    /// the session sends.
    fn publish(&mut self) {
        let c = self.session.common();
        c.resources = self.latest.as_ref().map(|s| {
            c.memo.resources(
                &c.node_id,
                c.provider.as_deref(),
                &self.gate.view.visible(s),
            )
        });
    }

    /// Pushes what a new snapshot changed, or ends the stream when the
    /// proxy was deregistered.
    async fn follow(&mut self, snapshot: Option<Option<Arc<ConnectProxySnapshot>>>) -> bool {
        if let Some(Some(_)) = &snapshot {
            self.gate.update_rate.acquire().await;
        }
        // The newest snapshot once its turn came.
        let snapshot = match (snapshot, self.watch.as_mut()) {
            (Some(Some(_)), Some(rx)) => Some(rx.borrow_and_update().clone()),
            (other, _) => other,
        };
        let c = self.session.common();
        match snapshot {
            Some(Some(s)) => {
                c.changed_at = s.changed_at;
                self.latest = Some(s);
                self.publish();
                self.session.push_all().await
            }
            // Deregistered: end the stream.
            Some(None) | None => {
                c.memo.forget(&c.node_id);
                c.metrics.history.forget(&c.node_id);
                let gone = Status::not_found("the proxy was deregistered");
                let _ = c.tx.send(Box::new(Err(gone))).await;
                false
            }
        }
    }

    /// Asks again whether the token may configure the proxy, and pushes
    /// what it may now see of the same snapshot.
    async fn recheck(&mut self) -> bool {
        let id = self.session.common().node_id.clone();
        if let Err(status) = self.gate.admit(&id).await {
            let _ = self.session.common().tx.send(Box::new(Err(status))).await;
            return false;
        }
        // The token may now see more or less of the same snapshot.
        if self.latest.is_none() {
            return true;
        }
        self.publish();
        self.session.push_all().await
    }
}

#[derive(Default)]
struct SotwType {
    subscribed: bool,
    names: BTreeSet<String>,
    sent_version: Option<String>,
    nonce: String,
}

struct SotwSession {
    common: Common<DiscoveryResponse>,
    types: HashMap<String, SotwType>,
}

impl SotwSession {
    /// Handles one request; `false` when the stream is gone.
    async fn handle(&mut self, request: DiscoveryRequest) -> bool {
        let type_url = request.type_url.clone();
        let state = self.types.entry(type_url.clone()).or_default();
        if !request.response_nonce.is_empty() {
            if request.response_nonce != state.nonce {
                // An answer to an older response: ignore it entirely.
                return true;
            }
            let error = request.error_detail.as_ref().map(|e| e.message.as_str());
            self.common
                .answered(&type_url, &request.response_nonce, error);
            if let Some(error) = &request.error_detail {
                self.common.metrics.observe_nack(&self.common.node_id);
                tracing::warn!(node = %self.common.node_id, type_url = %type_url, version = %request.version_info, error = %error.message, "xDS NACK: the proxy rejected the config; keeping the last good one");
                return true;
            }
        }
        let names: BTreeSet<String> = request.resource_names.iter().cloned().collect();
        let changed = !state.subscribed || names != state.names;
        state.subscribed = true;
        state.names = names;
        if changed && type_url == LISTENER_TYPE {
            self.common.want_listeners(&state.names);
        }
        if changed || state.sent_version.is_none() {
            return self.push(&type_url, true).await;
        }
        true
    }

    async fn push_all(&mut self) -> bool {
        for type_url in TYPE_ORDER {
            if self.types.get(type_url).is_some_and(|t| t.subscribed)
                && !self.push(type_url, false).await
            {
                return false;
            }
        }
        true
    }

    /// Sends the type's resources when their version changed (or `force`).
    async fn push(&mut self, type_url: &str, force: bool) -> bool {
        let Some(published) = self.common.resources.clone() else {
            return true;
        };
        let resources = &published.resources;
        let empty = BTreeMap::new();
        let all = resources.of(type_url).unwrap_or(&empty);
        let state = self.types.entry(type_url.to_string()).or_default();
        if resources.proxyless
            && type_url == LISTENER_TYPE
            && state.names.iter().any(|name| !all.contains_key(name))
        {
            // gRPC reads a listener missing from a response as deleted:
            // answer once proxycfg has built every listener asked for.
            return true;
        }
        let selected: Vec<(&String, &Any)> = all
            .iter()
            .filter(|(name, _)| {
                (is_wildcard_type(type_url) && state.names.is_empty())
                    || state.names.contains(*name)
            })
            .collect();
        let version = version_of(selected.iter().copied());
        if !force && state.sent_version.as_deref() == Some(version.as_str()) {
            return true;
        }
        let nonce = self.common.next_nonce();
        state.sent_version = Some(version.clone());
        state.nonce = nonce.clone();
        let count = selected.len();
        let response = DiscoveryResponse {
            version_info: version,
            resources: selected.into_iter().map(|(_, a)| a.clone()).collect(),
            type_url: type_url.to_string(),
            nonce: nonce.clone(),
            ..Default::default()
        };
        self.common
            .send(type_url, (&nonce, count, 0), response)
            .await
    }
}

#[tonic::async_trait]
impl Protocol for SotwSession {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;

    fn with_common(common: Common<DiscoveryResponse>) -> SotwSession {
        SotwSession {
            common,
            types: HashMap::new(),
        }
    }

    fn node_of(request: &DiscoveryRequest) -> Option<&Node> {
        request.node.as_ref()
    }

    fn common(&mut self) -> &mut Common<DiscoveryResponse> {
        &mut self.common
    }

    async fn handle(&mut self, request: DiscoveryRequest) -> bool {
        SotwSession::handle(self, request).await
    }

    async fn push_all(&mut self) -> bool {
        SotwSession::push_all(self).await
    }
}

#[derive(Default)]
struct DeltaType {
    wildcard: bool,
    names: BTreeSet<String>,
    /// What the client holds: name -> version.
    held: Held,
    nonce: String,
    started: bool,
}

struct DeltaSession {
    common: Common<DeltaDiscoveryResponse>,
    types: HashMap<String, DeltaType>,
}

impl DeltaSession {
    async fn handle(&mut self, request: DeltaDiscoveryRequest) -> bool {
        let type_url = request.type_url.clone();
        let state = self.types.entry(type_url.clone()).or_default();
        // The nonce only classifies ACK/NACK; subscription changes always apply
        // (Envoy attaches them to ACKs, possibly of an older response).
        if !request.response_nonce.is_empty() && request.response_nonce == state.nonce {
            let error = request.error_detail.as_ref().map(|e| e.message.as_str());
            self.common
                .answered(&type_url, &request.response_nonce, error);
            if let Some(error) = &request.error_detail {
                self.common.metrics.observe_nack(&self.common.node_id);
                tracing::warn!(node = %self.common.node_id, type_url = %type_url, error = %error.message, "xDS NACK: the proxy rejected the config; keeping the last good one");
                // Forget what we thought it holds, so the next change resends
                // everything of this type (nothing is lost to one bad resource).
                state.held.clear();
            }
        }
        if !state.started {
            state.started = true;
            // The first request of a type: wildcard unless it names resources.
            state.wildcard = is_wildcard_type(&type_url)
                && (request.resource_names_subscribe.is_empty()
                    || request.resource_names_subscribe.iter().any(|n| n == "*"));
            let mut initial: Vec<(&String, &String)> =
                request.initial_resource_versions.iter().collect();
            initial.sort_unstable();
            state.held.merge(
                initial
                    .into_iter()
                    .map(|(name, version)| (name.as_str(), Version::parse(version))),
            );
        }
        let mut changed = false;
        // Names whose held version is forgotten, all at once.
        let mut forget: HashSet<&str> = HashSet::new();
        for name in &request.resource_names_subscribe {
            if name == "*" {
                changed |= !state.wildcard;
                state.wildcard = true;
            } else {
                state.names.insert(name.clone());
                // A (re)subscription is answered with the resource, even if
                // we believe the client has it; unless it told us its version.
                if !request.initial_resource_versions.contains_key(name) {
                    forget.insert(name);
                }
                changed = true;
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                changed |= state.wildcard;
                state.wildcard = false;
            } else if state.names.remove(name) {
                forget.insert(name);
                changed = true;
            }
        }
        if !forget.is_empty() {
            state.held.retain(|name| !forget.contains(name));
        }
        if changed && type_url == LISTENER_TYPE {
            self.common.want_listeners(&state.names);
        }
        let first = request.response_nonce.is_empty();
        if changed || first {
            return self.push(&type_url, first).await;
        }
        true
    }

    async fn push_all(&mut self) -> bool {
        for type_url in TYPE_ORDER {
            if self.types.get(type_url).is_some_and(|t| t.started)
                && !self.push(type_url, false).await
            {
                return false;
            }
        }
        true
    }

    /// Sends what changed for the type since the client's last view
    /// (with `always`, even an empty response, so a first request is answered).
    async fn push(&mut self, type_url: &str, always: bool) -> bool {
        let Some(published) = self.common.resources.clone() else {
            return true;
        };
        let (all, all_version) = published.of(type_url);
        let state = self.types.entry(type_url.to_string()).or_default();
        let wanted = |name: &str| state.wildcard || state.names.contains(name);
        let mut updated = Vec::new();
        for &(name, any, hash) in all.iter().filter(|(n, _, _)| wanted(n)) {
            if !state.held.holds(name, hash) {
                updated.push((
                    hash,
                    Resource {
                        name: name.clone(),
                        version: Version::text(hash),
                        resource: Some(any.clone()),
                        ..Default::default()
                    },
                ));
            }
        }
        let present = |name: &str| {
            all.binary_search_by(|(n, _, _)| n.as_str().cmp(name))
                .is_ok()
        };
        let removed: Vec<String> = state
            .held
            .names()
            .filter(|name| !present(name) || !wanted(name))
            .map(str::to_string)
            .collect();
        if updated.is_empty() && removed.is_empty() && !always {
            return true;
        }
        // Both lists are in name order (they come from sorted maps).
        state.held.merge(
            updated
                .iter()
                .map(|(hash, r)| (r.name.as_str(), Version::Ours(*hash))),
        );
        if !removed.is_empty() {
            state
                .held
                .retain(|name| removed.binary_search_by(|r| r.as_str().cmp(name)).is_err());
        }
        let updated: Vec<Resource> = updated.into_iter().map(|(_, r)| r).collect();
        let nonce = self.common.next_nonce();
        state.nonce = nonce.clone();
        let shape = (updated.len(), removed.len());
        let response = DeltaDiscoveryResponse {
            system_version_info: all_version,
            resources: updated,
            type_url: type_url.to_string(),
            removed_resources: removed,
            nonce: nonce.clone(),
            ..Default::default()
        };
        self.common
            .send(type_url, (&nonce, shape.0, shape.1), response)
            .await
    }
}

#[tonic::async_trait]
impl Protocol for DeltaSession {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;

    fn with_common(common: Common<DeltaDiscoveryResponse>) -> DeltaSession {
        DeltaSession {
            common,
            types: HashMap::new(),
        }
    }

    fn node_of(request: &DeltaDiscoveryRequest) -> Option<&Node> {
        request.node.as_ref()
    }

    fn common(&mut self) -> &mut Common<DeltaDiscoveryResponse> {
        &mut self.common
    }

    async fn handle(&mut self, request: DeltaDiscoveryRequest) -> bool {
        DeltaSession::handle(self, request).await
    }

    async fn push_all(&mut self) -> bool {
        DeltaSession::push_all(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoProxies;

    impl SnapshotSource for NoProxies {
        fn watch(&self, _: &str) -> Option<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>> {
            None
        }
        fn want_upstreams(&self, _: &str, _: u64, _: BTreeSet<String>) {}
    }

    /// Every open stream is a task whose future is as large as its largest
    /// state; the steps run in futures of their own so that the waiting
    /// state (what tens of thousands of idle streams hold) stays small.
    /// It was 3.5 KB when the steps ran inline.
    #[test]
    fn an_idle_stream_task_stays_small() {
        let server = AdsServer::new(Arc::new(NoProxies));
        let (tx, _rx) = mpsc::channel(QUEUED_RESPONSES);
        let session = server.session::<DeltaSession>(tx);
        let inbound = Streaming::new_request(
            tonic_prost::ProstDecoder::<DeltaDiscoveryRequest>::new(Default::default()),
            tonic::body::Body::empty(),
            None,
            None,
        );
        let task = drive(session, server.gate(String::new()), inbound);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 2048, "a stream's task takes {size} bytes");
    }
}
