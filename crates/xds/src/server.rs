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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use futures::Stream;
use legate_proxycfg::ConnectProxySnapshot;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::resources::{self, Resources, CLUSTER_TYPE, LISTENER_TYPE, TYPE_ORDER};

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

/// Resources generated once per snapshot and shared by every stream of
/// that proxy (and, for proxyless clients, certificate provider).
#[derive(Default)]
struct Memo {
    by_proxy: std::sync::Mutex<HashMap<(String, Option<String>), Generated>>,
}

/// A snapshot with the resources generated from it.
type Generated = (Arc<ConnectProxySnapshot>, Arc<Resources>);

impl Memo {
    fn forget(&self, proxy_id: &str) {
        self.by_proxy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _), _| id != proxy_id);
    }

    /// The resources of a snapshot: Envoy's shapes for a sidecar, gRPC's
    /// for a native service (with mTLS through `provider` when named).
    fn resources(
        &self,
        proxy_id: &str,
        provider: Option<&str>,
        snapshot: &Arc<ConnectProxySnapshot>,
    ) -> Arc<Resources> {
        let key = (proxy_id.to_string(), provider.map(str::to_string));
        let mut map = self.by_proxy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cached, resources)) = map.get(&key) {
            if Arc::ptr_eq(cached, snapshot) {
                return resources.clone();
            }
        }
        let resources = Arc::new(if snapshot.native {
            crate::grpc::generate(snapshot, provider)
        } else {
            resources::generate(snapshot)
        });
        map.insert(key, (snapshot.clone(), resources.clone()));
        resources
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

    /// The tonic service.
    pub fn into_service(self) -> AggregatedDiscoveryServiceServer<AdsServer> {
        AggregatedDiscoveryServiceServer::new(self)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }
}

/// FNV-1a over the encoded resources: a version that changes exactly when
/// the content does.
fn version_of<'a>(items: impl Iterator<Item = (&'a String, &'a Any)>) -> String {
    let mut hash: u64 = 0xcbf29ce484222325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= *b as u64;
            hash = hash.wrapping_mul(0x100000001b3);
        }
    };
    for (name, any) in items {
        feed(name.as_bytes());
        feed(any.type_url.as_bytes());
        feed(&any.value);
    }
    format!("{hash:016x}")
}

pub(crate) fn resource_version(name: &String, any: &Any) -> String {
    version_of(std::iter::once((name, any)))
}

/// Types whose requests name no resources mean "all of them".
fn is_wildcard_type(type_url: &str) -> bool {
    type_url == LISTENER_TYPE || type_url == CLUSTER_TYPE
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn token_of<T>(request: &Request<T>) -> String {
    request
        .metadata()
        .get("x-consul-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for AdsServer {
    type StreamAggregatedResourcesStream = ResponseStream<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = ResponseStream<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let token = token_of(&request);
        let (tx, rx) = mpsc::channel(16);
        let session = SotwSession::new(
            self.source.clone(),
            self.metrics.clone(),
            self.memo.clone(),
            tx,
        );
        tokio::spawn(drive(session, self.gate(token), request.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        let token = token_of(&request);
        let (tx, rx) = mpsc::channel(16);
        let session = DeltaSession::new(
            self.source.clone(),
            self.metrics.clone(),
            self.memo.clone(),
            tx,
        );
        tokio::spawn(drive(session, self.gate(token), request.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
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
    type Request: Send + 'static;
    type Response: Send + 'static;

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
    tx: mpsc::Sender<Result<R, Status>>,
    node_id: String,
    resources: Option<Arc<Resources>>,
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
        let sent = self.tx.send(Ok(response)).await.is_ok();
        self.metrics
            .observe_push(&self.node_id, type_url, self.changed_at);
        let (nonce, count, removed) = shape;
        self.metrics.history.sent(
            &self.node_id,
            self.session,
            self.resources.as_ref(),
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
        tx: mpsc::Sender<Result<R, Status>>,
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

async fn drive<P: Protocol>(mut session: P, mut gate: Gate, mut inbound: Streaming<P::Request>)
where
    Streaming<P::Request>: Send,
{
    let metrics = session.common().metrics.clone();
    let open = metrics.streams.fetch_add(1, Ordering::Relaxed) + 1;
    Metrics::report_streams(open);
    let mut watch = None;
    // The latest snapshot as proxycfg made it, before the token's view.
    let mut latest: Option<Arc<ConnectProxySnapshot>> = None;
    loop {
        tokio::select! {
            message = inbound.message() => {
                let request = match message {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(node = %session.common().node_id, %status, "xDS stream ended");
                        break;
                    }
                };
                if watch.is_none() {
                    let node = P::node_of(&request);
                    let id = node.map(|n| n.id.clone()).unwrap_or_default();
                    let provider = certificate_provider_of(node);
                    let admitted = match subscribe(&session.common().source, &id) {
                        Ok(rx) => gate.admit(&id).await.map(|()| rx),
                        Err(status) => Err(status),
                    };
                    let c = session.common();
                    match admitted {
                        Ok(rx) => {
                            latest = rx.borrow().clone();
                            c.resources = latest.as_ref().map(|s| {
                                c.memo.resources(&id, provider.as_deref(), &gate.view.visible(s))
                            });
                            c.node_id = id;
                            c.provider = provider;
                            watch = Some(rx);
                        }
                        Err(status) => {
                            let _ = c.tx.send(Err(status)).await;
                            break;
                        }
                    }
                }
                if !session.handle(request).await {
                    break;
                }
            }
            snapshot = next_snapshot(&mut watch) => {
                if let Some(Some(_)) = &snapshot {
                    gate.update_rate.acquire().await;
                }
                // The newest snapshot once its turn came.
                let snapshot = match (snapshot, watch.as_mut()) {
                    (Some(Some(_)), Some(rx)) => Some(rx.borrow_and_update().clone()),
                    (other, _) => other,
                };
                let c = session.common();
                match snapshot {
                    Some(Some(s)) => {
                        c.changed_at = s.changed_at;
                        c.resources = Some(c.memo.resources(
                            &c.node_id,
                            c.provider.as_deref(),
                            &gate.view.visible(&s),
                        ));
                        latest = Some(s);
                        if !session.push_all().await {
                            break;
                        }
                    }
                    // Deregistered: end the stream.
                    Some(None) | None => {
                        c.memo.forget(&c.node_id);
                        c.metrics.history.forget(&c.node_id);
                        let _ = c.tx.send(Err(Status::not_found("the proxy was deregistered"))).await;
                        break;
                    }
                }
            }
            () = gate.recheck_due(), if watch.is_some() => {
                let id = session.common().node_id.clone();
                if let Err(status) = gate.admit(&id).await {
                    let _ = session.common().tx.send(Err(status)).await;
                    break;
                }
                // The token may now see more or less of the same snapshot.
                if let Some(s) = &latest {
                    let c = session.common();
                    c.resources = Some(c.memo.resources(&id, c.provider.as_deref(), &gate.view.visible(s)));
                    if !session.push_all().await {
                        break;
                    }
                }
            }
        }
    }
    session.common().want_listeners(&BTreeSet::new());
    let open = metrics.streams.fetch_sub(1, Ordering::Relaxed) - 1;
    Metrics::report_streams(open);
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
    fn new(
        source: Arc<dyn SnapshotSource>,
        metrics: Arc<Metrics>,
        memo: Arc<Memo>,
        tx: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    ) -> SotwSession {
        SotwSession {
            common: Common::new(source, metrics, memo, tx),
            types: HashMap::new(),
        }
    }

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
        let Some(resources) = self.common.resources.clone() else {
            return true;
        };
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
    held: BTreeMap<String, String>,
    nonce: String,
    started: bool,
}

struct DeltaSession {
    common: Common<DeltaDiscoveryResponse>,
    types: HashMap<String, DeltaType>,
}

impl DeltaSession {
    fn new(
        source: Arc<dyn SnapshotSource>,
        metrics: Arc<Metrics>,
        memo: Arc<Memo>,
        tx: mpsc::Sender<Result<DeltaDiscoveryResponse, Status>>,
    ) -> DeltaSession {
        DeltaSession {
            common: Common::new(source, metrics, memo, tx),
            types: HashMap::new(),
        }
    }

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
            for (name, version) in &request.initial_resource_versions {
                state.held.insert(name.clone(), version.clone());
            }
        }
        let mut changed = false;
        for name in &request.resource_names_subscribe {
            if name == "*" {
                changed |= !state.wildcard;
                state.wildcard = true;
            } else {
                state.names.insert(name.clone());
                // A (re)subscription is answered with the resource, even if
                // we believe the client has it; unless it told us its version.
                if !request.initial_resource_versions.contains_key(name) {
                    state.held.remove(name);
                }
                changed = true;
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                changed |= state.wildcard;
                state.wildcard = false;
            } else if state.names.remove(name) {
                state.held.remove(name);
                changed = true;
            }
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
        let Some(resources) = self.common.resources.clone() else {
            return true;
        };
        let empty = BTreeMap::new();
        let all = resources.of(type_url).unwrap_or(&empty);
        let state = self.types.entry(type_url.to_string()).or_default();
        let wanted = |name: &String| state.wildcard || state.names.contains(name);
        let mut updated = Vec::new();
        for (name, any) in all.iter().filter(|(n, _)| wanted(n)) {
            let version = resource_version(name, any);
            if state.held.get(name) != Some(&version) {
                updated.push(Resource {
                    name: name.clone(),
                    version: version.clone(),
                    resource: Some(any.clone()),
                    ..Default::default()
                });
            }
        }
        let removed: Vec<String> = state
            .held
            .keys()
            .filter(|name| !all.contains_key(*name) || !wanted(name))
            .cloned()
            .collect();
        if updated.is_empty() && removed.is_empty() && !always {
            return true;
        }
        for r in &updated {
            state.held.insert(r.name.clone(), r.version.clone());
        }
        for name in &removed {
            state.held.remove(name);
        }
        let nonce = self.common.next_nonce();
        state.nonce = nonce.clone();
        let shape = (updated.len(), removed.len());
        let response = DeltaDiscoveryResponse {
            system_version_info: version_of(all.iter()),
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
