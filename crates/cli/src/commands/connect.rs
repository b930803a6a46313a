//! `legate connect ca get-config|set-config`, `legate connect envoy`,
//! `legate connect proxy` and (in `grpc_certs`) `legate connect grpc-certs`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};

/// Connect subcommands.
#[derive(Subcommand, Debug)]
pub enum ConnectCommand {
    /// Reads and changes the Connect CA configuration.
    #[command(subcommand)]
    Ca(Box<CaCommand>),
    /// Writes Envoy's bootstrap for a sidecar and runs Envoy.
    Envoy(Box<EnvoyArgs>),
    /// Runs Legate's built-in sidecar proxy, configured over xDS.
    Proxy(Box<ProxyArgs>),
    /// Writes a Connect-native service's certificates (and a gRPC xDS
    /// bootstrap) for proxyless gRPC, and keeps them current.
    #[command(name = "grpc-certs")]
    GrpcCerts(Box<super::grpc_certs::GrpcCertsArgs>),
}

/// Flags of `connect proxy`.
#[derive(Args, Debug)]
pub struct ProxyArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The service whose sidecar proxy to run (finds its single sidecar).
    #[arg(long = "sidecar-for")]
    sidecar_for: Option<String>,
    /// The proxy's service id (instead of -sidecar-for).
    #[arg(long = "proxy-id")]
    proxy_id: Option<String>,
    /// The agent's gRPC address (env CONSUL_GRPC_ADDR; default: the agent's xDS port on 127.0.0.1).
    #[arg(long = "grpc-addr")]
    grpc_addr: Option<String>,
    /// CA certificate for the agent's gRPC TLS port (env CONSUL_GRPC_CACERT;
    /// default -ca-file): TLS unless -grpc-addr says http://.
    #[arg(long = "grpc-ca-file")]
    grpc_ca_file: Option<String>,
    /// The proxy's admin/metrics address (default: an ephemeral port on 127.0.0.1).
    #[arg(long = "admin-bind", default_value = "127.0.0.1:0")]
    admin_bind: String,
    /// Log level (trace, debug, info, warn, err).
    #[arg(long = "log-level", default_value = "info")]
    log_level: String,
    /// Dev form: register a proxy for this service while the proxy runs
    /// (with -gateway: the gateway's service name).
    #[arg(long)]
    service: Option<String>,
    #[command(flatten)]
    gateway: super::gateway::GatewayArgs,
    /// Dev form: an upstream `name:local_port` (repeatable).
    #[arg(long = "upstream")]
    upstreams: Vec<String>,
    /// Dev form: the public listener `[host]:port`.
    #[arg(long)]
    listen: Option<String>,
    /// Dev form: the local application's `host:port` (default 127.0.0.1 and the -service's registered port).
    #[arg(long = "service-addr")]
    service_addr: Option<String>,
    /// Arguments after `--` (accepted for symmetry with `connect envoy`; unused).
    #[arg(last = true)]
    passthrough: Vec<String>,
}

/// Flags of `connect envoy`.
#[derive(Args, Debug)]
pub struct EnvoyArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The service whose sidecar proxy to run (finds its single sidecar).
    #[arg(long = "sidecar-for")]
    sidecar_for: Option<String>,
    /// The proxy's service id (instead of -sidecar-for).
    #[arg(long = "proxy-id")]
    proxy_id: Option<String>,
    /// Envoy's admin address.
    #[arg(long = "admin-bind", default_value = "localhost:19000")]
    admin_bind: String,
    /// Envoy's admin access log.
    #[arg(long = "admin-access-log-path", default_value = "/dev/null")]
    admin_access_log_path: String,
    /// The agent's gRPC address (env CONSUL_GRPC_ADDR; default: the agent's xDS port on 127.0.0.1).
    #[arg(long = "grpc-addr")]
    grpc_addr: Option<String>,
    /// CA certificate for the agent's gRPC TLS port (env CONSUL_GRPC_CACERT;
    /// default -ca-file): TLS unless -grpc-addr says http://.
    #[arg(long = "grpc-ca-file")]
    grpc_ca_file: Option<String>,
    /// Print the bootstrap JSON and exit.
    #[arg(long)]
    bootstrap: bool,
    /// The gateway's service name with -gateway -register (default mesh-gateway).
    #[arg(long)]
    service: Option<String>,
    #[command(flatten)]
    gateway: super::gateway::GatewayArgs,
    /// The Envoy binary (default: `envoy` on PATH).
    #[arg(long = "envoy-binary")]
    envoy_binary: Option<String>,
    /// Arguments after `--` go to Envoy.
    #[arg(last = true)]
    passthrough: Vec<String>,
}

/// `connect ca` subcommands.
#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Prints the CA configuration as JSON.
    GetConfig(GetConfigArgs),
    /// Replaces the CA configuration from a JSON file; a new key or root
    /// certificate rotates the root.
    SetConfig(SetConfigArgs),
}

/// Flags of `connect ca get-config`.
#[derive(Args, Debug)]
pub struct GetConfigArgs {
    #[command(flatten)]
    http: HttpFlags,
}

/// Flags of `connect ca set-config`.
#[derive(Args, Debug)]
pub struct SetConfigArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The JSON file with `Provider`, `Config` and optionally `ForceWithoutCrossSigning`.
    #[arg(long = "config-file")]
    config_file: Option<PathBuf>,
    /// Rotate even when the old root cannot cross-sign the new one.
    #[arg(long = "force-without-cross-signing")]
    force_without_cross_signing: bool,
}

/// Resolves `host:port` to an IP address and port (IPv4 preferred), as
/// Envoy needs numeric addresses.
pub fn resolve(flag: &str, value: &str) -> Result<(String, u16), String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<std::net::SocketAddr> = value
        .to_socket_addrs()
        .map_err(|e| format!("Invalid {flag} {value:?}: {e}"))?
        .collect();
    let addr = addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .ok_or_else(|| format!("Invalid {flag} {value:?}: it resolves to no address"))?;
    Ok((addr.ip().to_string(), addr.port()))
}

/// Finds the proxy to run: `-proxy-id`, or the single sidecar of `-sidecar-for`.
pub async fn find_proxy(
    client: &Client,
    sidecar_for: Option<&str>,
    proxy_id: Option<&str>,
) -> Result<Value, String> {
    let services: serde_json::Map<String, Value> = client
        .get_json("/v1/agent/services", &[])
        .await
        .map_err(|e| format!("Error reading the agent's services: {e}"))?;
    match (sidecar_for, proxy_id) {
        (_, Some(id)) => services
            .get(id)
            .filter(|s| s["Kind"] == "connect-proxy" || s["Kind"] == "mesh-gateway")
            .cloned()
            .ok_or_else(|| format!("No proxy with ID {id:?} is registered with the local agent")),
        (Some(service), None) => {
            let mut found: Vec<&Value> = services
                .values()
                .filter(|s| {
                    s["Kind"] == "connect-proxy"
                        && (s["Proxy"]["DestinationServiceID"] == service
                            || (s["Proxy"]["DestinationServiceID"].is_null()
                                && s["Proxy"]["DestinationServiceName"] == service))
                })
                .collect();
            found.sort_by_key(|s| s["ID"].as_str().unwrap_or("").to_string());
            match found.as_slice() {
                [] => Err(format!("No sidecar proxy registered for {service}")),
                [one] => Ok((*one).clone()),
                many => Err(format!(
                    "More than one sidecar proxy registered for {service}.\n    Start proxy with -proxy-id and one of the following proxy IDs: {}",
                    many.iter()
                        .map(|s| s["ID"].as_str().unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        (None, None) => Err(
            "No proxy ID specified. One of -proxy-id, -sidecar-for, or -gateway is required".into(),
        ),
    }
}

/// The agent's gRPC address: the flag, `CONSUL_GRPC_ADDR`, or the agent's xDS port.
/// The agent's xDS server as `connect envoy` and `connect proxy` reach it.
pub(crate) struct GrpcTarget {
    /// Its IP.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The CA (PEM) its certificate is checked against: TLS when set.
    pub ca_pem: Option<String>,
}

impl GrpcTarget {
    /// `http://host:port` or `https://host:port`.
    pub fn uri(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

/// Where the agent's xDS server is, and whether over TLS: an `https://`
/// `-grpc-addr` (or CONSUL_GRPC_ADDR), or a gRPC CA (`-grpc-ca-file`,
/// CONSUL_GRPC_CACERT) without an `http://` address, asks for TLS, checked
/// against that CA (else `-ca-file` / CONSUL_CACERT); without an address
/// the agent's own TLS or plain xDS port is used.
pub(crate) async fn grpc_target(
    client: &Client,
    flag: Option<&str>,
    grpc_ca_file: Option<&str>,
    http: &HttpFlags,
) -> Result<GrpcTarget, String> {
    let given = flag
        .map(String::from)
        .or_else(|| std::env::var("CONSUL_GRPC_ADDR").ok())
        .filter(|s| !s.is_empty());
    let grpc_ca = grpc_ca_file
        .map(String::from)
        .or_else(|| std::env::var("CONSUL_GRPC_CACERT").ok())
        .filter(|s| !s.is_empty());
    let tls = match given.as_deref() {
        Some(addr) if addr.starts_with("https://") => true,
        Some(addr) if addr.starts_with("http://") => false,
        _ => grpc_ca.is_some(),
    };
    let ca_pem = if tls {
        let file = grpc_ca
            .or_else(|| http.ca_file.clone())
            .or_else(|| std::env::var("CONSUL_CACERT").ok())
            .filter(|s| !s.is_empty())
            .ok_or("TLS to the agent's gRPC port needs its CA: pass -grpc-ca-file (or CONSUL_GRPC_CACERT)")?;
        Some(
            std::fs::read_to_string(&file)
                .map_err(|e| format!("Error loading the gRPC CA file {file}: {e}"))?,
        )
    } else {
        None
    };
    let (host, port) = match given {
        Some(addr) => {
            let addr = addr
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .trim_end_matches('/');
            resolve("-grpc-addr", addr)?
        }
        None if tls => {
            let port = xds_port(client, "TLS", 8503).await?;
            if port <= 0 {
                return Err("The agent's gRPC TLS port is disabled: set ports { grpc_tls = 8503 } with tls { grpc { cert_file, key_file } }, or pass -grpc-addr".into());
            }
            ("127.0.0.1".into(), port as u16)
        }
        None => grpc_address(client, None).await?,
    };
    Ok(GrpcTarget { host, port, ca_pem })
}

/// The agent's xDS port of `kind` (`Plaintext` or `TLS`) from
/// `/v1/agent/self`; a token without `agent:read` (a sidecar's service
/// identity) gets Consul's default port instead, with Consul's warning.
async fn xds_port(client: &Client, kind: &str, default: i64) -> Result<i64, String> {
    match client.get_json::<Value>("/v1/agent/self", &[]).await {
        Ok(me) => Ok(me["xDS"]["Ports"][kind]
            .as_i64()
            .or_else(|| me["xDS"]["Port"].as_i64().filter(|_| kind == "Plaintext"))
            .unwrap_or(-1)),
        Err(e) if e.message.contains("Permission denied") => {
            eprintln!("WARNING: xDS port lookup failed, defaulting to {default}");
            Ok(default)
        }
        Err(e) => Err(format!("Error looking up xDS port: {e}")),
    }
}

pub(crate) async fn grpc_address(
    client: &Client,
    flag: Option<&str>,
) -> Result<(String, u16), String> {
    let given = flag
        .map(String::from)
        .or_else(|| std::env::var("CONSUL_GRPC_ADDR").ok())
        .filter(|s| !s.is_empty());
    if let Some(addr) = given {
        let addr = addr
            .trim_start_matches("http://")
            .trim_start_matches("https://");
        return resolve("-grpc-addr", addr);
    }
    let port = xds_port(client, "Plaintext", 8502).await?;
    if port <= 0 {
        return Err("The agent's gRPC (xDS) port is disabled: start it with -grpc-port 8502 (or ports { grpc = 8502 }), or pass -grpc-addr".into());
    }
    Ok(("127.0.0.1".into(), port as u16))
}

async fn envoy(args: EnvoyArgs) -> u8 {
    let client = Client::new(&args.http);
    let gateway = super::gateway::gateway_proxy(
        &client,
        &args.gateway,
        args.service.as_deref(),
        args.proxy_id.as_deref(),
        args.sidecar_for.as_deref(),
        args.bootstrap,
    )
    .await;
    let found = match gateway {
        Ok(Some(gateway)) => Ok(gateway),
        Ok(None) => {
            find_proxy(
                &client,
                args.sidecar_for.as_deref(),
                args.proxy_id.as_deref(),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let proxy = match found {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let (admin_address, admin_port) = match resolve("-admin-bind", &args.admin_bind) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let target = match grpc_target(
        &client,
        args.grpc_addr.as_deref(),
        args.grpc_ca_file.as_deref(),
        &args.http,
    )
    .await
    {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let prometheus = match proxy["Proxy"]["Config"]["envoy_prometheus_bind_addr"].as_str() {
        Some(addr) => match resolve("envoy_prometheus_bind_addr", addr) {
            Ok(a) => Some(a),
            Err(e) => return fail(e),
        },
        None => None,
    };
    let config = &proxy["Proxy"]["Config"];
    let mut extras = Vec::new();
    for (key, type_url) in [
        (
            "envoy_extra_static_clusters_json",
            "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        ),
        (
            "envoy_extra_static_listeners_json",
            "type.googleapis.com/envoy.config.listener.v3.Listener",
        ),
    ] {
        match config[key].as_str() {
            None => extras.push(Vec::new()),
            Some(text) => match legate_xds::bootstrap::parse_extra(key, text, type_url) {
                Ok(list) => extras.push(list),
                Err(e) => return fail(format!("Error in the proxy's config: {e}")),
            },
        }
    }
    let extra_listeners = extras.pop().unwrap_or_default();
    let extra_clusters = extras.pop().unwrap_or_default();
    let params = legate_xds::bootstrap::BootstrapParams {
        extra_clusters,
        extra_listeners,
        proxy_id: proxy["ID"].as_str().unwrap_or("").to_string(),
        cluster: proxy["Service"].as_str().unwrap_or("").to_string(),
        admin_address,
        admin_port,
        admin_access_log_path: args.admin_access_log_path.clone(),
        agent_address: target.host.clone(),
        agent_port: target.port,
        agent_ca_pem: target.ca_pem.clone(),
        // As every command: -token-file / CONSUL_HTTP_TOKEN_FILE, then -token / CONSUL_HTTP_TOKEN.
        token: crate::client::token_of(&args.http).unwrap_or_default(),
        prometheus_bind_addr: prometheus,
    };
    let text = serde_json::to_string_pretty(&legate_xds::bootstrap::bootstrap(&params))
        .unwrap_or_default();
    if args.bootstrap {
        println!("{text}");
        return 0;
    }
    let binary = match args.envoy_binary.clone().or_else(|| find_on_path("envoy")) {
        Some(b) => b,
        None => {
            return fail(format!(
                "Envoy is not installed: no `envoy` on PATH. Install Envoy or pass -envoy-binary, or run Legate's built-in proxy instead: legate connect proxy -sidecar-for {}",
                proxy["Proxy"]["DestinationServiceName"].as_str().unwrap_or("<service>")
            ))
        }
    };
    let path = std::env::temp_dir().join(format!("legate-envoy-{}.json", params.proxy_id));
    if let Err(e) = std::fs::write(&path, &text) {
        return fail(format!(
            "Error writing the bootstrap to {}: {e}",
            path.display()
        ));
    }
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(&binary)
        .arg("--config-path")
        .arg(&path)
        .arg("--disable-hot-restart")
        .args(&args.passthrough)
        .exec();
    fail(format!("Error running {binary}: {error}"))
}

fn find_on_path(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .map(|p| p.display().to_string())
}

async fn proxy(args: ProxyArgs) -> u8 {
    let level = match args.log_level.to_ascii_lowercase().as_str() {
        "err" => "error".to_string(),
        l @ ("trace" | "debug" | "info" | "warn" | "error") => l.to_string(),
        other => {
            return fail(format!(
                "Invalid -log-level {other:?} (trace, debug, info, warn, err)"
            ))
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEGATE_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},h2=warn,hyper=warn,tower=warn"))
    });
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    let client = Client::new(&args.http);
    let mut registered: Option<String> = None;
    let gateway = super::gateway::gateway_proxy(
        &client,
        &args.gateway,
        args.service.as_deref(),
        args.proxy_id.as_deref(),
        args.sidecar_for.as_deref(),
        false,
    )
    .await;
    let proxy = if let Some(gateway) = gateway.transpose() {
        match gateway {
            Ok(g) => g,
            Err(e) => return fail(e),
        }
    } else if let Some(service) = &args.service {
        match register_dev_proxy(&client, service, &args).await {
            Ok(p) => {
                registered = p["ID"].as_str().map(String::from);
                p
            }
            Err(e) => return fail(e),
        }
    } else {
        match find_proxy(
            &client,
            args.sidecar_for.as_deref(),
            args.proxy_id.as_deref(),
        )
        .await
        {
            Ok(p) => p,
            Err(e) => return fail(e),
        }
    };
    let target = match grpc_target(
        &client,
        args.grpc_addr.as_deref(),
        args.grpc_ca_file.as_deref(),
        &args.http,
    )
    .await
    {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let admin = match resolve("-admin-bind", &args.admin_bind) {
        Ok((ip, port)) => match format!("{ip}:{port}").parse() {
            Ok(a) => Some(a),
            Err(e) => return fail(format!("Invalid -admin-bind {:?}: {e}", args.admin_bind)),
        },
        Err(e) => return fail(e),
    };
    if !args.passthrough.is_empty() {
        tracing::warn!(args = ?args.passthrough, "arguments after -- are for Envoy; the built-in proxy ignores them");
    }
    let options = legate_proxy::ProxyOptions {
        proxy_id: proxy["ID"].as_str().unwrap_or("").to_string(),
        grpc_addr: target.uri(),
        grpc_ca_pem: target.ca_pem.clone(),
        // As every command: -token-file / CONSUL_HTTP_TOKEN_FILE, then -token / CONSUL_HTTP_TOKEN.
        token: crate::client::token_of(&args.http).unwrap_or_default(),
        admin_bind: admin,
    };
    println!("==> Legate proxy {} starting", options.proxy_id);
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let result = legate_proxy::run(options, shutdown).await;
    if let Some(id) = registered {
        let _ = client
            .ok(
                Method::PUT,
                &format!("/v1/agent/service/deregister/{id}"),
                &[],
                None,
            )
            .await;
    }
    match result {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `-service NAME -upstream db:9191 -listen :21000`: registers a proxy for
/// the service (deregistered when the proxy stops), as Consul's `-register`.
async fn register_dev_proxy(
    client: &Client,
    service: &str,
    args: &ProxyArgs,
) -> Result<Value, String> {
    let listen = args
        .listen
        .as_deref()
        .ok_or("-listen is required with -service (the proxy's public address, e.g. :21000)")?;
    let (host, port) = listen
        .rsplit_once(':')
        .ok_or_else(|| format!("Invalid -listen {listen:?}: expected [host]:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("Invalid -listen {listen:?}: bad port"))?;
    let mut upstreams = Vec::new();
    for u in &args.upstreams {
        let (name, local) = u
            .rsplit_once(':')
            .ok_or_else(|| format!("Invalid -upstream {u:?}: expected name:port"))?;
        let local: u16 = local
            .parse()
            .map_err(|_| format!("Invalid -upstream {u:?}: bad port"))?;
        upstreams.push(serde_json::json!({"DestinationName": name, "LocalBindPort": local}));
    }
    let mut proxy = serde_json::json!({"DestinationServiceName": service, "Upstreams": upstreams});
    let service_addr = match &args.service_addr {
        Some(a) => Some(a.clone()),
        None => {
            // The local service of that name, if the agent has one.
            let services: serde_json::Map<String, Value> = client
                .get_json("/v1/agent/services", &[])
                .await
                .map_err(|e| format!("Error reading the agent's services: {e}"))?;
            services
                .values()
                .find(|s| s["Service"] == service && s["Kind"].as_str().unwrap_or("").is_empty())
                .and_then(|s| s["Port"].as_u64())
                .filter(|p| *p > 0)
                .map(|p| format!("127.0.0.1:{p}"))
        }
    };
    if service_addr.is_none() && args.listen.is_some() {
        return Err(format!(
            "-service-addr is required: the local agent has no service named {service:?} to take the application's port from"
        ));
    }
    if let Some(addr) = &service_addr {
        let (h, p) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("Invalid -service-addr {addr:?}: expected host:port"))?;
        let p: u16 = p
            .parse()
            .map_err(|_| format!("Invalid -service-addr {addr:?}: bad port"))?;
        proxy["LocalServiceAddress"] = Value::String(h.to_string());
        proxy["LocalServicePort"] = Value::from(p);
    }
    let id = format!("{service}-proxy");
    let body = serde_json::json!({
        "Kind": "connect-proxy",
        "ID": id,
        "Name": id,
        "Address": if host.is_empty() { "" } else { host },
        "Port": port,
        "Proxy": proxy,
    });
    client
        .ok(
            Method::PUT,
            "/v1/agent/service/register",
            &[],
            Some(serde_json::to_vec(&body).unwrap_or_default()),
        )
        .await
        .map_err(|e| format!("Error registering the proxy: {e}"))?;
    let mut registered = body;
    registered["Proxy"]["DestinationServiceName"] = Value::String(service.to_string());
    Ok(registered)
}

/// Runs a connect subcommand.
pub async fn run(cmd: ConnectCommand) -> u8 {
    match cmd {
        ConnectCommand::Proxy(args) => proxy(*args).await,
        ConnectCommand::Envoy(args) => envoy(*args).await,
        ConnectCommand::GrpcCerts(args) => super::grpc_certs::run(*args).await,
        ConnectCommand::Ca(ca) => ca_command(*ca).await,
    }
}

/// Runs a `connect ca` subcommand.
async fn ca_command(cmd: CaCommand) -> u8 {
    match cmd {
        CaCommand::GetConfig(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Value>("/v1/connect/ca/configuration", &[])
                .await
            {
                Ok(config) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&config).unwrap_or_default()
                    );
                    0
                }
                Err(e) => fail(format!("Error request CA configuration: {e}")),
            }
        }
        CaCommand::SetConfig(args) => {
            let Some(path) = args.config_file else {
                return fail("The -config-file flag is required");
            };
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => return fail(format!("Error reading config file: {e}")),
            };
            let mut config: Value = match serde_json::from_str(&text) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => return fail("Error parsing config file: expected a JSON object"),
                Err(e) => return fail(format!("Error parsing config file: {e}")),
            };
            if args.force_without_cross_signing {
                config["ForceWithoutCrossSigning"] = Value::Bool(true);
            }
            let client = Client::new(&args.http);
            let body = serde_json::to_vec(&config).unwrap_or_default();
            match client
                .ok(Method::PUT, "/v1/connect/ca/configuration", &[], Some(body))
                .await
            {
                Ok(_) => {
                    println!("Configuration updated!");
                    0
                }
                Err(e) => fail(format!("Error setting CA configuration: {e}")),
            }
        }
    }
}
