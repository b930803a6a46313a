//! Cluster commands: `operator raft list-peers|remove-peer`, `join`,
//! `force-leave`, `keygen`, `keyring`.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::{fail, print_columns};
use crate::client::{Client, HttpFlags};

/// `operator` subcommands.
#[derive(Subcommand, Debug)]
pub enum OperatorCommand {
    /// Raft operations.
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Autopilot settings.
    #[command(subcommand)]
    Autopilot(AutopilotCommand),
}

/// `operator autopilot` subcommands.
#[derive(Subcommand, Debug)]
pub enum AutopilotCommand {
    /// Prints the settings autopilot runs with.
    #[command(name = "get-config")]
    GetConfig(ListPeersArgs),
    /// Changes autopilot's settings (check-and-set on the current ones).
    #[command(name = "set-config")]
    SetConfig(SetConfigArgs),
}

/// Flags of `operator autopilot set-config`: each one given replaces that
/// setting; the others keep their current value.
#[derive(Args, Debug)]
pub struct SetConfigArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Remove dead servers when a new one joins (`true|false`).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    cleanup_dead_servers: Option<bool>,
    /// Entries a server may trail the leader by and stay healthy.
    #[arg(long)]
    max_trailing_logs: Option<u64>,
    /// Voters dead-server cleanup never goes below.
    #[arg(long)]
    min_quorum: Option<usize>,
    /// How long a server may go without contact and stay healthy (`200ms`).
    #[arg(long)]
    last_contact_threshold: Option<String>,
    /// How long a new server must be healthy before it votes (`10s`).
    #[arg(long)]
    server_stabilization_time: Option<String>,
    /// Enterprise (redundancy zones); kept, never acted on.
    #[arg(long)]
    redundancy_zone_tag: Option<String>,
    /// Enterprise (upgrade migrations); kept, never acted on.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    disable_upgrade_migration: Option<bool>,
    /// Enterprise (upgrade migrations); kept, never acted on.
    #[arg(long)]
    upgrade_version_tag: Option<String>,
}

/// `operator raft` subcommands.
#[derive(Subcommand, Debug)]
pub enum RaftCommand {
    /// Lists the Raft peers.
    #[command(name = "list-peers")]
    ListPeers(ListPeersArgs),
    /// Removes a server from the Raft configuration.
    #[command(name = "remove-peer")]
    RemovePeer(RemovePeerArgs),
    /// Hands Raft leadership to another server (`-id`, else the most
    /// caught-up voter).
    #[command(name = "transfer-leader")]
    TransferLeader(TransferLeaderArgs),
}

/// Flags of `operator raft transfer-leader`.
#[derive(Args, Debug)]
pub struct TransferLeaderArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The server to hand leadership to.
    #[arg(long)]
    id: Option<String>,
}

/// Flags of `operator raft remove-peer`.
#[derive(Args, Debug)]
pub struct RemovePeerArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The server's `IP:port` (server port).
    #[arg(long)]
    address: Option<String>,
    /// The server's node ID.
    #[arg(long)]
    id: Option<String>,
}

/// Flags of `operator raft list-peers`.
#[derive(Args, Debug)]
pub struct ListPeersArgs {
    #[command(flatten)]
    http: HttpFlags,
}

/// Flags of `join`.
#[derive(Args, Debug)]
pub struct JoinArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Join the WAN pool (servers of other datacenters; servers only).
    #[arg(long)]
    wan: bool,
    /// Addresses of members to contact.
    addresses: Vec<String>,
}

/// Flags of `keyring`: exactly one action.
#[derive(Args, Debug)]
pub struct KeyringArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// List the installed keys and how many members hold each.
    #[arg(long)]
    list: bool,
    /// Install a key on every member.
    #[arg(long)]
    install: Option<String>,
    /// Make an installed key the primary (encrypting) key everywhere.
    #[arg(long = "use")]
    use_key: Option<String>,
    /// Remove a key (not the primary one) from every member.
    #[arg(long)]
    remove: Option<String>,
}

/// Runs `keyring`.
pub async fn keyring(args: KeyringArgs) -> u8 {
    let actions = [
        args.list,
        args.install.is_some(),
        args.use_key.is_some(),
        args.remove.is_some(),
    ]
    .iter()
    .filter(|a| **a)
    .count();
    if actions != 1 {
        return fail("Exactly one of -list, -install, -use, or -remove is required");
    }
    let client = Client::new(&args.http);
    if args.list {
        println!("==> Gathering installed encryption keys...");
        let pools: Value = match client.get_json("/v1/operator/keyring", &[]).await {
            Ok(v) => v,
            Err(e) => return fail(format!("Error: {e}")),
        };
        for pool in pools.as_array().into_iter().flatten() {
            let total = pool["NumNodes"].as_u64().unwrap_or(0);
            println!();
            if pool["WAN"].as_bool() == Some(true) {
                println!("WAN:");
            } else {
                println!("{} (LAN):", pool["Datacenter"].as_str().unwrap_or(""));
            }
            for (key, count) in pool["Keys"].as_object().into_iter().flatten() {
                println!("  {key} [{}/{total}]", count.as_u64().unwrap_or(0));
            }
        }
        return 0;
    }
    let (banner, method, key) = if let Some(key) = args.install {
        (
            "==> Installing new gossip encryption key...",
            Method::POST,
            key,
        )
    } else if let Some(key) = args.use_key {
        (
            "==> Changing primary gossip encryption key...",
            Method::PUT,
            key,
        )
    } else {
        let key = args.remove.unwrap_or_default();
        ("==> Removing gossip encryption key...", Method::DELETE, key)
    };
    println!("{banner}");
    let body = serde_json::json!({ "Key": key }).to_string().into_bytes();
    match client
        .ok(method, "/v1/operator/keyring", &[], Some(body))
        .await
    {
        Ok(_) => 0,
        Err(e) => fail(format!("Error: {e}")),
    }
}

/// Flags of `force-leave`.
#[derive(Args, Debug)]
pub struct ForceLeaveArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Remove the node from the member list altogether.
    #[arg(long)]
    prune: bool,
    /// The node is a member of the WAN pool (`<node>.<dc>`).
    #[arg(long)]
    wan: bool,
    /// The failed node to mark as left.
    node: Option<String>,
}

/// Runs `operator ...`.
pub async fn run(cmd: OperatorCommand) -> u8 {
    match cmd {
        OperatorCommand::Raft(RaftCommand::ListPeers(args)) => list_peers(args).await,
        OperatorCommand::Autopilot(AutopilotCommand::GetConfig(args)) => {
            autopilot_get_config(args).await
        }
        OperatorCommand::Autopilot(AutopilotCommand::SetConfig(args)) => {
            autopilot_set_config(args).await
        }
        OperatorCommand::Raft(RaftCommand::RemovePeer(args)) => remove_peer(args).await,
        OperatorCommand::Raft(RaftCommand::TransferLeader(args)) => transfer_leader(args).await,
    }
}

/// Consul's `operator raft transfer-leader`: `Success`, else its error
/// text (spelling included).
async fn transfer_leader(args: TransferLeaderArgs) -> u8 {
    let client = Client::new(&args.http);
    let query: Vec<(&str, String)> = args.id.iter().map(|id| ("id", id.clone())).collect();
    match client
        .ok(
            Method::POST,
            "/v1/operator/raft/transfer-leader",
            &query,
            None,
        )
        .await
    {
        Ok(_) => {
            println!("Success");
            0
        }
        Err(e) => fail(format!(
            "Error transfering leadership: Failed to transfer leadership {e}"
        )),
    }
}

async fn remove_peer(args: RemovePeerArgs) -> u8 {
    let (key, value) = match (&args.address, &args.id) {
        (Some(a), None) => ("address", a.clone()),
        (None, Some(i)) => ("id", i.clone()),
        (Some(_), Some(_)) => return fail("Only one of -address or -id may be specified"),
        (None, None) => return fail("Error removing peer: Must specify either -address or -id"),
    };
    let client = Client::new(&args.http);
    match client
        .ok(
            Method::DELETE,
            "/v1/operator/raft/peer",
            &[(key, value.clone())],
            None,
        )
        .await
    {
        Ok(_) => {
            let what = if key == "address" { "address" } else { "ID" };
            println!("Removed peer with {what} \"{value}\"");
            0
        }
        Err(e) => fail(format!("Error removing peer: {e}")),
    }
}

async fn autopilot_get_config(args: ListPeersArgs) -> u8 {
    let client = Client::new(&args.http);
    let config: Value = match client
        .get_json("/v1/operator/autopilot/configuration", &[])
        .await
    {
        Ok(v) => v,
        Err(e) => return fail(format!("Error querying Autopilot configuration: {e}")),
    };
    let text = |k: &str| config[k].as_str().unwrap_or("").to_string();
    println!("CleanupDeadServers = {}", config["CleanupDeadServers"]);
    println!("LastContactThreshold = {}", text("LastContactThreshold"));
    println!("MaxTrailingLogs = {}", config["MaxTrailingLogs"]);
    println!("MinQuorum = {}", config["MinQuorum"]);
    println!(
        "ServerStabilizationTime = {}",
        text("ServerStabilizationTime")
    );
    println!("RedundancyZoneTag = {:?}", text("RedundancyZoneTag"));
    println!(
        "DisableUpgradeMigration = {}",
        config["DisableUpgradeMigration"]
    );
    println!("UpgradeVersionTag = {:?}", text("UpgradeVersionTag"));
    0
}

/// Consul's `operator autopilot set-config`: reads the configuration,
/// changes the flags given, and writes it back with `?cas=` on the index
/// it read.
async fn autopilot_set_config(args: SetConfigArgs) -> u8 {
    for (flag, value) in [
        ("last-contact-threshold", &args.last_contact_threshold),
        ("server-stabilization-time", &args.server_stabilization_time),
    ] {
        if let Some(Err(e)) = value
            .as_deref()
            .map(legate_types::duration::parse_go_duration)
        {
            return fail(format!("invalid value {value:?} for -{flag}: {e}"));
        }
    }
    let client = Client::new(&args.http);
    let mut config: Value = match client
        .get_json("/v1/operator/autopilot/configuration", &[])
        .await
    {
        Ok(v) => v,
        Err(e) => return fail(format!("Error querying Autopilot configuration: {e}")),
    };
    let changes = [
        (
            "CleanupDeadServers",
            args.cleanup_dead_servers.map(Value::from),
        ),
        ("MaxTrailingLogs", args.max_trailing_logs.map(Value::from)),
        ("MinQuorum", args.min_quorum.map(Value::from)),
        (
            "LastContactThreshold",
            args.last_contact_threshold.map(Value::from),
        ),
        (
            "ServerStabilizationTime",
            args.server_stabilization_time.map(Value::from),
        ),
        (
            "RedundancyZoneTag",
            args.redundancy_zone_tag.map(Value::from),
        ),
        (
            "DisableUpgradeMigration",
            args.disable_upgrade_migration.map(Value::from),
        ),
        (
            "UpgradeVersionTag",
            args.upgrade_version_tag.map(Value::from),
        ),
    ];
    for (key, value) in changes {
        if let Some(value) = value {
            config[key] = value;
        }
    }
    let cas = config["ModifyIndex"].as_u64().unwrap_or(0).to_string();
    let answer = client
        .ok(
            Method::PUT,
            "/v1/operator/autopilot/configuration",
            &[("cas", cas)],
            Some(config.to_string().into_bytes()),
        )
        .await;
    match answer {
        Ok(body) if body.trim_ascii() == b"true" => {
            println!("Configuration updated!");
            0
        }
        Ok(_) => {
            println!("Configuration could not be atomically updated, please try again");
            1
        }
        Err(e) => fail(format!("Error setting Autopilot configuration: {e}")),
    }
}

async fn list_peers(args: ListPeersArgs) -> u8 {
    let client = Client::new(&args.http);
    let config: Value = match client
        .get_json("/v1/operator/raft/configuration", &[])
        .await
    {
        Ok(v) => v,
        Err(e) => return fail(format!("Error getting peers: {e}")),
    };
    let mut rows = vec![vec![
        "Node".to_string(),
        "ID".into(),
        "Address".into(),
        "State".into(),
        "Voter".into(),
        "RaftProtocol".into(),
    ]];
    for server in config["Servers"].as_array().into_iter().flatten() {
        let text = |k: &str| server[k].as_str().unwrap_or("").to_string();
        rows.push(vec![
            text("Node"),
            text("ID"),
            text("Address"),
            if server["Leader"].as_bool() == Some(true) {
                "leader"
            } else {
                "follower"
            }
            .into(),
            server["Voter"].as_bool().unwrap_or(false).to_string(),
            text("ProtocolVersion"),
        ]);
    }
    print_columns(&rows);
    0
}

/// Runs `join`.
pub async fn join(args: JoinArgs) -> u8 {
    if args.addresses.is_empty() {
        return fail("At least one address to join must be specified.");
    }
    let client = Client::new(&args.http);
    let query: Vec<(&str, String)> = if args.wan {
        vec![("wan", "1".into())]
    } else {
        Vec::new()
    };
    let mut joined = 0;
    for address in &args.addresses {
        match client
            .ok(
                Method::PUT,
                &format!("/v1/agent/join/{address}"),
                &query,
                None,
            )
            .await
        {
            Ok(_) => joined += 1,
            Err(e) => eprintln!("Error joining address '{address}': {e}"),
        }
    }
    if joined == 0 {
        return fail("Failed to join any nodes.");
    }
    println!("Successfully joined cluster by contacting {joined} nodes.");
    0
}

/// Runs `force-leave`.
pub async fn force_leave(args: ForceLeaveArgs) -> u8 {
    let Some(node) = args.node.filter(|n| !n.is_empty()) else {
        return fail("A node name must be specified to force leave.");
    };
    let client = Client::new(&args.http);
    let mut query: Vec<(&str, String)> = Vec::new();
    if args.prune {
        query.push(("prune", "1".into()));
    }
    if args.wan {
        query.push(("wan", "1".into()));
    }
    match client
        .ok(
            Method::PUT,
            &format!("/v1/agent/force-leave/{node}"),
            &query,
            None,
        )
        .await
    {
        Ok(_) => 0,
        Err(e) => fail(format!("Error force leaving: {e}")),
    }
}

/// Runs `keygen`: a new gossip encryption key.
pub fn keygen() -> u8 {
    println!("{}", legate_gossip::Key::generate());
    0
}
