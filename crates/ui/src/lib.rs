//! The web UI: its assets, built into the binary at compile time (no Node,
//! no network at build, test or run time), and its `index.html` rendered
//! with the agent's settings as Consul's `agent/uiserver` renders it — the
//! template data as JSON in a `<script type="application/json"
//! data-consul-ui-config>` block, asset paths under the content path.
//!
//! A path under the content path is an asset when it names a file (its
//! last segment has an extension); anything else is a client route and gets
//! the app shell. The HTTP layer serves both (see `legate-http`).

use serde_json::{json, Map, Value};

/// One built-in file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// Its bytes.
    pub bytes: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
}

macro_rules! assets {
    ($($path:literal => $kind:literal,)*) => {
        /// Every built-in file by its path under the content path.
        const ASSETS: &[(&str, Asset)] = &[
            $(($path, Asset {
                bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/web/", $path)),
                content_type: $kind,
            }),)*
        ];
    };
}

// Paths as the browser asks for them: `<content path>assets/<file>`, except
// the index and robots.txt.
assets! {
    "index.html" => "text/html; charset=utf-8",
    "robots.txt" => "text/plain; charset=utf-8",
    "assets/app.js" => "text/javascript; charset=utf-8",
    "assets/lib.js" => "text/javascript; charset=utf-8",
    "assets/graph.js" => "text/javascript; charset=utf-8",
    "assets/pages/topology.js" => "text/javascript; charset=utf-8",
    "assets/pages/config.js" => "text/javascript; charset=utf-8",
    "assets/pages/acls.js" => "text/javascript; charset=utf-8",
    "assets/pages/proxy.js" => "text/javascript; charset=utf-8",
    "assets/pages/catalog.js" => "text/javascript; charset=utf-8",
    "assets/pages/kv.js" => "text/javascript; charset=utf-8",
    "assets/pages/intentions.js" => "text/javascript; charset=utf-8",
    "assets/pages/settings.js" => "text/javascript; charset=utf-8",
    "assets/pages/routing.js" => "text/javascript; charset=utf-8",
    "assets/style.css" => "text/css; charset=utf-8",
    "assets/vendor/htm-preact-3.1.1.js" => "text/javascript; charset=utf-8",
    "assets/vendor/LICENSE-htm" => "text/plain; charset=utf-8",
    "assets/vendor/LICENSE-preact" => "text/plain; charset=utf-8",
    "assets/vendor/README.md" => "text/markdown; charset=utf-8",
}

/// Every built-in file with its path (relative to the content path).
pub fn assets() -> impl Iterator<Item = (&'static str, Asset)> {
    ASSETS.iter().map(|(path, asset)| (*path, *asset))
}

/// The built-in file at `path` (relative to the content path).
pub fn asset(path: &str) -> Option<Asset> {
    ASSETS
        .iter()
        .find(|(known, _)| *known == path)
        .map(|(_, asset)| *asset)
}

/// The `Content-Type` of a file served from `ui_config.dir`, by extension.
pub fn content_type_of(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Whether a path under the content path names a file (under `assets/`,
/// or `robots.txt`: a missing one is a 404) rather than a client route
/// (the app shell) — a route may hold dots, as service and node names do.
pub fn names_a_file(path: &str) -> bool {
    path.starts_with("assets/") || path == "robots.txt"
}

/// What the index page is told (Consul's `uiTemplateData`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TemplateData {
    /// Where the UI is served (`/ui/`).
    pub content_path: String,
    /// Whether ACLs are on (the UI then asks for a token).
    pub acls_enabled: bool,
    /// The agent's datacenter.
    pub local_datacenter: String,
    /// The primary datacenter.
    pub primary_datacenter: String,
    /// `ui_config.metrics_provider`.
    pub metrics_provider: String,
    /// Whether `ui_config.metrics_proxy.base_url` is set (the proxy's
    /// settings, which may hold secrets, are never sent).
    pub metrics_proxy_enabled: bool,
    /// `ui_config.dashboard_url_templates`.
    pub dashboard_url_templates: Map<String, Value>,
}

impl TemplateData {
    /// The JSON the page reads: Consul's keys, sorted as Go's map
    /// encoding sorts them.
    pub fn to_json(&self) -> Value {
        let templates = if self.dashboard_url_templates.is_empty() {
            Value::Null
        } else {
            Value::Object(self.dashboard_url_templates.clone())
        };
        json!({
            "ACLsEnabled": self.acls_enabled,
            "ContentPath": self.content_path,
            "HCPEnabled": false,
            "LocalDatacenter": self.local_datacenter,
            "PeeringEnabled": false,
            "PrimaryDatacenter": self.primary_datacenter,
            "UIConfig": {
                "dashboard_url_templates": templates,
                "hcp_enabled": false,
                "metrics_provider": self.metrics_provider,
                "metrics_proxy_enabled": self.metrics_proxy_enabled,
            },
        })
    }
}

/// JSON safe inside a `<script>` block: `<`, `>` and `&` escaped as Go's
/// encoder escapes them, so no value can close the block.
fn script_safe_json(value: &Value) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Renders an index template: `{{.ContentPath}}` and `{{jsonEncode .}}`,
/// the two placeholders Consul's index uses for paths and settings. The
/// content path is refused when the config is read unless it is a plain
/// path (letters, digits, `-._~/`), so it needs no escaping in an
/// attribute.
pub fn render_index(template: &str, data: &TemplateData) -> String {
    template
        .replace("{{.ContentPath}}", &data.content_path)
        .replace("{{jsonEncode .}}", &script_safe_json(&data.to_json()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_asset_is_built_in() {
        for (path, asset) in ASSETS {
            assert!(!asset.bytes.is_empty(), "{path}");
        }
        assert!(asset("assets/app.js").is_some());
        assert!(asset("assets/missing.js").is_none());
    }

    #[test]
    fn every_module_is_preloaded_by_the_index() {
        let index = String::from_utf8_lossy(asset("index.html").unwrap().bytes).to_string();
        for (path, _) in ASSETS {
            if path.ends_with(".js") && *path != "assets/app.js" {
                let link =
                    format!("<link rel=\"modulepreload\" href=\"{{{{.ContentPath}}}}{path}\">");
                assert!(index.contains(&link), "{path} is not preloaded");
            }
        }
    }

    #[test]
    fn files_and_client_routes_are_told_apart() {
        assert!(names_a_file("assets/app.js"));
        assert!(names_a_file("assets/nope.css"));
        assert!(!names_a_file("dc1/services/web"));
        assert!(!names_a_file("dc1/services/web.v2"));
        assert!(!names_a_file("dc1/nodes/ip-10-0-0-1.ec2.internal"));
        assert!(!names_a_file(""));
    }

    #[test]
    fn the_index_carries_the_settings_and_cannot_be_broken_out_of() {
        let data = TemplateData {
            content_path: "/ui/".into(),
            acls_enabled: true,
            local_datacenter: "dc1".into(),
            primary_datacenter: "dc1".into(),
            metrics_provider: "</script><script>alert(1)</script>".into(),
            ..Default::default()
        };
        let template = std::str::from_utf8(asset("index.html").unwrap().bytes).unwrap();
        let page = render_index(template, &data);
        assert!(page.contains("href=\"/ui/assets/style.css\""));
        assert!(page.contains("src=\"/ui/assets/app.js\""));
        assert!(!page.contains("</script><script>alert(1)"));
        let start = page.find("data-consul-ui-config>").unwrap() + "data-consul-ui-config>".len();
        let end = page[start..].find("</script>").unwrap() + start;
        let config: Value = serde_json::from_str(page[start..end].trim()).unwrap();
        assert_eq!(config["ACLsEnabled"], true);
        assert_eq!(config["LocalDatacenter"], "dc1");
        assert_eq!(
            config["UIConfig"]["metrics_provider"],
            "</script><script>alert(1)</script>"
        );
        assert_eq!(config["UIConfig"]["dashboard_url_templates"], Value::Null);
    }
}
