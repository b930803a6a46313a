//! `legate agent`: loads configuration, starts a server (in `-dev` or
//! `-server` mode) and the agent, serves the HTTP API, and shuts down
//! cleanly on SIGINT, SIGTERM or `/v1/agent/leave`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use legate_agent::config::{self, AgentConfig, ConfigSource};
use legate_agent::Agent;
use legate_raft::RaftOptions;
use legate_server::{Server, ServerConfig};
use legate_types::rpc::ServerRpc;
use serde_json::{json, Map, Value};

/// Flags of `legate agent`, as Consul's.
#[derive(Args, Debug, Default, Clone)]
pub struct AgentArgs {
    /// Development mode: one in-memory server, everything on loopback.
    #[arg(long)]
    dev: bool,
    /// Run a server.
    #[arg(long)]
    server: bool,
    /// Bootstrap a one-server cluster.
    #[arg(long)]
    bootstrap: bool,
    /// Number of servers to wait for before bootstrapping.
    #[arg(long = "bootstrap-expect")]
    bootstrap_expect: Option<u32>,
    /// A config file (HCL or JSON); repeatable.
    #[arg(long = "config-file")]
    config_file: Vec<PathBuf>,
    /// A directory of config files; repeatable.
    #[arg(long = "config-dir")]
    config_dir: Vec<PathBuf>,
    /// Read every config file in this format (`hcl` or `json`), whatever
    /// its extension.
    #[arg(long = "config-format")]
    config_format: Option<String>,
    /// An HCL config fragment; repeatable.
    #[arg(long)]
    hcl: Vec<String>,
    /// Node name.
    #[arg(long)]
    node: Option<String>,
    /// Node id (UUID).
    #[arg(long = "node-id")]
    node_id: Option<String>,
    /// Node metadata `key:value`; repeatable.
    #[arg(long = "node-meta")]
    node_meta: Vec<String>,
    /// Datacenter.
    #[arg(long)]
    datacenter: Option<String>,
    /// Address the client interfaces (HTTP, DNS, gRPC) bind.
    #[arg(long)]
    client: Option<String>,
    /// Address cluster communication binds.
    #[arg(long)]
    bind: Option<String>,
    /// Address advertised to the cluster.
    #[arg(long)]
    advertise: Option<String>,
    /// Data directory.
    #[arg(long = "data-dir")]
    data_dir: Option<PathBuf>,
    /// Log level.
    #[arg(long = "log-level")]
    log_level: Option<String>,
    /// Log as JSON.
    #[arg(long = "log-json")]
    log_json: bool,
    /// PID file.
    #[arg(long = "pid-file")]
    pid_file: Option<PathBuf>,
    /// HTTP port (-1 disables).
    #[arg(long = "http-port", allow_hyphen_values = true)]
    http_port: Option<i64>,
    /// gRPC port (-1 disables).
    #[arg(long = "grpc-port", allow_hyphen_values = true)]
    grpc_port: Option<i64>,
    /// gRPC TLS port (-1 disables; used only with a gRPC certificate).
    #[arg(long = "grpc-tls-port", allow_hyphen_values = true)]
    grpc_tls_port: Option<i64>,
    /// DNS port (-1 disables).
    #[arg(long = "dns-port", allow_hyphen_values = true)]
    dns_port: Option<i64>,
    /// Server RPC port.
    #[arg(long = "server-port", allow_hyphen_values = true)]
    server_port: Option<i64>,
    /// LAN gossip port.
    #[arg(long = "serf-lan-port", allow_hyphen_values = true)]
    serf_lan_port: Option<i64>,
    /// WAN gossip port.
    #[arg(long = "serf-wan-port", allow_hyphen_values = true)]
    serf_wan_port: Option<i64>,
    /// Address LAN gossip binds (`serf_lan`; default: `-bind`).
    #[arg(long = "serf-lan-bind")]
    serf_lan_bind: Option<String>,
    /// Address WAN gossip binds (`serf_wan`; default: `-bind`).
    #[arg(long = "serf-wan-bind")]
    serf_wan_bind: Option<String>,
    /// Serve the web UI.
    #[arg(long)]
    ui: bool,
    /// Where the web UI is served (`ui_config.content_path`; default `/ui/`).
    #[arg(long = "ui-content-path")]
    ui_content_path: Option<String>,
    /// Serve the web UI from this directory (`ui_config.dir`).
    #[arg(long = "ui-dir")]
    ui_dir: Option<String>,
    /// DNS domain.
    #[arg(long)]
    domain: Option<String>,
    /// A second DNS domain answered like -domain.
    #[arg(long = "alt-domain")]
    alt_domain: Option<String>,
    /// Upstream DNS server for names outside our domains (repeatable).
    #[arg(long = "recursor")]
    recursors: Vec<String>,
    /// Addresses to join, retried until one answers.
    #[arg(long = "retry-join")]
    retry_join: Vec<String>,
    /// Addresses to join at start.
    #[arg(long)]
    join: Vec<String>,
    /// Time between -retry-join attempts (default 30s).
    #[arg(long = "retry-interval")]
    retry_interval: Option<String>,
    /// WAN addresses to join (servers), retried until one answers.
    #[arg(long = "retry-join-wan")]
    retry_join_wan: Vec<String>,
    /// WAN addresses to join at start (servers).
    #[arg(long = "join-wan")]
    join_wan: Vec<String>,
    /// Time between -retry-join-wan attempts (default 30s).
    #[arg(long = "retry-interval-wan")]
    retry_interval_wan: Option<String>,
    /// -retry-join-wan attempts before giving up (default 0: forever).
    #[arg(long = "retry-max-wan")]
    retry_max_wan: Option<u32>,
    /// A primary datacenter's mesh gateway (`host:port`) to federate
    /// through (`primary_gateways`); repeatable.
    #[arg(long = "primary-gateway")]
    primary_gateway: Vec<String>,
    /// Address advertised to the WAN pool.
    #[arg(long = "advertise-wan")]
    advertise_wan: Option<String>,
    /// Gossip encryption key (base64 of 16 or 32 bytes; `legate keygen`).
    #[arg(long)]
    encrypt: Option<String>,
    /// Allow script checks registered through the API.
    #[arg(long = "enable-script-checks")]
    enable_script_checks: bool,
    /// Allow script checks from config files.
    #[arg(long = "enable-local-script-checks")]
    enable_local_script_checks: bool,
}

fn dev_defaults() -> Value {
    json!({
        "server": true,
        "bootstrap": true,
        "bind_addr": "127.0.0.1",
        "client_addr": "127.0.0.1",
        "ports": {"grpc": 8502},
        "connect": {"enabled": true},
        "ui_config": {"enabled": true},
        "disable_update_check": true,
    })
}

fn flags_fragment(args: &AgentArgs) -> Result<Value, String> {
    let mut map = Map::new();
    let mut put = |key: &str, value: Value| {
        map.insert(key.to_string(), value);
    };
    if args.server {
        put("server", json!(true));
    }
    if args.bootstrap {
        put("bootstrap", json!(true));
    }
    if let Some(n) = args.bootstrap_expect {
        put("bootstrap_expect", json!(n));
    }
    if let Some(v) = &args.node {
        put("node_name", json!(v));
    }
    if let Some(v) = &args.node_id {
        put("node_id", json!(v));
    }
    if let Some(v) = &args.datacenter {
        put("datacenter", json!(v));
    }
    if let Some(v) = &args.client {
        put("client_addr", json!(v));
    }
    if let Some(v) = &args.bind {
        put("bind_addr", json!(v));
    }
    if let Some(v) = &args.serf_lan_bind {
        put("serf_lan", json!(v));
    }
    if let Some(v) = &args.serf_wan_bind {
        put("serf_wan", json!(v));
    }
    if let Some(v) = &args.advertise {
        put("advertise_addr", json!(v));
    }
    if let Some(v) = &args.data_dir {
        put("data_dir", json!(v.display().to_string()));
    }
    if let Some(v) = &args.log_level {
        put("log_level", json!(v));
    }
    if args.log_json {
        put("log_json", json!(true));
    }
    if let Some(v) = &args.pid_file {
        put("pid_file", json!(v.display().to_string()));
    }
    if args.ui || args.ui_content_path.is_some() || args.ui_dir.is_some() {
        let mut ui = serde_json::Map::new();
        if args.ui {
            ui.insert("enabled".into(), json!(true));
        }
        if let Some(path) = &args.ui_content_path {
            ui.insert("content_path".into(), json!(path));
        }
        if let Some(dir) = &args.ui_dir {
            ui.insert("dir".into(), json!(dir));
        }
        put("ui_config", Value::Object(ui));
    }
    if let Some(v) = &args.domain {
        put("domain", json!(v));
    }
    if !args.retry_join.is_empty() {
        put("retry_join", json!(args.retry_join));
    }
    if !args.join.is_empty() {
        put("start_join", json!(args.join));
    }
    if let Some(v) = &args.retry_interval {
        put("retry_interval", json!(v));
    }
    if !args.retry_join_wan.is_empty() {
        put("retry_join_wan", json!(args.retry_join_wan));
    }
    if !args.join_wan.is_empty() {
        put("start_join_wan", json!(args.join_wan));
    }
    if !args.primary_gateway.is_empty() {
        put("primary_gateways", json!(args.primary_gateway));
    }
    if let Some(v) = &args.retry_interval_wan {
        put("retry_interval_wan", json!(v));
    }
    if let Some(v) = args.retry_max_wan {
        put("retry_max_wan", json!(v));
    }
    if let Some(v) = &args.advertise_wan {
        put("advertise_addr_wan", json!(v));
    }
    if let Some(v) = &args.alt_domain {
        put("alt_domain", json!(v));
    }
    if !args.recursors.is_empty() {
        put("recursors", json!(args.recursors));
    }
    if let Some(v) = &args.encrypt {
        put("encrypt", json!(v));
    }
    if args.enable_script_checks {
        put("enable_script_checks", json!(true));
    }
    if args.enable_local_script_checks {
        put("enable_local_script_checks", json!(true));
    }
    if !args.node_meta.is_empty() {
        let mut meta = Map::new();
        for pair in &args.node_meta {
            let (k, v) = pair
                .split_once(':')
                .ok_or_else(|| format!("-node-meta {pair:?}: expected key:value"))?;
            meta.insert(k.to_string(), json!(v));
        }
        put("node_meta", Value::Object(meta));
    }
    let mut ports = Map::new();
    for (name, value) in [
        ("http", args.http_port),
        ("grpc", args.grpc_port),
        ("grpc_tls", args.grpc_tls_port),
        ("dns", args.dns_port),
        ("server", args.server_port),
        ("serf_lan", args.serf_lan_port),
        ("serf_wan", args.serf_wan_port),
    ] {
        if let Some(v) = value {
            ports.insert(name.to_string(), json!(v));
        }
    }
    if !ports.is_empty() {
        map.insert("ports".into(), Value::Object(ports));
    }
    Ok(Value::Object(map))
}

fn load_config(args: &AgentArgs) -> Result<AgentConfig, String> {
    let mut sources = Vec::new();
    if args.dev {
        sources.push(ConfigSource::Json("dev defaults".into(), dev_defaults()));
    }
    for path in &args.config_file {
        sources.push(ConfigSource::File(path.clone()));
    }
    for dir in &args.config_dir {
        sources.push(ConfigSource::Dir(dir.clone()));
    }
    for hcl in &args.hcl {
        sources.push(ConfigSource::Hcl(hcl.clone()));
    }
    sources.push(ConfigSource::Json(
        "command-line flags".into(),
        flags_fragment(args)?,
    ));
    let format = args
        .config_format
        .as_deref()
        .map(config::ConfigFormat::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut config = config::load_as(&sources, format).map_err(|e| e.to_string())?;
    config.dev = args.dev;
    if config.dev {
        // -dev keeps everything in memory, whatever the files say.
        config.data_dir = None;
    }
    if !config.dev && config.data_dir.is_none() {
        return Err("data_dir cannot be empty: set -data-dir (or run with -dev)".into());
    }
    if config.server && !config.dev && !config.bootstrap && config.bootstrap_expect == 0 {
        return Err(
            "a server needs -bootstrap-expect=N (N servers form the cluster) or -bootstrap".into(),
        );
    }
    if config.bootstrap && config.bootstrap_expect > 1 {
        return Err("bootstrap and bootstrap_expect cannot both be set".into());
    }
    for watch in &config.watches {
        crate::watch::parse(watch).map_err(|e| format!("Failed to parse watch: {e}"))?;
    }
    Ok(config)
}

/// Decodes and validates `config_entries.bootstrap`, naming the entry that
/// is wrong.
fn bootstrap_entries(
    config: &AgentConfig,
) -> Result<Vec<legate_types::config_entry::ConfigEntry>, String> {
    config
        .config_entries_bootstrap
        .iter()
        .enumerate()
        .map(|(i, value)| {
            legate_types::config_entry::from_json(legate_types::keys::canonicalize_keys(
                value.clone(),
            ))
            .map_err(|e| format!("config_entries.bootstrap[{i}]: {e}"))
        })
        .collect()
}

fn port_text(port: Option<u16>) -> String {
    port.map(|p| p.to_string())
        .unwrap_or_else(|| "-1".to_string())
}

fn print_banner(config: &AgentConfig, node_id: &str) {
    println!("==> Starting Legate agent...");
    println!(
        "           Version: '{}' (legate {})",
        legate_types::CONSUL_API_VERSION,
        legate_types::LEGATE_VERSION
    );
    println!("           Node ID: '{node_id}'");
    println!("         Node name: '{}'", config.node_name);
    println!(
        "        Datacenter: '{}' (Segment: '<all>')",
        config.datacenter
    );
    println!(
        "            Server: {} (Bootstrap: {})",
        config.server,
        config.bootstrap || config.bootstrap_expect == 1
    );
    println!(
        "       Client Addr: [{}] (HTTP: {}, HTTPS: {}, gRPC: {}, DNS: {})",
        config.client_addr,
        port_text(config.ports.http),
        port_text(config.ports.https),
        port_text(config.ports.grpc),
        port_text(config.ports.dns)
    );
    println!(
        "      Cluster Addr: {} (LAN: {}, WAN: {})",
        config.advertise(),
        port_text(config.ports.serf_lan),
        port_text(config.ports.serf_wan)
    );
    println!(
        "         Data Dir: {}",
        config
            .data_dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "(in memory)".into())
    );
    println!();
    println!("==> Log data will now stream in as it occurs:");
    println!();
}

/// The Raft id of a node: the first 8 bytes of its node id (a UUID, which
/// `node_id` guarantees), never 0.
fn raft_id(node_id: &str) -> u64 {
    let bytes = uuid::Uuid::parse_str(node_id)
        .map(|u| *u.as_bytes())
        .unwrap_or_default();
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(id).max(1)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// SIGHUP reloads the configuration, as in Consul.
fn spawn_sighup_reload(agent: Arc<Agent>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            match agent.reload() {
                Ok(()) => tracing::info!("reloaded configuration (SIGHUP)"),
                Err(e) => {
                    tracing::error!(error = %e, "reload failed; keeping the running configuration")
                }
            }
        }
    });
}

fn write_pid(path: &Path) -> Result<(), String> {
    std::fs::write(path, std::process::id().to_string())
        .map_err(|e| format!("writing pid file {}: {e}", path.display()))
}

/// Runs the agent until a signal or a leave request; returns the exit code.
pub async fn run(args: AgentArgs) -> u8 {
    match run_inner(args).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("==> {e}");
            1
        }
    }
}

/// A server's WAN pool, its federation warnings and, federating through
/// mesh gateways, its gateway locator.
struct WanParts {
    membership: Arc<dyn legate_agent::membership::Membership>,
    warnings: tokio::sync::watch::Receiver<Vec<String>>,
    locator: Option<tokio::sync::watch::Receiver<legate_types::gateway_locator::GatewayLocator>>,
}

/// What a started server hands the agent.
struct StartedServer {
    server: Option<Arc<Server>>,
    /// LAN gossip (clustered servers and client agents).
    membership: Option<Arc<crate::cluster::GossipMembership>>,
    /// The WAN pool and its federation warnings (clustered servers).
    wan: Option<WanParts>,
    /// The `ServerRpc` the agent calls.
    rpc: Arc<dyn ServerRpc>,
    /// User events the server was asked to spread (servers).
    events: Option<tokio::sync::mpsc::UnboundedReceiver<legate_types::event::UserEvent>>,
}

/// Starts this agent's server: in `-dev` alone in memory; otherwise with
/// the server port, gossip, Raft over the network and forwarding.
/// Publishes the agent's `replication` token to the server whenever it
/// changes (`acl set-agent-token replication`, persisted tokens).
fn follow_replication_token(
    mut tokens: tokio::sync::watch::Receiver<legate_agent::acl_config::AclTokens>,
    to_server: tokio::sync::watch::Sender<String>,
) {
    tokio::spawn(async move {
        loop {
            let token = tokens.borrow_and_update().replication.clone();
            let token = token.unwrap_or_default();
            to_server.send_if_modified(|current| {
                let changed = *current != token;
                *current = token;
                changed
            });
            if tokens.changed().await.is_err() {
                return;
            }
        }
    });
}

async fn start_server(
    config: &AgentConfig,
    node_id: &str,
    pool: &Arc<legate_rpc::Pool>,
    tls: &legate_rpc::TlsSettings,
    replication_token: tokio::sync::watch::Receiver<String>,
) -> Result<StartedServer, String> {
    let advertise = config.advertise().to_string();
    let server_port = config.ports.server.unwrap_or(8300);
    let clustered = !config.dev;
    let mut listener = if clustered {
        let address = SocketAddr::new(config.bind_addr, server_port);
        Some(
            legate_rpc::Listener::bind(address)
                .await
                .map_err(|e| format!("Error starting the server port on {address}: {e}"))?,
        )
    } else {
        None
    };
    let transport = if clustered {
        legate_raft::Transport(Some(Arc::new(legate_server::cluster::PortTransport(
            pool.clone(),
        ))))
    } else {
        Default::default()
    };
    // The WAN pool's view of every datacenter, published by WAN gossip,
    // read by the router and the catalog.
    let (wan_view, wan_view_rx) = tokio::sync::watch::channel(Default::default());
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let federation = crate::wanfed::prepare(
        config,
        tls.client()
            .map_err(|e| format!("Error loading TLS: {e}"))?,
    )?;
    // Calls to other datacenters (forwarding, global writes, replication),
    // through mesh gateways when federating through them.
    let cross_dc = clustered.then(|| {
        let router = legate_rpc::Router::new(config.datacenter.clone(), wan_view_rx.clone());
        let router = match &federation {
            Some(f) => router.through_gateways(f.locator.clone()),
            None => router,
        };
        Arc::new(legate_rpc::CrossDatacenter::new(
            Arc::new(router),
            pool.clone(),
        ))
    });
    let server = Server::start(ServerConfig {
        primary_datacenter: config.primary_datacenter.clone(),
        remote: cross_dc
            .clone()
            .map(|c| legate_server::OtherDatacenters(c as Arc<dyn ServerRpc>)),
        masked_kinds: crate::cluster::masked_kinds(),
        federation_state_prune_interval: crate::cluster::federation_state_prune_interval(),
        intermediate_cert_ttl: crate::cluster::test_duration("LEGATE_TEST_INTERMEDIATE_CERT_TTL"),
        wan: wan_view_rx.clone(),
        events: Some(events_tx),
        datacenter: config.datacenter.clone(),
        node_name: config.node_name.clone(),
        node_id: node_id.to_string(),
        advertise_address: advertise.clone(),
        advertise_address_wan: config.wan.advertise_addr_wan.map(|a| a.to_string()),
        server_port,
        raft: RaftOptions {
            node_id: raft_id(node_id),
            address: SocketAddr::new(config.advertise(), server_port).to_string(),
            data_dir: config.data_dir.clone(),
            bootstrap: config.dev || config.bootstrap || config.bootstrap_expect == 1,
            raft_multiplier: if config.dev {
                1
            } else {
                config.raft_multiplier
            },
            snapshot_threshold: config.raft_tuning.snapshot_threshold.unwrap_or(8192),
            trailing_logs: config
                .raft_tuning
                .trailing_logs
                .unwrap_or(legate_raft::DEFAULT_TRAILING_LOGS),
            snapshot_interval: config
                .raft_tuning
                .snapshot_interval
                .unwrap_or(legate_raft::DEFAULT_SNAPSHOT_INTERVAL),
            transport,
        },
        tombstone_ttl: legate_server::DEFAULT_TOMBSTONE_TTL,
        config_entries_bootstrap: bootstrap_entries(config)?,
        connect_ca: config.connect_ca.clone(),
        default_intention_allow: !(config.acl.enabled && config.acl.default_policy == "deny"),
        masked_features: crate::cluster::masked_features(),
        autopilot: config.autopilot.clone(),
        reap_settle: Duration::from_secs(15 * 60),
        session_ttl_min: config.limits.session_ttl_min,
        max_query_time: config.http_config.max_query_time,
        acl: legate_server::AclSettings {
            enabled: config.acl.enabled,
            default_policy: if config.acl.default_policy == "deny" {
                legate_acl::DefaultPolicy::Deny
            } else {
                legate_acl::DefaultPolicy::Allow
            },
            initial_management: config.acl.tokens.initial_management.clone(),
            enable_key_list_policy: config.acl.enable_key_list_policy,
            token_cache_capacity: config.acl.token_cache_size.unwrap_or(10 * 1024),
            policy_cache_capacity: config.acl.policy_cache_size.unwrap_or(4096),
            down_policy: legate_acl::DownPolicy::parse(&config.acl.down_policy).unwrap_or_default(),
            token_ttl: config.acl.token_ttl,
            enable_token_replication: config.acl.enable_token_replication,
            login_tokens_per_identity: config
                .acl
                .login_tokens_per_identity
                .unwrap_or(legate_server::LIVE_TOKENS_PER_IDENTITY),
            replication_token,
        },
    })
    .await
    .map_err(|e| format!("Error starting the server: {e}"))?;
    let mut membership = None;
    let mut wan_membership = None;
    let rpc: Arc<dyn ServerRpc> = match cross_dc {
        Some(cross) => Arc::new(
            legate_rpc::Forwarding::new(
                Arc::new(legate_rpc::Prepared::new(
                    server.clone(),
                    server.token_hook(),
                )),
                server.clone(),
                pool.clone(),
            )
            .with_cross(cross),
        ),
        None => server.clone(),
    };
    if let Some(mut listener) = listener.take() {
        listener.set_tls(
            tls.server()
                .map_err(|e| format!("Error loading TLS: {e}"))?,
        );
        listener.set_client_limits(
            config.limits.rpc_max_conns_per_client,
            config.limits.rpc_handshake_timeout,
        );
        server.route(&mut listener, rpc.clone());
        if let Some(f) = &federation {
            listener.route_stream(legate_rpc::Kind::WanGossip, Arc::new(f.tunnel.clone()));
        }
        // The server port (and every connection on it) closes with the server.
        let s = server.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = listener.serve() => {}
                _ = s.wait_shutdown() => {}
            }
        });
        let rpc_address = SocketAddr::new(config.advertise(), server_port);
        let (gossip, gossip_membership) = crate::cluster::start_gossip(
            config,
            node_id,
            raft_id(node_id),
            Some(rpc_address),
            crate::cluster::PoolKind::Lan,
            None,
        )
        .await?;
        crate::cluster::spawn_joins(
            gossip_membership.clone(),
            crate::cluster::JoinPlan::lan(config),
        );
        let relay = federation.as_ref().and_then(|f| f.take_relay());
        if let Some(wan_pool) = crate::wan::start(
            config,
            node_id,
            raft_id(node_id),
            rpc_address,
            wan_view,
            relay,
        )
        .await?
        {
            if let Some((wan_gossip, _)) = &wan_pool.gossip {
                if let Some(f) = &federation {
                    f.run(config, server.clone(), pool.clone(), wan_gossip.clone());
                }
                crate::wan::spawn_flood_join(
                    gossip.clone(),
                    wan_gossip.clone(),
                    config.datacenter.clone(),
                );
                crate::wan::spawn_keyring_mirror(gossip.clone(), wan_gossip.clone());
            }
            wan_membership = Some(WanParts {
                membership: wan_pool.membership,
                warnings: wan_pool.warnings,
                locator: federation.as_ref().map(|f| f.locator.clone()),
            });
        }
        crate::cluster::spawn_member_sync(server.clone(), &gossip);
        if config.bootstrap_expect > 1 {
            crate::cluster::spawn_bootstrap_expect(
                server.clone(),
                gossip,
                config.bootstrap_expect,
                config.datacenter.clone(),
                pool.clone(),
            );
        }
        membership = Some(gossip_membership);
    }
    if config.bootstrap_expect > 1 {
        // The other servers may not have started yet: serve meanwhile.
        let s = server.clone();
        tokio::spawn(async move {
            while !s.wait_for_leader(Duration::from_secs(30)).await {
                tracing::warn!(
                    "no cluster leader yet; waiting for bootstrap_expect servers to join"
                );
            }
        });
    } else if !server.wait_for_leader(Duration::from_secs(30)).await {
        tracing::warn!("no Raft leader after 30s; continuing");
    } else if !server.wait_until_registered(Duration::from_secs(10)).await {
        tracing::warn!("this server's catalog entry is not registered after 10s; continuing");
    }
    Ok(StartedServer {
        server: Some(server),
        membership,
        wan: wan_membership,
        rpc,
        events: Some(events_rx),
    })
}

/// Runs the config's `watches` against this agent's own HTTP API (as
/// Consul's agent does); none when the HTTP port is off.
fn spawn_config_watches(config: &AgentConfig) -> Vec<tokio::task::JoinHandle<()>> {
    // The HTTP API's own address: its unix socket, else its TCP port on
    // the HTTP address (loopback for a wildcard one).
    let address = match (&config.http_unix, config.ports.http) {
        (Some(socket), _) => format!("unix://{}", socket.path.display()),
        (None, Some(port)) => {
            let ip = config.http_addr.unwrap_or(config.client_addr);
            let ip = if ip.is_unspecified() {
                std::net::IpAddr::from([127, 0, 0, 1])
            } else {
                ip
            };
            SocketAddr::new(ip, port).to_string()
        }
        (None, None) => {
            if !config.watches.is_empty() {
                tracing::warn!("watches need the HTTP API; it is disabled");
            }
            return Vec::new();
        }
    };
    config
        .watches
        .iter()
        .filter_map(|entry| crate::watch::parse(entry).ok())
        .map(|mut watch| {
            watch.http.http_addr = Some(address.clone());
            tokio::spawn(async move {
                if let Err(e) = crate::watch::run(watch).await {
                    tracing::error!(error = %e, "a watch stopped");
                }
            })
        })
        .collect()
}

/// The server port's TLS from the agent config: files read now, so a
/// missing or unreadable one stops the agent naming its key.
fn server_port_tls(config: &AgentConfig) -> Result<legate_rpc::TlsSettings, String> {
    let read = |key: &str, path: &Option<std::path::PathBuf>| -> Result<String, String> {
        match path {
            None => Ok(String::new()),
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("Error loading TLS: {key} {}: {e}", path.display())),
        }
    };
    Ok(legate_rpc::TlsSettings {
        ca_pem: config.tls.ca_pem()?.unwrap_or_default(),
        cert_pem: read("cert_file", &config.tls.cert_file)?,
        key_pem: read("key_file", &config.tls.key_file)?,
        verify_incoming: config.tls.verify_incoming,
        verify_outgoing: config.tls.verify_outgoing,
        server_name: format!("server.{}.{}", config.datacenter, config.domain),
    })
}

async fn run_inner(args: AgentArgs) -> Result<(), String> {
    let config = load_config(&args)?;
    crate::logging::init(&config)?;
    // `LEGATE_METRICS_RECORDER=off` (benchmarks only) runs without any
    // recorder, to measure what recording costs.
    if std::env::var("LEGATE_METRICS_RECORDER").as_deref() != Ok("off") {
        legate_telemetry::install(&config.telemetry).map_err(|e| format!("telemetry: {e}"))?;
    }
    crate::host::restrict_new_files();
    crate::host::raise_open_file_limit();
    crate::host::spawn_memory_release();
    crate::host::spawn_runtime_metrics();
    if let Some(dir) = &config.data_dir {
        crate::host::secure_data_dir(dir)?;
    }
    let node_id = crate::node_identity::node_id(&config)?;
    if let (true, Some(dir)) = (config.server && !config.dev, &config.data_dir) {
        crate::server_metadata::check_and_keep(dir, config.server_rejoin_age_max)?;
    }
    print_banner(&config, &node_id);
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    if let Some(pid) = &config.pid_file {
        write_pid(pid)?;
    }
    let tls = server_port_tls(&config)?;
    let pool = Arc::new(legate_rpc::Pool::with_tls(
        Duration::from_secs(5),
        tls.client()
            .map_err(|e| format!("Error loading TLS: {e}"))?,
    ));
    // The server's replication token is the agent's, as it is set.
    let (replication_token, replication_token_rx) =
        tokio::sync::watch::channel(config.acl.tokens.replication.clone().unwrap_or_default());
    let StartedServer {
        server,
        membership,
        wan: wan_membership,
        rpc,
        events,
    } = if config.server || config.dev {
        start_server(&config, &node_id, &pool, &tls, replication_token_rx).await?
    } else {
        // A client agent: no Raft; calls go to the servers gossip knows.
        let (gossip, membership) = crate::cluster::start_gossip(
            &config,
            &node_id,
            0,
            None,
            crate::cluster::PoolKind::Lan,
            None,
        )
        .await?;
        crate::cluster::spawn_joins(membership.clone(), crate::cluster::JoinPlan::lan(&config));
        let servers = crate::cluster::server_addresses(&gossip, config.datacenter.clone());
        let rpc: Arc<dyn ServerRpc> = Arc::new(legate_rpc::ServerPool::new(servers, pool.clone()));
        StartedServer {
            server: None,
            membership: Some(membership),
            wan: None,
            rpc,
            events: None,
        }
    };
    let agent = Agent::start(config.clone(), node_id, rpc)
        .await
        .map_err(|e| format!("Error starting the agent: {e}"))?;
    follow_replication_token(agent.tokens().subscribe(), replication_token);
    if let Some(m) = &membership {
        agent.set_membership(m.clone());
    }
    if let Some(wan) = &wan_membership {
        agent.set_wan_membership(wan.membership.clone());
        agent.set_federation_warnings(wan.warnings.clone());
        if let Some(locator) = &wan.locator {
            agent.set_gateway_locator(locator.clone());
        }
    }
    crate::cluster::spawn_user_events(agent.clone(), membership.as_ref(), events);
    let reload_args = args.clone();
    agent.set_config_loader(Box::new(move || load_config(&reload_args)));
    spawn_sighup_reload(agent.clone());
    if config.auto_reload_config {
        let (files, dirs) =
            crate::config_watch::watched_files(&config, &args.config_file, &args.config_dir);
        crate::config_watch::spawn(agent.clone(), files, dirs);
    }

    let listeners = crate::listeners::start(&config, &agent).await?;
    let dns = match config.ports.dns {
        Some(port) => {
            let address = SocketAddr::new(config.dns_addr.unwrap_or(config.client_addr), port);
            let tokens = agent.tokens().clone();
            let resolver = Arc::new(
                legate_dns::Resolver::with_limits(
                    agent.rpc().clone(),
                    config.dns.clone(),
                    config.datacenter.clone(),
                    Arc::new(move || tokens.dns_token()),
                    config.cache.limits("dns", legate_dns::CACHE_IDLE_TTL),
                )
                .for_agent_node(config.node_name.clone()),
            );
            let server = legate_dns::DnsServer::start(
                address,
                resolver,
                config.limits.http_max_conns_per_client,
            )
            .await
            .map_err(|e| format!("Error starting the DNS server on {address}: {e}"))?;
            tracing::info!(address = %address, "DNS server listening (UDP and TCP)");
            Some(server)
        }
        None => None,
    };
    let watches = spawn_config_watches(&config);
    println!("==> Legate agent running!");

    let raft_failed = async {
        match &server {
            Some(server) => server.wait_fatal().await,
            None => std::future::pending().await,
        }
    };
    let mut failure = None;
    let leaving = tokio::select! {
        _ = wait_for_signal() => { tracing::info!("caught signal; shutting down"); false }
        _ = agent.shutdown_requested() => { tracing::info!("leave requested; shutting down"); true }
        _ = crate::cluster::LAN_JOIN_EXHAUSTED.notified() => {
            tracing::error!("Retry join failed: agent: max join retry exhausted, exiting");
            failure = Some("agent: max join retry exhausted, exiting".to_string());
            false
        }
        // A storage error stops Raft for good: this server reports no
        // leader from that moment and exits non-zero, so a supervisor
        // restarts it once the disk takes writes again (the log and the
        // last snapshot on disk are intact: nothing acknowledged is lost).
        error = raft_failed => {
            tracing::error!(%error, "Raft stopped on a storage error; exiting");
            failure = Some(format!(
                "Raft stopped on a storage error ({error}); this server exits so that it can be restarted once its data dir takes writes again"
            ));
            false
        }
    };
    // As Consul's defaults: `leave` always leaves gossip gracefully; on a
    // signal, client agents leave (leave_on_terminate) and servers do not
    // (a restarting server should not shrink the cluster).
    if let (true, Some(m)) = (leaving || !config.server, &membership) {
        use legate_agent::membership::Membership;
        if let Some(wan) = &wan_membership {
            wan.membership.leave().await;
        }
        m.leave().await;
    }
    // Wake blocking queries first so the HTTP server can drain quickly.
    if let Some(server) = &server {
        server.begin_shutdown();
    }
    agent.stop();
    listeners.stop().await;
    if let Some(dns) = dns {
        let _ = tokio::time::timeout(Duration::from_secs(2), dns.stop()).await;
    }
    if let Some(server) = &server {
        server.shutdown().await;
    }
    for watch in watches {
        watch.abort();
    }
    if let Some(pid) = &config.pid_file {
        let _ = std::fs::remove_file(pid);
    }
    println!("==> Legate agent stopped");
    match failure {
        Some(message) => Err(message),
        None => Ok(()),
    }
}
