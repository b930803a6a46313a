//! `auto_reload_config`: the agent reloads (as on SIGHUP) when one of its
//! config files, a file in its config dirs, or a TLS file it reads changes.
//! Files are compared by size and modification time once a second; a
//! change is acted on once it has held for one look, so a file being
//! written is not read half-way. A reload that fails keeps the running
//! configuration, as SIGHUP's does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use legate_agent::config::AgentConfig;
use legate_agent::Agent;

/// How often the files are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Each watched path with its size and modification time (`None` while
/// it is missing).
type Fingerprint = Vec<(PathBuf, Option<(u64, SystemTime)>)>;

/// What the agent's files look like now.
fn fingerprint(files: &[PathBuf], dirs: &[PathBuf]) -> Fingerprint {
    let mut paths: Vec<PathBuf> = files.to_vec();
    for dir in dirs {
        if let Ok(entries) = std::fs::read_dir(dir) {
            paths.extend(entries.flatten().map(|e| e.path()).filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("hcl") | Some("json") | Some("pem") | Some("crt")
                )
            }));
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let seen = std::fs::metadata(&path)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?)));
            (path, seen)
        })
        .collect()
}

/// The files to watch: config files and dirs, and the TLS files.
pub fn watched_files(
    config: &AgentConfig,
    config_files: &[PathBuf],
    config_dirs: &[PathBuf],
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut files = config_files.to_vec();
    let mut dirs = config_dirs.to_vec();
    for tls in [&config.tls, &config.https_tls, &config.grpc_tls] {
        files.extend(
            [&tls.ca_file, &tls.cert_file, &tls.key_file]
                .into_iter()
                .flatten()
                .cloned(),
        );
    }
    for tls in [&config.tls, &config.https_tls, &config.grpc_tls] {
        dirs.extend(tls.ca_path.iter().cloned());
    }
    files.sort();
    files.dedup();
    dirs.sort();
    dirs.dedup();
    (files, dirs)
}

/// Watches `files` and `dirs`, reloading `agent` when they change.
pub fn spawn(agent: Arc<Agent>, files: Vec<PathBuf>, dirs: Vec<PathBuf>) {
    tokio::spawn(async move {
        let mut settled = fingerprint(&files, &dirs);
        let mut pending: Option<Fingerprint> = None;
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            let now = fingerprint(&files, &dirs);
            if now == settled {
                pending = None;
                continue;
            }
            if pending.as_ref() != Some(&now) {
                // Changed since the last look: wait one more.
                pending = Some(now);
                continue;
            }
            settled = now;
            pending = None;
            match agent.reload() {
                Ok(()) => tracing::info!("reloaded configuration (auto_reload_config)"),
                Err(e) => tracing::error!(
                    error = %e,
                    "auto reload failed; keeping the running configuration"
                ),
            }
        }
    });
}
