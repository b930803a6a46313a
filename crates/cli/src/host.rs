//! What the agent process sets up on its host before it opens anything:
//! files it creates are its owner's alone (the data dir holds the CA's
//! private keys and the gossip keyring), an existing data dir is
//! tightened, and the open-file soft limit is raised to the hard limit
//! (as every Go program, Consul included, does at start).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Makes every file and directory this process creates from now on
/// private to its owner (umask 077). Script checks get the umask the agent
/// inherited back.
pub fn restrict_new_files() {
    // SAFETY: umask only swaps the process's file mode mask.
    let inherited = unsafe { libc::umask(0o077) };
    legate_agent::checks::set_child_umask(inherited as u32);
}

/// Creates `dir` (0700) if it is missing and takes group and other access
/// away from everything in it this user owns; logs what it changed. What
/// cannot be changed (another user's files) is logged and left: the data
/// dir's own 0700 already keeps other users out.
pub fn secure_data_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut tightened = Vec::new();
    if let Err(e) = tighten(dir, &mut tightened) {
        tracing::warn!(data_dir = %dir.display(), error = %e, "could not restrict every file in the data dir to its owner");
    }
    if !tightened.is_empty() {
        tracing::warn!(
            data_dir = %dir.display(),
            count = tightened.len(),
            first = %tightened[0],
            "the data dir was readable by other users; restricted it to its owner (0700 directories, 0600 files)"
        );
    }
    Ok(())
}

fn tighten(path: &Path, tightened: &mut Vec<String>) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // Never follows links (a link's target is not ours to change) and
    // leaves other users' files alone.
    let meta = std::fs::symlink_metadata(path)?;
    // SAFETY: geteuid only reads the process's user id.
    let ours = meta.uid() == unsafe { libc::geteuid() };
    if meta.file_type().is_symlink() || !ours {
        return Ok(());
    }
    let mode = meta.permissions().mode() & 0o7777;
    let wanted = if meta.is_dir() {
        mode & 0o700
    } else {
        mode & 0o600
    };
    if mode != wanted {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted))?;
        tightened.push(format!("{} ({:o} -> {:o})", path.display(), mode, wanted));
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?.path();
            // One file that cannot be changed does not stop the others.
            if let Err(e) = tighten(&entry, tightened) {
                tracing::warn!(path = %entry.display(), error = %e, "could not restrict a data dir entry to its owner");
            }
        }
    }
    Ok(())
}

/// Raises the open-file soft limit to the hard limit, so a busy agent is
/// bounded by what the operator allows rather than a low default.
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let before = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            tracing::debug!(
                from = before,
                to = limit.rlim_max,
                "raised the open-file limit"
            );
        }
    }
}

/// Free heap above which the agent hands memory back to the system.
const FREE_HEAP_THRESHOLD: u64 = 32 << 20;

/// Every 10 s, hands free heap back to the system once more than 32 MiB of
/// it is free: a burst of work (thousands of finished blocking queries, a
/// deregistered proxy, a large delete) otherwise leaves RSS at its peak.
pub fn spawn_memory_release() {
    tokio::spawn(async {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // mallinfo2 walks the free lists: off the runtime's threads.
            let _ = tokio::task::spawn_blocking(|| {
                legate_types::memory::release_if_more_free_than(FREE_HEAP_THRESHOLD)
            })
            .await;
        }
    });
}

/// Publishes Consul's `runtime.*` gauges every 10 s, from what a Rust
/// process has: `alloc_bytes` (the allocator's bytes in use),
/// `sys_bytes` (resident memory), `num_goroutines` (live tokio tasks),
/// and `total_gc_pause_ns` 0 (there is no garbage collector).
pub fn spawn_runtime_metrics() {
    tokio::spawn(async {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            // mallinfo2 walks the free lists: off the runtime's threads.
            let memory = tokio::task::spawn_blocking(|| {
                (
                    legate_types::memory::allocated_heap_bytes(),
                    legate_types::memory::resident_bytes(),
                )
            })
            .await;
            if let Ok((allocated, resident)) = memory {
                if let Some(bytes) = allocated {
                    metrics::gauge!("runtime.alloc_bytes").set(bytes as f64);
                }
                if let Some(bytes) = resident {
                    metrics::gauge!("runtime.sys_bytes").set(bytes as f64);
                }
            }
            metrics::gauge!("runtime.num_goroutines").set(tasks as f64);
            metrics::gauge!("runtime.total_gc_pause_ns").set(0.0);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_data_dir_is_tightened_without_following_links() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir_all(dir.join("raft")).unwrap();
        std::fs::write(dir.join("raft/raft.db"), "key").unwrap();
        let outside = root.path().join("outside");
        std::fs::write(&outside, "x").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        for (p, m) in [(&dir, 0o755), (&dir.join("raft"), 0o775)] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        }
        std::fs::set_permissions(
            dir.join("raft/raft.db"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        secure_data_dir(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("raft")), 0o700);
        assert_eq!(mode(&dir.join("raft/raft.db")), 0o600);
        assert_eq!(mode(&outside), 0o644, "a link's target is left alone");
    }
}
