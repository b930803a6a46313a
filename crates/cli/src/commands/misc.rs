//! `version`, `members`, `leave`, `reload`, `maint`.

use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::{fail, print_columns};
use crate::client::{Client, HttpFlags};

/// Flags of commands that only talk to the agent.
#[derive(Args, Debug)]
pub struct HttpOnlyArgs {
    #[command(flatten)]
    http: HttpFlags,
}

/// Flags of `members`.
#[derive(Args, Debug)]
pub struct MembersArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Show detailed information.
    #[arg(long)]
    detailed: bool,
    /// List WAN members (servers of every datacenter).
    #[arg(long)]
    wan: bool,
    /// Only members whose status matches this regex.
    #[arg(long)]
    status: Option<String>,
}

/// Flags of `maint`.
#[derive(Args, Debug)]
pub struct MaintArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Enable maintenance mode.
    #[arg(long)]
    enable: bool,
    /// Disable maintenance mode.
    #[arg(long)]
    disable: bool,
    /// A reason to record.
    #[arg(long)]
    reason: Option<String>,
    /// The service id (node maintenance when absent).
    #[arg(long)]
    service: Option<String>,
}

/// Prints the version in Consul's format, then Legate's own.
pub fn version() {
    println!("Consul v{}", legate_types::CONSUL_API_VERSION);
    println!("Revision legate-{}", legate_types::LEGATE_VERSION);
    println!("Build Date 1970-01-01T00:00:00Z");
    println!("Protocol 2 spoken by default, understands 2 to 3 (agent will automatically use protocol >2 when speaking to compatible agents)");
    println!();
    println!("Legate v{}", legate_types::LEGATE_VERSION);
}

fn status_name(code: i64) -> &'static str {
    match code {
        1 => "alive",
        2 => "leaving",
        3 => "left",
        4 => "failed",
        _ => "none",
    }
}

/// `legate members`.
pub async fn members(args: MembersArgs) -> u8 {
    let client = Client::new(&args.http);
    let query: Vec<(&str, String)> = if args.wan {
        vec![("wan", "1".into())]
    } else {
        vec![]
    };
    let members: Vec<Value> = match client.get_json("/v1/agent/members", &query).await {
        Ok(m) => m,
        Err(e) => return fail(format!("Error retrieving members: {e}")),
    };
    let status_filter = match args.status.as_deref().map(regex_like) {
        Some(Err(e)) => return fail(format!("Failed to compile status regexp: {e}")),
        Some(Ok(f)) => Some(f),
        None => None,
    };
    let mut rows = vec![[
        "Node",
        "Address",
        "Status",
        "Type",
        "Build",
        "Protocol",
        "DC",
        "Partition",
        "Segment",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    for m in &members {
        let tags = &m["Tags"];
        let status = status_name(m["Status"].as_i64().unwrap_or(0));
        if let Some(filter) = &status_filter {
            if !filter(status) {
                continue;
            }
        }
        let role = if tags["role"] == "consul" {
            "server"
        } else {
            "client"
        };
        let build = tags["build"]
            .as_str()
            .unwrap_or("")
            .split(':')
            .next()
            .unwrap_or("")
            .to_string();
        rows.push(vec![
            m["Name"].as_str().unwrap_or("").to_string(),
            member_address(m),
            status.to_string(),
            role.to_string(),
            build,
            tags["vsn"].as_str().unwrap_or("2").to_string(),
            tags["dc"].as_str().unwrap_or("").to_string(),
            "default".to_string(),
            "<all>".to_string(),
        ]);
    }
    if args.detailed {
        // Consul's detailed form: Node, Address, Status, and every tag.
        let mut detailed = vec![vec![
            "Node".to_string(),
            "Address".into(),
            "Status".into(),
            "Tags".into(),
        ]];
        for m in &members {
            let status = status_name(m["Status"].as_i64().unwrap_or(0));
            if status_filter.as_ref().is_some_and(|filter| !filter(status)) {
                continue;
            }
            let tags = m["Tags"].as_object().map(|t| {
                let mut pairs: Vec<String> = t
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect();
                pairs.sort();
                pairs.join(",")
            });
            detailed.push(vec![
                m["Name"].as_str().unwrap_or("").to_string(),
                member_address(m),
                status.to_string(),
                tags.unwrap_or_default(),
            ]);
        }
        print_columns(&detailed);
        return 0;
    }
    print_columns(&rows);
    0
}

/// `addr:port` of a `/v1/agent/members` row.
fn member_address(m: &serde_json::Value) -> String {
    format!(
        "{}:{}",
        m["Addr"].as_str().unwrap_or(""),
        m["Port"].as_i64().unwrap_or(0)
    )
}

type Matcher = Box<dyn Fn(&str) -> bool>;

fn regex_like(pattern: &str) -> Result<Matcher, String> {
    let expr = legate_filter_regex(pattern)?;
    Ok(Box::new(move |s| expr(s)))
}

fn legate_filter_regex(pattern: &str) -> Result<Matcher, String> {
    // Reuse the filter grammar's regex support: `x matches "<pattern>"`.
    let expr = legate_filter::Expr::parse(&format!("x matches {pattern:?}")).map_err(|e| e.0)?;
    Ok(Box::new(move |s| {
        expr.matches(&serde_json::json!({ "x": s }))
    }))
}

/// `legate leave`.
pub async fn leave(args: HttpOnlyArgs) -> u8 {
    let client = Client::new(&args.http);
    match client.ok(Method::PUT, "/v1/agent/leave", &[], None).await {
        Ok(_) => {
            println!("Graceful leave complete");
            0
        }
        Err(e) => fail(format!("Error leaving: {e}")),
    }
}

/// `legate reload`.
pub async fn reload(args: HttpOnlyArgs) -> u8 {
    let client = Client::new(&args.http);
    match client.ok(Method::PUT, "/v1/agent/reload", &[], None).await {
        Ok(_) => {
            println!("Configuration reload triggered");
            0
        }
        Err(e) => fail(format!("Error reloading: {e}")),
    }
}

/// `legate maint`.
pub async fn maint(args: MaintArgs) -> u8 {
    let client = Client::new(&args.http);
    if args.enable && args.disable {
        return fail("Only one of -enable or -disable may be provided");
    }
    if !args.enable && args.reason.is_some() {
        return fail("Reason may only be provided with -enable");
    }
    if !args.enable && !args.disable {
        if args.service.is_some() {
            return fail("Service requires either -enable or -disable");
        }
        let checks: std::collections::BTreeMap<String, Value> =
            match client.get_json("/v1/agent/checks", &[]).await {
                Ok(c) => c,
                Err(e) => return fail(format!("Error getting checks: {e}")),
            };
        for (id, check) in checks {
            if id == "_node_maintenance" {
                println!("Node:");
                println!("  Name:   {}", check["Node"].as_str().unwrap_or(""));
                println!("  Reason: {}", check["Notes"].as_str().unwrap_or(""));
                println!();
            } else if let Some(service) = id.strip_prefix("_service_maintenance:") {
                println!("Service:");
                println!("  ID:     {service}");
                println!("  Reason: {}", check["Notes"].as_str().unwrap_or(""));
                println!();
            }
        }
        return 0;
    }
    let mut query = vec![("enable", args.enable.to_string())];
    if let Some(reason) = &args.reason {
        query.push(("reason", reason.clone()));
    }
    let path = match &args.service {
        Some(id) => format!("/v1/agent/service/maintenance/{id}"),
        None => "/v1/agent/maintenance".to_string(),
    };
    match client.ok(Method::PUT, &path, &query, None).await {
        Err(e) => fail(format!("Error toggling maintenance mode: {e}")),
        Ok(_) => {
            let state = if args.enable { "enabled" } else { "disabled" };
            match &args.service {
                Some(id) => println!("Service maintenance is now {state} for {id:?}"),
                None => println!("Node maintenance is now {state}"),
            }
            0
        }
    }
}

/// Flags of `monitor`.
#[derive(Args, Debug)]
pub struct MonitorArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The most verbose level of the lines to show (trace, debug, info,
    /// warn, err).
    #[arg(long = "log-level", default_value = "INFO")]
    log_level: String,
    /// Show each line as a JSON object.
    #[arg(long = "log-json")]
    log_json: bool,
}

/// `legate monitor`: prints the agent's log as it is written, until
/// interrupted (exit 0) or the agent goes away (exit 1), as Consul's.
pub async fn monitor(args: MonitorArgs) -> u8 {
    let client = Client::new(&args.http);
    let mut query = vec![("loglevel", args.log_level.clone())];
    if args.log_json {
        query.push(("logjson", String::new()));
    }
    let mut response = match client.stream("/v1/agent/monitor", &query).await {
        Ok(response) => response,
        Err(e) => return fail(format!("Error starting monitor: {e}")),
    };
    use std::io::Write;
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&chunk);
            let _ = out.flush();
        }
    };
    tokio::select! {
        _ = read => {
            println!();
            eprintln!("Remote side ended the monitor! This usually means that the\nremote side has exited or crashed.");
            1
        }
        _ = tokio::signal::ctrl_c() => 0,
    }
}

/// `legate info`: the agent's `Stats` as Consul prints them, each section
/// and its keys sorted, one `key = value` a line under `section:`.
pub async fn info(args: HttpOnlyArgs) -> u8 {
    let client = Client::new(&args.http);
    let me: serde_json::Value = match client.get_json("/v1/agent/self", &[]).await {
        Ok(me) => me,
        Err(e) => return fail(format!("Error querying agent: {e}")),
    };
    let Some(stats) = me["Stats"].as_object() else {
        return fail("Error querying agent: no Stats in /v1/agent/self");
    };
    let mut sections: Vec<(&String, &serde_json::Value)> = stats.iter().collect();
    sections.sort_by_key(|(name, _)| *name);
    for (name, values) in sections {
        println!("{name}:");
        let mut keys: Vec<(&String, &serde_json::Value)> = values
            .as_object()
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        keys.sort_by_key(|(k, _)| *k);
        for (key, value) in keys {
            let text = value
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| value.to_string());
            println!("\t{key} = {text}");
        }
    }
    0
}

/// Flags of `validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Config files and directories (every `.hcl` and `.json` in them).
    paths: Vec<std::path::PathBuf>,
    /// Only the exit code says whether the configuration is valid.
    #[arg(long)]
    quiet: bool,
    /// Read every file in this format (`hcl` or `json`), whatever its
    /// extension.
    #[arg(long = "config-format")]
    config_format: Option<String>,
}

/// `legate validate FILE_OR_DIRECTORY...`: loads the files as the agent
/// would (merged in order, every key checked, the same warnings) and says
/// whether they make a valid configuration, in Consul's words.
pub fn validate(args: ValidateArgs) -> u8 {
    use legate_agent::config::{load_as, ConfigFormat, ConfigSource};
    if args.paths.is_empty() {
        return fail("Must specify at least one config file or directory");
    }
    let format = match args
        .config_format
        .as_deref()
        .map(ConfigFormat::parse)
        .transpose()
    {
        Ok(format) => format,
        Err(e) => return fail(format!("Config validation failed: {e}")),
    };
    let sources: Vec<ConfigSource> = args
        .paths
        .iter()
        .map(|p| {
            if p.is_dir() {
                ConfigSource::Dir(p.clone())
            } else {
                ConfigSource::File(p.clone())
            }
        })
        .collect();
    let config = match load_as(&sources, format) {
        Ok(config) if config.data_dir.is_none() => {
            return fail("Config validation failed: data_dir cannot be empty");
        }
        Ok(config) => config,
        Err(e) => return fail(format!("Config validation failed: {e}")),
    };
    if !args.quiet {
        for warning in &config.warnings {
            eprintln!("{warning}");
        }
        println!("Configuration is valid!");
    }
    0
}
