//! Remote execution (`legate exec`), the agent's half, as Consul's
//! `agent/remote_exec.go`: a `_rexec` user event names a KV prefix and a
//! session; the agent reads the job at `<prefix>/<session>/job`, runs it,
//! and writes, each under the session's lock, `<node>/ack`, its output in
//! 4 KiB chunks `<node>/out/<%05x>` (an empty one as a heartbeat when
//! nothing was written for the job's `Wait`), and `<node>/exit`. Off
//! unless `disable_remote_exec = false` (Consul's default since 0.8).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use legate_types::event::UserEvent;
use legate_types::kv::{KvOp, KvVerb};
use legate_types::{Consistency, QueryOptions, WriteOptions};

use crate::Agent;

/// The user event that carries a remote execution.
pub const REMOTE_EXEC_EVENT: &str = "_rexec";
/// Output is uploaded in chunks of at most this many bytes.
const CHUNK_SIZE: usize = 4096;
/// Output waiting this long without more is uploaded.
const FLUSH_AFTER: Duration = Duration::from_millis(500);

/// The event's payload.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ExecEvent {
    prefix: String,
    session: String,
}

/// The job the CLI uploaded (Consul's `remoteExecSpec`).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct ExecSpec {
    command: String,
    args: Vec<String>,
    /// A script (Go's `[]byte`: base64).
    script: Option<String>,
    /// Nanoseconds between heartbeats.
    wait: u64,
}

impl Agent {
    /// Handles a `_rexec` event: ignored (logged) with remote execution
    /// disabled, else run in the background.
    pub(crate) fn handle_remote_exec(self: &Arc<Self>, event: UserEvent) {
        if self.config().disable_remote_exec {
            tracing::info!(id = %event.id, "ignoring remote exec event, disabled");
            return;
        }
        let agent = self.clone();
        tokio::spawn(async move { agent.remote_exec(event).await });
    }

    async fn remote_exec(&self, event: UserEvent) {
        let payload = event
            .payload
            .as_deref()
            .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
            .unwrap_or_default();
        let exec: ExecEvent = match serde_json::from_slice(&payload) {
            Ok(exec) => exec,
            Err(error) => {
                tracing::warn!(%error, id = %event.id, "failed to decode remote exec event");
                return;
            }
        };
        let dir = format!("{}/{}", exec.prefix, exec.session);
        let Some(spec) = self.exec_spec(&dir).await else {
            return;
        };
        let writer = ExecWriter {
            agent: self,
            key: format!("{dir}/{}", self.config().node_name),
            session: exec.session,
        };
        if !writer.write("ack", Vec::new()).await {
            return;
        }
        let code = run(&spec, &writer).await;
        writer.write("exit", code.to_string().into_bytes()).await;
    }

    /// Reads the job: stale first, then from the leader (Consul's order).
    async fn exec_spec(&self, dir: &str) -> Option<ExecSpec> {
        for consistency in [Consistency::Stale, Consistency::Default] {
            let opts = QueryOptions {
                consistency,
                token: self.tokens().agent_token(),
                ..Default::default()
            };
            match self.rpc().kv_get(&opts, format!("{dir}/job")).await {
                Ok(found) => {
                    if let Some(entry) = found.value {
                        return serde_json::from_slice(&entry.value)
                            .map_err(|error| {
                                tracing::warn!(%error, "failed to decode remote exec job");
                            })
                            .ok();
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "failed to read remote exec job");
                    return None;
                }
            }
        }
        tracing::warn!(dir, "remote exec job not found");
        None
    }
}

/// Writes a node's keys under the execution's session.
struct ExecWriter<'a> {
    agent: &'a Agent,
    key: String,
    session: String,
}

impl ExecWriter<'_> {
    async fn write(&self, suffix: &str, value: Vec<u8>) -> bool {
        let op = KvOp {
            verb: KvVerb::Lock,
            session: self.session.clone(),
            ..KvOp::set(format!("{}/{suffix}", self.key), value)
        };
        let opts = WriteOptions {
            token: self.agent.tokens().agent_token(),
            ..Default::default()
        };
        match self.agent.rpc().kv_apply(&opts, op).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(key = %self.key, suffix, "remote exec write refused (session gone)");
                false
            }
            Err(error) => {
                tracing::warn!(%error, key = %self.key, suffix, "remote exec write failed");
                false
            }
        }
    }
}

/// A script written to a private file, removed when dropped.
struct ScriptFile(PathBuf);

impl ScriptFile {
    fn create(script: &[u8]) -> std::io::Result<ScriptFile> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = std::env::temp_dir().join(format!("rexec{}", uuid::Uuid::new_v4().simple()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o750)
            .open(&path)?;
        file.write_all(script)?;
        Ok(ScriptFile(path))
    }
}

impl Drop for ScriptFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the job, uploading its output; its exit code (Consul's: -1 when
/// killed by a signal, 255 when it could not start).
async fn run(spec: &ExecSpec, writer: &ExecWriter<'_>) -> i32 {
    let script = match spec.script.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(encoded) => {
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
                return 255;
            };
            match ScriptFile::create(&bytes) {
                Ok(file) => Some(file),
                Err(error) => {
                    tracing::warn!(%error, "failed to write remote exec script");
                    return 255;
                }
            }
        }
    };
    // As Consul: `Args` run as they are; otherwise the command, or the
    // script's file, runs through the agent's shell, so a script without
    // a `#!` line is still read by the shell.
    let mut command = match spec.args.split_first() {
        Some((program, rest)) => {
            let mut command = tokio::process::Command::new(program);
            command.args(rest);
            command
        }
        None => {
            let shell = std::env::var("SHELL")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "/bin/sh".into());
            let mut command = tokio::process::Command::new(shell);
            command.arg("-c");
            match &script {
                Some(file) => command.arg(&file.0),
                None => command.arg(&spec.command),
            };
            command
        }
    };
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            tracing::warn!(%error, "failed to start remote exec command");
            return 255;
        }
    };
    let (tx, rx) = mpsc::channel(16);
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    {
        tokio::spawn(forward(pipe, tx.clone()));
    }
    drop(tx);
    let heartbeat = match spec.wait {
        0 => Duration::from_secs(1),
        ns => Duration::from_nanos(ns),
    };
    if !upload_output(rx, writer, heartbeat).await {
        let _ = child.kill().await;
        return 255;
    }
    match child.wait().await {
        Ok(status) => status.code().unwrap_or(-1),
        Err(_) => 1,
    }
}

/// Sends what a pipe gives to `tx` until it closes.
async fn forward(
    mut pipe: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    tx: mpsc::Sender<Vec<u8>>,
) {
    let mut buf = vec![0u8; CHUNK_SIZE];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(buf[..n].to_vec()).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Uploads output as it comes until both pipes close: full chunks at
/// once, the rest after [`FLUSH_AFTER`] of quiet, an empty chunk when
/// nothing was uploaded for `heartbeat`. False when a write failed.
async fn upload_output(
    mut rx: mpsc::Receiver<Vec<u8>>,
    writer: &ExecWriter<'_>,
    heartbeat: Duration,
) -> bool {
    let mut pending: Vec<u8> = Vec::new();
    let mut seq = 0u64;
    let mut last_upload = Instant::now();
    let mut last_output = Instant::now();
    let upload = |chunk: Vec<u8>, seq: &mut u64| {
        let suffix = format!("out/{:05x}", *seq);
        *seq += 1;
        async move { writer.write(&suffix, chunk).await }
    };
    loop {
        let deadline = if pending.is_empty() {
            last_upload + heartbeat
        } else {
            (last_output + FLUSH_AFTER).min(last_upload + heartbeat)
        };
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(bytes)) => {
                last_output = Instant::now();
                pending.extend_from_slice(&bytes);
                while pending.len() >= CHUNK_SIZE {
                    let rest = pending.split_off(CHUNK_SIZE);
                    let chunk = std::mem::replace(&mut pending, rest);
                    if !upload(chunk, &mut seq).await {
                        return false;
                    }
                    last_upload = Instant::now();
                }
            }
            Ok(None) => break,
            Err(_) => {
                if !upload(std::mem::take(&mut pending), &mut seq).await {
                    return false;
                }
                last_upload = Instant::now();
            }
        }
    }
    pending.is_empty() || upload(pending, &mut seq).await
}
