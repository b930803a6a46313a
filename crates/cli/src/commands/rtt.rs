//! `legate rtt [-wan] node1 [node2]`: the round trip between two nodes
//! estimated from their network coordinates, as Consul prints it.

use clap::Args;
use legate_types::coordinate::{CoordinateEntry, DatacenterCoordinates};
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};

/// Flags of `rtt`.
#[derive(Args, Debug)]
pub struct RttArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Use WAN coordinates (servers, named `<node>.<datacenter>`).
    #[arg(long)]
    wan: bool,
    /// The nodes (the second defaults to this agent).
    nodes: Vec<String>,
}

/// Runs `rtt`.
pub async fn rtt(args: RttArgs) -> u8 {
    if args.nodes.is_empty() || args.nodes.len() > 2 {
        return fail("One or two node names must be specified");
    }
    let client = Client::new(&args.http);
    let mut nodes = args.nodes.clone();
    if nodes.len() == 1 {
        let own: Value = match client.get_json("/v1/agent/self", &[]).await {
            Ok(v) => v,
            Err(e) => return fail(format!("Unable to look up agent info: {e}")),
        };
        let name = own["Config"]["NodeName"].as_str().unwrap_or("").to_string();
        let dc = own["Config"]["Datacenter"].as_str().unwrap_or("");
        nodes.push(if args.wan {
            format!("{name}.{dc}")
        } else {
            name
        });
    }
    let (found, source) = if args.wan {
        if nodes.iter().any(|n| n.split('.').count() != 2) {
            return fail("Node names must be specified as <node name>.<datacenter> with -wan");
        }
        let dcs: Vec<DatacenterCoordinates> =
            match client.get_json("/v1/coordinate/datacenters", &[]).await {
                Ok(v) => v,
                Err(e) => return fail(format!("Error getting coordinates: {e}")),
            };
        (
            dcs.into_iter()
                .flat_map(|d| d.coordinates)
                .collect::<Vec<_>>(),
            "WAN",
        )
    } else {
        let all: Vec<CoordinateEntry> = match client.get_json("/v1/coordinate/nodes", &[]).await {
            Ok(v) => v,
            Err(e) => return fail(format!("Error getting coordinates: {e}")),
        };
        (all, "LAN")
    };
    let find = |name: &str| found.iter().find(|e| e.node == name).map(|e| &e.coord);
    let Some(a) = find(&nodes[0]) else {
        return fail(format!(
            "Could not find a coordinate for node {:?}",
            nodes[0]
        ));
    };
    let Some(b) = find(&nodes[1]) else {
        return fail(format!(
            "Could not find a coordinate for node {:?}",
            nodes[1]
        ));
    };
    println!(
        "Estimated {} <-> {} rtt: {:.3} ms (using {source} coordinates)",
        nodes[0],
        nodes[1],
        a.distance_to(b).as_secs_f64() * 1000.0
    );
    0
}
