//! `snapshot save|restore|inspect`: the whole state as an archive file.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use legate_state::archive::{self, SnapshotMeta};
use reqwest::Method;

use super::{fail, print_columns};
use crate::client::{Client, HttpFlags};

/// `snapshot` subcommands.
#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Saves the cluster's state to a file (verified before it is kept).
    Save(SaveArgs),
    /// Replaces the cluster's state with a saved snapshot.
    Restore(RestoreArgs),
    /// Describes a snapshot file without contacting an agent.
    Inspect(InspectArgs),
}

/// Flags of `snapshot save`.
#[derive(Args, Debug)]
pub struct SaveArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Where to write the snapshot.
    file: Option<PathBuf>,
}

/// Flags of `snapshot restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The snapshot to restore.
    file: Option<PathBuf>,
}

/// Flags of `snapshot inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Output format: `pretty` (default) or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
    /// The snapshot to describe.
    file: Option<PathBuf>,
}

/// Runs `snapshot ...`.
pub async fn run(cmd: SnapshotCommand) -> u8 {
    match cmd {
        SnapshotCommand::Save(args) => save(args).await,
        SnapshotCommand::Restore(args) => restore(args).await,
        SnapshotCommand::Inspect(args) => inspect(args),
    }
}

fn file_argument(file: Option<PathBuf>) -> Result<PathBuf, u8> {
    file.ok_or_else(|| fail("Missing FILE argument"))
}

async fn save(args: SaveArgs) -> u8 {
    let file = match file_argument(args.file) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let client = Client::new(&args.http);
    let bytes = match client.ok(Method::GET, "/v1/snapshot", &[], None).await {
        Ok(b) => b,
        Err(e) => return fail(format!("Error saving snapshot: {e}")),
    };
    // Verified before it replaces anything at `file`.
    let meta = match archive::read_archive(&bytes) {
        Ok((meta, _)) => meta,
        Err(e) => return fail(format!("Error verifying snapshot: {e}")),
    };
    if let Err(e) = write_atomically(&file, &bytes) {
        return fail(format!(
            "Error writing snapshot file {}: {e}",
            file.display()
        ));
    }
    println!("Saved and verified snapshot to index {}", meta.index);
    0
}

/// Writes `bytes` beside `path` and renames it over `path` once synced.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut partial = path.as_os_str().to_owned();
    partial.push(".part");
    let partial = PathBuf::from(partial);
    let mut out = std::fs::File::create(&partial)?;
    out.write_all(bytes)?;
    out.sync_all()?;
    std::fs::rename(&partial, path)
}

fn read_snapshot_file(file: &Path) -> Result<Vec<u8>, u8> {
    std::fs::read(file).map_err(|e| {
        fail(format!(
            "Error opening snapshot file {}: {e}",
            file.display()
        ))
    })
}

async fn restore(args: RestoreArgs) -> u8 {
    let file = match file_argument(args.file) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let bytes = match read_snapshot_file(&file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let client = Client::new(&args.http);
    match client
        .ok(Method::PUT, "/v1/snapshot", &[], Some(bytes))
        .await
    {
        Ok(_) => {
            println!("Restored snapshot");
            0
        }
        Err(e) => fail(format!("Error restoring snapshot: {e}")),
    }
}

fn inspect(args: InspectArgs) -> u8 {
    let file = match file_argument(args.file) {
        Ok(f) => f,
        Err(code) => return code,
    };
    if args.format != "pretty" && args.format != "json" {
        return fail(format!(
            "Invalid -format {:?}: must be pretty or json",
            args.format
        ));
    }
    let bytes = match read_snapshot_file(&file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let (meta, data) = match archive::read_archive(&bytes) {
        Ok(read) => read,
        Err(e) => return fail(format!("Error inspecting snapshot: {e}")),
    };
    let summary = data.summary();
    if args.format == "json" {
        let stats: Vec<serde_json::Value> = summary
            .iter()
            .map(|s| serde_json::json!({"Name": s.kind, "Count": s.count, "Sum": s.size}))
            .collect();
        let out = serde_json::json!({
            "Meta": meta,
            "Stats": stats,
            "TotalSize": summary.iter().map(|s| s.size).sum::<usize>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return 0;
    }
    print_meta(&meta);
    println!();
    let mut rows = vec![
        vec![" Type".to_string(), "Count".into(), "Size".into()],
        vec![" ----".to_string(), "----".into(), "----".into()],
    ];
    for line in &summary {
        rows.push(vec![
            format!(" {}", line.kind),
            line.count.to_string(),
            human_bytes(line.size),
        ]);
    }
    rows.push(vec![" ----".to_string(), "----".into(), "----".into()]);
    rows.push(vec![
        " Total".to_string(),
        String::new(),
        human_bytes(summary.iter().map(|s| s.size).sum()),
    ]);
    print_columns(&rows);
    0
}

fn print_meta(meta: &SnapshotMeta) {
    print_columns(&[
        vec![" ID".to_string(), meta.id.clone()],
        vec![" Size".to_string(), meta.size.to_string()],
        vec![" Index".to_string(), meta.index.to_string()],
        vec![" Term".to_string(), meta.term.to_string()],
        vec![" Version".to_string(), meta.version.to_string()],
    ]);
}

/// Sizes as Consul's inspect prints them (`1.7KB`).
fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}
