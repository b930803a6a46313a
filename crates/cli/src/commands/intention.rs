//! `legate intention create|get|delete|check|match|list`, printing what
//! Consul's CLI prints.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use legate_types::intention::Intention;
use reqwest::Method;
use serde_json::json;

use super::{fail, print_columns};
use crate::client::{Client, HttpFlags};

/// Intention subcommands.
#[derive(Subcommand, Debug)]
pub enum IntentionCommand {
    /// Creates an intention from SRC to DST (allow unless -deny).
    Create(CreateArgs),
    /// Shows one intention by SRC DST or by ID.
    Get(TargetArgs),
    /// Deletes one intention by SRC DST or by ID.
    Delete(TargetArgs),
    /// Checks whether SRC may connect to DST (exit 0 allowed, 1 denied).
    Check(TargetArgs),
    /// Lists the intentions matching a source or destination, in evaluation order.
    Match(MatchArgs),
    /// Lists every intention.
    List(ListArgs),
}

/// Flags of `intention create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Allow the connection (the default).
    #[arg(long)]
    allow: bool,
    /// Deny the connection.
    #[arg(long)]
    deny: bool,
    /// Replace an existing intention for the same pair.
    #[arg(long)]
    replace: bool,
    /// Metadata `key=value` (repeatable).
    #[arg(long = "meta")]
    meta: Vec<String>,
    /// Read intentions from the JSON files given as arguments.
    #[arg(long)]
    file: bool,
    /// SRC DST, or files with -file.
    args: Vec<String>,
}

/// SRC DST or ID.
#[derive(Args, Debug)]
pub struct TargetArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// SRC DST, or an intention ID.
    args: Vec<String>,
}

/// Flags of `intention match`.
#[derive(Args, Debug)]
pub struct MatchArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Match by source.
    #[arg(long)]
    source: bool,
    /// Match by destination (the default).
    #[arg(long)]
    destination: bool,
    /// The service name.
    args: Vec<String>,
}

/// Flags of `intention list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    http: HttpFlags,
}

fn exact_query(source: &str, destination: &str) -> Vec<(&'static str, String)> {
    vec![
        ("source", source.to_string()),
        ("destination", destination.to_string()),
    ]
}

async fn create(args: CreateArgs) -> u8 {
    if args.allow && args.deny {
        return fail("Only one of -allow or -deny may be specified.");
    }
    let mut meta = std::collections::BTreeMap::new();
    for kv in &args.meta {
        let Some((k, v)) = kv.split_once('=') else {
            return fail(format!("Error: -meta must be key=value, got {kv:?}"));
        };
        meta.insert(k.to_string(), v.to_string());
    }
    let intentions: Vec<Intention> = if args.file {
        let mut out = Vec::new();
        for path in &args.args {
            let text = match std::fs::read_to_string(PathBuf::from(path)) {
                Ok(t) => t,
                Err(e) => return fail(format!("Error reading {path:?}: {e}")),
            };
            let intention: Intention = match serde_json::from_str::<serde_json::Value>(&text)
                .map(legate_types::keys::canonicalize_keys)
                .and_then(serde_json::from_value)
            {
                Ok(i) => i,
                Err(e) => return fail(format!("Error decoding {path:?}: {e}")),
            };
            if !intention.permissions.is_empty() {
                return fail(format!("Error: cannot create L7 intention from file {path:?} using this CLI; use 'legate config write' instead"));
            }
            out.push(intention);
        }
        out
    } else {
        let [source, destination] = args.args.as_slice() else {
            return fail("Error: Must specify two arguments: source and destination");
        };
        vec![Intention {
            source_name: source.clone(),
            destination_name: destination.clone(),
            source_type: "consul".into(),
            action: if args.deny { "deny" } else { "allow" }.into(),
            meta: meta.clone(),
            ..Default::default()
        }]
    };
    let client = Client::new(&args.http);
    for intention in intentions {
        let summary = intention.summary();
        if args.replace {
            let query = exact_query(&intention.source_name, &intention.destination_name);
            match client
                .get_json::<Intention>("/v1/connect/intentions/exact", &query)
                .await
            {
                Ok(existing) => {
                    let result = if existing.id.is_empty() {
                        // Written as a config entry: replace by name.
                        let body = json!({"Action": intention.action, "Description": intention.description});
                        client
                            .ok(
                                Method::PUT,
                                "/v1/connect/intentions/exact",
                                &query,
                                Some(body.to_string().into_bytes()),
                            )
                            .await
                    } else {
                        let body = serde_json::to_vec(&intention).unwrap_or_default();
                        client
                            .ok(
                                Method::PUT,
                                &format!("/v1/connect/intentions/{}", existing.id),
                                &[],
                                Some(body),
                            )
                            .await
                    };
                    if let Err(e) = result {
                        return fail(format!(
                            "Error replacing intention with source {:?} and destination {:?}: {e}",
                            intention.source_name, intention.destination_name
                        ));
                    }
                    continue;
                }
                Err(e) if e.status == Some(reqwest::StatusCode::NOT_FOUND) => {}
                Err(e) => {
                    return fail(format!(
                        "Error looking up intention for replacement with source {:?} and destination {:?}: {e}",
                        intention.source_name, intention.destination_name
                    ))
                }
            }
        }
        let body = serde_json::to_vec(&intention).unwrap_or_default();
        match client
            .ok(Method::POST, "/v1/connect/intentions", &[], Some(body))
            .await
        {
            Ok(_) => println!("Created: {summary}"),
            Err(e) => return fail(format!("Error creating intention {summary:?}: {e}")),
        }
    }
    0
}

/// Reads the intention named by SRC DST or by ID.
async fn lookup(client: &Client, args: &[String]) -> Result<Intention, String> {
    match args {
        [id] => client
            .get_json::<Intention>(&format!("/v1/connect/intentions/{id}"), &[])
            .await
            .map_err(|e| {
                if e.status == Some(reqwest::StatusCode::NOT_FOUND) {
                    format!("Intention not found with ID {id:?}")
                } else {
                    format!("Error reading the intention: {e}")
                }
            }),
        [source, destination] => client
            .get_json::<Intention>(
                "/v1/connect/intentions/exact",
                &exact_query(source, destination),
            )
            .await
            .map_err(|e| {
                if e.status == Some(reqwest::StatusCode::NOT_FOUND) {
                    format!(
                        "Intention not found with source {source:?} and destination {destination:?}"
                    )
                } else {
                    format!("Error reading the intention: {e}")
                }
            }),
        _ => Err("command requires exactly 1 or 2 arguments".into()),
    }
}

fn print_intention(i: &Intention) {
    let mut rows = vec![
        vec!["Source:".to_string(), i.source_name.clone()],
        vec!["Destination:".to_string(), i.destination_name.clone()],
    ];
    if !i.action.is_empty() {
        rows.push(vec!["Action:".into(), i.action.clone()]);
    }
    if !i.id.is_empty() {
        rows.push(vec!["ID:".into(), i.id.clone()]);
    }
    if !i.description.is_empty() {
        rows.push(vec!["Description:".into(), i.description.clone()]);
    }
    for (k, v) in &i.meta {
        rows.push(vec![format!("Meta[{k}]:"), v.clone()]);
    }
    if let Some(created) = &i.created_at {
        rows.push(vec!["Created At:".into(), created.clone()]);
    }
    print_columns(&rows);
    if !i.permissions.is_empty() {
        println!("Permissions:");
        println!(
            "{}",
            serde_json::to_string_pretty(&i.permissions).unwrap_or_default()
        );
    }
}

/// Runs an intention subcommand.
pub async fn run(cmd: IntentionCommand) -> u8 {
    match cmd {
        IntentionCommand::Create(args) => create(args).await,
        IntentionCommand::Get(args) => {
            let client = Client::new(&args.http);
            match lookup(&client, &args.args).await {
                Ok(i) => {
                    print_intention(&i);
                    0
                }
                Err(e) => fail(e),
            }
        }
        IntentionCommand::Delete(args) => {
            let client = Client::new(&args.http);
            let result = match args.args.as_slice() {
                [id] => {
                    client
                        .ok(
                            Method::DELETE,
                            &format!("/v1/connect/intentions/{id}"),
                            &[],
                            None,
                        )
                        .await
                }
                [source, destination] => {
                    client
                        .ok(
                            Method::DELETE,
                            "/v1/connect/intentions/exact",
                            &exact_query(source, destination),
                            None,
                        )
                        .await
                }
                _ => return fail("command requires exactly 1 or 2 arguments"),
            };
            match result {
                Ok(_) => {
                    println!("Intention deleted.");
                    0
                }
                Err(e) => fail(format!("Error deleting the intention: {e}")),
            }
        }
        IntentionCommand::Check(args) => {
            let [source, destination] = args.args.as_slice() else {
                eprintln!("Error: command requires exactly two arguments: src and dst");
                return 2;
            };
            let client = Client::new(&args.http);
            match client
                .get_json::<serde_json::Value>(
                    "/v1/connect/intentions/check",
                    &exact_query(source, destination),
                )
                .await
            {
                Ok(v) if v["Allowed"] == json!(true) => {
                    println!("Allowed");
                    0
                }
                Ok(_) => {
                    println!("Denied");
                    1
                }
                Err(e) => {
                    eprintln!("Error checking the connection: {e}");
                    2
                }
            }
        }
        IntentionCommand::Match(args) => {
            if args.source && args.destination {
                return fail("Error: only one of -source or -destination may be specified");
            }
            let [name] = args.args.as_slice() else {
                return fail("Error: command requires exactly one argument: src or dst");
            };
            let by = if args.source { "source" } else { "destination" };
            let client = Client::new(&args.http);
            match client
                .get_json::<serde_json::Map<String, serde_json::Value>>(
                    "/v1/connect/intentions/match",
                    &[("by", by.to_string()), ("name", name.clone())],
                )
                .await
            {
                Ok(map) => {
                    let list: Vec<Intention> = map
                        .get(name)
                        .cloned()
                        .and_then(|v| serde_json::from_value(v).ok())
                        .unwrap_or_default();
                    for i in list {
                        println!("{}", i.summary());
                    }
                    0
                }
                Err(e) => fail(format!("Error matching the connection: {e}")),
            }
        }
        IntentionCommand::List(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Vec<Intention>>("/v1/connect/intentions", &[])
                .await
            {
                Ok(list) if list.is_empty() => {
                    eprintln!("There are no intentions.");
                    2
                }
                Ok(list) => {
                    let mut rows = vec![vec![
                        "ID".to_string(),
                        "Source".into(),
                        "Action".into(),
                        "Destination".into(),
                        "Precedence".into(),
                    ]];
                    for i in list {
                        rows.push(vec![
                            i.id,
                            i.source_name,
                            i.action,
                            i.destination_name,
                            i.precedence.to_string(),
                        ]);
                    }
                    print_columns(&rows);
                    0
                }
                Err(e) => fail(format!("Failed to retrieve the intentions list: {e}")),
            }
        }
    }
}
