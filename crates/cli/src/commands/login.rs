//! `legate login` and `legate logout`: a bearer token exchanged for an
//! ACL token through an auth method, its SecretID written to a sink file;
//! and that token given back. Consul's flags and texts; nothing printed
//! on success.

use clap::Args;
use reqwest::Method;
use serde_json::json;

use super::fail;
use crate::client::{Client, HttpFlags};

/// Flags of `legate login`.
#[derive(Args, Debug)]
pub struct LoginArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Name of the auth method to login to.
    #[arg(long)]
    method: Option<String>,
    /// Path to a file containing a secret bearer token to use with this
    /// auth method.
    #[arg(long = "bearer-token-file")]
    bearer_token_file: Option<String>,
    /// The most recent token's SecretID is kept up to date in this file.
    #[arg(long = "token-sink-file")]
    token_sink_file: Option<String>,
    /// Metadata to set on the token, `key=value` (repeatable).
    #[arg(long = "meta")]
    meta: Vec<String>,
    /// No arguments are taken.
    #[arg(hide = true)]
    extra: Vec<String>,
}

/// Flags of `legate logout`.
#[derive(Args, Debug)]
pub struct LogoutArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// No arguments are taken.
    #[arg(hide = true)]
    extra: Vec<String>,
}

/// Writes `secret` to `path` with mode 0600, replacing it whole.
fn write_sink(path: &str, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let target = std::path::Path::new(path);
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // A new file of our own beside the target (never one left there or a
    // link planted), then renamed over it.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let staged = target.with_file_name(format!(".{name}.{}.{stamp}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&staged)?;
    file.write_all(secret.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(staged, target)
}

/// Runs `legate login`.
pub async fn login(mut args: LoginArgs) -> u8 {
    if !args.extra.is_empty() {
        return fail("Should have no non-flag arguments.");
    }
    let Some(method) = args.method.clone().filter(|m| !m.is_empty()) else {
        return fail("Missing required '-method' flag");
    };
    let Some(sink) = args.token_sink_file.clone().filter(|s| !s.is_empty()) else {
        return fail("Missing required '-token-sink-file' flag");
    };
    let Some(bearer_file) = args.bearer_token_file.clone().filter(|b| !b.is_empty()) else {
        return fail("Missing required '-bearer-token-file' flag");
    };
    let bearer = match std::fs::read_to_string(&bearer_file) {
        Ok(text) => text.trim().to_string(),
        Err(e) => return fail(e.to_string()),
    };
    if bearer.is_empty() {
        return fail(format!("No bearer token found in {bearer_file}"));
    }
    let mut meta = serde_json::Map::new();
    for entry in &args.meta {
        let Some((key, value)) = entry.split_once('=') else {
            return fail(format!("Missing '=' in argument: {entry}"));
        };
        meta.insert(key.to_string(), json!(value));
    }
    // Logging in uses no token of its own.
    args.http.token = None;
    args.http.token_file = None;
    let client = Client::new(&args.http).without_token();
    let body = json!({"AuthMethod": method, "BearerToken": bearer, "Meta": meta});
    let token = match client
        .ok(
            Method::POST,
            "/v1/acl/login",
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
    {
        Ok(bytes) => bytes,
        Err(e) => return fail(format!("Error logging in: {e}")),
    };
    let Some(secret) = serde_json::from_slice::<serde_json::Value>(&token)
        .ok()
        .and_then(|t| t["SecretID"].as_str().map(str::to_string))
        .filter(|s| !s.is_empty())
    else {
        return fail("Error logging in: the agent's answer holds no SecretID");
    };
    match write_sink(&sink, &secret) {
        Ok(()) => 0,
        Err(e) => fail(format!("Error writing token to file sink: {e}")),
    }
}

/// Runs `legate logout`.
pub async fn logout(args: LogoutArgs) -> u8 {
    if !args.extra.is_empty() {
        return fail("Should have no non-flag arguments.");
    }
    let client = Client::new(&args.http);
    match client.ok(Method::POST, "/v1/acl/logout", &[], None).await {
        Ok(_) => 0,
        Err(e) => fail(format!("Error destroying token: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sink_holds_the_secret_alone_and_only_its_owner_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/token");
        super::write_sink(path.to_str().unwrap(), "s3cret").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "s3cret");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
