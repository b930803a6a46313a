//! `legate lock [options] prefix child...`: Consul's lock command. It
//! holds the lock at `<prefix>/.lock` (a session, renewed while the child
//! runs, acquiring the key with Consul's lock flag value), runs the child
//! while holding it, kills the child if the lock is lost, and releases it
//! when the child exits. With `-n` above 1 it takes one of that many
//! slots of a semaphore instead (see [`super::semaphore`]).

use std::time::{Duration, Instant};

use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};

/// The flags Consul's API gives a key held as a lock
/// (`api.LockFlagValue`).
const LOCK_FLAG_VALUE: u64 = 0x2ddc_cbc0_58a5_0c18;
/// The session's TTL (Consul's `api.DefaultLockSessionTTL`).
const SESSION_TTL: &str = "15s";
/// How long one wait for the key to change lasts.
const LOCK_WAIT: &str = "15s";
/// Pause before trying again after the key was free but the acquire
/// failed (a lock delay; Consul's `DefaultLockRetryTime`).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Flags of `lock`.
#[derive(Args, Debug)]
pub struct LockArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// How many may hold the lock at once (above 1: a semaphore).
    #[arg(long, default_value_t = 1)]
    n: u32,
    /// The session's name.
    #[arg(long)]
    name: Option<String>,
    /// Give the child this command's standard input.
    #[arg(long)]
    pass_stdin: bool,
    /// Run the child through a shell (`sh -c`); `-shell=false` runs it
    /// directly.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true")]
    shell: bool,
    /// Give up after this long without the lock (0: wait forever).
    #[arg(long)]
    timeout: Option<String>,
    /// Try to take the lock for at most this long (`5s`).
    #[arg(long = "try")]
    try_for: Option<String>,
    /// Kept for Consul's flag set (retries of the lock monitor).
    #[arg(long, default_value_t = 3)]
    monitor_retry: u32,
    /// Print what the command does.
    #[arg(long)]
    verbose: bool,
    /// Exit 2 when the child fails (else the child's failure is not
    /// passed on).
    #[arg(long)]
    child_exit_code: bool,
    /// The KV prefix whose `.lock` key is the lock.
    prefix: String,
    /// The command to run while holding the lock.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    child: Vec<String>,
}

fn duration(flag: &str, value: &Option<String>) -> Result<Option<Duration>, String> {
    match value {
        None => Ok(None),
        Some(text) => legate_types::duration::parse_go_duration(text)
            .map(|d| (!d.is_zero()).then_some(d))
            .map_err(|e| format!("invalid value {text:?} for -{flag}: {e}")),
    }
}

/// Runs `lock`.
pub async fn run(args: LockArgs) -> u8 {
    if args.n == 0 {
        return fail("Lock holder limit must be positive");
    }
    let deadline = match (
        duration("timeout", &args.timeout),
        duration("try", &args.try_for),
    ) {
        (Err(e), _) | (_, Err(e)) => return fail(e),
        (Ok(a), Ok(b)) => a.or(b).map(|d| Instant::now() + d),
    };
    let prefix = args.prefix.trim_matches('/').to_string();
    let key = format!("{prefix}/.lock");
    let client = Client::new(&args.http);
    let say = |text: &str| {
        if args.verbose {
            println!("{text}");
        }
    };
    say(&format!("Setting up lock at path: {key}"));
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("Consul lock for '{prefix}'"));
    let body = serde_json::json!({"Name": name, "TTL": SESSION_TTL, "Behavior": "release"});
    let session = match create_session(&client, body).await {
        Ok(id) => id,
        Err(e) => return fail(format!("Lock acquisition failed: {e}")),
    };
    // At half the TTL while the lock is held.
    let renewer = spawn_renewal(
        Client::new(&args.http),
        session.clone(),
        Duration::from_millis(7500),
    );
    say("Attempting lock acquisition");
    let acquired = if args.n > 1 {
        super::semaphore::acquire(&client, &prefix, &session, args.n, deadline).await
    } else {
        acquire(&client, &key, &session, deadline).await
    };
    match acquired {
        Ok(true) => {}
        Ok(false) => {
            renewer.abort();
            destroy_session(&client, &session).await;
            return fail("Shutdown triggered or timeout during lock acquisition");
        }
        Err(e) => {
            renewer.abort();
            destroy_session(&client, &session).await;
            return fail(format!("Lock acquisition failed: {e}"));
        }
    }
    say("Starting handler");
    let outcome = run_child(&args, &client, &prefix, &key, &session).await;
    say("Cleanup succeeded");
    if args.n > 1 {
        super::semaphore::release(&client, &prefix, &session).await;
    } else {
        let _ = client
            .call(
                Method::PUT,
                &format!("/v1/kv/{key}"),
                &[("release", session.clone())],
                None,
            )
            .await;
    }
    renewer.abort();
    destroy_session(&client, &session).await;
    match outcome {
        ChildOutcome::Exited(true) => 0,
        ChildOutcome::Exited(false) if args.child_exit_code => 2,
        ChildOutcome::Exited(false) => 0,
        ChildOutcome::LockLost => 1,
        ChildOutcome::Failed(e) => fail(format!("Error running handler: {e}")),
    }
}

/// Creates a session from `body`; its ID.
pub(super) async fn create_session(client: &Client, body: Value) -> Result<String, String> {
    let answer = client
        .ok(
            Method::PUT,
            "/v1/session/create",
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
        .map_err(|e| e.to_string())?;
    let created: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
    created["ID"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the agent answered no session ID".to_string())
}

/// Destroys a session (failures are ignored: its TTL ends it anyway).
pub(super) async fn destroy_session(client: &Client, session: &str) {
    let _ = client
        .call(
            Method::PUT,
            &format!("/v1/session/destroy/{session}"),
            &[],
            None,
        )
        .await;
}

/// Renews the session every `every` until aborted.
pub(super) fn spawn_renewal(
    client: Client,
    session: String,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let _ = client
                .call(
                    Method::PUT,
                    &format!("/v1/session/renew/{session}"),
                    &[],
                    None,
                )
                .await;
        }
    })
}

/// The key's holder and index (`None`: nobody, or the key is absent).
async fn holder(client: &Client, key: &str, index: u64) -> Result<(Option<String>, u64), String> {
    let query = [
        ("index", index.to_string()),
        ("wait", LOCK_WAIT.to_string()),
    ];
    let (status, index, body) = client
        .exchange(Method::GET, &format!("/v1/kv/{key}"), &query, None)
        .await
        .map_err(|e| e.to_string())?;
    if status.as_u16() == 404 {
        return Ok((None, index));
    }
    if !status.is_success() {
        return Err(String::from_utf8_lossy(&body).to_string());
    }
    let entries: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let session = entries[0]["Session"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Ok((session, index))
}

/// Takes the lock; `false` when `deadline` passed first.
async fn acquire(
    client: &Client,
    key: &str,
    session: &str,
    deadline: Option<Instant>,
) -> Result<bool, String> {
    let mut index = 0;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        let (held_by, seen) = holder(client, key, 0).await?;
        index = index.max(seen);
        if held_by.is_none() {
            let (status, body) = client
                .call(
                    Method::PUT,
                    &format!("/v1/kv/{key}"),
                    &[
                        ("acquire", session.to_string()),
                        ("flags", LOCK_FLAG_VALUE.to_string()),
                    ],
                    Some(Vec::new()),
                )
                .await
                .map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(String::from_utf8_lossy(&body).to_string());
            }
            if body.trim_ascii() == b"true" {
                return Ok(true);
            }
            // Free but refused: a lock delay after its last holder.
            tokio::time::sleep(remaining(deadline, RETRY_AFTER)).await;
            continue;
        }
        // Held: wait for the key to change (within the deadline).
        let wait = holder(client, key, index);
        match deadline {
            Some(d) => {
                if let Ok(Ok((_, seen))) =
                    tokio::time::timeout(d.saturating_duration_since(Instant::now()), wait).await
                {
                    index = seen;
                }
            }
            None => index = wait.await?.1,
        }
    }
}

fn remaining(deadline: Option<Instant>, at_most: Duration) -> Duration {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()).min(at_most),
        None => at_most,
    }
}

enum ChildOutcome {
    /// Whether it succeeded.
    Exited(bool),
    LockLost,
    Failed(String),
}

async fn run_child(
    args: &LockArgs,
    client: &Client,
    prefix: &str,
    key: &str,
    session: &str,
) -> ChildOutcome {
    let mut command = if args.shell {
        let mut c = tokio::process::Command::new("sh");
        c.arg("-c").arg(args.child.join(" "));
        c
    } else {
        let mut c = tokio::process::Command::new(&args.child[0]);
        c.args(&args.child[1..]);
        c
    };
    if !args.pass_stdin {
        command.stdin(std::process::Stdio::null());
    }
    // Its own process group, so a lost lock stops everything it started
    // (a shell's children too).
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return ChildOutcome::Failed(e.to_string()),
    };
    let lost = async {
        if args.n > 1 {
            return super::semaphore::lost(client, prefix, session).await;
        }
        let mut index = 0;
        loop {
            match holder(client, key, index).await {
                Ok((Some(s), seen)) if s == session => index = seen,
                Ok(_) => return,
                // The agent did not answer: look again shortly.
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    };
    tokio::select! {
        status = child.wait() => match status {
            Ok(status) => ChildOutcome::Exited(status.success()),
            Err(e) => ChildOutcome::Failed(e.to_string()),
        },
        () = lost => {
            eprintln!("Lock lost, killing child");
            if let Some(pid) = child.id() {
                // SAFETY: kill(2) with a negative pid signals the child's
                // process group, which it leads (`process_group(0)`).
                unsafe {
                    libc::kill(-(pid as i32), libc::SIGKILL);
                }
            }
            let _ = child.kill().await;
            ChildOutcome::LockLost
        }
    }
}
