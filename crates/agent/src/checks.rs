//! Check runners: one task per check, reporting results to the agent's
//! local state. TTL checks wait for updates; HTTP, TCP, gRPC and script
//! checks probe on their interval; alias checks mirror another service.
//! `SuccessBeforePassing`, `FailuresBeforeWarning` and
//! `FailuresBeforeCritical` gate status changes.

use std::sync::Arc;
use std::time::Duration;

use legate_types::{CheckDefinition, HealthStatus, QueryOptions};
use rand::Rng;
use tokio::net::TcpStream;

use crate::check_sni::SniRoute;
use crate::Agent;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Consecutive-result gating of status changes.
#[derive(Debug, Default, Clone)]
pub struct StatusGate {
    successes: u32,
    failures: u32,
    success_before_passing: u32,
    failures_before_warning: u32,
    failures_before_critical: u32,
}

impl StatusGate {
    /// A gate for a definition.
    pub fn new(def: &CheckDefinition) -> StatusGate {
        StatusGate {
            success_before_passing: def.success_before_passing,
            failures_before_warning: def.failures_before_warning,
            failures_before_critical: def.failures_before_critical,
            ..Default::default()
        }
    }

    /// The status to report for an observed result, or `None` to keep the
    /// current one.
    pub fn observe(&mut self, observed: HealthStatus) -> Option<HealthStatus> {
        match observed {
            HealthStatus::Passing => {
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                (self.successes >= self.success_before_passing.max(1))
                    .then_some(HealthStatus::Passing)
            }
            HealthStatus::Warning => {
                self.successes = 0;
                self.failures = 0;
                Some(HealthStatus::Warning)
            }
            _ => {
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                if self.failures >= self.failures_before_critical.max(1) {
                    Some(HealthStatus::Critical)
                } else if self.failures_before_warning > 0
                    && self.failures >= self.failures_before_warning
                {
                    Some(HealthStatus::Warning)
                } else {
                    None
                }
            }
        }
    }
}

/// Starts the runner of a check; TTL and maintenance checks have none
/// beyond the TTL clock.
pub(crate) fn spawn(
    agent: Arc<Agent>,
    id: String,
    def: CheckDefinition,
) -> Option<tokio::task::JoinHandle<()>> {
    let check_type = def.check_type().ok()?;
    let handle = match check_type {
        "ttl" => tokio::spawn(run_ttl(
            agent,
            id,
            def.ttl.unwrap_or(Duration::from_secs(30)),
        )),
        "alias" => tokio::spawn(run_alias(agent, id, def)),
        "http" | "tcp" | "grpc" | "script" => tokio::spawn(run_probe(agent, id, def, check_type)),
        _ => return None,
    };
    Some(handle)
}

async fn run_ttl(agent: Arc<Agent>, id: String, ttl: Duration) {
    let reset = agent.ttl_reset_signal(&id);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ttl) => {
                agent.set_check_status(&id, HealthStatus::Critical, "TTL expired");
                reset.notified().await;
            }
            _ = reset.notified() => {}
        }
    }
}

/// The name of the TCP check the agent adds to sidecar proxies. While it
/// fails it is retried every second (not every interval), so a proxy that
/// starts listening is healthy within a second rather than ten.
pub const SIDECAR_LISTENING_CHECK: &str = "Connect Sidecar Listening";

async fn run_probe(agent: Arc<Agent>, id: String, def: CheckDefinition, check_type: &'static str) {
    let interval = def
        .interval
        .unwrap_or(Duration::from_secs(10))
        .max(Duration::from_secs(1));
    let timeout = def.timeout.unwrap_or(if check_type == "script" {
        Duration::from_secs(30)
    } else {
        DEFAULT_TIMEOUT
    });
    let mut gate = StatusGate::new(&def);
    // A body is read up to one byte past what is kept, so the stored
    // output can say it was cut.
    let read_limit = agent.config().check_output.max_size.saturating_add(1);
    let stagger = rand::rng().random_range(0..=interval.as_millis().min(500) as u64);
    tokio::time::sleep(Duration::from_millis(stagger)).await;
    let client = match check_type {
        "http" | "grpc" => match http_client(&def, timeout, check_type == "grpc", &agent) {
            Ok(c) => Some(c),
            Err(e) => {
                agent.set_check_status(
                    &id,
                    HealthStatus::Critical,
                    &format!("invalid check configuration: {e}"),
                );
                return;
            }
        },
        _ => None,
    };
    loop {
        let (observed, output) = match check_type {
            "http" => probe_http(client.as_ref(), &def, read_limit).await,
            "tcp" => probe_tcp(&def.tcp, timeout).await,
            "grpc" => probe_grpc(client.as_ref(), &def).await,
            _ => probe_script(&def.script_args, timeout).await,
        };
        let failing = observed != HealthStatus::Passing;
        match gate.observe(observed) {
            Some(status) => agent.set_check_status(&id, status, &output),
            None => agent.set_check_output(&id, &output),
        }
        let next = if failing && def.name == SIDECAR_LISTENING_CHECK {
            interval.min(Duration::from_secs(1))
        } else {
            interval
        };
        tokio::time::sleep(next).await;
    }
}

/// An HTTP client for one check, and the route that puts the check's
/// TLS server name in its handshake.
struct CheckClient {
    client: reqwest::Client,
    route: Option<SniRoute>,
}

impl CheckClient {
    /// A request to `url` (the check's own URL), rerouted when the check
    /// names its server.
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        match &self.route {
            Some(route) => self
                .client
                .request(method, route.url().clone())
                .header(reqwest::header::HOST, route.authority()),
            None => self.client.request(method, url),
        }
    }
}

/// The URL a gRPC check dials, and the service it asks about.
fn grpc_target(def: &CheckDefinition) -> (String, &str) {
    let (target, service) = match def.grpc.split_once('/') {
        Some((t, s)) => (t, s),
        None => (def.grpc.as_str(), ""),
    };
    let scheme = if def.grpc_use_tls { "https" } else { "http" };
    (
        format!("{scheme}://{target}/grpc.health.v1.Health/Check"),
        service,
    )
}

fn http_client(
    def: &CheckDefinition,
    timeout: Duration,
    grpc: bool,
    agent: &Agent,
) -> Result<CheckClient, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .danger_accept_invalid_certs(def.tls_skip_verify)
        .user_agent("Consul Health Check");
    if grpc && !def.grpc_use_tls {
        builder = builder.http2_prior_knowledge();
    }
    let server_name = tls_server_name(def, agent);
    if let Some(tls) = check_tls(def, agent, server_name.as_deref())? {
        builder = builder.use_preconfigured_tls(tls);
    }
    let url = if grpc {
        grpc_target(def).0
    } else {
        def.http.clone()
    };
    let route = server_name.and_then(|name| SniRoute::new(&url, &name));
    if let Some(route) = &route {
        builder = builder.dns_resolver(std::sync::Arc::new(route.clone()));
    }
    Ok(CheckClient {
        client: builder.build().map_err(|e| e.to_string())?,
        route,
    })
}

/// The name a check's TLS names its server by, as Consul's
/// `OutgoingTLSConfigForCheck`: the check's `TLSServerName`; else, with
/// `enable_agent_tls_for_checks`, `server_name`, else the node name.
fn tls_server_name(def: &CheckDefinition, agent: &Agent) -> Option<String> {
    if !def.tls_server_name.is_empty() {
        return Some(def.tls_server_name.clone());
    }
    let config = agent.config();
    config.enable_agent_tls_for_checks.then(|| {
        config
            .server_name
            .clone()
            .unwrap_or_else(|| config.node_name.clone())
    })
}

/// The TLS a check dials with, as Consul's `OutgoingTLSConfigForCheck`:
/// with `enable_agent_tls_for_checks`, the agent's CA and certificate
/// (the HTTPS listener's files, which fall back to `tls.defaults` and the
/// older keys); without it, the default roots. The server is checked as
/// `server_name` (see [`tls_server_name`]), else as the URL's host.
/// `None`: the client's defaults (with `TLSSkipVerify` applied by the
/// caller).
fn check_tls(
    def: &CheckDefinition,
    agent: &Agent,
    server_name: Option<&str>,
) -> Result<Option<rustls::ClientConfig>, String> {
    use legate_net::check_tls::{check_client_config, ServerCheck};
    let config = agent.config();
    let check = match server_name {
        _ if def.tls_skip_verify => ServerCheck::Skip,
        Some(name) => ServerCheck::Named(name.to_string()),
        None => return Ok(None),
    };
    if !config.enable_agent_tls_for_checks {
        if def.tls_server_name.is_empty() {
            return Ok(None);
        }
        return check_client_config(None, None, check).map(Some);
    }
    let files = &config.https_tls;
    let ca = files.ca_pem()?;
    let identity = files.identity_pem()?;
    check_client_config(
        ca.as_deref(),
        identity.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
        check,
    )
    .map(Some)
}

async fn probe_http(
    client: Option<&CheckClient>,
    def: &CheckDefinition,
    read_limit: usize,
) -> (HealthStatus, String) {
    let Some(client) = client else {
        return (HealthStatus::Critical, "no HTTP client".into());
    };
    let method = if def.method.is_empty() {
        "GET"
    } else {
        def.method.as_str()
    };
    let Ok(parsed_method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return (
            HealthStatus::Critical,
            format!("invalid HTTP method {method:?}"),
        );
    };
    let mut request = client
        .request(parsed_method, &def.http)
        .header("Accept", "text/plain, text/*, */*");
    for (name, values) in &def.header {
        for value in values {
            request = request.header(name.as_str(), value.as_str());
        }
    }
    if !def.body.is_empty() {
        request = request.body(def.body.clone());
    }
    match request.send().await {
        Err(e) => (
            HealthStatus::Critical,
            // The URL is said once, as the check names it (not as
            // rerouted for its server name).
            format!("HTTP {method} {}: {}", def.http, e.without_url()),
        ),
        Ok(mut response) => {
            let code = response.status();
            // Keep at most `read_limit` bytes, and whatever arrived before a
            // connection that ends uncleanly (servers that skip TLS close_notify).
            let mut bytes = Vec::new();
            while bytes.len() < read_limit {
                match response.chunk().await {
                    Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
                    _ => break,
                }
            }
            let body = String::from_utf8_lossy(&bytes).into_owned();
            let output = format!(
                "HTTP {method} {}: {} {} Output: {}",
                def.http,
                code.as_u16(),
                code.canonical_reason().unwrap_or(""),
                body
            );
            let status = if code.is_success() {
                HealthStatus::Passing
            } else if code.as_u16() == 429 {
                HealthStatus::Warning
            } else {
                HealthStatus::Critical
            };
            (status, output)
        }
    }
}

async fn probe_tcp(address: &str, timeout: Duration) -> (HealthStatus, String) {
    match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
        Ok(Ok(_)) => (
            HealthStatus::Passing,
            format!("TCP connect {address}: Success"),
        ),
        Ok(Err(e)) => (HealthStatus::Critical, format!("dial tcp {address}: {e}")),
        Err(_) => (
            HealthStatus::Critical,
            format!("dial tcp {address}: i/o timeout"),
        ),
    }
}

/// Encodes a `grpc.health.v1.HealthCheckRequest` in a gRPC frame.
fn grpc_health_request(service: &str) -> Vec<u8> {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        let mut len = service.len();
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                message.push(byte);
                break;
            }
            message.push(byte | 0x80);
        }
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

/// Reads the serving status out of a `HealthCheckResponse` frame.
fn grpc_health_status(body: &[u8]) -> Option<u64> {
    let message = body.get(5..)?;
    match message.split_first() {
        // An empty message is the default status, UNKNOWN (0).
        None => Some(0),
        Some((0x08, varint)) => {
            let mut value = 0u64;
            for (i, byte) in varint.iter().take(10).enumerate() {
                value |= ((byte & 0x7f) as u64) << (7 * i);
                if byte & 0x80 == 0 {
                    return Some(value);
                }
            }
            None
        }
        Some(_) => None,
    }
}

async fn probe_grpc(client: Option<&CheckClient>, def: &CheckDefinition) -> (HealthStatus, String) {
    let Some(client) = client else {
        return (HealthStatus::Critical, "no gRPC client".into());
    };
    let (url, service) = grpc_target(def);
    let response = client
        .request(reqwest::Method::POST, &url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(grpc_health_request(service))
        .send()
        .await;
    match response {
        Err(e) => (
            HealthStatus::Critical,
            format!("gRPC {}: {}", def.grpc, e.without_url()),
        ),
        Ok(response) => {
            if let Some(code) = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
            {
                if code != "0" {
                    let message = response
                        .headers()
                        .get("grpc-message")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    return (
                        HealthStatus::Critical,
                        format!("gRPC {} failed: status {code} {message}", def.grpc),
                    );
                }
            }
            let body = response.bytes().await.unwrap_or_default();
            match grpc_health_status(&body) {
                Some(1) => (
                    HealthStatus::Passing,
                    format!("gRPC check {}: success", def.grpc),
                ),
                Some(other) => (
                    HealthStatus::Critical,
                    format!(
                        "gRPC check {}: service reports status {other} (not SERVING)",
                        def.grpc
                    ),
                ),
                None => (
                    HealthStatus::Critical,
                    format!("gRPC check {}: malformed response", def.grpc),
                ),
            }
        }
    }
}

/// The file mode mask script checks run with: the one the agent was
/// started with, not the private one the agent keeps for its own files
/// (`u32::MAX`: leave the child's as it is).
static CHILD_UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Records the umask script checks run with (see [`CHILD_UMASK`]).
pub fn set_child_umask(mask: u32) {
    CHILD_UMASK.store(mask, std::sync::atomic::Ordering::Relaxed);
}

async fn probe_script(args: &[String], timeout: Duration) -> (HealthStatus, String) {
    let Some((program, rest)) = args.split_first() else {
        return (HealthStatus::Critical, "no script arguments".into());
    };
    let mut command = tokio::process::Command::new(program);
    command.args(rest).kill_on_drop(true);
    let mask = CHILD_UMASK.load(std::sync::atomic::Ordering::Relaxed);
    if mask != u32::MAX {
        // SAFETY: umask is async-signal-safe and touches nothing else.
        unsafe {
            command.pre_exec(move || {
                libc::umask(mask as libc::mode_t);
                Ok(())
            });
        }
    }
    match tokio::time::timeout(timeout, command.output()).await {
        Err(_) => (
            HealthStatus::Critical,
            format!("Timed out ({timeout:?}) running check"),
        ),
        Ok(Err(e)) => (
            HealthStatus::Critical,
            format!("failed to run {program}: {e}"),
        ),
        Ok(Ok(output)) => {
            let mut text = String::from_utf8_lossy(&output.stdout).to_string();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            let status = match output.status.code() {
                Some(0) => HealthStatus::Passing,
                Some(1) => HealthStatus::Warning,
                _ => HealthStatus::Critical,
            };
            (status, text)
        }
    }
}

async fn run_alias(agent: Arc<Agent>, id: String, def: CheckDefinition) {
    let local_node = agent.config().node_name.clone();
    let node = if def.alias_node.is_empty() {
        local_node.clone()
    } else {
        def.alias_node.clone()
    };
    let mut changes = agent.local_changes();
    loop {
        let (status, output) = if node == local_node && !def.alias_service.is_empty() {
            match agent.local_service_health(&def.alias_service) {
                Some(HealthStatus::Passing) => {
                    (HealthStatus::Passing, "All checks passing.".to_string())
                }
                Some(status) => (
                    status,
                    format!(
                        "Aliased service {:?} is {}",
                        def.alias_service,
                        status.as_str()
                    ),
                ),
                None => (
                    HealthStatus::Critical,
                    format!(
                        "Service {} could not be found on node {node}",
                        def.alias_service
                    ),
                ),
            }
        } else {
            remote_alias_status(&agent, &node, &def.alias_service).await
        };
        agent.set_check_status(&id, status, &output);
        if node == local_node && !def.alias_service.is_empty() {
            if changes.changed().await.is_err() {
                return;
            }
        } else {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
}

async fn remote_alias_status(
    agent: &Agent,
    node: &str,
    service_id: &str,
) -> (HealthStatus, String) {
    match agent
        .rpc()
        .health_node_checks(&QueryOptions::default(), node.to_string())
        .await
    {
        Err(e) => (HealthStatus::Critical, format!("alias lookup failed: {e}")),
        Ok(result) => {
            let checks: Vec<_> = result
                .value
                .iter()
                .filter(|c| {
                    service_id.is_empty() || c.service_id == service_id || c.service_id.is_empty()
                })
                .collect();
            let status = legate_types::aggregate_status(checks.into_iter());
            (
                status,
                format!("Aliased node {node} is {}", status.as_str()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_requires_consecutive_results() {
        let def = CheckDefinition {
            success_before_passing: 2,
            failures_before_critical: 3,
            failures_before_warning: 1,
            ..Default::default()
        };
        let mut gate = StatusGate::new(&def);
        assert_eq!(gate.observe(HealthStatus::Passing), None);
        assert_eq!(
            gate.observe(HealthStatus::Passing),
            Some(HealthStatus::Passing)
        );
        assert_eq!(
            gate.observe(HealthStatus::Critical),
            Some(HealthStatus::Warning)
        );
        assert_eq!(
            gate.observe(HealthStatus::Critical),
            Some(HealthStatus::Warning)
        );
        assert_eq!(
            gate.observe(HealthStatus::Critical),
            Some(HealthStatus::Critical)
        );
        assert_eq!(gate.observe(HealthStatus::Passing), None);
    }

    #[test]
    fn grpc_frames_round_trip() {
        let frame = grpc_health_request("web");
        assert_eq!(frame, vec![0, 0, 0, 0, 5, 0x0a, 3, b'w', b'e', b'b']);
        assert_eq!(grpc_health_status(&[0, 0, 0, 0, 2, 0x08, 1]), Some(1));
        assert_eq!(grpc_health_status(&[0, 0, 0, 0, 0]), Some(0));
        assert_eq!(grpc_health_status(&[0, 0]), None);
    }
}
