//! The agent's client-facing TCP listeners: the HTTP API (`ports.http`),
//! HTTPS (`ports.https`, with `tls.https`), the xDS gRPC server
//! (`ports.grpc`) and gRPC over TLS (`ports.grpc_tls`, with `tls.grpc`).
//! Every one accepts through `legate_net`'s acceptor; TLS files are read
//! at start, so a missing or unreadable one stops the agent naming it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use legate_agent::config::AgentConfig;
use legate_agent::tls_config::TlsFiles;
use legate_agent::Agent;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running listener: its stop signal and task.
type Running = (oneshot::Sender<()>, JoinHandle<()>);

/// The listeners an agent started.
pub struct Listeners {
    http: Vec<Running>,
    grpc: Vec<Running>,
}

impl Listeners {
    /// Stops them: HTTP connections get 5 s to drain, gRPC streams 2 s.
    pub async fn stop(self) {
        for (stop, task) in self.http {
            let _ = stop.send(());
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                tracing::warn!("HTTP connections did not drain within 5s; closing them");
            }
        }
        for (stop, task) in self.grpc {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
    }
}

/// The PEM texts of a listener's files, with `verify_incoming`'s CA.
fn server_pem(files: &TlsFiles, section: &str) -> Result<legate_net::tls::ServerPem, String> {
    let read = |key: &str, path: &Option<std::path::PathBuf>| -> Result<String, String> {
        match path {
            None => Err(format!("Error loading TLS: tls.{section}.{key} is not set")),
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("Error loading TLS: {key} {}: {e}", path.display())),
        }
    };
    Ok(legate_net::tls::ServerPem {
        cert_pem: read("cert_file", &files.cert_file)?,
        key_pem: read("key_file", &files.key_file)?,
        client_ca_pem: if files.verify_incoming {
            Some(
                files.ca_pem()?.ok_or_else(|| {
                    format!("Error loading TLS: tls.{section}.ca_file is not set")
                })?,
            )
        } else {
            None
        },
    })
}

/// A listener's rustls configuration, or the reason it cannot be built.
fn server_tls(
    files: &TlsFiles,
    section: &str,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig, String> {
    legate_net::tls::server_config(&server_pem(files, section)?, alpn)
        .map_err(|e| format!("Error loading TLS for tls.{section}: {e}"))
}

async fn bind(address: SocketAddr, what: &str) -> Result<tokio::net::TcpListener, String> {
    legate_net::bind_tcp(address)
        .map_err(|e| format!("Error starting the {what} on {address}: {e}"))
}

/// Binds the HTTP API's unix socket (a socket file left by an earlier
/// run is replaced, as Consul replaces it) and gives the file the owner,
/// group and mode `unix_sockets` asks for.
fn bind_unix(
    socket: &legate_agent::unix_socket_config::UnixSocket,
) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let path = &socket.path;
    let failed = |e: std::io::Error| {
        format!(
            "Error starting the HTTP API on unix socket {}: {e}",
            path.display()
        )
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!(
                "Error starting the HTTP API: {} exists and is not a socket",
                path.display()
            ));
        }
        std::fs::remove_file(path).map_err(failed)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(failed)?;
    if socket.user.is_some() || socket.group.is_some() {
        std::os::unix::fs::chown(path, socket.user, socket.group).map_err(failed)?;
    }
    if let Some(mode) = socket.mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(failed)?;
    }
    Ok(listener)
}

/// Starts every listener the config names.
pub async fn start(config: &AgentConfig, agent: &Arc<Agent>) -> Result<Listeners, String> {
    let mut listeners = Listeners {
        http: Vec::new(),
        grpc: Vec::new(),
    };
    let http_ip = config.http_addr.unwrap_or(config.client_addr);
    if let (Some(_), Some(socket)) = (config.ports.http, &config.http_unix) {
        let listener = bind_unix(socket)?;
        tracing::info!(path = %socket.path.display(), "HTTP API listening on a unix socket");
        let state = legate_http::AppState {
            agent: agent.clone(),
        };
        listeners.http.push(spawn(|stop| async move {
            let _ = legate_http::serve_unix(listener, state, stop).await;
        }));
    } else if let Some(port) = config.ports.http {
        let address = SocketAddr::new(http_ip, port);
        let listener = bind(address, "HTTP API").await?;
        tracing::info!(address = %address, "HTTP API listening");
        let state = legate_http::AppState {
            agent: agent.clone(),
        };
        listeners.http.push(spawn(|stop| async move {
            let _ = legate_http::serve(listener, state, stop).await;
        }));
    }
    if let Some(port) = config.ports.https {
        // Consul refuses an HTTPS port without a certificate.
        let tls = server_tls(&config.https_tls, "https", &[])?;
        let address = SocketAddr::new(http_ip, port);
        let listener = bind(address, "HTTPS API").await?;
        tracing::info!(address = %address, verify_incoming = config.https_tls.verify_incoming, "HTTPS API listening");
        let state = legate_http::AppState {
            agent: agent.clone(),
        };
        listeners.http.push(spawn(|stop| async move {
            let _ = legate_http::serve_tls(listener, state, tls, stop).await;
        }));
    }
    let Some(manager) = agent.proxycfg() else {
        return Ok(listeners);
    };
    let stream_acl: Arc<dyn legate_xds::StreamAcl> =
        Arc::new(crate::xds_acl::AgentStreamAcl(agent.clone()));
    let ads = legate_xds::AdsServer::new(manager.clone())
        .with_acl(stream_acl.clone())
        .with_update_rate(config.xds_update_max_per_second);
    agent.set_proxy_status(ads.status_source());
    let sink = legate_xds::metrics_service::TrafficSink::new(
        manager.clone(),
        Some(stream_acl),
        agent.traffic().clone(),
    );
    let services = GrpcServices { ads, sink };
    let per_client = config.limits.http_max_conns_per_client;
    if let Some(port) = config.ports.grpc {
        let address = SocketAddr::new(config.client_addr, port);
        let listener = bind(address, "gRPC (xDS) server").await?;
        tracing::info!(address = %address, "gRPC (xDS) server listening");
        let incoming =
            crate::grpc_incoming::incoming(legate_net::Acceptor::new(listener, per_client, "gRPC"));
        let services = services.clone();
        listeners
            .grpc
            .push(spawn(|stop| serve_grpc(services, incoming, stop)));
    }
    // gRPC over TLS runs only with a certificate for it (Consul's default
    // port 8503 is otherwise left closed).
    if let (Some(port), true) = (config.ports.grpc_tls, config.grpc_tls.serves_tls()) {
        let tls = server_tls(&config.grpc_tls, "grpc", &[b"h2"])?;
        let address = SocketAddr::new(config.client_addr, port);
        let listener = bind(address, "gRPC TLS (xDS) server").await?;
        tracing::info!(address = %address, verify_incoming = config.grpc_tls.verify_incoming, "gRPC TLS (xDS) server listening");
        let incoming = crate::grpc_incoming::incoming_tls(
            legate_net::Acceptor::new(listener, per_client, "gRPC TLS"),
            tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            config.limits.http_handshake_timeout,
        );
        listeners
            .grpc
            .push(spawn(|stop| serve_grpc(services, incoming, stop)));
    }
    Ok(listeners)
}

fn spawn<F>(run: impl FnOnce(futures::future::BoxFuture<'static, ()>) -> F) -> Running
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let stop: futures::future::BoxFuture<'static, ()> = Box::pin(async move {
        let _ = stop_rx.await;
    });
    (stop_tx, tokio::spawn(run(stop)))
}

/// What the gRPC ports serve: xDS, and the metrics service local proxies
/// report their traffic to.
#[derive(Clone)]
struct GrpcServices {
    ads: legate_xds::AdsServer,
    sink: legate_xds::metrics_service::TrafficSink,
}

async fn serve_grpc<S, IO>(
    services: GrpcServices,
    incoming: S,
    stop: futures::future::BoxFuture<'static, ()>,
) where
    S: futures::Stream<Item = std::io::Result<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
{
    let result = tonic::transport::Server::builder()
        // Dead peers are noticed and their streams released.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(services.ads.into_service())
        .add_service(services.sink.into_service())
        .serve_with_incoming_shutdown(incoming, stop)
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "gRPC server failed");
    }
}
