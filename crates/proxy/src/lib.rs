//! `legate connect proxy`: Legate's own data plane. It reads the same xDS
//! the agent serves Envoy (one delta ADS stream as the proxy's node id) and
//! serves it: mTLS public listener with intentions enforced per connection
//! before any byte reaches the application, upstream listeners proxied over
//! mTLS to healthy endpoints (failover by priority), an admin port with
//! counters, and its traffic per edge reported to the agent (`report`).
//! HTTP listeners are proxied as TCP; a source whose intention needs L7 is
//! denied.

pub mod config;
pub mod data;
pub mod edges;
pub mod report;
pub mod sni;
pub mod splice;
pub mod xds;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// What `legate connect proxy` runs.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// The proxy's service id (xDS node id).
    pub proxy_id: String,
    /// The agent's gRPC address (`http://127.0.0.1:8502`).
    pub grpc_addr: String,
    /// The CA (PEM) to check the agent's gRPC TLS port with; TLS when set.
    pub grpc_ca_pem: Option<String>,
    /// ACL token sent as `x-consul-token`.
    pub token: String,
    /// The admin/metrics address (`None`: no admin port).
    pub admin_bind: Option<SocketAddr>,
}

/// Runs the proxy until `shutdown` resolves.
pub async fn run(
    options: ProxyOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let (tx, rx) = watch::channel(Arc::new(config::Runtime::default()));
    let agent = xds::AgentLink {
        grpc_addr: options.grpc_addr.clone(),
        ca_pem: options.grpc_ca_pem.clone(),
    };
    let follow = tokio::spawn(xds::follow(
        agent.clone(),
        options.proxy_id.clone(),
        options.token.clone(),
        tx,
    ));
    let plane = data::DataPlane::new(rx);
    let serve = tokio::spawn(plane.clone().serve());
    let report = tokio::spawn(report::run(
        agent,
        options.proxy_id.clone(),
        options.token.clone(),
        plane.clone(),
    ));
    let admin = match options.admin_bind {
        Some(addr) => {
            let socket = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("Error binding the admin address {addr}: {e}"))?;
            let bound = socket
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::info!(address = %bound, "admin listening");
            println!("==> Admin and metrics on http://{bound}/stats");
            Some(tokio::spawn(admin(socket, plane.clone())))
        }
        None => None,
    };
    shutdown.await;
    follow.abort();
    serve.abort();
    report.abort();
    if let Some(a) = admin {
        a.abort();
    }
    Ok(())
}

/// `GET /stats` (and anything else): the counters as Prometheus text.
async fn admin(socket: tokio::net::TcpListener, plane: Arc<data::DataPlane>) {
    loop {
        let Ok((mut conn, _)) = socket.accept().await else {
            continue;
        };
        let plane = plane.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(5), conn.read(&mut buf)).await;
            let body = stats_text(&plane.stats);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(response.as_bytes()).await;
        });
    }
}

/// The counters as Prometheus text: totals, then connections per cluster
/// (`legate_proxy_cluster_connections_total{cluster="..."}`, as Envoy's
/// `cluster.<name>.upstream_cx_total`).
pub fn stats_text(s: &data::Stats) -> String {
    let mut body = format!(
        "legate_proxy_connections_total {}\nlegate_proxy_bytes_upstream_total {}\nlegate_proxy_bytes_downstream_total {}\nlegate_proxy_tls_handshake_failures_total {}\nlegate_proxy_rbac_denials_total {}\nlegate_proxy_upstream_connect_failures_total {}\nlegate_proxy_sni_refusals_total {}\n",
        s.connections.load(Ordering::Relaxed),
        s.bytes_up.load(Ordering::Relaxed),
        s.bytes_down.load(Ordering::Relaxed),
        s.handshake_failures.load(Ordering::Relaxed),
        s.rbac_denials.load(Ordering::Relaxed),
        s.upstream_failures.load(Ordering::Relaxed),
        s.sni_refusals.load(Ordering::Relaxed),
    );
    let clusters = s
        .cluster_connections
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for (cluster, count) in clusters.iter() {
        let escaped = cluster.replace('\\', "\\\\").replace('"', "\\\"");
        body.push_str(&format!(
            "legate_proxy_cluster_connections_total{{cluster=\"{escaped}\"}} {count}\n"
        ));
    }
    body
}
