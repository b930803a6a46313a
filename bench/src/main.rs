//! Load generator for BENCHMARKS.md: drives Legate's HTTP API (and etcd's
//! v3 HTTP gateway as the peer) from a second process on loopback. Every
//! run is bounded in count and time and stops by itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

mod acl;
mod dns;
mod login;
mod storage;
mod watch;
mod watch_floor;

#[derive(Parser)]
#[command(name = "legate-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Target {
    Legate,
    Etcd,
}

#[derive(Subcommand)]
enum Command {
    /// Writes distinct keys with N concurrent clients (spread over the
    /// comma-separated `url`s, one per cluster member).
    KvPut {
        #[arg(long)]
        url: String,
        #[arg(long, value_enum)]
        target: Target,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Registers distinct services (Legate only): through the agent
    /// (`/v1/agent/service/register`) or straight into the catalog.
    Register {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Use `/v1/catalog/register` (a Raft write per call).
        #[arg(long)]
        catalog: bool,
        /// Registers this many services first (not measured), so the run
        /// measures registrations on an agent that already holds them.
        #[arg(long, default_value_t = 0)]
        preload: u64,
    },
    /// GETs `url` (a path with its query) with N concurrent clients; any
    /// answer other than 2xx is an error.
    HttpGet {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// An ACL token every request sends (`X-Consul-Token`).
        #[arg(long)]
        token: Option<String>,
        /// A file of tokens (one a line) the requests send in turn.
        #[arg(long = "tokens-file")]
        tokens_file: Option<String>,
    },
    /// Creates ACL tokens linking one policy; writes their secrets to a file.
    AclTokens {
        #[arg(long)]
        url: String,
        /// The management token that creates them.
        #[arg(long)]
        management: String,
        /// The policy (by name) each token links.
        #[arg(long)]
        policy: String,
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Where the secrets go.
        #[arg(long)]
        out: String,
    },
    /// Logs in with `count` JWTs through a `jwt` auth method it makes.
    Logins(login::LoginArgs),
    /// Signs leaf certificates from CSRs on one thread with the built-in CA.
    Csr {
        #[arg(long, default_value_t = 5)]
        seconds: u64,
    },
    /// Simulates N agents each holding a leaf certificate from one
    /// in-process server, rotates the CA root, and reports when each agent's
    /// re-issued certificate arrived (the rotation jitter spread).
    Reissue {
        #[arg(long, default_value_t = 10_000)]
        agents: usize,
        /// The servers' `csr_max_per_second` during the re-issue (0: off).
        #[arg(long, default_value_t = 0.0)]
        csr_max_per_second: f64,
    },
    /// Opens N delta ADS streams for one proxy on a running agent, waits for
    /// their initial config, registers one more endpoint of the upstream,
    /// and reports how long until every stream received the change.
    XdsFanout {
        /// The agent's HTTP address (`http://127.0.0.1:8500`).
        #[arg(long)]
        url: String,
        /// The agent's gRPC address (`http://127.0.0.1:8502`).
        #[arg(long)]
        grpc: String,
        #[arg(long, default_value_t = 1000)]
        streams: usize,
        /// Streams per HTTP/2 connection.
        #[arg(long, default_value_t = 100)]
        per_connection: usize,
        /// The agent's pid, to report its memory.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// A TCP echo server (the application behind the proxies).
    Echo {
        #[arg(long)]
        port: u16,
    },
    /// Drives a TCP echo path: `throughput` (N connections streaming
    /// 16 KiB writes, echoed back) or `latency` (one connection, 64-byte
    /// request-response round trips).
    Tcp {
        #[arg(long)]
        addr: String,
        #[arg(long, default_value = "throughput")]
        mode: String,
        #[arg(long, default_value_t = 1)]
        connections: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Throughput mode: the most bytes each connection has sent and
        /// not yet had back (0: no bound; the writer streams as fast as
        /// TCP takes it, which on loopback can fill every socket buffer
        /// of a long path until the kernel's TCP memory pressure drops
        /// segments).
        #[arg(long, default_value_t = 0)]
        window: u64,
    },
    /// DNS over UDP: `concurrency` clients each send a query for `name`
    /// and wait for its answer, for `seconds`; reports queries per second
    /// and latency percentiles.
    Dns {
        /// `ip:port` of the DNS server.
        #[arg(long)]
        server: String,
        #[arg(long)]
        name: String,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Fills the KV store with `keys` keys of `size` incompressible bytes.
    KvFill {
        #[arg(long)]
        url: String,
        #[arg(long, value_enum, default_value = "legate")]
        target: Target,
        #[arg(long, default_value = "bench")]
        prefix: String,
        #[arg(long, default_value_t = 60_000)]
        keys: u64,
        #[arg(long, default_value_t = 4096)]
        size: usize,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// Opens N watchers on one key, writes it once, and reports how long
    /// each watcher took to see the change.
    Watch {
        #[arg(long)]
        url: String,
        #[arg(long, value_enum)]
        target: Target,
        #[arg(long, default_value_t = 1000)]
        watchers: usize,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The server's process: reports the share of one core it used
        /// while the watchers waited.
        #[arg(long)]
        pid: Option<u32>,
    },
    /// The floor of the watch run: a bare server answering the watch
    /// round's requests with no HTTP library, routing or store (see
    /// `watch_floor.rs`), watched with `watch --target legate`.
    WatchFloor {
        #[arg(long)]
        port: u16,
    },
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn closed_loop<F, Fut>(concurrency: usize, seconds: u64, op: F) -> Result<()>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let counter = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let op = op.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                op(n).await?;
                latencies.push(t.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let elapsed = started.elapsed();
    all.sort();
    println!(
        "ops={} seconds={:.2} ops_per_sec={:.0} p50_ms={:.2} p99_ms={:.2}",
        all.len(),
        elapsed.as_secs_f64(),
        all.len() as f64 / elapsed.as_secs_f64(),
        percentile(&all, 50.0).as_secs_f64() * 1e3,
        percentile(&all, 99.0).as_secs_f64() * 1e3
    );
    Ok(())
}

async fn kv_put(client: reqwest::Client, url: String, target: Target, n: u64) -> Result<()> {
    let response = match target {
        Target::Legate => {
            client
                .put(format!("{url}/v1/kv/bench/{n}"))
                .body("value")
                .send()
                .await?
        }
        Target::Etcd => {
            client
                .post(format!("{url}/v3/kv/put"))
                .json(&json!({"key": b64(&format!("bench/{n}")), "value": b64("value")}))
                .send()
                .await?
        }
    };
    if !response.status().is_success() {
        bail!("write failed: {}", response.status());
    }
    Ok(())
}

/// Registers services `0..count` with `concurrency` requests in flight.
async fn preload_services(
    client: &reqwest::Client,
    url: &str,
    catalog: bool,
    count: u64,
    concurrency: usize,
) -> Result<()> {
    use futures::StreamExt;
    let mut results = futures::stream::iter(0..count)
        .map(|n| register(client.clone(), url.to_string(), catalog, n))
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = results.next().await {
        result?;
    }
    Ok(())
}

async fn register(client: reqwest::Client, url: String, catalog: bool, n: u64) -> Result<()> {
    let response = if catalog {
        client
            .put(format!("{url}/v1/catalog/register"))
            .json(&json!({"Node": format!("bench-node-{}", n % 100), "Address": "10.0.0.1",
                "Service": {"Service": format!("svc-{}", n % 50), "ID": format!("svc-{n}"), "Port": 8080}}))
            .send()
            .await?
    } else {
        client
            .put(format!("{url}/v1/agent/service/register"))
            .json(
                &json!({"Name": format!("svc-{}", n % 50), "ID": format!("svc-{n}"), "Port": 8080}),
            )
            .send()
            .await?
    };
    if !response.status().is_success() {
        bail!("register failed: {}", response.status());
    }
    Ok(())
}

async fn set_ca_config(server: &legate_server::Server, config: serde_json::Value) -> Result<()> {
    use legate_types::rpc::ServerRpc;
    server
        .ca_config_set(
            &Default::default(),
            legate_types::connect::CaConfiguration {
                provider: "consul".into(),
                config: config.as_object().cloned().unwrap_or_default(),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The re-issue spread after a root rotation, for `agents` leaf managers
/// with Consul's 30 s rotation and rate-limit windows.
async fn reissue(agents: usize, csr_max_per_second: f64) -> Result<()> {
    use legate_agent::leaf::{LeafManager, LeafSettings};
    use legate_types::rpc::ServerRpc;
    let server =
        legate_server::Server::start(legate_server::ServerConfig::in_memory("dc1", "bench"))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    if !server.wait_for_leader(Duration::from_secs(10)).await {
        bail!("no leader");
    }
    let trust_domain = loop {
        let roots = server
            .ca_roots(&Default::default())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .value;
        if !roots.roots.is_empty() {
            break roots.trust_domain;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Initial issue without limits.
    set_ca_config(&server, json!({"CSRMaxPerSecond": 0})).await?;
    let managers: Vec<Arc<LeafManager>> = (0..agents)
        .map(|_| LeafManager::start(server.clone(), "dc1".into(), LeafSettings::default()))
        .collect();
    let indexes = futures::future::try_join_all(managers.iter().enumerate().map(|(i, m)| {
        let m = m.clone();
        async move {
            m.get(&format!("svc-{i}"), 0, Duration::from_secs(120))
                .await
                .map(|c| c.raft.modify_index)
        }
    }))
    .await
    .map_err(|e| anyhow::anyhow!("initial issue: {e}"))?;
    let before = server.ca_sign_counts();
    // Rotate to a new EC root (an operator-supplied one keeps the key type).
    let next = legate_ca::builtin::generate_root(
        &trust_domain,
        &legate_ca::builtin::root_common_name(&trust_domain),
        Duration::from_secs(87600 * 3600),
    )?;
    let rotated_at = Instant::now();
    set_ca_config(
        &server,
        json!({"CSRMaxPerSecond": csr_max_per_second, "PrivateKey": next.key_pem, "RootCert": next.cert_pem}),
    )
    .await?;
    let arrivals = futures::future::try_join_all(managers.iter().zip(indexes).enumerate().map(
        |(i, (m, index))| {
            let m = m.clone();
            async move {
                m.get(&format!("svc-{i}"), index, Duration::from_secs(600))
                    .await
                    .map(|_| rotated_at.elapsed())
            }
        },
    ))
    .await
    .map_err(|e| anyhow::anyhow!("re-issue: {e}"))?;
    let after = server.ca_sign_counts();
    let mut sorted = arrivals.clone();
    sorted.sort();
    let mut per_second = std::collections::BTreeMap::<u64, usize>::new();
    for a in &arrivals {
        *per_second.entry(a.as_secs()).or_default() += 1;
    }
    let peak = per_second.values().copied().max().unwrap_or(0);
    let buckets: Vec<String> = (0..=sorted.last().map(|d| d.as_secs() / 5).unwrap_or(0))
        .map(|b| {
            per_second
                .range(b * 5..b * 5 + 5)
                .map(|(_, n)| *n)
                .sum::<usize>()
                .to_string()
        })
        .collect();
    println!(
        "agents={agents} csr_max_per_second={csr_max_per_second} first={:.1}s p50={:.1}s p99={:.1}s last={:.1}s peak_per_second={peak} rate_limited={} per_5s=[{}]",
        sorted[0].as_secs_f64(),
        percentile(&sorted, 50.0).as_secs_f64(),
        percentile(&sorted, 99.0).as_secs_f64(),
        sorted.last().map(|d| d.as_secs_f64()).unwrap_or(0.0),
        after.rate_limited - before.rate_limited,
        buckets.join(",")
    );
    for m in &managers {
        m.stop();
    }
    server.shutdown().await;
    Ok(())
}

async fn echo_server(port: u16) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    loop {
        let (mut conn, _) = listener.accept().await?;
        let _ = conn.set_nodelay(true);
        tokio::spawn(async move {
            let (mut r, mut w) = conn.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
    }
}

/// Bytes a throughput connection has sent and had echoed back; the
/// writer waits on `echoed` while its window is full.
#[derive(Default)]
struct Flow {
    sent: AtomicU64,
    echoed: AtomicU64,
    echoed_more: tokio::sync::Notify,
}

async fn tcp_load(
    addr: &str,
    mode: &str,
    connections: usize,
    seconds: u64,
    window: u64,
) -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + Duration::from_secs(seconds);
    // Wait for the path to answer (proxies may still be starting).
    let ready_by = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let mut b = [0u8; 1];
            if s.write_all(b"x").await.is_ok()
                && tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut b))
                    .await
                    .is_ok_and(|r| r.is_ok())
            {
                break;
            }
        }
        if Instant::now() > ready_by {
            bail!("{addr} does not echo");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match mode {
        "latency" => {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            let msg = [7u8; 64];
            let mut back = [0u8; 64];
            let mut times = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                s.write_all(&msg).await?;
                s.read_exact(&mut back).await?;
                times.push(t.elapsed());
            }
            times.sort();
            println!(
                "round_trips={} p50_us={:.0} p99_us={:.0}",
                times.len(),
                percentile(&times, 50.0).as_secs_f64() * 1e6,
                percentile(&times, 99.0).as_secs_f64() * 1e6
            );
        }
        _ => {
            let total = Arc::new(AtomicU64::new(0));
            let started = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..connections {
                let total = total.clone();
                let addr = addr.to_string();
                tasks.push(tokio::spawn(async move {
                    let s = tokio::net::TcpStream::connect(&addr).await?;
                    s.set_nodelay(true)?;
                    let (mut r, mut w) = s.into_split();
                    let flow = Arc::new(Flow::default());
                    let writer_flow = flow.clone();
                    let writer = tokio::spawn(async move {
                        let flow = writer_flow;
                        let chunk = vec![1u8; 16 * 1024];
                        while Instant::now() < deadline {
                            while window > 0
                                && flow.sent.load(Ordering::Relaxed) + chunk.len() as u64
                                    > flow.echoed.load(Ordering::Relaxed) + window
                            {
                                // A permit left by a wake before this wait is kept.
                                flow.echoed_more.notified().await;
                            }
                            if w.write_all(&chunk).await.is_err() {
                                break;
                            }
                            flow.sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        }
                        let _ = w.shutdown().await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                flow.echoed.fetch_add(n as u64, Ordering::Relaxed);
                                flow.echoed_more.notify_one();
                                if Instant::now() < deadline {
                                    total.fetch_add(n as u64, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    let _ = writer.await;
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
            let secs = started
                .elapsed()
                .as_secs_f64()
                .min(seconds as f64)
                .max(0.001);
            println!(
                "connections={connections} echoed_mb_per_s={:.1}",
                total.load(Ordering::Relaxed) as f64 / secs / 1e6
            );
        }
    }
    Ok(())
}

fn rss_kb(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// See `Command::XdsFanout`.
async fn xds_fanout(
    http: &reqwest::Client,
    url: &str,
    grpc: &str,
    streams: usize,
    per_connection: usize,
    pid: Option<u32>,
) -> Result<()> {
    use envoy_types::pb::envoy::config::core::v3::Node;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
    let rss_before = rss_kb(pid);
    let mut channels = Vec::new();
    for _ in 0..streams.div_ceil(per_connection) {
        channels.push(
            tonic::transport::Endpoint::from_shared(grpc.to_string())?
                .connect()
                .await?,
        );
    }
    let (updated_tx, mut updated_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut senders = Vec::new();
    for i in 0..streams {
        let mut client =
            AggregatedDiscoveryServiceClient::new(channels[i / per_connection].clone());
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let node = Some(Node {
            id: "web-sidecar-proxy".into(),
            ..Default::default()
        });
        tx.send(DeltaDiscoveryRequest {
            node: node.clone(),
            type_url: CDS.into(),
            ..Default::default()
        })
        .await?;
        let mut inbound = client
            .delta_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let (updated_tx, ready_tx) = (updated_tx.clone(), ready_tx.clone());
        let sender = tx.clone();
        senders.push(tx);
        tokio::spawn(async move {
            let mut eds_seen = 0;
            while let Ok(Some(response)) = inbound.message().await {
                let _ = sender
                    .send(DeltaDiscoveryRequest {
                        type_url: response.type_url.clone(),
                        response_nonce: response.nonce.clone(),
                        ..Default::default()
                    })
                    .await;
                if response.type_url == CDS && eds_seen == 0 {
                    let names: Vec<String> = response
                        .resources
                        .iter()
                        .map(|r| r.name.clone())
                        .filter(|n| n != "local_app")
                        .collect();
                    let _ = sender
                        .send(DeltaDiscoveryRequest {
                            node: node.clone(),
                            type_url: EDS.into(),
                            resource_names_subscribe: names,
                            ..Default::default()
                        })
                        .await;
                }
                if response.type_url == EDS && !response.resources.is_empty() {
                    eds_seen += 1;
                    if eds_seen == 1 {
                        let _ = ready_tx.send(());
                    } else {
                        let _ = updated_tx.send(Instant::now());
                    }
                }
            }
        });
    }
    for _ in 0..streams {
        tokio::time::timeout(Duration::from_secs(120), ready_rx.recv())
            .await
            .context("streams did not all get their initial config")?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_connected = rss_kb(pid);
    // One endpoint change: another db instance with its sidecar.
    let started = Instant::now();
    let response = http
        .put(format!("{url}/v1/agent/service/register"))
        .body(r#"{"Name":"db","ID":"db-bench-2","Port":9092,"Connect":{"SidecarService":{}}}"#)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("registering the new endpoint failed: {}", response.status());
    }
    let mut latencies = Vec::with_capacity(streams);
    for _ in 0..streams {
        let at = tokio::time::timeout(Duration::from_secs(60), updated_rx.recv())
            .await
            .context("not every stream received the update")?
            .context("streams ended")?;
        latencies.push(at.duration_since(started));
    }
    latencies.sort();
    println!(
        "streams={streams} all_updated_ms={:.1} p50_ms={:.1} p99_ms={:.1} rss_before_kb={rss_before} rss_connected_kb={rss_connected} kb_per_stream={:.1}",
        latencies.last().unwrap().as_secs_f64() * 1000.0,
        percentile(&latencies, 50.0).as_secs_f64() * 1000.0,
        percentile(&latencies, 99.0).as_secs_f64() * 1000.0,
        (rss_connected.saturating_sub(rss_before)) as f64 / streams as f64,
    );
    drop(senders);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .timeout(Duration::from_secs(120))
        .build()?;
    match cli.command {
        Command::KvPut {
            url,
            target,
            concurrency,
            seconds,
        } => {
            let urls: Vec<String> = url.split(',').map(str::to_string).collect();
            closed_loop(concurrency, seconds, move |n| {
                let url = urls[n as usize % urls.len()].clone();
                kv_put(client.clone(), url, target, n)
            })
            .await
        }
        Command::HttpGet {
            url,
            concurrency,
            seconds,
            token,
            tokens_file,
        } => {
            let tokens = Arc::new(acl::Tokens::from_args(token, tokens_file)?);
            closed_loop(concurrency, seconds, move |n| {
                let (client, url, tokens) = (client.clone(), url.clone(), tokens.clone());
                async move {
                    let mut request = client.get(&url);
                    if let Some(token) = tokens.nth(n) {
                        request = request.header("X-Consul-Token", token);
                    }
                    let response = request.send().await?;
                    if !response.status().is_success() {
                        bail!("GET failed: {}", response.status());
                    }
                    response.bytes().await?;
                    Ok(())
                }
            })
            .await
        }
        Command::Logins(args) => login::run(client, args).await,
        Command::AclTokens {
            url,
            management,
            policy,
            count,
            concurrency,
            out,
        } => acl::make_tokens(client, &url, &management, &policy, count, concurrency, &out).await,
        Command::Register {
            url,
            concurrency,
            seconds,
            catalog,
            preload,
        } => {
            preload_services(&client, &url, catalog, preload, concurrency).await?;
            closed_loop(concurrency, seconds, move |n| {
                register(client.clone(), url.clone(), catalog, preload + n)
            })
            .await
        }
        Command::KvFill {
            url,
            target,
            prefix,
            keys,
            size,
            concurrency,
        } => storage::kv_fill(client, target, &url, &prefix, keys, size, concurrency).await,
        Command::Csr { seconds } => {
            use legate_ca::builtin::{generate_root, make_csr, sign_leaf};
            use legate_ca::SpiffeId;
            let td = "11111111-2222-3333-4444-555555555555.consul";
            let root = generate_root(td, "bench CA", Duration::from_secs(87600 * 3600))?;
            let id = SpiffeId::service(td, "dc1", "web");
            let csrs: Vec<String> = (0..256)
                .map(|_| make_csr(&id).map(|(csr, _)| csr))
                .collect::<Result<_, _>>()?;
            let leaf_ttl = Duration::from_secs(72 * 3600);
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let started = Instant::now();
            let mut signed = 0u64;
            while Instant::now() < deadline {
                sign_leaf(&root, &csrs[(signed % 256) as usize], &id, leaf_ttl)?;
                signed += 1;
            }
            let elapsed = started.elapsed().as_secs_f64();
            println!(
                "signed={signed} seconds={elapsed:.2} csr_per_sec_one_core={:.0}",
                signed as f64 / elapsed
            );
            Ok(())
        }
        Command::Reissue {
            agents,
            csr_max_per_second,
        } => reissue(agents, csr_max_per_second).await,
        Command::Echo { port } => echo_server(port).await,
        Command::WatchFloor { port } => watch_floor::serve(port).await,
        Command::Dns {
            server,
            name,
            concurrency,
            seconds,
        } => {
            tokio::task::spawn_blocking(move || dns::load(&server, &name, concurrency, seconds))
                .await?
        }
        Command::Tcp {
            addr,
            mode,
            connections,
            seconds,
            window,
        } => tcp_load(&addr, &mode, connections, seconds, window).await,
        Command::XdsFanout {
            url,
            grpc,
            streams,
            per_connection,
            pid,
        } => xds_fanout(&client, &url, &grpc, streams, per_connection, pid).await,
        Command::Watch {
            url,
            target,
            watchers,
            rounds,
            pid,
        } => {
            let mut all = Vec::new();
            let mut arrivals = Vec::new();
            let mut idle = Vec::new();
            let mut wake_cpu = Vec::new();
            for round in 0..rounds {
                let result = match target {
                    Target::Legate => watch::legate_round(&client, &url, watchers, pid).await?,
                    Target::Etcd => watch::etcd_round(&client, &url, watchers, round, pid).await?,
                };
                all.extend(result.latencies);
                arrivals.extend(result.arrivals);
                idle.extend(result.idle_share);
                wake_cpu.extend(result.wake_cpu);
            }
            all.sort();
            arrivals.sort();
            let idle = if idle.is_empty() {
                String::new()
            } else {
                format!(
                    " idle_cpu_pct={:.1}",
                    idle.iter().sum::<f64>() / idle.len() as f64 * 100.0
                )
            };
            // The server's CPU per woken watcher, from the write until the
            // last answer (averaged over the rounds).
            let wake = if wake_cpu.is_empty() {
                String::new()
            } else {
                let total: Duration = wake_cpu.iter().sum();
                format!(
                    " wake_cpu_us_per_watcher={:.1}",
                    total.as_secs_f64() * 1e6 / (wake_cpu.len() * watchers) as f64
                )
            };
            println!(
                "watchers={} rounds={} p50_ms={:.2} p99_ms={:.2} max_ms={:.2} arrived_p50_ms={:.2} arrived_p99_ms={:.2}{idle}{wake}",
                watchers,
                rounds,
                percentile(&all, 50.0).as_secs_f64() * 1e3,
                percentile(&all, 99.0).as_secs_f64() * 1e3,
                all.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
                percentile(&arrivals, 50.0).as_secs_f64() * 1e3,
                percentile(&arrivals, 99.0).as_secs_f64() * 1e3,
            );
            Ok(())
        }
    }
}
