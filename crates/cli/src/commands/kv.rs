//! `legate kv get|put|delete|export|import`, with Consul's output.

use std::io::Read;

use base64::Engine;
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};

/// KV subcommands.
#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Reads a key (or a prefix with -recurse / -keys).
    Get(GetArgs),
    /// Writes a key.
    Put(PutArgs),
    /// Deletes a key (or a prefix with -recurse).
    Delete(DeleteArgs),
    /// Exports a prefix as JSON.
    Export(ExportArgs),
    /// Imports JSON produced by export.
    Import(ImportArgs),
}

/// Flags of `kv get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Print values base64-encoded.
    #[arg(long)]
    base64: bool,
    /// Print every field.
    #[arg(long)]
    detailed: bool,
    /// List keys only.
    #[arg(long)]
    keys: bool,
    /// Read every key under the prefix.
    #[arg(long)]
    recurse: bool,
    /// Separator for -keys.
    #[arg(long, default_value = "/")]
    separator: String,
    /// The key or prefix.
    key: Option<String>,
}

/// Flags of `kv put`.
#[derive(Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Acquire a lock with -session.
    #[arg(long)]
    acquire: bool,
    /// Release a lock held by -session.
    #[arg(long)]
    release: bool,
    /// The session for -acquire / -release.
    #[arg(long)]
    session: Option<String>,
    /// The data is base64-encoded.
    #[arg(long)]
    base64: bool,
    /// Check-and-set against -modify-index.
    #[arg(long)]
    cas: bool,
    /// The expected modify index for -cas.
    #[arg(long = "modify-index", default_value_t = 0)]
    modify_index: u64,
    /// Opaque flags.
    #[arg(long, default_value_t = 0)]
    flags: u64,
    /// The key.
    key: Option<String>,
    /// The data: a value, `-` for stdin, or `@file`.
    data: Option<String>,
}

/// Flags of `kv delete`.
#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Check-and-set against -modify-index.
    #[arg(long)]
    cas: bool,
    /// The expected modify index for -cas.
    #[arg(long = "modify-index", default_value_t = 0)]
    modify_index: u64,
    /// Delete every key under the prefix.
    #[arg(long)]
    recurse: bool,
    /// The key or prefix.
    key: Option<String>,
}

/// Flags of `kv export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The prefix to export.
    prefix: Option<String>,
}

/// Flags of `kv import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Prefix prepended to every imported key.
    #[arg(long)]
    prefix: Option<String>,
    /// The data: JSON, `-` for stdin, or `@file`.
    data: Option<String>,
}

/// One exported entry.
#[derive(Debug, Serialize, Deserialize)]
struct ExportedEntry {
    key: String,
    flags: u64,
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    key: String,
    #[serde(default)]
    flags: u64,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    session: String,
    #[serde(default)]
    lock_index: u64,
    #[serde(default)]
    create_index: u64,
    #[serde(default)]
    modify_index: u64,
}

fn decode_value(entry: &Entry) -> Vec<u8> {
    entry
        .value
        .as_deref()
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .unwrap_or_default()
}

fn read_data(data: &str) -> Result<Vec<u8>, String> {
    if data == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        return Ok(buf);
    }
    if let Some(path) = data.strip_prefix('@') {
        return std::fs::read(path).map_err(|e| format!("Failed to read file {path}: {e}"));
    }
    Ok(data.as_bytes().to_vec())
}

fn print_value(bytes: &[u8], base64: bool) -> String {
    if base64 {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// Runs a KV subcommand.
pub async fn run(cmd: KvCommand) -> u8 {
    match cmd {
        KvCommand::Get(args) => get(args).await,
        KvCommand::Put(args) => put(args).await,
        KvCommand::Delete(args) => delete(args).await,
        KvCommand::Export(args) => export(args).await,
        KvCommand::Import(args) => import(args).await,
    }
}

async fn get(args: GetArgs) -> u8 {
    let client = Client::new(&args.http);
    let key = args.key.clone().unwrap_or_default();
    if key.is_empty() && !args.recurse && !args.keys {
        return fail("Error! Missing KEY argument");
    }
    let path = format!("/v1/kv/{}", key.trim_start_matches('/'));
    if args.keys {
        let query = vec![
            ("keys", String::new()),
            ("separator", args.separator.clone()),
        ];
        return match client.call(Method::GET, &path, &query, None).await {
            Ok((StatusCode::NOT_FOUND, _)) => 0,
            Ok((status, body)) if status.is_success() => {
                let keys: Vec<String> = serde_json::from_slice(&body).unwrap_or_default();
                for k in keys {
                    println!("{k}");
                }
                0
            }
            Ok((status, body)) => fail(format!(
                "Error querying Consul agent: Unexpected response code: {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            )),
            Err(e) => fail(format!("Error querying Consul agent: {e}")),
        };
    }
    let query: Vec<(&str, String)> = if args.recurse {
        vec![("recurse", String::new())]
    } else {
        vec![]
    };
    let entries: Vec<Entry> = match client.call(Method::GET, &path, &query, None).await {
        Ok((StatusCode::NOT_FOUND, _)) => {
            if args.recurse {
                return 0;
            }
            return fail(format!("Error! No key exists at: {key}"));
        }
        Ok((status, body)) if status.is_success() => match serde_json::from_slice(&body) {
            Ok(e) => e,
            Err(e) => return fail(format!("Error decoding the answer: {e}")),
        },
        Ok((status, body)) => {
            return fail(format!(
                "Error querying Consul agent: Unexpected response code: {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            ))
        }
        Err(e) => return fail(format!("Error querying Consul agent: {e}")),
    };
    for (i, entry) in entries.iter().enumerate() {
        let value = decode_value(entry);
        if args.detailed {
            if i > 0 {
                println!();
            }
            let rows = vec![
                vec!["CreateIndex".to_string(), entry.create_index.to_string()],
                vec!["Flags".to_string(), entry.flags.to_string()],
                vec!["Key".to_string(), entry.key.clone()],
                vec!["LockIndex".to_string(), entry.lock_index.to_string()],
                vec!["ModifyIndex".to_string(), entry.modify_index.to_string()],
                vec![
                    "Session".to_string(),
                    if entry.session.is_empty() {
                        "-".to_string()
                    } else {
                        entry.session.clone()
                    },
                ],
                vec!["Value".to_string(), print_value(&value, args.base64)],
            ];
            super::print_columns(&rows);
        } else if args.recurse {
            println!("{}:{}", entry.key, print_value(&value, args.base64));
        } else {
            println!("{}", print_value(&value, args.base64));
        }
    }
    0
}

async fn put(args: PutArgs) -> u8 {
    let client = Client::new(&args.http);
    let Some(key) = args.key.clone().filter(|k| !k.is_empty()) else {
        return fail("Error! Missing KEY argument");
    };
    let mut data = match args.data.as_deref() {
        None => Vec::new(),
        Some(d) => match read_data(d) {
            Ok(bytes) => bytes,
            Err(e) => return fail(format!("Error! {e}")),
        },
    };
    if args.base64 {
        match base64::engine::general_purpose::STANDARD.decode(&data) {
            Ok(decoded) => data = decoded,
            Err(e) => return fail(format!("Error! Cannot base 64 decode data: {e}")),
        }
    }
    if (args.acquire || args.release) && args.session.is_none() {
        return fail("Error! Missing -session (required with -acquire and -release)");
    }
    let mut query: Vec<(&str, String)> = Vec::new();
    if args.flags != 0 {
        query.push(("flags", args.flags.to_string()));
    }
    if args.cas {
        query.push(("cas", args.modify_index.to_string()));
    }
    if args.acquire {
        query.push(("acquire", args.session.clone().unwrap_or_default()));
    }
    if args.release {
        query.push(("release", args.session.clone().unwrap_or_default()));
    }
    let path = format!("/v1/kv/{}", key.trim_start_matches('/'));
    match client.ok(Method::PUT, &path, &query, Some(data)).await {
        Err(e) => fail(format!("Error! Failed writing data: {e}")),
        Ok(body) => {
            let applied: bool = serde_json::from_slice(&body).unwrap_or(false);
            if applied {
                if args.acquire {
                    println!("Success! Lock acquired on: {key}");
                } else if args.release {
                    println!("Success! Lock released on: {key}");
                } else {
                    println!("Success! Data written to: {key}");
                }
                0
            } else if args.cas {
                fail(format!("Error! Did not write to {key}: CAS failed"))
            } else if args.acquire {
                fail(format!(
                    "Error! Did not write to {key}: lock acquisition failed"
                ))
            } else {
                fail(format!("Error! Did not write to {key}"))
            }
        }
    }
}

async fn delete(args: DeleteArgs) -> u8 {
    let client = Client::new(&args.http);
    let key = args.key.clone().unwrap_or_default();
    if key.is_empty() && !args.recurse {
        return fail("Error! Missing KEY argument");
    }
    if args.cas && args.recurse {
        return fail("Cannot specify both -cas and -recurse!");
    }
    let mut query: Vec<(&str, String)> = Vec::new();
    if args.recurse {
        query.push(("recurse", String::new()));
    }
    if args.cas {
        query.push(("cas", args.modify_index.to_string()));
    }
    let path = format!("/v1/kv/{}", key.trim_start_matches('/'));
    match client.ok(Method::DELETE, &path, &query, None).await {
        Err(e) => fail(format!("Error! Did not delete key {key}: {e}")),
        Ok(body) => {
            let applied: bool = serde_json::from_slice(&body).unwrap_or(false);
            if !applied {
                return fail(format!("Error! Did not delete key {key}: CAS failed"));
            }
            if args.recurse {
                println!("Success! Deleted keys with prefix: {key}");
            } else {
                println!("Success! Deleted key: {key}");
            }
            0
        }
    }
}

async fn export(args: ExportArgs) -> u8 {
    let client = Client::new(&args.http);
    let prefix = args.prefix.clone().unwrap_or_default();
    let path = format!("/v1/kv/{}", prefix.trim_start_matches('/'));
    let entries: Vec<Entry> = match client
        .call(Method::GET, &path, &[("recurse", String::new())], None)
        .await
    {
        Ok((StatusCode::NOT_FOUND, _)) => Vec::new(),
        Ok((status, body)) if status.is_success() => {
            serde_json::from_slice(&body).unwrap_or_default()
        }
        Ok((status, body)) => {
            return fail(format!(
                "Error querying Consul agent: Unexpected response code: {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(&body)
            ))
        }
        Err(e) => return fail(format!("Error querying Consul agent: {e}")),
    };
    let exported: Vec<ExportedEntry> = entries
        .into_iter()
        .map(|e| ExportedEntry {
            key: e.key,
            flags: e.flags,
            value: e.value.unwrap_or_default(),
        })
        .collect();
    match serde_json::to_string_pretty(&exported) {
        Ok(text) => {
            println!("{}", text.replace("  ", "\t"));
            0
        }
        Err(e) => fail(format!("Error exporting: {e}")),
    }
}

async fn import(args: ImportArgs) -> u8 {
    let client = Client::new(&args.http);
    let data = match args.data.as_deref() {
        None => return fail("Error! Missing DATA argument"),
        Some(d) => match read_data(d) {
            Ok(bytes) => bytes,
            Err(e) => return fail(format!("Error! {e}")),
        },
    };
    let entries: Vec<Value> = match serde_json::from_slice(&data) {
        Ok(v) => v,
        Err(e) => return fail(format!("Cannot unmarshal data: {e}")),
    };
    for (i, entry) in entries.into_iter().enumerate() {
        let parsed: ExportedEntry = match serde_json::from_value(entry) {
            Ok(e) => e,
            Err(e) => return fail(format!("Error! Entry {i} is not a valid export entry: {e}")),
        };
        let value = match base64::engine::general_purpose::STANDARD.decode(&parsed.value) {
            Ok(v) => v,
            Err(e) => {
                return fail(format!(
                    "Error! Cannot base 64 decode the value of {}: {e}",
                    parsed.key
                ))
            }
        };
        let key = format!("{}{}", args.prefix.clone().unwrap_or_default(), parsed.key);
        let mut query: Vec<(&str, String)> = Vec::new();
        if parsed.flags != 0 {
            query.push(("flags", parsed.flags.to_string()));
        }
        if let Err(e) = client
            .ok(
                Method::PUT,
                &format!("/v1/kv/{}", key.trim_start_matches('/')),
                &query,
                Some(value),
            )
            .await
        {
            return fail(format!("Error! Failed writing data for key {key}: {e}"));
        }
        println!("Imported: {key}");
    }
    0
}
