//! The manager: a task per proxy that follows the proxy's data sources and
//! publishes a new snapshot (debounced) whenever one of them changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use legate_chain::compile::Target;
use legate_chain::CompiledChain;
use legate_types::connect::{IndexedCaRoots, IssuedCert};
use legate_types::intention::Intention;
use legate_types::ConnectProxyConfig;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::snapshot::{ConnectProxySnapshot, Endpoint, UpstreamSnapshot};

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
    ) -> Result<Fetched<Vec<Intention>>, String>;
    /// The compiled chain of `service` as seen from `datacenter`.
    async fn chain(
        &self,
        service: &str,
        datacenter: &str,
        min_index: u64,
    ) -> Result<Fetched<CompiledChain>, String>;
    /// The mesh endpoints (sidecars or native instances) of one target.
    async fn endpoints(
        &self,
        target: &Target,
        min_index: u64,
    ) -> Result<Fetched<Vec<Endpoint>>, String>;
    /// What intentions decide when none matches.
    fn default_allow(&self) -> bool;
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
}

enum Update {
    /// The protocol of the proxy's own service (from its chain).
    OwnProtocol(String),
    Roots(IndexedCaRoots),
    Leaf(IssuedCert),
    Intentions(Vec<Intention>),
    Chain(String, CompiledChain),
    Endpoints(String, String, Vec<Endpoint>),
}

struct Proxy {
    registration: ProxyRegistration,
    snapshot: watch::Sender<Option<Arc<ConnectProxySnapshot>>>,
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
            let task = tokio::spawn(run_proxy(
                self.sources.clone(),
                registration.clone(),
                snapshot.clone(),
            ));
            proxies.insert(
                id,
                Proxy {
                    registration,
                    snapshot,
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
    Fut: std::future::Future<Output = Result<Fetched<T>, String>> + Send,
{
    let mut index = 0;
    let mut failures = 0u32;
    loop {
        match read(index).await {
            Ok(fetched) => {
                failures = 0;
                if fetched.index == index && index != 0 {
                    continue; // the wait ran out with nothing new
                }
                index = fetched.index;
                if tx.send(wrap(fetched.value)).is_err() {
                    return;
                }
            }
            Err(e) => {
                failures += 1;
                tracing::debug!(error = %e, "proxycfg data source failed; retrying");
                tokio::time::sleep(Duration::from_millis(100 * 2u64.pow(failures.min(6)))).await;
            }
        }
    }
}

struct Building {
    own_protocol: Option<String>,
    roots: Option<IndexedCaRoots>,
    leaf: Option<IssuedCert>,
    intentions: Option<Vec<Intention>>,
    chains: BTreeMap<String, CompiledChain>,
    endpoints: BTreeMap<String, BTreeMap<String, Vec<Endpoint>>>,
}

impl Building {
    fn snapshot(&self, r: &ProxyRegistration, default_allow: bool) -> Option<ConnectProxySnapshot> {
        let roots = self.roots.as_ref()?;
        let leaf = self.leaf.as_ref()?;
        let intentions = self.intentions.as_ref()?;
        let mut upstreams = Vec::new();
        for upstream in &r.proxy.upstreams {
            let id = upstream.destination_name.clone();
            let chain = self.chains.get(&id)?;
            let found = self.endpoints.get(&id);
            let mut endpoints = BTreeMap::new();
            for target in chain.targets.keys() {
                endpoints.insert(target.clone(), found.and_then(|m| m.get(target)).cloned()?);
            }
            upstreams.push(UpstreamSnapshot {
                upstream: upstream.clone(),
                chain: chain.clone(),
                endpoints,
            });
        }
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
        Some(ConnectProxySnapshot {
            proxy_id: r.proxy_id.clone(),
            proxy_service: r.service.clone(),
            destination_service: r.proxy.destination_service_name.clone(),
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
            leaf_cert: leaf.cert_pem.clone(),
            leaf_key: leaf.private_key_pem.clone(),
            intentions: intentions.clone(),
            default_allow,
            protocol,
            upstreams,
            changed_at: None,
        })
    }
}

async fn run_proxy(
    sources: Arc<dyn DataSources>,
    registration: ProxyRegistration,
    out: watch::Sender<Option<Arc<ConnectProxySnapshot>>>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    let destination = registration.proxy.destination_service_name.clone();
    {
        let s = sources.clone();
        tasks.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let s = s.clone();
                async move { s.roots(i).await }
            },
            Update::Roots,
        )));
        let s = sources.clone();
        let d = destination.clone();
        tasks.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, d) = (s.clone(), d.clone());
                async move { s.leaf(&d, i).await }
            },
            Update::Leaf,
        )));
        let s = sources.clone();
        let d = destination.clone();
        tasks.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, d) = (s.clone(), d.clone());
                async move { s.intentions(&d, i).await }
            },
            Update::Intentions,
        )));
    }
    for upstream in &registration.proxy.upstreams {
        let s = sources.clone();
        let name = upstream.destination_name.clone();
        let dc = if upstream.datacenter.is_empty() {
            registration.datacenter.clone()
        } else {
            upstream.datacenter.clone()
        };
        let tag = name.clone();
        tasks.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, name, dc) = (s.clone(), name.clone(), dc.clone());
                async move { s.chain(&name, &dc, i).await }
            },
            move |c| Update::Chain(tag.clone(), c),
        )));
    }
    {
        let s = sources.clone();
        let d = destination.clone();
        let dc = registration.datacenter.clone();
        tasks.push(tokio::spawn(follow(
            tx.clone(),
            move |i| {
                let (s, d, dc) = (s.clone(), d.clone(), dc.clone());
                async move { s.chain(&d, &dc, i).await }
            },
            |c: CompiledChain| Update::OwnProtocol(c.protocol),
        )));
    }
    let mut building = Building {
        own_protocol: None,
        roots: None,
        leaf: None,
        intentions: None,
        chains: BTreeMap::new(),
        endpoints: BTreeMap::new(),
    };
    let mut target_watchers: HashMap<(String, String), JoinHandle<()>> = HashMap::new();
    let default_allow = sources.default_allow();
    while let Some(first) = rx.recv().await {
        let received = std::time::Instant::now();
        let mut pending = vec![first];
        let deadline = tokio::time::Instant::now() + DEBOUNCE;
        while let Ok(Some(more)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            pending.push(more);
        }
        for update in pending {
            match update {
                Update::OwnProtocol(p) => building.own_protocol = Some(p),
                Update::Roots(r) => building.roots = Some(r),
                Update::Leaf(l) => building.leaf = Some(l),
                Update::Intentions(i) => building.intentions = Some(i),
                Update::Chain(upstream, chain) => {
                    // (Re)start endpoint watchers for the chain's targets.
                    let wanted: Vec<(String, Target)> = chain
                        .targets
                        .iter()
                        .map(|(id, t)| (id.clone(), t.clone()))
                        .collect();
                    target_watchers.retain(|(u, id), handle| {
                        let keep = u != &upstream || wanted.iter().any(|(w, _)| w == id);
                        if !keep {
                            handle.abort();
                        }
                        keep
                    });
                    if let Some(m) = building.endpoints.get_mut(&upstream) {
                        m.retain(|id, _| wanted.iter().any(|(w, _)| w == id));
                    }
                    for (id, target) in wanted {
                        let key = (upstream.clone(), id.clone());
                        if target_watchers.contains_key(&key) {
                            continue;
                        }
                        let s = sources.clone();
                        let (u, tid) = (upstream.clone(), id.clone());
                        let handle = tokio::spawn(follow(
                            tx.clone(),
                            move |i| {
                                let (s, t) = (s.clone(), target.clone());
                                async move { s.endpoints(&t, i).await }
                            },
                            move |e| Update::Endpoints(u.clone(), tid.clone(), e),
                        ));
                        target_watchers.insert(key, handle);
                    }
                    building.chains.insert(upstream, chain);
                }
                Update::Endpoints(upstream, target, list) => {
                    building
                        .endpoints
                        .entry(upstream)
                        .or_default()
                        .insert(target, list);
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
    for t in tasks {
        t.abort();
    }
    for (_, t) in target_watchers {
        t.abort();
    }
}
