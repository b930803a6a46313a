//! Watches (`legate watch` and the agent config's `watches`): a blocking
//! query per type over the HTTP API, as Consul's watch plans run them, and
//! a handler run with the view as JSON whenever its index changes — a
//! script (`sh -c`, the JSON on stdin, `CONSUL_INDEX` in the environment)
//! or an HTTP request.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::client::{Client, HttpFlags};

/// What a watch follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchKind {
    /// One KV key (`key`).
    Key(String),
    /// A KV prefix (`prefix`).
    KeyPrefix(String),
    /// The service list.
    Services,
    /// The node list.
    Nodes,
    /// A service's healthy-or-not instances (`service`, `tag`, `passingonly`).
    Service {
        /// The service.
        service: String,
        /// Tags every instance must have.
        tags: Vec<String>,
        /// Only instances whose checks pass.
        passing_only: bool,
    },
    /// Checks of a service, or in a state (`service` or `state`).
    Checks {
        /// The service.
        service: Option<String>,
        /// The state (`any` when neither is given).
        state: Option<String>,
    },
    /// User events, optionally by name.
    Event(String),
}

/// How a watch's handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// Print the view once and stop (the CLI without a handler).
    PrintOnce,
    /// `sh -c <command>` (or the argument list itself), the view on stdin.
    Script(Vec<String>),
    /// An HTTP request carrying the view as its body.
    Http {
        /// The URL.
        path: String,
        /// The method (POST by default).
        method: String,
        /// Extra headers.
        headers: BTreeMap<String, Vec<String>>,
        /// How long the request may take.
        timeout: Duration,
    },
}

/// One watch: what it follows, through which agent, and its handler.
#[derive(Debug, Clone)]
pub struct Watch {
    /// What it follows.
    pub kind: WatchKind,
    /// Agent address, datacenter, token, stale.
    pub http: HttpFlags,
    /// Its handler.
    pub handler: Handler,
}

impl WatchKind {
    /// The path and query of its blocking read.
    fn request(&self) -> (String, Vec<(&'static str, String)>) {
        match self {
            WatchKind::Key(key) => (format!("/v1/kv/{key}"), vec![]),
            WatchKind::KeyPrefix(prefix) => {
                (format!("/v1/kv/{prefix}"), vec![("recurse", String::new())])
            }
            WatchKind::Services => ("/v1/catalog/services".into(), vec![]),
            WatchKind::Nodes => ("/v1/catalog/nodes".into(), vec![]),
            WatchKind::Service {
                service,
                tags,
                passing_only,
            } => {
                let mut query: Vec<(&'static str, String)> =
                    tags.iter().map(|t| ("tag", t.clone())).collect();
                if *passing_only {
                    query.push(("passing", String::new()));
                }
                (format!("/v1/health/service/{service}"), query)
            }
            WatchKind::Checks { service, state } => match (service, state) {
                (Some(service), _) => (format!("/v1/health/checks/{service}"), vec![]),
                (None, state) => (
                    format!("/v1/health/state/{}", state.as_deref().unwrap_or("any")),
                    vec![],
                ),
            },
            WatchKind::Event(name) => (
                "/v1/event/list".into(),
                if name.is_empty() {
                    vec![]
                } else {
                    vec![("name", name.clone())]
                },
            ),
        }
    }

    /// The view a response body makes (a key watch: the pair itself, or
    /// null when the key is absent).
    fn view(&self, status: StatusCode, body: &[u8]) -> Result<Value, String> {
        if status == StatusCode::NOT_FOUND {
            return Ok(match self {
                WatchKind::Key(_) => Value::Null,
                _ => Value::Array(Vec::new()),
            });
        }
        if !status.is_success() {
            return Err(format!(
                "Unexpected response code: {} ({})",
                status.as_u16(),
                String::from_utf8_lossy(body).trim()
            ));
        }
        let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        Ok(match (self, value) {
            (WatchKind::Key(_), Value::Array(mut pairs)) if !pairs.is_empty() => pairs.remove(0),
            (WatchKind::Key(_), Value::Array(_)) => Value::Null,
            (_, value) => value,
        })
    }
}

/// Builds a watch from Consul's watch parameters (the agent config's
/// `watches` entries); the error names what is wrong.
pub fn parse(entry: &Value) -> Result<Watch, String> {
    let map = entry
        .as_object()
        .ok_or_else(|| "a watch must be an object".to_string())?;
    let text = |key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{key}: expected a string, got {other}")),
        }
    };
    let kind = match text("type")?.as_deref() {
        None => return Err("Watch type must be specified".into()),
        Some("key") => WatchKind::Key(text("key")?.ok_or("Must specify a single key to watch")?),
        Some("keyprefix") => {
            WatchKind::KeyPrefix(text("prefix")?.ok_or("Must specify a key prefix to watch")?)
        }
        Some("services") => WatchKind::Services,
        Some("nodes") => WatchKind::Nodes,
        Some("service") => WatchKind::Service {
            service: text("service")?.ok_or("Must specify a single service to watch")?,
            tags: match map.get("tag") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(t)) => vec![t.clone()],
                Some(Value::Array(tags)) => tags
                    .iter()
                    .map(|t| t.as_str().map(String::from).ok_or("tag: expected strings"))
                    .collect::<Result<_, _>>()?,
                Some(other) => return Err(format!("tag: expected a list, got {other}")),
            },
            passing_only: map
                .get("passingonly")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        Some("checks") => {
            let service = text("service")?;
            let state = text("state")?;
            if service.is_some() && state.is_some() {
                return Err("Cannot specify service and state".into());
            }
            WatchKind::Checks { service, state }
        }
        Some("event") => WatchKind::Event(text("name")?.unwrap_or_default()),
        Some(other) => return Err(format!("Unsupported watch type: {other}")),
    };
    let handler = match (
        text("handler_type")?.as_deref(),
        map.get("args"),
        text("handler")?,
    ) {
        (Some("http"), _, _) => {
            let config = map
                .get("http_handler_config")
                .and_then(Value::as_object)
                .ok_or("http_handler_config is required with handler_type http")?;
            let path = config
                .get("path")
                .and_then(Value::as_str)
                .ok_or("http_handler_config.path is required")?
                .to_string();
            let timeout = match config.get("timeout").and_then(Value::as_str) {
                Some(t) => legate_types::duration::parse_go_duration(t)
                    .map_err(|e| format!("http_handler_config.timeout: {e}"))?,
                None => Duration::from_secs(10),
            };
            let headers = config
                .get("header")
                .and_then(Value::as_object)
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| {
                            let values = match v {
                                Value::Array(items) => items
                                    .iter()
                                    .filter_map(|i| i.as_str().map(String::from))
                                    .collect(),
                                Value::String(s) => vec![s.clone()],
                                _ => Vec::new(),
                            };
                            (k.clone(), values)
                        })
                        .collect()
                })
                .unwrap_or_default();
            Handler::Http {
                path,
                method: config
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or("POST")
                    .to_uppercase(),
                headers,
                timeout,
            }
        }
        (None | Some("script"), Some(Value::Array(args)), _) if !args.is_empty() => {
            Handler::Script(
                args.iter()
                    .map(|a| a.as_str().map(String::from).ok_or("args: expected strings"))
                    .collect::<Result<_, _>>()?,
            )
        }
        (None | Some("script"), _, Some(handler)) => Handler::Script(vec![handler]),
        (None | Some("script"), _, None) => {
            return Err("Must define a watch handler (args or handler)".into())
        }
        (Some(other), _, _) => return Err(format!("Handler type '{other}' not recognized")),
    };
    let http = HttpFlags {
        datacenter: text("datacenter")?,
        token: text("token")?,
        stale: map.get("stale").and_then(Value::as_bool).unwrap_or(false),
        ..Default::default()
    };
    Ok(Watch {
        kind,
        http,
        handler,
    })
}

/// Runs `watch` until its handler says stop (print-once) or the task is
/// dropped, as Consul's watch plans do: a blocking read; the handler runs
/// when the index moved and the view differs from the last one handed to
/// it (the first answer included); an index that went back starts over;
/// an event watch hands over only the events after the last one seen.
/// Errors back off 5 s × failures², at most 20 s.
pub async fn run(watch: Watch) -> Result<(), String> {
    let client = Client::new(&watch.http);
    let (path, query) = watch.kind.request();
    let mut index = 0u64;
    let mut failures = 0u32;
    let mut last_view: Option<Value> = None;
    loop {
        let mut params = query.clone();
        if index > 0 {
            params.push(("index", index.to_string()));
        }
        let answer = client.exchange(Method::GET, &path, &params, None).await;
        let (status, new_index, body) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                if watch.handler == Handler::PrintOnce {
                    return Err(e.to_string());
                }
                failures += 1;
                tracing::warn!(error = %e, "watch: the blocking read failed; retrying");
                tokio::time::sleep(backoff(failures)).await;
                continue;
            }
        };
        let view = match watch.kind.view(status, &body) {
            Ok(view) => view,
            Err(e) => {
                if watch.handler == Handler::PrintOnce {
                    return Err(e);
                }
                failures += 1;
                tracing::warn!(error = %e, "watch: the read was refused; retrying");
                tokio::time::sleep(backoff(failures)).await;
                continue;
            }
        };
        failures = 0;
        let new_index = new_index.max(1);
        if new_index == index {
            continue;
        }
        let previous = index;
        // An index that went back (a restore, another server) starts over,
        // except for events, whose index is a hash of the last id.
        index = if new_index < index && !matches!(watch.kind, WatchKind::Event(_)) {
            0
        } else {
            new_index
        };
        let view = match (&watch.kind, view) {
            (WatchKind::Event(_), Value::Array(events)) if previous != 0 => {
                Value::Array(events_after(events, previous))
            }
            (_, view) => view,
        };
        if last_view.as_ref() == Some(&view) {
            continue;
        }
        last_view = Some(view.clone());
        match &watch.handler {
            Handler::PrintOnce => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&view).unwrap_or_default()
                );
                return Ok(());
            }
            Handler::Script(args) => run_script(args, &view, new_index).await,
            Handler::Http {
                path,
                method,
                headers,
                timeout,
            } => run_http(path, method, headers, *timeout, &view, new_index).await,
        }
    }
}

/// The events after the one whose index is `seen` (all of them when it
/// is not in the list any more), as Consul's event watch prunes.
fn events_after(events: Vec<Value>, seen: u64) -> Vec<Value> {
    let at = events
        .iter()
        .position(|e| legate_types::event::index_of(e["ID"].as_str().unwrap_or("")) == seen);
    match at {
        Some(i) => events.into_iter().skip(i + 1).collect(),
        None => events,
    }
}

/// Consul's watch retry pause: 5 s × failures², at most 20 s.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs((5 * u64::from(failures).pow(2)).min(20))
}

async fn run_script(args: &[String], view: &Value, index: u64) {
    use tokio::io::AsyncWriteExt;
    let mut command = if args.len() == 1 {
        let mut c = tokio::process::Command::new("sh");
        c.arg("-c").arg(&args[0]);
        c
    } else {
        let mut c = tokio::process::Command::new(&args[0]);
        c.args(&args[1..]);
        c
    };
    command
        .env("CONSUL_INDEX", index.to_string())
        .stdin(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            tracing::error!(error = %e, "watch: the handler did not start");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let mut input = serde_json::to_vec(view).unwrap_or_default();
        input.push(b'\n');
        let _ = stdin.write_all(&input).await;
    }
    match child.wait().await {
        Ok(status) if !status.success() => {
            tracing::warn!(%status, "watch: the handler failed")
        }
        Err(e) => tracing::warn!(error = %e, "watch: waiting for the handler failed"),
        Ok(_) => {}
    }
}

async fn run_http(
    path: &str,
    method: &str,
    headers: &BTreeMap<String, Vec<String>>,
    timeout: Duration,
    view: &Value,
    index: u64,
) {
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::POST);
    let mut request = reqwest::Client::new()
        .request(method, path)
        .timeout(timeout)
        .header("Content-Type", "application/json")
        .header("X-Consul-Index", index.to_string())
        .body(serde_json::to_vec(view).unwrap_or_default());
    for (name, values) in headers {
        for value in values {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(response) if !response.status().is_success() => {
            tracing::warn!(status = %response.status(), "watch: the HTTP handler answered with an error")
        }
        Err(e) => tracing::warn!(error = %e, "watch: the HTTP handler failed"),
        Ok(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn watches_parse_as_consul_writes_them() {
        let w = parse(&json!({"type": "key", "key": "app/x", "args": ["cat"]})).unwrap();
        assert_eq!(w.kind, WatchKind::Key("app/x".into()));
        assert_eq!(w.handler, Handler::Script(vec!["cat".into()]));
        let w = parse(&json!({"type": "service", "service": "web", "tag": ["a"], "passingonly": true, "handler": "cat"})).unwrap();
        assert_eq!(
            w.kind.request(),
            (
                "/v1/health/service/web".to_string(),
                vec![("tag", "a".to_string()), ("passing", String::new())]
            )
        );
        let w = parse(&json!({"type": "event", "name": "deploy", "handler_type": "http",
            "http_handler_config": {"path": "http://127.0.0.1:1/x", "method": "put", "timeout": "2s"}}))
        .unwrap();
        assert!(
            matches!(w.handler, Handler::Http { ref method, timeout, .. } if method == "PUT" && timeout == Duration::from_secs(2))
        );
        for (bad, error) in [
            (json!({"key": "x"}), "Watch type must be specified"),
            (
                json!({"type": "bogus", "args": ["x"]}),
                "Unsupported watch type: bogus",
            ),
            (
                json!({"type": "key", "args": ["x"]}),
                "Must specify a single key to watch",
            ),
            (json!({"type": "nodes"}), "Must define a watch handler"),
            (
                json!({"type": "nodes", "args": []}),
                "Must define a watch handler",
            ),
            (
                json!({"type": "nodes", "handler_type": "carrier-pigeon"}),
                "Handler type 'carrier-pigeon' not recognized",
            ),
            (
                json!({"type": "checks", "service": "a", "state": "passing", "args": ["x"]}),
                "Cannot specify service and state",
            ),
        ] {
            let e = parse(&bad).unwrap_err();
            assert!(e.contains(error), "{bad}: {e}");
        }
    }

    #[test]
    fn event_watches_hand_over_only_new_events() {
        let id = |n: u32| format!("00000000-0000-0000-0000-{n:012}");
        let events: Vec<Value> = (1..=3).map(|n| json!({"ID": id(n)})).collect();
        let seen = legate_types::event::index_of(&id(2));
        assert_eq!(
            events_after(events.clone(), seen),
            vec![json!({"ID": id(3)})]
        );
        assert_eq!(events_after(events.clone(), 12345).len(), 3);
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(5), Duration::from_secs(20));
    }

    #[test]
    fn views_are_consuls() {
        let key = WatchKind::Key("a".into());
        assert_eq!(key.view(StatusCode::NOT_FOUND, b"").unwrap(), Value::Null);
        assert_eq!(
            key.view(StatusCode::OK, br#"[{"Key":"a"}]"#).unwrap(),
            json!({"Key": "a"})
        );
        assert_eq!(
            WatchKind::KeyPrefix("a".into())
                .view(StatusCode::NOT_FOUND, b"")
                .unwrap(),
            json!([])
        );
        assert!(WatchKind::Nodes.view(StatusCode::FORBIDDEN, b"no").is_err());
    }
}
