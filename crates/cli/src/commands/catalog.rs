//! `legate catalog datacenters|nodes|services`.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::{fail, print_columns};
use crate::client::{Client, HttpFlags};

/// Catalog subcommands.
#[derive(Subcommand, Debug)]
pub enum CatalogCommand {
    /// Lists the known datacenters.
    Datacenters(DatacentersArgs),
    /// Lists the nodes.
    Nodes(NodesArgs),
    /// Lists the services.
    Services(ServicesArgs),
}

/// Flags of `catalog datacenters`.
#[derive(Args, Debug)]
pub struct DatacentersArgs {
    #[command(flatten)]
    http: HttpFlags,
}

/// Flags of `catalog nodes`.
#[derive(Args, Debug)]
pub struct NodesArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Show more columns.
    #[arg(long)]
    detailed: bool,
    /// Only nodes running this service.
    #[arg(long)]
    service: Option<String>,
    /// A filter expression.
    #[arg(long)]
    filter: Option<String>,
    /// Sort by estimated round trip from this node (`_agent`: this agent).
    #[arg(long)]
    near: Option<String>,
    /// Only nodes with this metadata (`key=value`; repeatable).
    #[arg(long = "node-meta")]
    node_meta: Vec<String>,
}

/// Flags of `catalog services`.
#[derive(Args, Debug)]
pub struct ServicesArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Only services on this node.
    #[arg(long)]
    node: Option<String>,
    /// Show tags.
    #[arg(long)]
    tags: bool,
    /// Only services on nodes with this metadata (`key=value`; repeatable).
    #[arg(long = "node-meta")]
    node_meta: Vec<String>,
}

/// Runs a catalog subcommand.
pub async fn run(cmd: CatalogCommand) -> u8 {
    match cmd {
        CatalogCommand::Datacenters(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Vec<String>>("/v1/catalog/datacenters", &[])
                .await
            {
                Ok(dcs) if dcs.is_empty() => fail("No datacenters found"),
                Ok(dcs) => {
                    for dc in dcs {
                        println!("{dc}");
                    }
                    0
                }
                Err(e) => fail(format!("Error listing datacenters: {e}")),
            }
        }
        CatalogCommand::Nodes(args) => {
            let client = Client::new(&args.http);
            let mut query = Vec::new();
            if let Some(f) = &args.filter {
                query.push(("filter", f.clone()));
            }
            if let Some(near) = &args.near {
                query.push(("near", near.clone()));
            }
            for meta in &args.node_meta {
                query.push(("node-meta", meta_param(meta)));
            }
            let nodes: Vec<Value> = match &args.service {
                Some(service) => match client
                    .get_json::<Vec<Value>>(&format!("/v1/catalog/service/{service}"), &query)
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) => return fail(format!("Error listing nodes for service: {e}")),
                },
                None => match client.get_json("/v1/catalog/nodes", &query).await {
                    Ok(rows) => rows,
                    Err(e) => return fail(format!("Error listing nodes: {e}")),
                },
            };
            if nodes.is_empty() {
                return fail("No nodes match the given query - try expanding your search.");
            }
            let mut rows = vec![vec![
                "Node".to_string(),
                "ID".to_string(),
                "Address".to_string(),
                "DC".to_string(),
            ]];
            if args.detailed {
                rows[0].push("TaggedAddresses".into());
                rows[0].push("Meta".into());
            }
            for n in &nodes {
                let id = n["ID"].as_str().unwrap_or("");
                let mut row = vec![
                    n["Node"].as_str().unwrap_or("").to_string(),
                    if args.detailed {
                        id.to_string()
                    } else {
                        id.chars().take(8).collect()
                    },
                    n["Address"].as_str().unwrap_or("").to_string(),
                    n["Datacenter"].as_str().unwrap_or("").to_string(),
                ];
                if args.detailed {
                    row.push(join_map(&n["TaggedAddresses"]));
                    row.push(join_map(
                        n.get("Meta").or(n.get("NodeMeta")).unwrap_or(&Value::Null),
                    ));
                }
                rows.push(row);
            }
            print_columns(&rows);
            0
        }
        CatalogCommand::Services(args) => {
            let client = Client::new(&args.http);
            let services: BTreeMap<String, Vec<String>> = match &args.node {
                Some(node) => match client
                    .get_json::<Value>(&format!("/v1/catalog/node/{node}"), &[])
                    .await
                {
                    Ok(v) => v["Services"]
                        .as_object()
                        .map(|m| {
                            m.values()
                                .map(|s| {
                                    let tags = s["Tags"]
                                        .as_array()
                                        .map(|t| {
                                            t.iter()
                                                .filter_map(|x| x.as_str().map(String::from))
                                                .collect()
                                        })
                                        .unwrap_or_default();
                                    (s["Service"].as_str().unwrap_or("").to_string(), tags)
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    Err(e) => return fail(format!("Error listing services for node: {e}")),
                },
                None => match client
                    .get_json(
                        "/v1/catalog/services",
                        &args
                            .node_meta
                            .iter()
                            .map(|m| ("node-meta", meta_param(m)))
                            .collect::<Vec<_>>(),
                    )
                    .await
                {
                    Ok(s) => s,
                    Err(e) => return fail(format!("Error listing services: {e}")),
                },
            };
            if services.is_empty() {
                return fail("No services match the given query - try expanding your search.");
            }
            if args.tags {
                let rows: Vec<Vec<String>> = services
                    .iter()
                    .map(|(n, t)| vec![n.clone(), t.join(",")])
                    .collect();
                print_columns(&rows);
            } else {
                for name in services.keys() {
                    println!("{name}");
                }
            }
            0
        }
    }
}

/// A `-node-meta key=value` flag as the API's `node-meta=key:value`.
fn meta_param(flag: &str) -> String {
    match flag.split_once('=') {
        Some((k, v)) => format!("{k}:{v}"),
        None => flag.to_string(),
    }
}

fn join_map(value: &Value) -> String {
    value
        .as_object()
        .map(|m| {
            let mut pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            pairs.sort();
            pairs.join(", ")
        })
        .unwrap_or_default()
}
