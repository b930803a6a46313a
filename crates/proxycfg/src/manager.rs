//! The manager: a task per proxy that follows the proxy's data sources and
//! publishes a new snapshot (debounced) whenever one of them changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{Stream, StreamExt};
use legate_chain::compile::Target;
use legate_chain::CompiledChain;
use legate_types::connect::{IndexedCaRoots, IssuedCert};
use legate_types::intention::Intention;
use legate_types::{CheckServiceNode, ConnectProxyConfig, Upstream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::snapshot::{
    ConnectProxySnapshot, Endpoint, QueryEndpoint, QueryUpstreamSnapshot, SharedUpstream,
    TargetEndpoints, UpstreamSnapshot,
};
use crate::subscriptions::Subscriptions;

/// How long changes are gathered before a snapshot is published.
pub const DEBOUNCE: Duration = Duration::from_millis(20);

/// A value read at an index.
#[derive(Debug, Clone)]
pub struct Fetched<T> {
    /// The index of the read (blocking reads wait for one past `min_index`).
    pub index: u64,
    /// The value.
    pub value: T,
}

impl<T> From<legate_types::Queried<T>> for Fetched<T> {
    fn from(q: legate_types::Queried<T>) -> Fetched<T> {
        Fetched {
            index: q.meta.index,
            value: q.value,
        }
    }
}

/// Where a proxy's inputs come from. Every read blocks until the index
/// passes `min_index` (or a server-side wait runs out).
#[async_trait]
pub trait DataSources: Send + Sync + 'static {
    /// The CA roots.
    async fn roots(&self, min_index: u64) -> Result<Fetched<IndexedCaRoots>, String>;
    /// The leaf certificate of `service`.
    async fn leaf(&self, service: &str, min_index: u64) -> Result<Fetched<IssuedCert>, String>;
    /// The intentions whose destination covers `destination`, in evaluation order.
    async fn intentions(
        &self,
        destination: &str,
        min_index: u64,
    ) -> Result<Fetched<Arc<Vec<Intention>>>, String>;
    /// The compiled chain of `service` as seen from `datacenter`, with
    /// `mesh_gateway_mode` (when not empty) overriding the entries'
    /// (Consul's `OverrideMeshGateway`).
    async fn chain(
        &self,
        service: &str,
        datacenter: &str,
        mesh_gateway_mode: &str,
        min_index: u64,
    ) -> Result<Fetched<Arc<CompiledChain>>, String>;
    /// The mesh endpoints (sidecars or native instances) of one target.
    async fn endpoints(
        &self,
        target: &Target,
        min_index: u64,
    ) -> Result<Fetched<Vec<Endpoint>>, String>;
    /// What intentions decide when none matches.
    fn default_allow(&self) -> bool;

    /// The names of the services in `datacenter`'s catalog (a mesh
    /// gateway's local services).
    async fn services(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<String>>, String> {
        let _ = (datacenter, min_index);
        Err("this source serves no mesh gateways".into())
    }

    /// The `mesh-gateway` instances in `datacenter`'s catalog.
    async fn mesh_gateways(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<CheckServiceNode>>, String> {
        let _ = (datacenter, min_index);
        Err("this source serves no mesh gateways".into())
    }

    /// Every datacenter's gateways as the federation states (replicated
    /// from the primary) name them.
    async fn federation_gateways(
        &self,
        min_index: u64,
    ) -> Result<Fetched<BTreeMap<String, Vec<CheckServiceNode>>>, String> {
        let _ = min_index;
        Err("this source serves no mesh gateways".into())
    }

    /// The `service-resolver` entries of `datacenter` (a mesh gateway's
    /// subsets and connect timeouts).
    async fn resolvers(
        &self,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<Vec<legate_types::config_entry::ConfigEntry>>, String> {
        let _ = (datacenter, min_index);
        Err("this source serves no mesh gateways".into())
    }

    /// The instances of `datacenter`'s servers (the `consul` service), for
    /// a gateway that carries their traffic.
    async fn servers(
        &self,
        _datacenter: &str,
        _min_index: u64,
    ) -> Result<Fetched<Vec<CheckServiceNode>>, String> {
        Err("servers are not available from these sources".into())
    }

    /// The datacenters known now (not blocking).
    async fn datacenters(&self) -> Result<Vec<String>, String> {
        Err("this source serves no mesh gateways".into())
    }

    /// Follows the compiled chain of `service` as seen from `datacenter`:
    /// every value newer than the last. By default, blocking reads of
    /// [`DataSources::chain`]; a source that keeps values itself answers
    /// from them, without a task or a read in flight per upstream.
    fn follow_chain(
        self: Arc<Self>,
        service: String,
        datacenter: String,
        mesh_gateway_mode: String,
    ) -> Subscription<Arc<CompiledChain>> {
        follow_reads(move |index| {
            let (sources, service, datacenter, mode) = (
                self.clone(),
                service.clone(),
                datacenter.clone(),
                mesh_gateway_mode.clone(),
            );
            async move { sources.chain(&service, &datacenter, &mode, index).await }
        })
    }

    /// Runs the prepared query `query` (an ID or a name) in `datacenter`
    /// for mesh instances (`Connect = true`), failover included.
    async fn prepared_query(
        &self,
        query: &str,
        datacenter: &str,
    ) -> Result<Vec<QueryEndpoint>, String> {
        let _ = (query, datacenter);
        Err("this source runs no prepared queries".into())
    }

    /// Follows a prepared query's answer: by default
    /// [`DataSources::prepared_query`] run every
    /// [`crate::prepared_query::QUERY_REFRESH`].
    fn follow_prepared_query(
        self: Arc<Self>,
        query: String,
        datacenter: String,
    ) -> Subscription<Vec<QueryEndpoint>> {
        crate::prepared_query::poll_query(
            move || {
                let (sources, query, datacenter) =
                    (self.clone(), query.clone(), datacenter.clone());
                async move { sources.prepared_query(&query, &datacenter).await }
            },
            crate::prepared_query::QUERY_REFRESH,
        )
    }

    /// Follows the endpoints of one target, as [`DataSources::follow_chain`]
    /// follows a chain.
    fn follow_endpoints(self: Arc<Self>, target: Target) -> Subscription<Vec<Endpoint>> {
        follow_reads(move |index| {
            let (sources, target) = (self.clone(), target.clone());
            async move { sources.endpoints(&target, index).await }
        })
    }
}

/// A data source followed over time: each item is a newer value.
pub type Subscription<T> = Pin<Box<dyn Stream<Item = T> + Send>>;

/// Follows blocking reads: each value read at a new index (failures are
/// retried after a growing pause).
pub(crate) fn follow_reads<T, F, Fut>(read: F) -> Subscription<T>
where
    T: Send + 'static,
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Fetched<T>, String>> + Send + 'static,
{
    Box::pin(futures::stream::unfold(
        (read, 0u64),
        |(read, mut index)| async move {
            let mut failures = 0u32;
            loop {
                match read(index).await {
                    Ok(fetched) if fetched.index == index && index != 0 => failures = 0,
                    Ok(fetched) => {
                        index = fetched.index;
                        return Some((fetched.value, (read, index)));
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::debug!(error = %e, "proxycfg data source failed; retrying");
                        tokio::time::sleep(retry_pause(failures)).await;
                    }
                }
            }
        },
    ))
}

/// The pause before retrying a data source after `failures` failures.
fn retry_pause(failures: u32) -> Duration {
    Duration::from_millis(100 * 2u64.pow(failures.min(6)))
}

/// A local proxy as the agent registered it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyRegistration {
    /// Service id (the xDS node id).
    pub proxy_id: String,
    /// Service name.
    pub service: String,
    /// Address of the public listener.
    pub address: String,
    /// Port of the public listener.
    pub port: u16,
    /// The `Proxy` block.
    pub proxy: ConnectProxyConfig,
    /// This agent's datacenter.
    pub datacenter: String,
    /// A Connect-native service served proxyless (gRPC's own xDS client):
    /// no public listener, and its upstreams are whatever its xDS clients
    /// ask for (see [`Manager::want_upstreams`]) rather than registered ones.
    pub native: bool,
    /// A mesh gateway (`Kind: mesh-gateway`): what it is configured from
    /// beyond any proxy.
    pub gateway: Option<crate::gateway::GatewayRegistration>,
}

/// Which upstreams each xDS session of a native service asks for.
type Wanted = BTreeMap<u64, BTreeSet<String>>;

enum Update {
    /// The protocol of the proxy's own service (from its chain).
    OwnProtocol(String),
    Roots(IndexedCaRoots),
    Leaf(Box<IssuedCert>),
    Intentions(Arc<Vec<Intention>>),
    Chain(String, Arc<CompiledChain>),
    Endpoints(String, String, Vec<Endpoint>),
    /// A prepared-query upstream's answer.
    Query(String, Vec<QueryEndpoint>),
    /// The upstreams a native service's clients ask for now.
    Wanted(BTreeSet<String>),
}

struct Proxy {
    registration: ProxyRegistration,
    snapshot: watch::Sender<Option<Arc<ConnectProxySnapshot>>>,
    wanted: watch::Sender<Wanted>,
    task: JoinHandle<()>,
}

/// The manager of every local proxy.
pub struct Manager {
    sources: Arc<dyn DataSources>,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl Manager {
    /// A manager over `sources`.
    pub fn new(sources: Arc<dyn DataSources>) -> Arc<Manager> {
        Arc::new(Manager {
            sources,
            proxies: Mutex::new(HashMap::new()),
        })
    }

    /// Makes the set of managed proxies equal `registrations`: new ones
    /// start, changed ones restart, missing ones stop (their watchers see
    /// `None`).
    pub fn sync(&self, registrations: Vec<ProxyRegistration>) {
        let mut proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        let wanted: HashMap<String, ProxyRegistration> = registrations
            .into_iter()
            .map(|r| (r.proxy_id.clone(), r))
            .collect();
        proxies.retain(|id, proxy| {
            let keep = wanted.get(id) == Some(&proxy.registration);
            if !keep {
                proxy.task.abort();
                if !wanted.contains_key(id) {
                    proxy.snapshot.send_replace(None);
                }
            }
            keep
        });
        for (id, registration) in wanted {
            if proxies.contains_key(&id) {
                continue;
            }
            let snapshot = watch::channel(None).0;
            let wanted = watch::channel(Wanted::new()).0;
            let task = if registration.gateway.is_some() {
                tokio::spawn(crate::gateway::run_gateway(
                    self.sources.clone(),
                    registration.clone(),
                    snapshot.clone(),
                ))
            } else {
                tokio::spawn(run_proxy(
                    self.sources.clone(),
                    registration.clone(),
                    snapshot.clone(),
                    wanted.subscribe(),
                ))
            };
            proxies.insert(
                id,
                Proxy {
                    registration,
                    snapshot,
                    wanted,
                    task,
                },
            );
        }
    }

    /// The snapshots of one proxy (`None` until complete); `None` when the
    /// proxy is not registered here.
    pub fn watch(
        &self,
        proxy_id: &str,
    ) -> Option<watch::Receiver<Option<Arc<ConnectProxySnapshot>>>> {
        self.proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(proxy_id)
            .map(|p| p.snapshot.subscribe())
    }

    /// Records the upstreams one xDS session of a native service asks for
    /// (its listener names); an empty set releases the session's interest.
    /// The proxy follows the union over its sessions. Does nothing for
    /// unknown ids and for sidecar proxies, whose upstreams are registered.
    pub fn want_upstreams(&self, proxy_id: &str, session: u64, names: BTreeSet<String>) {
        let proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        let Some(proxy) = proxies.get(proxy_id).filter(|p| p.registration.native) else {
            return;
        };
        proxy.wanted.send_if_modified(|wanted| {
            if names.is_empty() {
                wanted.remove(&session).is_some()
            } else if wanted.get(&session) == Some(&names) {
                false
            } else {
                wanted.insert(session, names);
                true
            }
        });
    }

    /// Ids of the managed proxies.
    pub fn proxy_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    }

    /// Stops every proxy task.
    pub fn stop(&self) {
        for (_, proxy) in self
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            proxy.task.abort();
            proxy.snapshot.send_replace(None);
        }
    }
}

/// Follows one blocking data source, sending each new value (tagged by
/// `wrap`) until the receiver is gone; spawn it and abort it to stop.
async fn follow<T, F, Fut>(
    tx: mpsc::UnboundedSender<Update>,
    read: F,
    wrap: impl Fn(T) -> Update + Send + 'static,
) where
    T: Send + 'static,
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Fetched<T>, String>> + Send + 'static,
{
    let mut values = follow_reads(read);
    while let Some(value) = values.next().await {
        if tx.send(wrap(value)).is_err() {
            return;
        }
    }
}

struct Building {
    own_protocol: Option<String>,
    roots: Option<IndexedCaRoots>,
    leaf: Option<IssuedCert>,
    intentions: Option<Arc<Vec<Intention>>>,
    /// The upstreams followed now (registered, or asked for by native clients).
    upstreams: Vec<SharedUpstream>,
    /// The registered upstreams that are prepared queries.
    query_upstreams: Vec<SharedUpstream>,
    /// Their answers, by query name.
    queries: BTreeMap<String, Vec<QueryEndpoint>>,
    chains: BTreeMap<String, Arc<CompiledChain>>,
    /// Keyed by (upstream, target id): one map for every upstream.
    endpoints: BTreeMap<(String, String), Vec<Endpoint>>,
}

impl Building {
    /// An upstream with its chain and the endpoints of every target, once all are known.
    fn upstream(&self, upstream: &SharedUpstream) -> Option<UpstreamSnapshot> {
        let id = &upstream.destination_name;
        let chain = self.chains.get(id)?;
        let mut endpoints = TargetEndpoints::with_capacity(chain.targets.len());
        for target in chain.targets.keys() {
            let found = self.endpoints.get(&(id.clone(), target.clone()))?;
            endpoints.insert(target.clone(), found.clone());
        }
        Some(UpstreamSnapshot {
            upstream: upstream.clone(),
            chain: chain.clone(),
            endpoints,
        })
    }

    /// The snapshot, once everything it needs is known. A sidecar waits for
    /// every upstream; a native service publishes the complete ones and
    /// names the others as pending.
    fn snapshot(&self, r: &ProxyRegistration, default_allow: bool) -> Option<ConnectProxySnapshot> {
        let roots = self.roots.as_ref()?;
        let mut upstreams = Vec::new();
        let mut pending_upstreams = Vec::new();
        for upstream in &self.upstreams {
            match self.upstream(upstream) {
                Some(u) => upstreams.push(u),
                None if r.native => pending_upstreams.push(upstream.destination_name.clone()),
                None => return None,
            }
        }
        let mut query_upstreams = Vec::with_capacity(self.query_upstreams.len());
        for upstream in &self.query_upstreams {
            query_upstreams.push(QueryUpstreamSnapshot {
                upstream: upstream.clone(),
                datacenter: datacenter_of(upstream, &r.datacenter),
                endpoints: self.queries.get(&upstream.destination_name)?.clone(),
            });
        }
        let (leaf_cert, leaf_key, intentions, protocol) = if r.native {
            // Proxyless clients read certificates from files and enforce
            // no intentions; the listener protocol is the upstream's.
            Default::default()
        } else {
            let leaf = self.leaf.as_ref()?;
            // The registration's `protocol` wins; else the service's resolved
            // protocol (service-defaults, proxy-defaults).
            let own = self.own_protocol.as_ref()?;
            let protocol = r
                .proxy
                .config
                .get("protocol")
                .and_then(|v| v.as_str())
                .unwrap_or(own)
                .to_ascii_lowercase();
            (
                leaf.cert_pem.clone(),
                leaf.private_key_pem.clone(),
                self.intentions.clone()?,
                protocol,
            )
        };
        Some(ConnectProxySnapshot {
            proxy_id: r.proxy_id.clone(),
            proxy_service: r.service.clone(),
            destination_service: r.proxy.destination_service_name.clone(),
            native: r.native,
            address: r.address.clone(),
            port: r.port,
            local_service_address: if r.proxy.local_service_address.is_empty() {
                "127.0.0.1".into()
            } else {
                r.proxy.local_service_address.clone()
            },
            local_service_port: r.proxy.local_service_port,
            config: r.proxy.config.clone(),
            datacenter: r.datacenter.clone(),
            trust_domain: roots.trust_domain.clone(),
            roots: roots.roots.iter().map(|r| r.root_cert.clone()).collect(),
            leaf_cert,
            leaf_key,
            intentions,
            default_allow,
            protocol,
            upstreams,
            query_upstreams,
            pending_upstreams,
            mesh_gateway: None,
            changed_at: None,
        })
    }
}

/// The watchers of one proxy's upstreams: a chain subscription per
/// upstream and an endpoints subscription per chain target, all polled by
/// the proxy's own task (no task per upstream). Dropping it stops them.
struct UpstreamWatchers {
    sources: Arc<dyn DataSources>,
    datacenter: String,
    /// The proxy registration's `MeshGateway.Mode`.
    mesh_gateway_mode: String,
    watches: Subscriptions<Watch, Update>,
}

/// What a proxy's task follows for its upstreams.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Watch {
    /// An upstream's compiled chain.
    Chain(String),
    /// The endpoints of one target (by id) of an upstream's chain.
    Target(String, String),
    /// A prepared-query upstream's answer.
    Query(String),
}

/// The datacenter an upstream names, else the proxy's own.
fn datacenter_of(upstream: &Upstream, local: &str) -> String {
    if upstream.datacenter.is_empty() {
        local.to_string()
    } else {
        upstream.datacenter.clone()
    }
}

/// Whether an upstream is a prepared query rather than a service.
fn is_query(upstream: &Upstream) -> bool {
    upstream.destination_type == "prepared_query"
}

impl UpstreamWatchers {
    /// The next update of any subscription (pending while there is none).
    async fn next(&mut self) -> Update {
        self.watches.next().await
    }

    /// Follows exactly `upstreams`: new ones start, dropped ones stop and
    /// are forgotten.
    fn follow_upstreams(&mut self, building: &mut Building, upstreams: &Arc<Vec<Upstream>>) {
        let named = |query: bool| -> BTreeSet<&str> {
            upstreams
                .iter()
                .filter(|u| is_query(u) == query)
                .map(|u| u.destination_name.as_str())
                .collect()
        };
        let (wanted, wanted_queries) = (named(false), named(true));
        self.watches.retain(|w| match w {
            Watch::Chain(name) | Watch::Target(name, _) => wanted.contains(name.as_str()),
            Watch::Query(name) => wanted_queries.contains(name.as_str()),
        });
        building
            .queries
            .retain(|name, _| wanted_queries.contains(name.as_str()));
        building
            .chains
            .retain(|name, _| wanted.contains(name.as_str()));
        building
            .endpoints
            .retain(|(name, _), _| wanted.contains(name.as_str()));
        for upstream in upstreams.iter().filter(|u| is_query(u)) {
            let name = upstream.destination_name.clone();
            if self.watches.contains(&Watch::Query(name.clone())) {
                continue;
            }
            let dc = datacenter_of(upstream, &self.datacenter);
            let answers = self.sources.clone().follow_prepared_query(name.clone(), dc);
            let tag = name.clone();
            self.watches.add(Watch::Query(name), answers, move |a| {
                Update::Query(tag.clone(), a)
            });
        }
        for upstream in upstreams.iter().filter(|u| !is_query(u)) {
            let name = upstream.destination_name.clone();
            if self.watches.contains(&Watch::Chain(name.clone())) {
                continue;
            }
            let dc = datacenter_of(upstream, &self.datacenter);
            // The upstream's mode, else the proxy's (Consul's precedence
            // above service-defaults and proxy-defaults).
            let mode = if upstream.mesh_gateway.mode.is_empty() {
                self.mesh_gateway_mode.clone()
            } else {
                upstream.mesh_gateway.mode.clone()
            };
            let chain = self.sources.clone().follow_chain(name.clone(), dc, mode);
            let tag = name.clone();
            self.watches.add(Watch::Chain(name), chain, move |c| {
                Update::Chain(tag.clone(), c)
            });
        }
        let (queries, services) = SharedUpstream::all_of(upstreams)
            .into_iter()
            .partition(|u| is_query(u));
        building.upstreams = services;
        building.query_upstreams = queries;
    }

    /// Follows the endpoints of the targets of an upstream's new chain
    /// (and stops following its old targets).
    fn follow_targets(&mut self, building: &mut Building, upstream: &str, chain: &CompiledChain) {
        self.watches.retain(|w| match w {
            Watch::Target(u, id) => u != upstream || chain.targets.contains_key(id.as_str()),
            Watch::Chain(_) | Watch::Query(_) => true,
        });
        building
            .endpoints
            .retain(|(u, id), _| u != upstream || chain.targets.contains_key(id));
        for (id, target) in &chain.targets {
            let key = Watch::Target(upstream.to_string(), id.clone());
            if self.watches.contains(&key) {
                continue;
            }
            let endpoints = if crate::gateway::through_gateways(target, &self.datacenter) {
                crate::gateway::via_gateways(
                    self.sources.clone(),
                    (**target).clone(),
                    &self.datacenter,
                )
            } else {
                self.sources.clone().follow_endpoints((**target).clone())
            };
            let (u, tid) = (upstream.to_string(), id.clone());
            self.watches.add(key, endpoints, move |e| {
                Update::Endpoints(u.clone(), tid.clone(), e)
            });
        }
    }
}

/// Turns a native service's per-session interests into their union.
async fn forward_wanted(mut wanted: watch::Receiver<Wanted>, tx: mpsc::UnboundedSender<Update>) {
    loop {
        let union: BTreeSet<String> = wanted
            .borrow_and_update()
            .values()
            .flatten()
            .cloned()
            .collect();
        if tx.send(Update::Wanted(union)).is_err() || wanted.changed().await.is_err() {
            return;
        }
    }
}

/// Aborts the spawned tasks when dropped (when the proxy task is aborted).
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

async fn run_proxy(
    sources: Arc<dyn DataSources>,
    registration: ProxyRegistration,
    out: watch::Sender<Option<Arc<ConnectProxySnapshot>>>,
    wanted: watch::Receiver<Wanted>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Tasks(Vec::new());
    let destination = registration.proxy.destination_service_name.clone();
    let s = sources.clone();
    tasks.0.push(tokio::spawn(follow(
        tx.clone(),
        move |i| {
            let s = s.clone();
            async move { s.roots(i).await }
        },
        Update::Roots,
    )));
    if registration.native {
        tasks
            .0
            .push(tokio::spawn(forward_wanted(wanted, tx.clone())));
    } else {
        let s = sources.clone();
        let d = destination.clone();
        tasks.0.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, d) = (s.clone(), d.clone());
                async move { s.leaf(&d, i).await }
            },
            |leaf| Update::Leaf(Box::new(leaf)),
        )));
        let s = sources.clone();
        let d = destination.clone();
        tasks.0.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, d) = (s.clone(), d.clone());
                async move { s.intentions(&d, i).await }
            },
            Update::Intentions,
        )));
        let s = sources.clone();
        let d = destination.clone();
        let dc = registration.datacenter.clone();
        tasks.0.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, d, dc) = (s.clone(), d.clone(), dc.clone());
                async move { s.chain(&d, &dc, "", i).await }
            },
            |c: Arc<CompiledChain>| Update::OwnProtocol(c.protocol.clone()),
        )));
    }
    let mut building = Building {
        own_protocol: None,
        roots: None,
        leaf: None,
        intentions: None,
        upstreams: Vec::new(),
        query_upstreams: Vec::new(),
        queries: BTreeMap::new(),
        chains: BTreeMap::new(),
        endpoints: BTreeMap::new(),
    };
    let mut watchers = UpstreamWatchers {
        sources: sources.clone(),
        datacenter: registration.datacenter.clone(),
        mesh_gateway_mode: registration.proxy.mesh_gateway.mode.clone(),
        watches: Subscriptions::new(),
    };
    if !registration.native {
        watchers.follow_upstreams(&mut building, &registration.proxy.upstreams);
    }
    drop(tx);
    let default_allow = sources.default_allow();
    // The proxy's own sources arrive on `rx`, its upstreams' from the
    // watchers' subscriptions.
    async fn next(
        rx: &mut mpsc::UnboundedReceiver<Update>,
        watchers: &mut UpstreamWatchers,
    ) -> Option<Update> {
        tokio::select! {
            update = rx.recv() => update,
            update = watchers.next() => Some(update),
        }
    }
    while let Some(first) = next(&mut rx, &mut watchers).await {
        let received = std::time::Instant::now();
        let mut pending = vec![first];
        let deadline = tokio::time::Instant::now() + DEBOUNCE;
        while let Ok(Some(more)) =
            tokio::time::timeout_at(deadline, next(&mut rx, &mut watchers)).await
        {
            pending.push(more);
        }
        for update in pending {
            match update {
                Update::OwnProtocol(p) => building.own_protocol = Some(p),
                Update::Roots(r) => building.roots = Some(r),
                Update::Leaf(l) => building.leaf = Some(*l),
                Update::Intentions(i) => building.intentions = Some(i),
                Update::Wanted(names) => {
                    let upstreams = names
                        .into_iter()
                        .map(|name| Upstream {
                            destination_name: name,
                            ..Default::default()
                        })
                        .collect();
                    watchers.follow_upstreams(&mut building, &Arc::new(upstreams));
                }
                Update::Chain(upstream, chain) => {
                    if !watchers.watches.contains(&Watch::Chain(upstream.clone())) {
                        continue; // no longer followed
                    }
                    watchers.follow_targets(&mut building, &upstream, &chain);
                    building.chains.insert(upstream, chain);
                }
                Update::Endpoints(upstream, target, list) => {
                    let key = Watch::Target(upstream.clone(), target.clone());
                    if !watchers.watches.contains(&key) {
                        continue;
                    }
                    building.endpoints.insert((upstream, target), list);
                }
                Update::Query(name, answer) => {
                    if watchers.watches.contains(&Watch::Query(name.clone())) {
                        building.queries.insert(name, answer);
                    }
                }
            }
        }
        if let Some(mut snapshot) = building.snapshot(&registration, default_allow) {
            let changed = out.borrow().as_ref().is_none_or(|current| {
                snapshot.changed_at = current.changed_at;
                **current != snapshot
            });
            if changed {
                snapshot.changed_at = Some(received);
                out.send_replace(Some(Arc::new(snapshot)));
            }
        }
    }
}
