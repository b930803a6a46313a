//! The data path: one accept loop per listener; inbound connections are
//! TLS-terminated (client certificate required, our trust domain only),
//! authorized against the intentions' RBAC before a byte reaches the
//! application, then proxied to `local_app`; outbound connections are
//! proxied to a healthy endpoint of the upstream cluster over mTLS with the
//! expected SPIFFE id checked. Config changes apply to new connections;
//! established ones keep running; a removed listener stops accepting.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{
    ClusterConfig, Destination, EndpointAddress, ListenerConfig, Runtime, TlsMaterial,
};
use crate::edges::Edge;

/// Counters served on the admin port.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Bytes from downstream to upstream.
    pub bytes_up: AtomicU64,
    /// Bytes from upstream to downstream.
    pub bytes_down: AtomicU64,
    /// Failed TLS handshakes (either side).
    pub handshake_failures: AtomicU64,
    /// Connections refused by intentions.
    pub rbac_denials: AtomicU64,
    /// Upstream connections that could not be made.
    pub upstream_failures: AtomicU64,
    /// Connections to an SNI-routed (gateway) listener closed because
    /// their ClientHello named no server, or one no chain or cluster has.
    pub sni_refusals: AtomicU64,
    /// Connections sent to each cluster.
    pub cluster_connections: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Counters per source and destination service (reported to the agent).
    pub edges: crate::edges::EdgeStats,
}

impl Stats {
    fn count_cluster(&self, cluster: &str) {
        let mut counts = self
            .cluster_connections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match counts.get_mut(cluster) {
            Some(n) => *n += 1,
            None => {
                counts.insert(cluster.to_string(), 1);
            }
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(pem: &str) -> Vec<CertificateDer<'static>> {
    legate_ca::info::pem_certificates(pem)
        .unwrap_or_default()
        .into_iter()
        .map(CertificateDer::from)
        .collect()
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    use rustls::pki_types::pem::PemObject;
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("private key: {e}"))
}

fn roots(pem: &str) -> Arc<RootCertStore> {
    let mut store = RootCertStore::empty();
    for c in certs(pem) {
        let _ = store.add(c);
    }
    Arc::new(store)
}

/// TLS configs built once per distinct material.
#[derive(Default)]
pub struct TlsCache {
    servers: Mutex<HashMap<u64, Arc<ServerConfig>>>,
    clients: Mutex<HashMap<u64, Arc<ClientConfig>>>,
}

fn fingerprint(m: &TlsMaterial) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.cert_chain.hash(&mut h);
    m.private_key.hash(&mut h);
    m.roots.hash(&mut h);
    m.expected_sans.hash(&mut h);
    h.finish()
}

impl TlsCache {
    fn server(&self, m: &TlsMaterial) -> Result<Arc<ServerConfig>, String> {
        let k = fingerprint(m);
        if let Some(c) = self
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&k)
        {
            return Ok(c.clone());
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(roots(&m.roots), provider())
            .build()
            .map_err(|e| format!("client verifier: {e}"))?;
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs(&m.cert_chain), key(&m.private_key)?)
            .map_err(|e| format!("server certificate: {e}"))?;
        let config = Arc::new(config);
        let mut map = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() > 64 {
            map.clear();
        }
        map.insert(k, config.clone());
        Ok(config)
    }

    fn client(&self, m: &TlsMaterial) -> Result<Arc<ClientConfig>, String> {
        let k = fingerprint(m);
        if let Some(c) = self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&k)
        {
            return Ok(c.clone());
        }
        let verifier = Arc::new(SpiffeServerVerifier {
            roots: m.roots.clone(),
            expected: m.expected_sans.clone(),
            unsupported: m.unsupported_san_matcher,
            algorithms: provider().signature_verification_algorithms,
        });
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(certs(&m.cert_chain), key(&m.private_key)?)
            .map_err(|e| format!("client certificate: {e}"))?;
        let config = Arc::new(config);
        let mut map = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() > 256 {
            map.clear();
        }
        map.insert(k, config.clone());
        Ok(config)
    }
}

/// Verifies an upstream's certificate chain against our roots and its
/// SPIFFE id against the ids the cluster expects (mesh certificates carry
/// no DNS names, so the usual host-name check does not apply).
#[derive(Debug)]
struct SpiffeServerVerifier {
    roots: String,
    expected: Vec<String>,
    unsupported: bool,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for SpiffeServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let chain: Vec<&[u8]> = std::iter::once(end_entity)
            .chain(intermediates.iter())
            .map(|d| d.as_ref())
            .collect();
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(now.as_secs());
        let id = legate_ca::verify::verify_chain_at(&[&self.roots], &chain, when)
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        let uri = id.to_string();
        if self.unsupported || self.expected.is_empty() {
            return Err(rustls::Error::General(
                "the cluster names no SPIFFE id this proxy can check; refusing the upstream".into(),
            ));
        }
        if !self.expected.contains(&uri) {
            return Err(rustls::Error::General(format!(
                "upstream presented {uri}, expected one of {:?}",
                self.expected
            )));
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The trust domain of our own certificate (peers must share it).
fn trust_domain_of(cert_chain: &str) -> Option<String> {
    let info = legate_ca::info::describe(cert_chain).ok()?;
    let id = legate_ca::SpiffeId::parse(info.uris.first()?).ok()?;
    Some(id.trust_domain().to_string())
}

/// The shared pieces every connection uses.
pub struct DataPlane {
    runtime: watch::Receiver<Arc<Runtime>>,
    tls: TlsCache,
    /// Counters.
    pub stats: Stats,
    round_robin: AtomicUsize,
}

impl DataPlane {
    /// A data plane following `runtime`.
    pub fn new(runtime: watch::Receiver<Arc<Runtime>>) -> Arc<DataPlane> {
        Arc::new(DataPlane {
            runtime,
            tls: TlsCache::default(),
            stats: Stats::default(),
            round_robin: AtomicUsize::new(0),
        })
    }

    /// Keeps one accept loop per listener in step with the runtime.
    pub async fn serve(self: Arc<Self>) {
        let mut rx = self.runtime.clone();
        let mut running: HashMap<String, (SocketAddr, tokio::task::JoinHandle<()>)> =
            HashMap::new();
        // Listeners whose address was taken, reported once and retried.
        let mut unbound: HashMap<String, SocketAddr> = HashMap::new();
        loop {
            let rt = rx.borrow_and_update().clone();
            unbound.retain(|name, addr| rt.listeners.get(name).is_some_and(|l| l.address == *addr));
            running.retain(|name, (addr, task)| {
                let keep = rt.listeners.get(name).is_some_and(|l| l.address == *addr);
                if !keep {
                    tracing::info!(listener = %name, "listener removed; no longer accepting");
                    task.abort();
                }
                keep
            });
            for (name, l) in &rt.listeners {
                if running.contains_key(name) {
                    continue;
                }
                match TcpListener::bind(l.address).await {
                    Ok(socket) => {
                        unbound.remove(name);
                        tracing::info!(listener = %name, address = %l.address, "listening");
                        let plane = self.clone();
                        let n = name.clone();
                        running.insert(
                            name.clone(),
                            (l.address, tokio::spawn(plane.accept(n, socket))),
                        );
                    }
                    Err(e) => {
                        if unbound.insert(name.clone(), l.address).is_none() {
                            tracing::error!(listener = %name, address = %l.address, error = %e, "cannot bind listener; retrying every second");
                        }
                    }
                }
            }
            if unbound.is_empty() {
                if rx.changed().await.is_err() {
                    return;
                }
            } else {
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(BIND_RETRY) => {}
                }
            }
        }
    }

    async fn accept(self: Arc<Self>, name: String, socket: TcpListener) {
        loop {
            let Ok((conn, peer)) = socket.accept().await else {
                continue;
            };
            self.stats.connections.fetch_add(1, Ordering::Relaxed);
            let Some(l) = self.runtime.borrow().listeners.get(&name).cloned() else {
                continue;
            };
            let plane = self.clone();
            tokio::spawn(async move {
                if let Err(e) = plane.handle(&l, conn, peer).await {
                    tracing::debug!(listener = %l.name, %peer, error = %e, "connection ended");
                }
            });
        }
    }

    async fn handle(
        &self,
        l: &ListenerConfig,
        conn: TcpStream,
        peer: SocketAddr,
    ) -> Result<(), String> {
        let _ = conn.set_nodelay(true);
        if !l.sni_routes.is_empty() {
            return self.pass_through(l, conn, peer).await;
        }
        match &l.tls {
            Some(material) => {
                // A connection closed before its first byte is a TCP
                // health check (the sidecar's own), not a failed handshake.
                // The wait for a first byte and the handshake share one deadline.
                let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
                let mut first = [0u8; 1];
                match tokio::time::timeout_at(deadline, conn.peek(&mut first)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return Ok(()),
                    _ => {}
                }
                let acceptor = TlsAcceptor::from(self.tls.server(material)?);
                let handshake = tokio::time::timeout_at(deadline, acceptor.accept(conn))
                    .await
                    .unwrap_or_else(|_| {
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "TLS handshake timed out",
                        ))
                    });
                let mut tls = match handshake {
                    Ok(t) => t,
                    Err(e) => {
                        self.stats
                            .handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                        self.stats.edges.inbound_handshake_failed();
                        tracing::warn!(listener = %l.name, %peer, error = %e, "inbound TLS handshake failed");
                        return Err(e.to_string());
                    }
                };
                let uri = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|der| legate_ca::info::describe_der(der).ok())
                    .and_then(|info| info.uris.first().cloned())
                    .unwrap_or_default();
                // Only services of our trust domain (default namespace) may connect.
                let ours = trust_domain_of(&material.cert_chain).unwrap_or_default();
                let source = match legate_ca::SpiffeId::parse(&uri) {
                    Ok(legate_ca::SpiffeId::Service {
                        trust_domain,
                        namespace,
                        service,
                        ..
                    }) if trust_domain.eq_ignore_ascii_case(&ours) && namespace == "default" => {
                        Some(service)
                    }
                    _ => None,
                };
                // Counted per source service only once the source is one of ours.
                let edge = source
                    .as_deref()
                    .and_then(|service| self.stats.edges.inbound(service));
                let allowed =
                    source.is_some() && l.authorization.as_ref().is_none_or(|a| a.allows(&uri));
                if !allowed {
                    self.stats.rbac_denials.fetch_add(1, Ordering::Relaxed);
                    if let Some(edge) = &edge {
                        edge.denied();
                    }
                    tracing::info!(listener = %l.name, peer = %uri, "connection denied by intentions");
                    let _ = tls.shutdown().await;
                    return Err(format!("{uri} is not allowed"));
                }
                if let Some(edge) = &edge {
                    edge.connected();
                }
                let (upstream, _) = self.connect(l).await?;
                self.pipe(tls, upstream, edge).await
            }
            None => {
                let (upstream, edge) = self.connect(l).await?;
                self.pipe(conn, upstream, edge).await
            }
        }
    }

    fn pick_cluster(&self, rt: &Runtime, l: &ListenerConfig) -> Option<String> {
        let destination = match &l.route_name {
            Some(route) => rt.routes.get(route)?.clone(),
            None => l.destination.clone(),
        };
        match destination {
            Destination::Cluster(c) => Some(c),
            Destination::Weighted(list) => {
                let total: u64 = list.iter().map(|(_, w)| *w as u64).sum();
                if total == 0 {
                    return list.first().map(|(c, _)| c.clone());
                }
                let mut pick = rand::random::<u64>() % total;
                for (c, w) in list {
                    if pick < w as u64 {
                        return Some(c);
                    }
                    pick -= w as u64;
                }
                None
            }
        }
    }

    /// A gateway's connection: its ClientHello's SNI picks the cluster
    /// (by the listener's chains) and every byte, the ClientHello first,
    /// goes through untouched.
    async fn pass_through(
        &self,
        l: &ListenerConfig,
        mut conn: TcpStream,
        peer: SocketAddr,
    ) -> Result<(), String> {
        use tokio::io::AsyncReadExt;
        let mut hello = Vec::with_capacity(1024);
        let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let sni = loop {
            match crate::sni::client_hello_sni(&hello) {
                crate::sni::Hello::Sni(name) => break Some(name),
                crate::sni::Hello::NeedMore if hello.len() < MAX_CLIENT_HELLO => {}
                _ => break None,
            }
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await;
            match read {
                Ok(Ok(n)) if n > 0 => hello.extend_from_slice(&chunk[..n]),
                _ => break None,
            }
        };
        if hello.is_empty() {
            return Ok(()); // closed before a byte: a TCP health check
        }
        let rt = self.runtime.borrow().clone();
        let cluster = sni
            .as_deref()
            .and_then(|name| crate::sni::route(&l.sni_routes, name))
            .filter(|cluster| rt.clusters.contains_key(cluster));
        let Some(cluster) = cluster else {
            self.stats.sni_refusals.fetch_add(1, Ordering::Relaxed);
            tracing::info!(listener = %l.name, %peer, sni = sni.as_deref().unwrap_or(""), "no route for this server name; connection closed");
            return Err("no route for the connection's server name".into());
        };
        let upstream = self
            .connect_cluster(&rt, &cluster)
            .await
            .map_err(String::from)?;
        self.stats.count_cluster(&cluster);
        let Upstream::Plain(mut up) = upstream else {
            return Err("a gateway cluster never originates TLS".into());
        };
        up.write_all(&hello).await.map_err(|e| e.to_string())?;
        // Every further byte passes kernel to kernel (never decrypted).
        let (to_up, to_down) = crate::splice::splice_bidirectional(&conn, &up)
            .await
            .map_err(|e| e.to_string())?;
        self.stats
            .bytes_up
            .fetch_add(hello.len() as u64 + to_up, Ordering::Relaxed);
        self.stats.bytes_down.fetch_add(to_down, Ordering::Relaxed);
        Ok(())
    }

    /// A connection for listener `l`, with the edge to the destination
    /// service it leads to (none for the local application).
    async fn connect(&self, l: &ListenerConfig) -> Result<(Upstream, Option<Arc<Edge>>), String> {
        let rt = self.runtime.borrow().clone();
        let cluster_name = self
            .pick_cluster(&rt, l)
            .ok_or_else(|| format!("no cluster for listener {}", l.name))?;
        let edge = rt
            .clusters
            .get(&cluster_name)
            .and_then(|c| c.destination_service.as_deref())
            .and_then(|service| self.stats.edges.outbound(service));
        let upstream = self
            .connect_cluster(&rt, &cluster_name)
            .await
            .inspect_err(|failure| {
                if let Some(edge) = &edge {
                    match failure {
                        ConnectError::Handshake(_) => edge.handshake_failed(),
                        ConnectError::Connect(_) => edge.connect_failed(),
                    }
                }
            })?;
        self.stats.count_cluster(&cluster_name);
        if let Some(edge) = &edge {
            edge.connected();
        }
        Ok((upstream, edge))
    }

    /// A connection to a healthy endpoint of `cluster_name`, over mTLS
    /// when the cluster originates it.
    async fn connect_cluster(
        &self,
        rt: &Runtime,
        cluster_name: &str,
    ) -> Result<Upstream, ConnectError> {
        let cluster: Arc<ClusterConfig> = rt
            .clusters
            .get(cluster_name)
            .cloned()
            .ok_or_else(|| ConnectError::Connect(format!("unknown cluster {cluster_name}")))?;
        // The first priority with a healthy endpoint (failover), round robin within it.
        let endpoints = rt
            .endpoints_of(cluster_name)
            .into_iter()
            .find(|p| !p.is_empty())
            .ok_or_else(|| {
                self.stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
                ConnectError::Connect(format!("no healthy endpoint in {cluster_name}"))
            })?;
        let n = self.round_robin.fetch_add(1, Ordering::Relaxed);
        let (addr, _) = &endpoints[n % endpoints.len()];
        let tcp = tokio::time::timeout(cluster.connect_timeout, dial(addr))
            .await
            .map_err(|_| format!("connecting to {addr} timed out"))
            .and_then(|r| r.map_err(|e| format!("connecting to {addr}: {e}")))
            .inspect_err(|_| {
                self.stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
            })
            .map_err(ConnectError::Connect)?;
        let _ = tcp.set_nodelay(true);
        match &cluster.tls {
            None => Ok(Upstream::Plain(tcp)),
            Some(material) => {
                let connector =
                    TlsConnector::from(self.tls.client(material).map_err(ConnectError::Handshake)?);
                let name = ServerName::try_from(if material.sni.is_empty() {
                    "upstream.invalid".to_string()
                } else {
                    material.sni.clone()
                })
                .map_err(|e| ConnectError::Handshake(e.to_string()))?;
                // An upstream that never finishes its handshake must not
                // hold the connection (and the client) forever.
                let handshake = within_deadline(connector.connect(name, tcp)).await;
                match handshake {
                    Ok(tls) => Ok(Upstream::Tls(Box::new(tls))),
                    Err(e) => {
                        self.stats
                            .handshake_failures
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(cluster = %cluster_name, %addr, error = %e, "outbound TLS handshake failed");
                        Err(ConnectError::Handshake(e.to_string()))
                    }
                }
            }
        }
    }

    async fn pipe<D>(
        &self,
        mut down: D,
        up: Upstream,
        edge: Option<Arc<Edge>>,
    ) -> Result<(), String>
    where
        D: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let result = match up {
            Upstream::Plain(mut s) => {
                tokio::io::copy_bidirectional_with_sizes(
                    &mut down,
                    &mut s,
                    COPY_BUFFER,
                    COPY_BUFFER,
                )
                .await
            }
            Upstream::Tls(mut s) => {
                tokio::io::copy_bidirectional_with_sizes(
                    &mut down,
                    &mut *s,
                    COPY_BUFFER,
                    COPY_BUFFER,
                )
                .await
            }
        };
        match result {
            Ok((to_up, to_down)) => {
                self.stats.bytes_up.fetch_add(to_up, Ordering::Relaxed);
                self.stats.bytes_down.fetch_add(to_down, Ordering::Relaxed);
                if let Some(edge) = edge {
                    edge.carried(to_up, to_down);
                }
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A TCP connection to `addr`; a host name is looked up now (IPv4, as
/// Consul's clusters ask Envoy for) and its addresses tried in turn.
async fn dial(addr: &EndpointAddress) -> std::io::Result<TcpStream> {
    match addr {
        EndpointAddress::Ip(ip) => TcpStream::connect(*ip).await,
        EndpointAddress::Host(host, port) => {
            let mut last = std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{host} has no IPv4 address"),
            );
            for ip in tokio::net::lookup_host((host.as_str(), *port))
                .await?
                .filter(SocketAddr::is_ipv4)
            {
                match TcpStream::connect(ip).await {
                    Ok(tcp) => return Ok(tcp),
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

/// How often a listener whose address was taken is tried again.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The most a gateway reads looking for a ClientHello's server name.
const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// `handshake`, or a timed-out error after [`HANDSHAKE_TIMEOUT`].
async fn within_deadline<T>(
    handshake: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            ))
        })
}

/// How long a peer has to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Copy buffer per direction: large enough for a full TLS record, so bulk
/// transfers make few, full records and few system calls.
const COPY_BUFFER: usize = 64 * 1024;

/// Why an upstream connection was not made.
#[derive(Debug)]
enum ConnectError {
    /// No endpoint, or the TCP connection failed.
    Connect(String),
    /// The TLS handshake (or its set-up) failed.
    Handshake(String),
}

impl From<ConnectError> for String {
    fn from(e: ConnectError) -> String {
        match e {
            ConnectError::Connect(s) | ConnectError::Handshake(s) => s,
        }
    }
}

enum Upstream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_host_name_endpoint_is_looked_up_when_dialled() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = tokio::spawn(async move { listener.accept().await.map(|(_, peer)| peer) });
        let tcp = dial(&EndpointAddress::Host("localhost".into(), port))
            .await
            .unwrap();
        assert_eq!(tcp.peer_addr().unwrap().port(), port);
        accepted.await.unwrap().unwrap();
        // A name that does not resolve is an error, not a hang or a panic.
        let unknown = EndpointAddress::Host("no-such-host.invalid".into(), port);
        assert!(dial(&unknown).await.is_err());
    }
}
