//! `legate debug`: Consul's debug bundle. It writes what the agent says
//! about itself once (`agent.json`, `host.json`, `members.json`), follows
//! its metrics stream (`metrics.json`) and its log at `TRACE`
//! (`consul.log`) for `-duration`, notes what was captured in
//! `index.json`, and packs the directory into `<output>.tar.gz` (0600)
//! unless `-archive=false`. Go profiles (`pprof`) do not exist in Legate:
//! asking for them is warned about and skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use legate_types::duration::{format_go_duration, parse_go_duration};

use crate::client::{Client, HttpFlags};

/// Everything `-capture` may name, in Consul's default order.
const TARGETS: &[&str] = &["metrics", "logs", "pprof", "host", "agent", "members"];
/// Added to the duration so the last interval's captures finish.
const GRACE: Duration = Duration::from_secs(2);

/// Flags of `debug`.
#[derive(Args, Debug)]
pub struct DebugArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// How often to mark a capture interval.
    #[arg(long, default_value = "30s")]
    interval: String,
    /// How long to capture for.
    #[arg(long, default_value = "5m")]
    duration: String,
    /// The directory to write (default `consul-debug-<time>`).
    #[arg(long)]
    output: Option<String>,
    /// Pack the directory into `<output>.tar.gz` and remove it.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true")]
    archive: bool,
    /// What to capture (repeatable): metrics, logs, pprof, host, agent,
    /// members.
    #[arg(long)]
    capture: Vec<String>,
    /// Nothing is taken as an argument.
    #[arg(hide = true)]
    rest: Vec<String>,
}

fn error(text: impl std::fmt::Display) -> u8 {
    eprintln!("==> {text}");
    1
}

/// The UTC time in Consul's directory form (`2006-01-02T15-04-05Z`).
fn stamp(now: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}Z",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// The UTC time as Go prints a `time.Time`.
fn go_time(now: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} +0000 UTC",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.nanosecond()
    )
}

/// Checks the timing and the targets (Consul's texts, its `10s` slip in
/// the interval's included); the targets to capture.
fn validate(
    interval: Duration,
    duration: Duration,
    capture: &[String],
) -> Result<Vec<String>, String> {
    if duration < Duration::from_secs(10) {
        return Err("duration must be longer than 10s".into());
    }
    if interval < Duration::from_secs(5) {
        return Err("interval must be longer than 10s".into());
    }
    if duration < interval {
        return Err(format!(
            "duration ({}) must be longer than interval ({})",
            format_go_duration(duration),
            format_go_duration(interval)
        ));
    }
    let mut targets = Vec::new();
    let wanted: Vec<String> = if capture.is_empty() {
        TARGETS.iter().map(|t| t.to_string()).collect()
    } else {
        capture.to_vec()
    };
    for target in wanted {
        let target = if target == "cluster" {
            "members".to_string()
        } else {
            target
        };
        if !TARGETS.contains(&target.as_str()) {
            return Err(format!("target not found: {target}"));
        }
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}

/// Writes `value` as Go's `json.MarshalIndent(v, "", "\t")` does.
fn write_json(path: &Path, value: &Value) -> std::io::Result<()> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(value, &mut serializer).map_err(std::io::Error::other)?;
    std::fs::write(path, out)
}

/// Runs `debug`.
pub async fn run(args: DebugArgs) -> u8 {
    if !args.rest.is_empty() {
        return error("debug: Too many arguments provided, expected 0");
    }
    let (interval, duration) = match (
        parse_go_duration(&args.interval),
        parse_go_duration(&args.duration),
    ) {
        (Ok(i), Ok(d)) => (i, d),
        (Err(e), _) | (_, Err(e)) => return error(format!("Error parsing flags: {e}")),
    };
    let mut targets = match validate(interval, duration, &args.capture) {
        Ok(targets) => targets,
        Err(e) => return error(format!("Capture validation failed: {e}")),
    };
    let client = Client::new(&args.http);
    let me: Value = match client.get_json("/v1/agent/self", &[]).await {
        Ok(me) => me,
        Err(e) => {
            return error(format!(
                "Capture validation failed: error querying target agent: {e}. verify connectivity and agent address"
            ))
        }
    };
    let Some(version) = me["Config"]["Version"].as_str().map(str::to_string) else {
        return error("Capture validation failed: agent response did not contain version key");
    };
    if targets.iter().any(|t| t == "pprof") {
        targets.retain(|t| t != "pprof");
        eprintln!("[WARN] Unable to capture pprof: Legate has no Go profiler (profile the agent with perf).");
    }
    let output = PathBuf::from(
        args.output
            .clone()
            .unwrap_or_else(|| format!("consul-debug-{}", stamp(time::OffsetDateTime::now_utc()))),
    );
    if output.exists() {
        return error(format!(
            "Capture validation failed: output directory already exists: {}",
            output.display()
        ));
    }
    if let Err(e) = std::fs::create_dir_all(&output) {
        return error(format!(
            "Capture validation failed: could not create output directory: {e}"
        ));
    }
    let archive_name = if args.archive {
        format!("{}.tar.gz", output.display())
    } else {
        output.display().to_string()
    };
    println!("==> Starting debugger and capturing static information...");
    println!("     Agent Version: '{version}'");
    println!("          Interval: '{}'", format_go_duration(interval));
    println!("          Duration: '{}'", format_go_duration(duration));
    println!("            Output: '{archive_name}'");
    println!("           Capture: '{}'", targets.join(", "));
    capture_static(&client, &output, &targets, &me).await;
    if targets.iter().any(|t| t == "metrics" || t == "logs") {
        if let Err(e) =
            capture_dynamic(&args.http, &output, &targets, interval, duration + GRACE).await
        {
            eprintln!("==> Error encountered during collection: {e}");
        }
    }
    let index = json!({
        "Version": 1,
        "AgentVersion": version,
        "Interval": format_go_duration(interval),
        "Duration": format_go_duration(duration + GRACE),
        "Targets": targets,
    });
    if let Err(e) = write_json(&output.join("index.json"), &index) {
        return error(format!("Error creating index document: {e}"));
    }
    if args.archive {
        if let Err(e) = archive(&output) {
            eprintln!("[WARN] Archive creation failed: {e}");
            return 1;
        }
    }
    println!("    Saved debug archive: {archive_name}");
    0
}

/// The once-only captures: each written even when its read failed (as
/// `null`), the failures warned about together.
async fn capture_static(client: &Client, output: &Path, targets: &[String], me: &Value) {
    let mut failures = Vec::new();
    for (target, file, path, query) in [
        ("host", "host.json", "/v1/agent/host", vec![]),
        ("agent", "agent.json", "/v1/agent/self", vec![]),
        (
            "members",
            "members.json",
            "/v1/agent/members",
            vec![("wan", "1".to_string())],
        ),
    ] {
        if !targets.iter().any(|t| t == target) {
            continue;
        }
        let value = if target == "agent" {
            Ok(me.clone())
        } else {
            client.get_json::<Value>(path, &query).await
        };
        let value = value.unwrap_or_else(|e| {
            failures.push(e.to_string());
            Value::Null
        });
        if let Err(e) = write_json(&output.join(file), &value) {
            failures.push(e.to_string());
        }
    }
    if !failures.is_empty() {
        let mut text = format!(
            "{} error{} occurred:",
            failures.len(),
            if failures.len() == 1 { "" } else { "s" }
        );
        for failure in failures {
            text.push_str(&format!("\n\t* {failure}"));
        }
        eprintln!("Static capture failed: {text}");
    }
}

/// Follows the metrics stream and the log into their files for `total`,
/// marking each interval; an interrupt ends it early.
async fn capture_dynamic(
    http: &HttpFlags,
    output: &Path,
    targets: &[String],
    interval: Duration,
    total: Duration,
) -> Result<(), String> {
    let mut streams = Vec::new();
    for (target, file, path, query) in [
        (
            "metrics",
            "metrics.json",
            "/v1/agent/metrics/stream",
            vec![],
        ),
        (
            "logs",
            "consul.log",
            "/v1/agent/monitor",
            vec![("loglevel", "TRACE".to_string())],
        ),
    ] {
        if targets.iter().any(|t| t == target) {
            let client = Client::new(http);
            let file = output.join(file);
            streams.push(tokio::spawn(async move {
                follow(client, path, query, file).await
            }));
        }
    }
    let started = tokio::time::Instant::now();
    let deadline = started + total;
    println!(
        "==> Beginning capture interval {} (0)",
        go_time(time::OffsetDateTime::now_utc())
    );
    println!(
        "==> Capture successful {} (0)",
        go_time(time::OffsetDateTime::now_utc())
    );
    let mut ticks = tokio::time::interval_at(started + interval, interval);
    let mut count = 0;
    let result = loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break Ok(()),
            _ = ticks.tick() => {
                count += 1;
                println!("==> Capture successful {} ({count})", go_time(time::OffsetDateTime::now_utc()));
            }
            _ = tokio::signal::ctrl_c() => break Err("stopping collection due to shutdown signal".to_string()),
        }
    };
    for stream in streams {
        stream.abort();
        if let Ok(Err(e)) = stream.await {
            return Err(e);
        }
    }
    result
}

/// Copies a streaming answer into `file` until aborted or it ends.
async fn follow(
    client: Client,
    path: &str,
    query: Vec<(&str, String)>,
    file: PathBuf,
) -> Result<(), String> {
    let mut out = tokio::fs::File::create(&file)
        .await
        .map_err(|e| format!("creating {}: {e}", file.display()))?;
    let mut response = client
        .stream(path, &query)
        .await
        .map_err(|e| e.to_string())?;
    while let Ok(Some(chunk)) = response.chunk().await {
        out.write_all(&chunk).await.map_err(|e| e.to_string())?;
        out.flush().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Packs `dir` into `<dir>.tar.gz` (entries under the directory's own
/// name, mode 0600, written to a temporary file and renamed) and removes
/// the directory.
fn archive(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let base = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "consul-debug".into());
    let target = PathBuf::from(format!("{}.tar.gz", dir.display()));
    let temp = PathBuf::from(format!("{}.tmp{}", target.display(), std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| format!("failed to create compressed temp archive: {e}"))?;
    let encoder = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(encoder);
    tar.append_dir_all(&base, dir)
        .map_err(|e| format!("failed to walk output path for archive: {e}"))?;
    let mut file = tar
        .into_inner()
        .and_then(|gz| gz.finish())
        .map_err(|e| format!("failed to compress archive: {e}"))?;
    file.flush()
        .and_then(|_| file.sync_all())
        .map_err(|e| e.to_string())?;
    std::fs::rename(&temp, &target).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(dir).map_err(|e| format!("failed to remove archived directory: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_and_targets_are_checked_with_consuls_texts() {
        let s = Duration::from_secs;
        assert_eq!(
            validate(s(30), s(5), &[]).unwrap_err(),
            "duration must be longer than 10s"
        );
        assert_eq!(
            validate(s(4), s(60), &[]).unwrap_err(),
            "interval must be longer than 10s"
        );
        assert_eq!(
            validate(s(30), s(20), &[]).unwrap_err(),
            "duration (20s) must be longer than interval (30s)"
        );
        assert_eq!(
            validate(s(5), s(10), &["nope".into()]).unwrap_err(),
            "target not found: nope"
        );
        assert_eq!(validate(s(5), s(10), &[]).unwrap(), TARGETS);
        assert_eq!(
            validate(s(5), s(10), &["cluster".into(), "members".into()]).unwrap(),
            ["members"]
        );
    }

    #[test]
    fn times_are_printed_as_go_prints_them() {
        let at =
            time::OffsetDateTime::from_unix_timestamp_nanos(1_754_403_743_646_385_703).unwrap();
        assert_eq!(stamp(at), "2025-08-05T14-22-23Z");
        assert_eq!(go_time(at), "2025-08-05 14:22:23.646385703 +0000 UTC");
    }
}
