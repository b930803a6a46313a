//! `legate event` (fire a user event) and `legate watch` (follow a view
//! and run a handler whenever it changes), as Consul's commands.

use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};
use crate::watch::{Handler, Watch, WatchKind};

/// Flags of `event`.
#[derive(Args, Debug)]
pub struct EventArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The event's name.
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    filters: EventFilters,
    /// The payload.
    payload: Option<String>,
}

/// Which agents an event (or a remote execution) is for.
#[derive(Args, Debug)]
pub struct EventFilters {
    /// Only nodes whose name matches this regex.
    #[arg(long)]
    node: Option<String>,
    /// Only nodes with a service whose name matches this regex.
    #[arg(long)]
    service: Option<String>,
    /// With -service: only services with a tag matching this regex.
    #[arg(long)]
    tag: Option<String>,
}

/// Checks an event's node, service and tag filters as Consul's commands
/// do (regexes; a tag needs a service) and gives them as query
/// parameters.
pub(super) fn filter_query(
    EventFilters { node, service, tag }: &EventFilters,
) -> Result<Vec<(&'static str, String)>, String> {
    let filters = [("node", node), ("service", service), ("tag", tag)];
    for (what, pattern) in filters {
        if let Some(p) = pattern {
            if let Err(e) = regex::Regex::new(p) {
                return Err(format!("Failed to compile {what} filter regexp: {e}"));
            }
        }
    }
    if tag.is_some() && service.is_none() {
        return Err("Cannot provide tag filter without service filter.".into());
    }
    Ok(filters
        .into_iter()
        .filter_map(|(key, value)| value.clone().map(|v| (key, v)))
        .collect())
}

/// Runs `event`: prints the new event's id.
pub async fn event(args: EventArgs) -> u8 {
    let Some(name) = args.name.filter(|n| !n.is_empty()) else {
        return fail("Event name must be specified");
    };
    let query = match filter_query(&args.filters) {
        Ok(query) => query,
        Err(e) => return fail(e),
    };
    let client = Client::new(&args.http);
    let body = args.payload.map(String::into_bytes);
    match client
        .ok(Method::PUT, &format!("/v1/event/fire/{name}"), &query, body)
        .await
    {
        Ok(answer) => {
            let event: Value = serde_json::from_slice(&answer).unwrap_or_default();
            println!("Event ID: {}", event["ID"].as_str().unwrap_or(""));
            0
        }
        Err(e) => fail(format!("Error firing event: {e}")),
    }
}

/// Flags of `watch`.
#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// What to watch: key, keyprefix, services, nodes, service, checks, event.
    #[arg(long = "type")]
    kind: Option<String>,
    /// The key (`-type=key`).
    #[arg(long)]
    key: Option<String>,
    /// The prefix (`-type=keyprefix`).
    #[arg(long)]
    prefix: Option<String>,
    /// The service (`-type=service` or `checks`).
    #[arg(long)]
    service: Option<String>,
    /// Tags the instances must have (`-type=service`); repeatable.
    #[arg(long)]
    tag: Vec<String>,
    /// Only passing instances (`-type=service`).
    #[arg(long = "passingonly")]
    passing_only: bool,
    /// A check state (`-type=checks`).
    #[arg(long)]
    state: Option<String>,
    /// The event name (`-type=event`).
    #[arg(long)]
    name: Option<String>,
    /// The handler to run with the view on stdin (none: print it once).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    handler: Vec<String>,
}

/// Runs `watch`.
pub async fn watch(args: WatchArgs) -> u8 {
    let mut entry = serde_json::Map::new();
    let mut put = |key: &str, value: Value| {
        entry.insert(key.to_string(), value);
    };
    if let Some(kind) = &args.kind {
        put("type", kind.clone().into());
    }
    for (key, value) in [
        ("key", &args.key),
        ("prefix", &args.prefix),
        ("service", &args.service),
        ("state", &args.state),
        ("name", &args.name),
    ] {
        if let Some(v) = value {
            put(key, v.clone().into());
        }
    }
    if !args.tag.is_empty() {
        put("tag", args.tag.clone().into());
    }
    put("passingonly", args.passing_only.into());
    // Parsed as a config entry would be, with a placeholder handler.
    put("args", vec!["true"].into());
    let parsed = match crate::watch::parse(&Value::Object(entry)) {
        Ok(w) => w,
        Err(e) => return fail(format!("Failed to parse watch: {e}")),
    };
    let handler = if args.handler.is_empty() {
        Handler::PrintOnce
    } else {
        // Consul runs the handler words as one shell command.
        Handler::Script(vec![args.handler.join(" ")])
    };
    let kind: WatchKind = parsed.kind;
    match crate::watch::run(Watch {
        kind,
        http: args.http,
        handler,
    })
    .await
    {
        Ok(()) => 0,
        Err(e) => fail(format!("Error querying Consul agent: {e}")),
    }
}
