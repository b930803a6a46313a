//! `legate config write|read|list|delete`.

use std::io::Read;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};

/// Config subcommands.
#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Creates or updates a config entry from a file (HCL or JSON) or `-`.
    Write(WriteArgs),
    /// Prints one config entry as JSON.
    Read(EntryArgs),
    /// Lists the names of the entries of one kind.
    List(ListArgs),
    /// Deletes a config entry.
    Delete(DeleteArgs),
}

/// Flags of `config write`.
#[derive(Args, Debug)]
pub struct WriteArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Check-and-set against -modify-index.
    #[arg(long)]
    cas: bool,
    /// The expected modify index for -cas (0: only create).
    #[arg(long = "modify-index", default_value_t = 0)]
    modify_index: u64,
    /// The file, or `-` for stdin.
    file: Option<String>,
}

/// Flags naming one entry.
#[derive(Args, Debug)]
pub struct EntryArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The entry's kind.
    #[arg(long)]
    kind: Option<String>,
    /// The entry's name.
    #[arg(long)]
    name: Option<String>,
}

/// Flags of `config list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The kind to list.
    #[arg(long)]
    kind: Option<String>,
    /// A filter expression.
    #[arg(long)]
    filter: Option<String>,
}

/// Flags of `config delete`.
#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The entry's kind.
    #[arg(long)]
    kind: Option<String>,
    /// The entry's name.
    #[arg(long)]
    name: Option<String>,
    /// Read kind and name from this file instead.
    #[arg(long)]
    filename: Option<PathBuf>,
    /// Check-and-set against -modify-index.
    #[arg(long)]
    cas: bool,
    /// The expected modify index for -cas.
    #[arg(long = "modify-index", default_value_t = 0)]
    modify_index: u64,
}

/// Reads an entry file: JSON when it parses as JSON, else HCL.
fn read_entry(source: &str) -> Result<Value, String> {
    let text = if source == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        text
    } else {
        std::fs::read_to_string(source).map_err(|e| format!("Failed to read file {source}: {e}"))?
    };
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        return Ok(value);
    }
    legate_hcl::parse(&text)
        .map_err(|e| format!("Failed to decode config entry input: {source}: {e}"))
}

fn kind_and_name(value: &Value) -> (String, String) {
    let get = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| value.get(*k).and_then(Value::as_str))
            .unwrap_or("")
            .to_string()
    };
    (get(&["Kind", "kind"]), get(&["Name", "name"]))
}

/// Runs a config subcommand.
pub async fn run(cmd: ConfigCommand) -> u8 {
    match cmd {
        ConfigCommand::Write(args) => {
            let Some(file) = args.file.as_deref() else {
                return fail("Must provide exactly one positional argument to specify the config entry to write");
            };
            let value = match read_entry(file) {
                Ok(v) => v,
                Err(e) => return fail(e),
            };
            let (kind, name) = kind_and_name(&value);
            let client = Client::new(&args.http);
            let query: Vec<(&str, String)> = if args.cas {
                vec![("cas", args.modify_index.to_string())]
            } else {
                vec![]
            };
            let body = serde_json::to_vec(&value).unwrap_or_default();
            match client
                .ok(Method::PUT, "/v1/config", &query, Some(body))
                .await
            {
                Err(e) => fail(format!("Error writing config entry {kind}/{name}: {e}")),
                Ok(body) if body.as_slice() == b"true" => {
                    println!("Config entry written: {kind}/{name}");
                    0
                }
                Ok(_) => fail(format!("Config entry not updated: {kind}/{name}")),
            }
        }
        ConfigCommand::Read(args) => {
            let (Some(kind), Some(name)) = (args.kind.as_deref(), args.name.as_deref()) else {
                return fail("Must specify the -kind and -name parameters");
            };
            let client = Client::new(&args.http);
            match client
                .get_json::<Value>(&format!("/v1/config/{kind}/{name}"), &[])
                .await
            {
                Ok(entry) => {
                    println!("{}", pretty4(&entry));
                    0
                }
                Err(e) => fail(format!("Error reading config entry {kind}/{name}: {e}")),
            }
        }
        ConfigCommand::List(args) => {
            let Some(kind) = args.kind.as_deref() else {
                return fail("Must specify the -kind parameter");
            };
            let client = Client::new(&args.http);
            let query: Vec<(&str, String)> =
                args.filter.iter().map(|f| ("filter", f.clone())).collect();
            match client
                .get_json::<Vec<Value>>(&format!("/v1/config/{kind}"), &query)
                .await
            {
                Ok(entries) => {
                    for entry in entries {
                        println!("{}", entry["Name"].as_str().unwrap_or(""));
                    }
                    0
                }
                Err(e) => fail(format!(
                    "Error listing config entries for kind {kind:?}: {e}"
                )),
            }
        }
        ConfigCommand::Delete(args) => {
            let (kind, name) = match (&args.filename, &args.kind, &args.name) {
                (Some(file), None, None) => match read_entry(&file.display().to_string()) {
                    Ok(v) => kind_and_name(&v),
                    Err(e) => return fail(e),
                },
                (None, Some(kind), Some(name)) => (kind.clone(), name.clone()),
                (Some(_), _, _) => return fail("filename can't be used with kind or name"),
                _ => return fail("Must specify the -kind and -name parameters, or -filename"),
            };
            let client = Client::new(&args.http);
            let query: Vec<(&str, String)> = if args.cas {
                vec![("cas", args.modify_index.to_string())]
            } else {
                vec![]
            };
            match client
                .ok(
                    Method::DELETE,
                    &format!("/v1/config/{kind}/{name}"),
                    &query,
                    None,
                )
                .await
            {
                Err(e) => fail(format!("Error deleting config entry {kind}/{name}: {e}")),
                Ok(body) if body.as_slice() == b"true" => {
                    println!("Config entry deleted: {kind}/{name}");
                    0
                }
                Ok(_) => fail(format!("Config entry not deleted: {kind}/{name}")),
            }
        }
    }
}

/// JSON indented with four spaces, as Consul's CLI prints entries.
fn pretty4(value: &Value) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    if serde::Serialize::serialize(value, &mut serializer).is_err() {
        return value.to_string();
    }
    String::from_utf8(out).unwrap_or_default()
}
