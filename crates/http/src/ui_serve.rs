//! Serving the web UI under `ui_config.content_path` (`/ui/`), as Consul's
//! `agent/uiserver` does: the built-in assets (or `ui_config.dir`), the
//! index rendered with the agent's settings, client routes answered with
//! the index (200), and a missing file 404. `/ui` redirects to `/ui/`,
//! `/ui/index.html` too; `/robots.txt` keeps crawlers out.
//!
//! Every page carries a strict Content-Security-Policy: scripts, styles
//! and connections from the agent only, no inline code, no frames.
//! Built-in text assets go gzipped to clients that accept it (compressed
//! once, on first use).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::AppState;

/// The policy every UI response carries.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn page(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn redirect(to: &str) -> Response {
    (
        StatusCode::MOVED_PERMANENTLY,
        [(header::LOCATION, to.to_string())],
    )
        .into_response()
}

fn not_found() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        b"404 page not found\n".to_vec(),
    )
}

/// The settings the index page is rendered with.
fn template_data(st: &AppState) -> legate_ui::TemplateData {
    let config = st.agent.config();
    legate_ui::TemplateData {
        content_path: config.ui.content_path.clone(),
        acls_enabled: config.acl.enabled,
        local_datacenter: config.datacenter.clone(),
        primary_datacenter: if config.primary_datacenter.is_empty() {
            config.datacenter.clone()
        } else {
            config.primary_datacenter.clone()
        },
        metrics_provider: config.ui.metrics_provider.clone(),
        metrics_proxy_enabled: !config.ui.metrics_proxy.base_url.is_empty(),
        dashboard_url_templates: config
            .ui
            .dashboard_url_templates
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    }
}

fn index(st: &AppState, template: &[u8]) -> Response {
    let rendered = legate_ui::render_index(&String::from_utf8_lossy(template), &template_data(st));
    page(
        StatusCode::OK,
        "text/html; charset=utf-8",
        rendered.into_bytes(),
    )
}

/// A relative path inside `ui_config.dir`, or `None` if it could leave it.
fn inside(rest: &str) -> Option<&str> {
    let safe = !rest.starts_with('/')
        && !rest.contains('\0')
        && !rest.contains('\\')
        && rest.split('/').all(|part| part != "..");
    safe.then_some(rest)
}

async fn from_dir(st: &AppState, dir: &std::path::Path, rest: &str) -> Response {
    let Some(rest) = inside(rest) else {
        return not_found();
    };
    if !rest.is_empty() {
        if let Ok(bytes) = tokio::fs::read(dir.join(rest)).await {
            return page(StatusCode::OK, legate_ui::content_type_of(rest), bytes);
        }
        if legate_ui::names_a_file(rest) {
            return not_found();
        }
    }
    match tokio::fs::read(dir.join("index.html")).await {
        Ok(template) => index(st, &template),
        // Without an index, the directory is served as plain files.
        Err(_) => not_found(),
    }
}

/// Whether an `Accept-Encoding` value accepts gzip: a `gzip` entry
/// decides (refused with `q=0`), else a `*` entry does.
pub fn accepts_gzip(value: &str) -> bool {
    let mut wildcard = None;
    for part in value.split(',') {
        let mut pieces = part.split(';').map(str::trim);
        let coding = pieces.next().unwrap_or("");
        let refused = pieces.any(|p| {
            let p = p.to_ascii_lowercase();
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q == 0.0)
        });
        if coding.eq_ignore_ascii_case("gzip") {
            return !refused;
        }
        if coding == "*" {
            wildcard = Some(!refused);
        }
    }
    wildcard.unwrap_or(false)
}

/// The gzip form of each built-in text asset larger than 1 KiB.
fn gzipped(path: &str) -> Option<&'static [u8]> {
    static CACHE: std::sync::OnceLock<std::collections::HashMap<&'static str, Vec<u8>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| {
        legate_ui::assets()
            .filter(|(_, asset)| {
                asset.bytes.len() > 1024 && asset.content_type.starts_with("text/")
            })
            .filter_map(|(path, asset)| {
                use std::io::Write;
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                encoder.write_all(asset.bytes).ok()?;
                Some((path, encoder.finish().ok()?))
            })
            .collect()
    });
    cache.get(path).map(Vec::as_slice)
}

fn built_in(rest: &str, asset: legate_ui::Asset, gzip: bool) -> Response {
    let compressed = gzip.then(|| gzipped(rest)).flatten();
    let mut response = page(
        StatusCode::OK,
        asset.content_type,
        compressed.unwrap_or(asset.bytes).to_vec(),
    );
    let headers = response.headers_mut();
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if compressed.is_some() {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// The UI's answer for `path` (gzipped where the client accepts it and it
/// helps), or `None` when the path is not the UI's (or the UI is off).
pub async fn answer(st: &AppState, path: &str, gzip: bool) -> Option<Response> {
    let config = st.agent.config();
    let ui = &config.ui;
    if !ui.serves() {
        return None;
    }
    if path == "/robots.txt" {
        let robots = legate_ui::asset("robots.txt")?;
        return Some(page(
            StatusCode::OK,
            robots.content_type,
            robots.bytes.to_vec(),
        ));
    }
    let root = ui.content_path.as_str();
    if path == root.trim_end_matches('/') && root != "/" {
        return Some(redirect(root));
    }
    let rest = path.strip_prefix(root)?;
    if rest == "index.html" {
        return Some(redirect(root));
    }
    if let Some(dir) = &ui.dir {
        return Some(from_dir(st, dir, rest).await);
    }
    if let Some(asset) = legate_ui::asset(rest) {
        return Some(built_in(rest, asset, gzip));
    }
    if legate_ui::names_a_file(rest) {
        return Some(not_found());
    }
    let template = legate_ui::asset("index.html")?;
    Some(index(st, template.bytes))
}

#[cfg(test)]
mod tests {
    use super::accepts_gzip;

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        assert!(accepts_gzip("gzip, deflate, br"));
        assert!(accepts_gzip("br;q=1.0, GZIP;q=0.5"));
        assert!(accepts_gzip("*"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("gzip;Q=0, *"));
        assert!(!accepts_gzip("*;q=0"));
        assert!(!accepts_gzip("br, deflate"));
        assert!(!accepts_gzip(""));
    }
}
