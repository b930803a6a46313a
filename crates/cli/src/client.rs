//! The CLI's HTTP client: every command talks to an agent only through the
//! HTTP API, with Consul's address and token settings.

use clap::Args;
use reqwest::{Method, StatusCode};

/// Flags every HTTP command accepts.
#[derive(Args, Debug, Clone, Default)]
pub struct HttpFlags {
    /// The agent's HTTP address (env CONSUL_HTTP_ADDR or LEGATE_HTTP_ADDR).
    #[arg(long = "http-addr")]
    pub http_addr: Option<String>,
    /// ACL token (env CONSUL_HTTP_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// A file holding the ACL token (env CONSUL_HTTP_TOKEN_FILE); wins over
    /// -token, as in Consul.
    #[arg(long = "token-file")]
    pub token_file: Option<String>,
    /// Datacenter to query.
    #[arg(long)]
    pub datacenter: Option<String>,
    /// Allow any server to answer reads.
    #[arg(long)]
    pub stale: bool,
    /// CA certificate to check the agent's HTTPS certificate with (env
    /// CONSUL_CACERT).
    #[arg(long = "ca-file")]
    pub ca_file: Option<String>,
    /// A directory of CA certificates (env CONSUL_CAPATH).
    #[arg(long = "ca-path")]
    pub ca_path: Option<String>,
    /// Client certificate for agents with `verify_incoming` (env
    /// CONSUL_CLIENT_CERT).
    #[arg(long = "client-cert")]
    pub client_cert: Option<String>,
    /// Its key (env CONSUL_CLIENT_KEY).
    #[arg(long = "client-key")]
    pub client_key: Option<String>,
}

/// A flag's value, else its environment variable's (empty counts as unset).
fn flag_or_env(flag: &Option<String>, env: &str) -> Option<String> {
    flag.clone()
        .or_else(|| std::env::var(env).ok())
        .filter(|v| !v.is_empty())
}

/// A file the CLI needs, or the end of the command naming it.
fn read_or_exit(what: &str, path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        eprintln!("Error initializing client: Error loading {what}: open {path}: {e}");
        std::process::exit(1);
    })
}

/// The HTTP client with Consul's TLS settings: the CA (`-ca-file`,
/// `-ca-path`, CONSUL_CACERT, CONSUL_CAPATH) alone is trusted when given,
/// a client certificate is presented when given (`-client-cert`,
/// `-client-key`, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY), and
/// CONSUL_HTTP_SSL_VERIFY=false skips the check.
fn http_client(flags: &HttpFlags, unix_socket: Option<&str>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder();
    if let Some(path) = unix_socket {
        builder = builder.unix_socket(path);
    }
    let mut cas = Vec::new();
    if let Some(file) = flag_or_env(&flags.ca_file, "CONSUL_CACERT") {
        cas.push(read_or_exit("CA File", &file));
    }
    if let Some(dir) = flag_or_env(&flags.ca_path, "CONSUL_CAPATH") {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
            eprintln!("Error initializing client: Error loading CA Path: open {dir}: {e}");
            std::process::exit(1);
        });
        for entry in entries.flatten() {
            if entry
                .path()
                .extension()
                .is_some_and(|x| x == "pem" || x == "crt")
            {
                cas.push(read_or_exit("CA Path", &entry.path().display().to_string()));
            }
        }
    }
    if !cas.is_empty() {
        builder = builder.tls_built_in_root_certs(false);
    }
    for pem in cas {
        match reqwest::Certificate::from_pem_bundle(&pem) {
            Ok(certs) => {
                for cert in certs {
                    builder = builder.add_root_certificate(cert);
                }
            }
            Err(e) => {
                eprintln!("Error initializing client: Error loading CA File: {e}");
                std::process::exit(1);
            }
        }
    }
    let cert = flag_or_env(&flags.client_cert, "CONSUL_CLIENT_CERT");
    let key = flag_or_env(&flags.client_key, "CONSUL_CLIENT_KEY");
    if let (Some(cert), Some(key)) = (cert, key) {
        let mut pem = read_or_exit("client certificate", &cert);
        pem.push(b'\n');
        pem.extend(read_or_exit("client key", &key));
        match reqwest::Identity::from_pem(&pem) {
            Ok(identity) => builder = builder.identity(identity),
            Err(e) => {
                eprintln!("Error initializing client: Error loading client certificate: {e}");
                std::process::exit(1);
            }
        }
    }
    if std::env::var("CONSUL_HTTP_SSL_VERIFY").is_ok_and(|v| v.eq_ignore_ascii_case("false")) {
        builder = builder.danger_accept_invalid_certs(true);
    }
    builder.build().unwrap_or_else(|e| {
        eprintln!("Error initializing client: {e}");
        std::process::exit(1);
    })
}

/// A failed call, with the message to print.
#[derive(Debug)]
pub struct CallError {
    /// HTTP status, when the agent answered.
    pub status: Option<StatusCode>,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(status) => write!(
                f,
                "Unexpected response code: {} ({})",
                status.as_u16(),
                self.message.trim()
            ),
            None => write!(f, "{}", self.message),
        }
    }
}

/// A client bound to one agent.
pub struct Client {
    base: String,
    token: Option<String>,
    datacenter: Option<String>,
    stale: bool,
    http: reqwest::Client,
}

/// The token a command sends, in Consul's precedence: the token file
/// (`-token-file`, else `CONSUL_HTTP_TOKEN_FILE`), then `-token`, then
/// `CONSUL_HTTP_TOKEN`. A file that cannot be read ends the command,
/// naming the file.
pub fn token_of(flags: &HttpFlags) -> Option<String> {
    let file = flags
        .token_file
        .clone()
        .or_else(|| std::env::var("CONSUL_HTTP_TOKEN_FILE").ok())
        .filter(|f| !f.is_empty());
    if let Some(path) = file {
        match std::fs::read_to_string(&path) {
            Ok(text) => return Some(text.trim().to_string()).filter(|t| !t.is_empty()),
            Err(e) => {
                eprintln!("Error loading token file {path}: {e}");
                std::process::exit(1);
            }
        }
    }
    flags
        .token
        .clone()
        .or_else(|| std::env::var("CONSUL_HTTP_TOKEN").ok())
        .filter(|t| !t.is_empty())
}

impl Client {
    /// Builds a client from flags and the environment.
    pub fn new(flags: &HttpFlags) -> Client {
        let address = flags
            .http_addr
            .clone()
            .or_else(|| std::env::var("LEGATE_HTTP_ADDR").ok())
            .or_else(|| std::env::var("CONSUL_HTTP_ADDR").ok())
            .unwrap_or_else(|| "127.0.0.1:8500".to_string());
        // CONSUL_HTTP_SSL=true turns a bare address into an HTTPS one.
        let ssl = std::env::var("CONSUL_HTTP_SSL").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        // `unix:///path` (Consul's form): every request goes over that
        // socket, addressed to `localhost`.
        let unix_socket = address.strip_prefix("unix://").map(str::to_string);
        let base = if unix_socket.is_some() {
            let scheme = if ssl { "https" } else { "http" };
            format!("{scheme}://localhost")
        } else if address.starts_with("http://") || address.starts_with("https://") {
            address.trim_end_matches('/').to_string()
        } else if ssl {
            format!("https://{}", address.trim_end_matches('/'))
        } else {
            format!("http://{}", address.trim_end_matches('/'))
        };
        let token = token_of(flags);
        Client {
            base,
            token,
            datacenter: flags.datacenter.clone(),
            stale: flags.stale,
            http: http_client(flags, unix_socket.as_deref()),
        }
    }

    /// The same client sending no ACL token (whatever the flags and the
    /// environment said).
    pub fn without_token(mut self) -> Client {
        self.token = None;
        self
    }

    /// Sends a request; returns the status and body of any answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Vec<u8>), CallError> {
        let (status, _, body) = self.exchange(method, path, query, body).await?;
        Ok((status, body))
    }

    /// A blocking GET (`?index`): the body of a 2xx answer and its
    /// `X-Consul-Index`, once the index passes `index` or the wait runs out.
    pub async fn get_blocking(&self, path: &str, index: u64) -> Result<(Vec<u8>, u64), CallError> {
        let query = [("index", index.to_string())];
        let (status, index, body) = self.exchange(Method::GET, path, &query, None).await?;
        if !status.is_success() {
            return Err(CallError {
                status: Some(status),
                message: String::from_utf8_lossy(&body).to_string(),
            });
        }
        Ok((body, index))
    }

    /// Sends a request; the status, `X-Consul-Index` (0 if absent) and body.
    pub(crate) async fn exchange(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, u64, Vec<u8>), CallError> {
        let mut params: Vec<(&str, String)> = query.to_vec();
        if let Some(dc) = &self.datacenter {
            params.push(("dc", dc.clone()));
        }
        if self.stale && method == Method::GET {
            params.push(("stale", String::new()));
        }
        let mut request = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .query(&params);
        if let Some(token) = &self.token {
            request = request.header("X-Consul-Token", token);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.map_err(|e| CallError {
            status: None,
            message: format!("Error connecting to the agent at {}: {e}", self.base),
        })?;
        let status = response.status();
        let index = response
            .headers()
            .get("X-Consul-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let bytes = response.bytes().await.map_err(|e| CallError {
            status: Some(status),
            message: e.to_string(),
        })?;
        Ok((status, index, bytes.to_vec()))
    }

    /// A GET whose answer is a stream (`/v1/agent/monitor`): the response,
    /// to be read chunk by chunk, once its status is 2xx.
    pub async fn stream(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::Response, CallError> {
        let mut request = self.http.get(format!("{}{}", self.base, path)).query(query);
        if let Some(token) = &self.token {
            request = request.header("X-Consul-Token", token);
        }
        let response = request.send().await.map_err(|e| CallError {
            status: None,
            message: format!("Error connecting to the agent at {}: {e}", self.base),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        Err(CallError {
            status: Some(status),
            message: body,
        })
    }

    /// Sends a request and fails on any non-2xx answer.
    pub async fn ok(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, CallError> {
        let (status, body) = self.call(method, path, query, body).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(CallError {
                status: Some(status),
                message: String::from_utf8_lossy(&body).to_string(),
            })
        }
    }

    /// GETs and decodes JSON.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, CallError> {
        let body = self.ok(Method::GET, path, query, None).await?;
        serde_json::from_slice(&body).map_err(|e| CallError {
            status: None,
            message: format!("Error decoding the agent's answer: {e}"),
        })
    }
}
