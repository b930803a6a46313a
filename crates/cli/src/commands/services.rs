//! `legate services register|deregister`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use super::fail;
use crate::client::{Client, HttpFlags};

/// Services subcommands.
#[derive(Subcommand, Debug)]
pub enum ServicesCommand {
    /// Registers services from files or flags.
    Register(RegisterArgs),
    /// Deregisters services by id or from files.
    Deregister(DeregisterArgs),
}

/// Flags of `services register`.
#[derive(Args, Debug)]
pub struct RegisterArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Service name.
    #[arg(long)]
    name: Option<String>,
    /// Service id.
    #[arg(long)]
    id: Option<String>,
    /// Service address.
    #[arg(long)]
    address: Option<String>,
    /// Service port.
    #[arg(long)]
    port: Option<u16>,
    /// A tag; repeatable.
    #[arg(long)]
    tag: Vec<String>,
    /// Metadata `key=value`; repeatable.
    #[arg(long)]
    meta: Vec<String>,
    /// Service definition files (HCL or JSON).
    files: Vec<PathBuf>,
}

/// Flags of `services deregister`.
#[derive(Args, Debug)]
pub struct DeregisterArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Service id.
    #[arg(long)]
    id: Option<String>,
    /// Service definition files.
    files: Vec<PathBuf>,
}

/// Service definitions in a file: `service {}` or `services [...]`.
fn definitions_in(path: &std::path::Path) -> Result<Vec<Value>, String> {
    let value = legate_agent::config::parse_file(path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let Value::Object(map) = value else {
        return Err(format!("{}: expected an object", path.display()));
    };
    for (key, value) in map {
        match key.as_str() {
            "service" | "services" | "Service" | "Services" => match value {
                Value::Array(items) => out.extend(items),
                other => out.push(other),
            },
            other => {
                return Err(format!(
                    "{}: unexpected key {other:?}; expected service or services",
                    path.display()
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(format!("{}: no service definitions", path.display()));
    }
    Ok(out)
}

/// Runs a services subcommand.
pub async fn run(cmd: ServicesCommand) -> u8 {
    match cmd {
        ServicesCommand::Register(args) => {
            let client = Client::new(&args.http);
            let definitions = if args.files.is_empty() {
                let Some(name) = &args.name else {
                    return fail("Service name (-name) or a definition file is required");
                };
                let mut meta = serde_json::Map::new();
                for pair in &args.meta {
                    match pair.split_once('=') {
                        Some((k, v)) => {
                            meta.insert(k.to_string(), json!(v));
                        }
                        None => return fail(format!("Invalid -meta {pair:?}: expected key=value")),
                    }
                }
                vec![json!({
                    "Name": name,
                    "ID": args.id.clone().unwrap_or_default(),
                    "Address": args.address.clone().unwrap_or_default(),
                    "Port": args.port.unwrap_or(0),
                    "Tags": args.tag,
                    "Meta": meta,
                })]
            } else {
                if args.name.is_some() || args.id.is_some() {
                    return fail("Flags and definition files cannot be used together");
                }
                let mut all = Vec::new();
                for path in &args.files {
                    match definitions_in(path) {
                        Ok(defs) => all.extend(defs),
                        Err(e) => return fail(format!("Error parsing service definition: {e}")),
                    }
                }
                all
            };
            for def in definitions {
                let name = def
                    .get("Name")
                    .or_else(|| def.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let body = serde_json::to_vec(&def).unwrap_or_default();
                if let Err(e) = client
                    .ok(Method::PUT, "/v1/agent/service/register", &[], Some(body))
                    .await
                {
                    return fail(format!("Error registering service {name:?}: {e}"));
                }
                println!("Registered service: {name}");
            }
            0
        }
        ServicesCommand::Deregister(args) => {
            let client = Client::new(&args.http);
            let ids: Vec<String> = match (&args.id, args.files.is_empty()) {
                (Some(_), false) => {
                    return fail("Only one of -id or a definition file may be given")
                }
                (Some(id), true) => vec![id.clone()],
                (None, true) => return fail("Service id (-id) or a definition file is required"),
                (None, false) => {
                    let mut ids = Vec::new();
                    for path in &args.files {
                        match definitions_in(path) {
                            Ok(defs) => {
                                for def in defs {
                                    let get = |k: &str| {
                                        def.get(k).and_then(Value::as_str).map(String::from)
                                    };
                                    let id = get("ID")
                                        .or(get("id"))
                                        .or(get("Name"))
                                        .or(get("name"))
                                        .unwrap_or_default();
                                    ids.push(id);
                                }
                            }
                            Err(e) => {
                                return fail(format!("Error parsing service definition: {e}"))
                            }
                        }
                    }
                    ids
                }
            };
            for id in ids {
                if let Err(e) = client
                    .ok(
                        Method::PUT,
                        &format!("/v1/agent/service/deregister/{id}"),
                        &[],
                        None,
                    )
                    .await
                {
                    return fail(format!("Error deregistering service {id:?}: {e}"));
                }
                println!("Deregistered service: {id}");
            }
            0
        }
    }
}
