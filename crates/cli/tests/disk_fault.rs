//! A server whose disk fills up under write load: its data dir is a small
//! tmpfs in a mount namespace of the test's own (held open by a `sleep`),
//! so the test can fill it and then grow it. Legate's chosen behaviour: the
//! server stops reporting a leader and exits non-zero with a clear message
//! as soon as Raft fails to write, and once restarted on a disk with room
//! it has every acknowledged write.
//!
//! Needs root (mount namespaces), as the CI machine runs tests.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, try_http_request};

/// A mount namespace kept alive by a sleeping process.
struct Namespace(Child);

impl Namespace {
    fn new() -> Namespace {
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "600"])
            .spawn()
            .expect("unshare (util-linux)");
        // Wait until the sleeper runs inside its own namespace.
        let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(format!("/proc/{}/ns/mnt", child.id())).ok() == Some(own.clone())
            || std::fs::read_to_string(format!("/proc/{}/cmdline", child.id()))
                .map(|c| !c.starts_with("sleep"))
                .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "unshare did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Namespace(child)
    }

    /// A command run inside the namespace.
    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg("-t")
            .arg(self.0.id().to_string())
            .arg("-m")
            .arg(program);
        command
    }

    fn mount_tmpfs(&self, dir: &Path, options: &str) {
        let status = self
            .command(Path::new("mount"))
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount {options}");
    }

    fn remount(&self, dir: &Path, options: &str) {
        let status = self
            .command(Path::new("mount"))
            .args(["-o", &format!("remount,{options}")])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "remount {options}");
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Server {
    child: Child,
    http: u16,
    log: std::path::PathBuf,
}

impl Server {
    fn start(ns: &Namespace, data: &Path, log: std::path::PathBuf) -> Server {
        let http = free_port();
        let out = std::fs::File::create(&log).unwrap();
        let child = ns
            .command(&common::binary())
            .args(["agent", "-server", "-bootstrap-expect=1", "-node=full"])
            .arg(format!("-data-dir={}", data.display()))
            .args(["-bind=127.0.0.74", "-client=127.0.0.1"])
            .arg(format!("-http-port={http}"))
            .args(["-dns-port=-1", "-grpc-port=-1"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let server = Server { child, http, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((200, _, body)) = try_http_request(http, "GET", "/v1/status/leader", None) {
                if body.trim().len() > 2 {
                    return server;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no leader:\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_full_disk_stops_the_server_with_a_clear_error_and_a_restart_keeps_every_acknowledged_write() {
    let ns = Namespace::new();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    ns.mount_tmpfs(&data, "size=8m");
    let mut server = Server::start(&ns, &data, root.path().join("first.log"));

    // Writes of 100 KiB until the disk is full.
    let value: String = (0..100 * 1024)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    let mut acknowledged = Vec::new();
    let failed_at = loop {
        let key = format!("k{}", acknowledged.len());
        match try_http_request(
            server.http,
            "PUT",
            &format!("/v1/kv/{key}"),
            Some(value.clone().into_bytes()),
        ) {
            Some((200, _, body)) if body == "true" => acknowledged.push(key),
            other => break other,
        }
        assert!(acknowledged.len() < 500, "the disk never filled up");
    };
    assert!(acknowledged.len() > 5, "{failed_at:?}");
    // The server stops at once, non-zero, saying why.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server kept running after a storage error:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(1), "{}", server.log_text());
    let log = server.log_text();
    assert!(
        log.contains("Raft stopped on a storage error") && log.contains("No space left on device"),
        "{log}"
    );
    assert!(
        log.lines().filter(|l| l.contains("ERROR")).count() < 20,
        "the log was flooded:\n{log}"
    );

    // With room again, a restart has every acknowledged write.
    ns.remount(&data, "size=256m");
    let server = Server::start(&ns, &data, root.path().join("second.log"));
    for key in &acknowledged {
        let (status, _, body) =
            common::http_request(server.http, "GET", &format!("/v1/kv/{key}?raw"), None);
        assert_eq!(status, 200, "{key} was lost");
        assert_eq!(body.len(), value.len(), "{key} changed");
    }
    let (status, _, body) =
        common::http_request(server.http, "PUT", "/v1/kv/after", Some(b"x".to_vec()));
    assert_eq!((status, body.as_str()), (200, "true"));
}
