//! `legate exec [options] command`: Consul's remote execution. The CLI
//! creates a session, uploads the job to `<prefix>/<session>/job` under
//! it, fires the `_rexec` user event at the nodes its filters pick, and
//! prints what each agent writes back (`ack`, output chunks, `exit`) until
//! nothing new arrives for `-wait` (twice that while some node has
//! acknowledged without finishing). Agents run jobs only with
//! `disable_remote_exec = false`; the others never answer.

use std::collections::HashSet;
use std::io::Read;
use std::time::{Duration, Instant};

use base64::Engine;
use clap::Args;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::fail;
use super::lock::{create_session, destroy_session, spawn_renewal};
use crate::client::{Client, HttpFlags};

/// The session's TTL and how often the CLI renews it (Consul's).
const SESSION_TTL: &str = "15s";
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Flags of `exec`.
#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    http: HttpFlags,
    #[command(flatten)]
    filters: super::event::EventFilters,
    /// The KV prefix the job and its results are written under.
    #[arg(long, default_value = "_rexec")]
    prefix: String,
    /// Run the command through the agent's shell (`-shell=false`: the
    /// words as a program and its arguments).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true")]
    shell: bool,
    /// How long to wait with no new answer before finishing.
    #[arg(long, default_value = "2s")]
    wait: String,
    /// How long to wait for the job to replicate before firing the event.
    #[arg(long = "wait-repl", default_value = "200ms")]
    wait_repl: String,
    /// Say what happens.
    #[arg(long)]
    verbose: bool,
    /// The command (`-`: a script read from standard input).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// What a node wrote back.
#[derive(Debug)]
enum Heard {
    Ack(String),
    Heartbeat(String),
    Output(String, Vec<u8>),
    Exit(String, i64),
    Failed(String),
}

fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    legate_types::duration::parse_go_duration(text)
        .map_err(|e| format!("invalid value {text:?} for -{flag}: {e}"))
}

/// The job spec Consul's agents read (`remoteExecSpec`).
fn job_spec(args: &ExecArgs, wait: Duration) -> Result<Value, String> {
    let text = args.command.join(" ");
    if text.is_empty() {
        return Err("Must specify a command to execute".into());
    }
    let mut spec = json!({"Wait": wait.as_nanos() as u64});
    if text == "-" {
        if !args.shell {
            return Err("Cannot configure -shell=false when reading from stdin".into());
        }
        let mut script = Vec::new();
        std::io::stdin()
            .read_to_end(&mut script)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        spec["Script"] = json!(base64::engine::general_purpose::STANDARD.encode(script));
    } else if args.shell {
        spec["Command"] = json!(text);
    } else {
        spec["Args"] = json!(args.command);
    }
    Ok(spec)
}

/// Runs `exec`.
pub async fn run(args: ExecArgs) -> u8 {
    let filters = match super::event::filter_query(&args.filters) {
        Ok(filters) => filters,
        Err(e) => return fail(e),
    };
    let (wait, wait_repl) = match (
        duration("wait", &args.wait),
        duration("wait-repl", &args.wait_repl),
    ) {
        (Ok(w), Ok(r)) => (w, r),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let spec = match job_spec(&args, wait) {
        Ok(spec) => spec,
        Err(e) => return fail(e),
    };
    let client = Client::new(&args.http);
    let session = match start_session(&client, &args.http).await {
        Ok(session) => session,
        Err(e) => return fail(e),
    };
    let say = |text: String| {
        if args.verbose {
            println!("{text}");
        }
    };
    say(format!("Created remote execution session: {session}"));
    let renewer = spawn_renewal(Client::new(&args.http), session.clone(), RENEW_EVERY);
    let prefix = args.prefix.trim_matches('/').to_string();
    let dir = format!("{prefix}/{session}");
    let code = match dispatch(&client, &dir, &session, &spec, &filters, wait_repl).await {
        Ok(event) => {
            say("Uploaded remote execution spec".into());
            say(format!("Fired remote execution event: {event}"));
            let started = Instant::now();
            let code = gather(Client::new(&args.http), &dir, wait, args.verbose).await;
            say(format!(
                "Completed in {:0.2} seconds",
                started.elapsed().as_secs_f64()
            ));
            code
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    };
    renewer.abort();
    destroy_session(&client, &session).await;
    let _ = client
        .call(
            Method::DELETE,
            &format!("/v1/kv/{dir}"),
            &[("recurse", String::new())],
            None,
        )
        .await;
    code
}

/// Creates the session: on the agent's own node, or — for another
/// datacenter — on a server there, with no checks (Consul's way).
async fn start_session(client: &Client, http: &HttpFlags) -> Result<String, String> {
    let me: Value = client
        .get_json("/v1/agent/self", &[])
        .await
        .map_err(|e| format!("Failed to get agent info: {e}"))?;
    let node = me["Config"]["NodeName"].as_str().unwrap_or_default();
    let local_dc = me["Config"]["Datacenter"].as_str().unwrap_or_default();
    let body = match http.datacenter.as_deref().filter(|dc| *dc != local_dc) {
        None => json!({"Name": "Remote Exec", "Behavior": "delete", "TTL": SESSION_TTL}),
        Some(dc) => {
            let servers: Value = client
                .get_json("/v1/health/service/consul", &[("passing", "1".into())])
                .await
                .map_err(|e| format!("Failed to find a server in {dc}: {e}"))?;
            let server = servers[0]["Node"]["Node"]
                .as_str()
                .ok_or_else(|| format!("No path to datacenter {dc}"))?;
            json!({"Name": format!("Remote Exec via {node}@{local_dc}"), "Node": server,
                   "Checks": [], "Behavior": "delete", "TTL": SESSION_TTL})
        }
    };
    create_session(client, body)
        .await
        .map_err(|e| format!("Failed to create session: {e}"))
}

/// Uploads the job under the session and fires the event; its ID.
async fn dispatch(
    client: &Client,
    dir: &str,
    session: &str,
    spec: &Value,
    filters: &[(&'static str, String)],
    wait_repl: Duration,
) -> Result<String, String> {
    let key = format!("{dir}/job");
    let acquired = client
        .ok(
            Method::PUT,
            &format!("/v1/kv/{key}"),
            &[("acquire", session.to_string())],
            Some(spec.to_string().into_bytes()),
        )
        .await
        .map_err(|e| format!("Failed to upload job spec: {e}"))?;
    if String::from_utf8_lossy(&acquired).trim() != "true" {
        return Err(format!(
            "Failed to upload job spec: failed to acquire key {key:?}"
        ));
    }
    tokio::time::sleep(wait_repl).await;
    let (prefix, _) = dir.rsplit_once('/').unwrap_or((dir, ""));
    let payload = json!({"Prefix": prefix, "Session": session});
    let fired = client
        .ok(
            Method::PUT,
            "/v1/event/fire/_rexec",
            filters,
            Some(payload.to_string().into_bytes()),
        )
        .await
        .map_err(|e| format!("Failed to fire event: {e}"))?;
    let event: Value = serde_json::from_slice(&fired).unwrap_or_default();
    Ok(event["ID"].as_str().unwrap_or_default().to_string())
}

/// Prints what the nodes write back until they go quiet; the exit code
/// (2 when a node failed or acknowledged without finishing).
async fn gather(client: Client, dir: &str, wait: Duration, verbose: bool) -> u8 {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let watcher = tokio::spawn(watch_results(client, format!("{dir}/"), wait, tx));
    let (mut acks, mut exits, mut failed) = (0usize, 0usize, false);
    loop {
        let quiet = if acks > exits { wait * 2 } else { wait };
        let heard = tokio::select! {
            heard = tokio::time::timeout(quiet, rx.recv()) => heard,
            _ = tokio::signal::ctrl_c() => {
                watcher.abort();
                return 1;
            }
        };
        match heard {
            Ok(Some(Heard::Ack(node))) => {
                acks += 1;
                if verbose {
                    println!("==> {node}: acknowledged");
                }
            }
            Ok(Some(Heard::Heartbeat(node))) => {
                if verbose {
                    println!("==> {node}: heartbeat received");
                }
            }
            Ok(Some(Heard::Output(node, bytes))) => {
                let text = String::from_utf8_lossy(&bytes);
                for line in text.trim_end().split('\n') {
                    println!("    {node}: {line}");
                }
            }
            Ok(Some(Heard::Exit(node, code))) => {
                exits += 1;
                failed |= code != 0;
                println!("==> {node}: finished with exit code {code}");
            }
            Ok(Some(Heard::Failed(e))) => {
                watcher.abort();
                eprintln!("Failed to read results: {e}");
                return 1;
            }
            Ok(None) | Err(_) => break,
        }
    }
    watcher.abort();
    println!("{exits} / {acks} node(s) completed / acknowledged");
    if failed || exits < acks {
        2
    } else {
        0
    }
}

/// Follows the keys under `dir` with blocking reads, reporting each new
/// one once.
async fn watch_results(
    client: Client,
    dir: String,
    wait: Duration,
    tx: mpsc::UnboundedSender<Heard>,
) {
    let mut index = 0u64;
    let mut seen = HashSet::new();
    let wait = format!("{}ms", wait.as_millis().max(1));
    loop {
        let query = [
            ("keys", String::new()),
            ("index", index.to_string()),
            ("wait", wait.clone()),
        ];
        let answer = client
            .exchange(Method::GET, &format!("/v1/kv/{dir}"), &query, None)
            .await;
        let (status, next, body) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                let _ = tx.send(Heard::Failed(e.to_string()));
                return;
            }
        };
        index = next.max(1);
        let mut keys: Vec<String> = match status.as_u16() {
            404 => Vec::new(),
            200 => serde_json::from_slice(&body).unwrap_or_default(),
            _ => {
                let _ = tx.send(Heard::Failed(String::from_utf8_lossy(&body).into()));
                return;
            }
        };
        keys.sort();
        for key in keys {
            if !seen.insert(key.clone()) {
                continue;
            }
            if let Some(heard) = classify(&client, &dir, &key).await {
                if tx.send(heard).is_err() {
                    return;
                }
            }
        }
    }
}

/// What a result key says (its value read when it matters).
async fn classify(client: &Client, dir: &str, key: &str) -> Option<Heard> {
    let rest = key.strip_prefix(dir)?;
    if rest == "job" {
        return None;
    }
    let value = || async {
        client
            .ok(
                Method::GET,
                &format!("/v1/kv/{key}"),
                &[("raw", String::new())],
                None,
            )
            .await
            .unwrap_or_default()
    };
    if let Some(node) = rest.strip_suffix("/ack") {
        return Some(Heard::Ack(node.to_string()));
    }
    if let Some(node) = rest.strip_suffix("/exit") {
        let code = String::from_utf8_lossy(&value().await)
            .trim()
            .parse()
            .unwrap_or(-1);
        return Some(Heard::Exit(node.to_string(), code));
    }
    if let Some((node, _)) = rest.split_once("/out/") {
        let bytes = value().await;
        return Some(if bytes.is_empty() {
            Heard::Heartbeat(node.to_string())
        } else {
            Heard::Output(node.to_string(), bytes)
        });
    }
    eprintln!("Unknown key '{key}', ignoring.");
    None
}
