//! `ui_config { }` (and the older top-level `ui` and `ui_dir`): whether the
//! web UI is served, from where (`dir` instead of the assets built into the
//! binary), under which path, and what the UI is told about metrics and
//! dashboards.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::config::{get, get_bool, get_str, string_map, ConfigError};

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
    /// `metrics_proxy.base_url` (empty: the proxy is off).
    pub metrics_proxy_base_url: String,
    /// `dashboard_url_templates` (`service` → a URL with placeholders).
    pub dashboard_url_templates: BTreeMap<String, String>,
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
    Ok(UiConfig {
        enabled: get_bool(map, &["ui"])?
            .or(get_bool(map, &["ui_config", "enabled"])?)
            .unwrap_or(false),
        dir,
        content_path: content_path(get_str(map, &["ui_config", "content_path"])?)?,
        metrics_provider: get_str(map, &["ui_config", "metrics_provider"])?.unwrap_or_default(),
        metrics_proxy_base_url: get_str(map, &["ui_config", "metrics_proxy", "base_url"])?
            .unwrap_or_default(),
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
        assert_eq!(ui.metrics_proxy_base_url, "http://prometheus:9090");
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
        for bad in ["/ui\"><script>", "/a b/", "/../x/"] {
            assert!(
                parse_json(json!({"ui_config": {"content_path": bad}})).is_err(),
                "{bad}"
            );
        }
    }
}
