//! `ui_config { }` (and the older top-level `ui` and `ui_dir`): whether the
//! web UI is served, from where (`dir` instead of the assets built into the
//! binary), under which path, and what the UI is told about metrics and
//! dashboards.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::config::{get, get_bool, get_str, string_map, strings, ConfigError};

/// The UI's settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UiConfig {
    /// Serve the UI (`ui_config.enabled`, `-ui`; on in `-dev`).
    pub enabled: bool,
    /// Serve the UI from this directory instead of the built-in assets
    /// (`ui_config.dir`, `-ui-dir`, `ui_dir`); setting it turns the UI on.
    pub dir: Option<PathBuf>,
    /// Where it is served, with a leading and a trailing `/` (`/ui/`).
    pub content_path: String,
    /// `metrics_provider` (Consul's built-in one is `prometheus`).
    pub metrics_provider: String,
    /// `metrics_proxy` (the proxy is off while its `base_url` is empty).
    pub metrics_proxy: MetricsProxy,
    /// `dashboard_url_templates` (`service` → a URL with placeholders).
    pub dashboard_url_templates: BTreeMap<String, String>,
}

/// `ui_config.metrics_proxy`: where `/v1/internal/ui/metrics-proxy/`
/// sends the UI's metrics queries.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricsProxy {
    /// The metrics backend (`http://` or `https://`); empty: no proxy.
    pub base_url: String,
    /// Headers added to every proxied request (`name`, `value`).
    pub add_headers: Vec<(String, String)>,
    /// The only paths that may be reached (empty: any); Prometheus's two
    /// query paths by default with `metrics_provider = "prometheus"`.
    pub path_allowlist: Vec<String>,
}

impl UiConfig {
    /// Whether the UI is served at all.
    pub fn serves(&self) -> bool {
        self.enabled || self.dir.is_some()
    }
}

/// A UI content path as Consul keeps it: `/ui/` by default, otherwise the
/// given path with a leading and a trailing `/`; only a plain path
/// (letters, digits, `-._~/`, no `..`) is taken, since it is written into
/// the UI's page.
fn content_path(path: Option<String>) -> Result<String, ConfigError> {
    if let Some(given) = &path {
        let plain = given
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~/".contains(c));
        if !plain || given.split('/').any(|part| part == "..") {
            return Err(ConfigError(format!(
                "ui_config.content_path {given:?}: only letters, digits and -._~/ may be used"
            )));
        }
    }
    Ok(content_path_of(path))
}

fn content_path_of(path: Option<String>) -> String {
    let path = path
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/ui/".into());
    let mut path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    if !path.ends_with('/') {
        path.push('/');
    }
    path
}

/// `metrics_proxy` checked as Consul checks it.
fn metrics_proxy(map: &Map<String, Value>, provider: &str) -> Result<MetricsProxy, ConfigError> {
    let base_url = get_str(map, &["ui_config", "metrics_proxy", "base_url"])?.unwrap_or_default();
    if !base_url.is_empty() {
        let scheme_ok = ["http://", "https://"]
            .iter()
            .any(|scheme| base_url.len() > scheme.len() && base_url.starts_with(scheme));
        if !scheme_ok || base_url.contains(char::is_whitespace) {
            return Err(ConfigError(format!(
                "ui_config.metrics_proxy.base_url must be a valid http or https URL. received: {base_url:?}"
            )));
        }
    }
    let mut path_allowlist = strings(
        get(map, &["ui_config", "metrics_proxy", "path_allowlist"]),
        "ui_config.metrics_proxy.path_allowlist",
    )?;
    for path in &path_allowlist {
        if !path.starts_with('/') || path.contains(['?', '#']) {
            return Err(ConfigError(format!(
                "ui_config.metrics_proxy.path_allowlist: path {path:?} is not an absolute path"
            )));
        }
    }
    if path_allowlist.is_empty() && provider == "prometheus" {
        path_allowlist = vec!["/api/v1/query_range".into(), "/api/v1/query".into()];
    }
    let headers = match get(map, &["ui_config", "metrics_proxy", "add_headers"]) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one @ Value::Object(_)) => vec![one],
        Some(_) => {
            return Err(ConfigError(
                "ui_config.metrics_proxy.add_headers: expected a list of {name, value}".into(),
            ))
        }
    };
    let mut add_headers = Vec::new();
    for header in headers {
        let field = |key: &str| header.get(key).and_then(Value::as_str).map(str::to_string);
        match (field("name"), field("value")) {
            (Some(name), Some(value)) if !name.is_empty() => add_headers.push((name, value)),
            _ => {
                return Err(ConfigError(
                    "ui_config.metrics_proxy.add_headers: each header needs a name and a value"
                        .into(),
                ))
            }
        }
    }
    Ok(MetricsProxy {
        base_url,
        add_headers,
        path_allowlist,
    })
}

/// Reads `ui_config` and the older keys.
pub fn parse(map: &Map<String, Value>) -> Result<UiConfig, ConfigError> {
    let dir = get_str(map, &["ui_config", "dir"])?
        .or(get_str(map, &["ui_dir"])?)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    // An explicit null is no templates.
    let templates = string_map(
        get(map, &["ui_config", "dashboard_url_templates"]).filter(|v| !v.is_null()),
        "ui_config.dashboard_url_templates",
    )?;
    let metrics_provider = get_str(map, &["ui_config", "metrics_provider"])?.unwrap_or_default();
    Ok(UiConfig {
        enabled: get_bool(map, &["ui"])?
            .or(get_bool(map, &["ui_config", "enabled"])?)
            .unwrap_or(false),
        dir,
        content_path: content_path(get_str(map, &["ui_config", "content_path"])?)?,
        metrics_proxy: metrics_proxy(map, &metrics_provider)?,
        metrics_provider,
        dashboard_url_templates: templates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(value: Value) -> Result<UiConfig, ConfigError> {
        parse(value.as_object().unwrap())
    }

    #[test]
    fn every_key_is_read() {
        let ui = parse_json(json!({"ui_config": {
            "enabled": true, "dir": "/srv/ui", "content_path": "console",
            "metrics_provider": "prometheus",
            "metrics_proxy": {"base_url": "http://prometheus:9090"},
            "dashboard_url_templates": {"service": "https://grafana/d/x?var-service={{Service.Name}}"}
        }}))
        .unwrap();
        assert!(ui.enabled && ui.serves());
        assert_eq!(ui.dir, Some(PathBuf::from("/srv/ui")));
        assert_eq!(ui.content_path, "/console/");
        assert_eq!(ui.metrics_provider, "prometheus");
        assert_eq!(ui.metrics_proxy.base_url, "http://prometheus:9090");
        // Prometheus's query paths are the default allowlist.
        assert_eq!(
            ui.metrics_proxy.path_allowlist,
            ["/api/v1/query_range", "/api/v1/query"]
        );
        assert_eq!(ui.dashboard_url_templates.len(), 1);
    }

    #[test]
    fn older_keys_and_defaults() {
        let ui = parse_json(json!({"ui_dir": "/old"})).unwrap();
        assert!(!ui.enabled && ui.serves());
        assert_eq!(ui.content_path, "/ui/");
        let ui = parse_json(json!({"ui": true})).unwrap();
        assert!(ui.enabled && ui.dir.is_none());
        assert!(!parse_json(json!({})).unwrap().serves());
        assert!(
            parse_json(json!({"ui_config": {"dashboard_url_templates": {"service": 1}}})).is_err()
        );
        assert!(parse_json(json!({"ui_config": {"dashboard_url_templates": []}})).is_err());
        let proxy = parse_json(json!({"ui_config": {"metrics_proxy": {
            "base_url": "https://prom.internal/prefix",
            "add_headers": [{"name": "Authorization", "value": "Bearer x"}],
            "path_allowlist": ["/api/v1/series"]
        }}}))
        .unwrap()
        .metrics_proxy;
        assert_eq!(
            proxy.add_headers,
            [("Authorization".into(), "Bearer x".into())]
        );
        assert_eq!(proxy.path_allowlist, ["/api/v1/series"]);
        for bad in [
            json!({"base_url": "ftp://x"}),
            json!({"base_url": "prometheus:9090"}),
            json!({"base_url": "http://x", "path_allowlist": ["api/v1/query"]}),
            json!({"base_url": "http://x", "add_headers": [{"name": "X"}]}),
        ] {
            let err = parse_json(json!({"ui_config": {"metrics_proxy": bad}})).unwrap_err();
            assert!(err.0.starts_with("ui_config.metrics_proxy."), "{err:?}");
        }
        for bad in ["/ui\"><script>", "/a b/", "/../x/"] {
            assert!(
                parse_json(json!({"ui_config": {"content_path": bad}})).is_err(),
                "{bad}"
            );
        }
    }
}
