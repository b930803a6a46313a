//! The proxy's xDS client: one delta ADS stream to the agent as the proxy's
//! node id. Resources it holds survive a broken stream: it keeps serving
//! them, reconnects with backoff, and resumes by telling the server which
//! versions it has (`initial_resource_versions`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3 as cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3 as endpoint;
use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::config::route::v3 as route;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use tokio::sync::{mpsc, watch};

use crate::config::{self, Runtime};

/// Listener type URL.
pub const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// Cluster type URL.
pub const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// Load assignment type URL.
pub const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// Route configuration type URL.
pub const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// What the client holds: type -> name -> (version, resource).
#[derive(Debug, Default, Clone)]
pub struct Held {
    by_type: BTreeMap<&'static str, BTreeMap<String, (String, Any)>>,
}

impl Held {
    fn of<'a>(
        &'a self,
        type_url: &str,
    ) -> impl Iterator<Item = (&'a String, &'a (String, Any))> + 'a {
        self.by_type
            .get(type_url)
            .into_iter()
            .flat_map(|m| m.iter())
    }

    fn versions(&self, type_url: &str) -> std::collections::HashMap<String, String> {
        self.of(type_url)
            .map(|(name, (version, _))| (name.clone(), version.clone()))
            .collect()
    }

    /// Builds the runtime; resources that do not decode are skipped (and
    /// reported through the NACK of the response that carried them).
    pub fn runtime(&self) -> Runtime {
        let mut rt = Runtime::default();
        for (name, (_, any)) in self.of(CDS) {
            if let Ok(c) = cluster::Cluster::decode(any.value.as_slice()) {
                rt.clusters
                    .insert(name.clone(), Arc::new(config::cluster_config(&c)));
            }
        }
        for (name, (_, any)) in self.of(EDS) {
            if let Ok(cla) = endpoint::ClusterLoadAssignment::decode(any.value.as_slice()) {
                rt.endpoints
                    .insert(name.clone(), config::endpoints_by_priority(&cla));
            }
        }
        for (name, (_, any)) in self.of(RDS) {
            if let Ok(rc) = route::RouteConfiguration::decode(any.value.as_slice()) {
                if let Some(d) = config::route_destination(&rc) {
                    rt.routes.insert(name.clone(), d);
                }
            }
        }
        for (name, (_, any)) in self.of(LDS) {
            if let Ok(l) = listener::Listener::decode(any.value.as_slice()) {
                if let Some(cfg) = config::listener_config(&l) {
                    rt.listeners.insert(name.clone(), Arc::new(cfg));
                }
            }
        }
        rt
    }
}

fn static_type(type_url: &str) -> Option<&'static str> {
    [LDS, CDS, EDS, RDS].into_iter().find(|t| *t == type_url)
}

/// The resources of a response this proxy cannot use, with why.
fn invalid(response: &DeltaDiscoveryResponse) -> Vec<(String, String)> {
    let mut bad = Vec::new();
    for r in &response.resources {
        let Some(any) = &r.resource else { continue };
        let ok = match response.type_url.as_str() {
            LDS => listener::Listener::decode(any.value.as_slice())
                .map_err(|e| e.to_string())
                .and_then(|l| {
                    config::listener_config(&l).map(|_| ()).ok_or_else(|| {
                        format!("listener {} has a shape this proxy cannot serve", l.name)
                    })
                }),
            CDS => cluster::Cluster::decode(any.value.as_slice())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            EDS => endpoint::ClusterLoadAssignment::decode(any.value.as_slice())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            RDS => route::RouteConfiguration::decode(any.value.as_slice())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            other => Err(format!("unexpected type {other}")),
        };
        if let Err(e) = ok {
            bad.push((r.name.clone(), e));
        }
    }
    bad
}

/// Resource names a runtime needs from EDS and RDS.
fn wanted(held: &Held) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut eds = BTreeSet::new();
    for (name, (_, any)) in held.of(CDS) {
        if let Ok(c) = cluster::Cluster::decode(any.value.as_slice()) {
            if matches!(
                c.cluster_discovery_type,
                Some(cluster::cluster::ClusterDiscoveryType::Type(t)) if t == cluster::cluster::DiscoveryType::Eds as i32
            ) {
                eds.insert(name.clone());
            }
        }
    }
    let mut rds = BTreeSet::new();
    for (_, (_, any)) in held.of(LDS) {
        if let Ok(l) = listener::Listener::decode(any.value.as_slice()) {
            if let Some(cfg) = config::listener_config(&l) {
                if let Some(r) = cfg.route_name {
                    rds.insert(r);
                }
            }
        }
    }
    (eds, rds)
}

/// The agent's xDS server: its address, and the TLS to reach it with
/// (its `grpc_tls` port).
#[derive(Clone, Debug)]
pub struct AgentLink {
    /// `http://host:port` or `https://host:port`.
    pub grpc_addr: String,
    /// The CA (PEM) the agent's certificate is checked against; TLS when set.
    pub ca_pem: Option<String>,
}

impl AgentLink {
    /// A gRPC channel to the agent (over TLS when a CA is given).
    pub(crate) async fn channel(&self) -> Result<tonic::transport::Channel, String> {
        let Some(ca) = &self.ca_pem else {
            return tonic::transport::Endpoint::from_shared(self.grpc_addr.clone())
                .map_err(|e| e.to_string())?
                .connect_timeout(Duration::from_secs(5))
                .connect()
                .await
                .map_err(|e| format!("connecting to {}: {e}", self.grpc_addr));
        };
        let hostport = self
            .grpc_addr
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let host = match hostport.rsplit_once(':') {
            Some((host, _)) => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            None => hostport.clone(),
        };
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("-grpc-addr host {host:?}: {e}"))?;
        let config = legate_net::tls::client_config(ca, None, &[b"h2"])?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let dial = tower::service_fn(move |_: tonic::transport::Uri| {
            let (connector, name, hostport) = (connector.clone(), name.clone(), hostport.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect(&hostport).await?;
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        });
        // The TLS is ours: tonic sees a plain HTTP/2 connection.
        tonic::transport::Endpoint::from_shared(format!(
            "http://{}",
            self.grpc_addr
                .trim_start_matches("https://")
                .trim_start_matches("http://")
        ))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(dial)
        .await
        .map_err(|e| format!("connecting to {} over TLS: {e}", self.grpc_addr))
    }
}

/// Reconnection pacing toward the agent: waits doubling from `first` up
/// to `max`, starting over after a stream that worked for a while.
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Pacing from `first` up to `max`.
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// Waits before the next attempt; `worked`: the last stream did.
    pub(crate) async fn wait(&mut self, worked: bool) {
        if worked {
            self.next = self.first;
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }
}

/// A request to the agent carrying the proxy's token (`x-consul-token`).
pub(crate) fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Ok(value) = token.parse() {
        request.metadata_mut().insert("x-consul-token", value);
    }
    request
}

/// Follows the agent's xDS for `proxy_id`, publishing a new runtime after
/// every accepted change. Never returns (reconnects forever).
pub async fn follow(
    agent: AgentLink,
    proxy_id: String,
    token: String,
    out: watch::Sender<Arc<Runtime>>,
) {
    let mut held = Held::default();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let mut connected = false;
        if let Err(e) = session(&agent, &proxy_id, &token, &mut held, &out, &mut connected).await {
            tracing::warn!(error = %e, "xDS stream to the agent failed; keeping the last config and reconnecting");
        }
        backoff.wait(connected).await;
    }
}

async fn session(
    agent: &AgentLink,
    proxy_id: &str,
    token: &str,
    held: &mut Held,
    out: &watch::Sender<Arc<Runtime>>,
    connected: &mut bool,
) -> Result<(), String> {
    let channel = agent.channel().await?;
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = mpsc::channel::<DeltaDiscoveryRequest>(16);
    let node = Some(Node {
        id: proxy_id.to_string(),
        cluster: proxy_id.to_string(),
        user_agent_name: "legate-proxy".into(),
        ..Default::default()
    });
    let request = with_token(tokio_stream::wrappers::ReceiverStream::new(rx), token);
    // Subscribe to listeners and clusters (wildcard), resuming what we hold.
    for type_url in [CDS, LDS] {
        tx.send(DeltaDiscoveryRequest {
            node: node.clone(),
            type_url: type_url.into(),
            initial_resource_versions: held.versions(type_url),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    }
    let mut stream = client
        .delta_aggregated_resources(request)
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let mut subscribed: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    loop {
        let response = match stream.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Err("the agent closed the stream".into()),
            Err(status) => return Err(format!("{}: {}", status.code(), status.message())),
        };
        let Some(type_url) = static_type(&response.type_url) else {
            continue;
        };
        *connected = true;
        // Apply every usable resource; a bad one keeps its last good
        // version (a listener we cannot serve is not served) and is NACKed.
        let bad = invalid(&response);
        let map = held.by_type.entry(type_url).or_default();
        for r in &response.resources {
            if bad.iter().any(|(n, _)| n == &r.name) {
                continue;
            }
            if let Some(any) = &r.resource {
                map.insert(r.name.clone(), (r.version.clone(), any.clone()));
            }
        }
        for name in &response.removed_resources {
            map.remove(name);
        }
        let error_detail = (!bad.is_empty()).then(|| {
            let message = bad
                .iter()
                .map(|(n, e)| format!("{n}: {e}"))
                .collect::<Vec<_>>()
                .join("; ");
            tracing::warn!(type_url, error = %message, "rejecting xDS resources (NACK); keeping their last good versions");
            RpcStatus {
                code: 3,
                message,
                ..Default::default()
            }
        });
        tx.send(DeltaDiscoveryRequest {
            type_url: type_url.into(),
            response_nonce: response.nonce.clone(),
            error_detail,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
        // Follow the EDS and RDS names the clusters and listeners need.
        let (eds, rds) = wanted(held);
        for (t, names) in [(EDS, eds), (RDS, rds)] {
            let current = subscribed.entry(t).or_default();
            let add: Vec<String> = names.difference(current).cloned().collect();
            let drop: Vec<String> = current.difference(&names).cloned().collect();
            if add.is_empty() && drop.is_empty() {
                continue;
            }
            let versions = held.versions(t);
            tx.send(DeltaDiscoveryRequest {
                node: node.clone(),
                type_url: t.into(),
                resource_names_subscribe: add.clone(),
                resource_names_unsubscribe: drop.clone(),
                initial_resource_versions: versions
                    .into_iter()
                    .filter(|(n, _)| add.contains(n))
                    .collect(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
            for n in drop {
                current.remove(&n);
                if let Some(m) = held.by_type.get_mut(t) {
                    m.remove(&n);
                }
            }
            current.extend(add);
        }
        out.send_replace(Arc::new(held.runtime()));
    }
}
