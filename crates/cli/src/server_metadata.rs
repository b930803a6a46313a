//! `server_metadata.json` in a server's data dir: when the server was
//! last running, written at start and every minute after. A server whose
//! file is older than `server_rejoin_age_max` (Consul's 168h) refuses to
//! start, so a long-dead server does not rejoin with stale state (Consul
//! 1.16's guard, with its text); deleting the file lets it start.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The file's name in the data dir (Consul's).
pub const FILE: &str = "server_metadata.json";
/// How often the file is refreshed while the server runs.
const REFRESH: Duration = Duration::from_secs(60);

/// The file's content (Consul's field name).
#[derive(Debug, Serialize, Deserialize)]
struct ServerMetadata {
    last_seen_unix: i64,
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn write(path: &Path) -> std::io::Result<()> {
    let body = serde_json::to_vec(&ServerMetadata {
        last_seen_unix: now_unix(),
    })
    .map_err(std::io::Error::other)?;
    let temp = path.with_extension("json.tmp");
    std::fs::write(&temp, body)?;
    std::fs::rename(&temp, path)
}

/// Refuses to go on when the server was last seen longer than `max_age`
/// ago; otherwise records it as running now and keeps the record fresh
/// until the process ends. An unreadable file is warned about and
/// replaced (Consul starts then too).
pub fn check_and_keep(data_dir: &Path, max_age: Duration) -> Result<(), String> {
    let path: PathBuf = data_dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<ServerMetadata>(&bytes) {
            Ok(meta) => {
                let offline = now_unix().saturating_sub(meta.last_seen_unix).max(0) as u64;
                if Duration::from_secs(offline) > max_age {
                    return Err(format!(
                        "refusing to rejoin cluster because server has been offline for more than the configured server_rejoin_age_max ({}) - consider wiping your data dir",
                        legate_types::duration::format_go_duration(max_age)
                    ));
                }
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "unreadable server metadata; replacing it")
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    }
    write(&path).map_err(|e| format!("writing {}: {e}", path.display()))?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REFRESH).await;
            if let Err(e) = write(&path) {
                tracing::warn!(file = %path.display(), error = %e, "refreshing the server metadata failed");
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_offline_too_long_is_refused_and_a_fresh_one_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let week = Duration::from_secs(168 * 3600);
        check_and_keep(dir.path(), week).unwrap();
        let meta: ServerMetadata =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        assert!((now_unix() - meta.last_seen_unix).abs() < 5);
        let stale = serde_json::json!({"last_seen_unix": now_unix() - 200 * 3600});
        std::fs::write(dir.path().join(FILE), stale.to_string()).unwrap();
        let err = check_and_keep(dir.path(), week).unwrap_err();
        assert!(err.contains("server_rejoin_age_max (168h0m0s)"), "{err}");
        check_and_keep(dir.path(), Duration::from_secs(300 * 3600)).unwrap();
    }
}
