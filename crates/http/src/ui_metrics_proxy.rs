//! `GET /v1/internal/ui/metrics-proxy/*`: a read-only proxy from the UI to
//! one metrics backend (`ui_config.metrics_proxy`), with Consul's rules
//! (`agent/ui_endpoint.go`, `UIMetricsProxy`):
//!
//! - 404 `UI is not enabled` with the UI off, 404 `Metrics proxy is not
//!   enabled` without a `base_url`;
//! - the token is read from the headers only (`X-Consul-Token`,
//!   `Authorization: Bearer`), never from `?token=` (a backend may use that
//!   name), and is removed before the request goes on;
//! - `node:read` and `service:read` on every name are required;
//! - the path after the prefix is appended to `base_url`, cleaned (`.`,
//!   `..`, repeated and trailing slashes), checked against
//!   `path_allowlist` (403 with no body when not listed) and against
//!   `base_url` still being its prefix (400 `Invalid path.`);
//! - the query string goes through unchanged, `add_headers` are set (a
//!   `Host` one becomes the request's host), and the answer comes back as
//!   the backend gave it (status, headers but hop-by-hop ones, body
//!   streamed). Redirects are passed back, not followed.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use legate_acl::{Access, Resource};

use crate::util::{self, ApiError};
use crate::AppState;

const PREFIX: &str = "/v1/internal/ui/metrics-proxy";

/// Headers that belong to one connection and are never passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap_or_default()
    })
}

/// Go's `path.Clean`: `.` and `..` resolved, repeated slashes folded, no
/// trailing slash (but the root).
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The backend URL a request path leads to (without its query), or why
/// not: `Err(None)` for a path outside the allowlist, `Err(Some(_))` for
/// an invalid one.
pub fn target_url(
    base_url: &str,
    sub_path: &str,
    allowlist: &[String],
) -> Result<reqwest::Url, Option<ApiError>> {
    let invalid = || Some(ApiError::bad_request("Invalid path."));
    let base = reqwest::Url::parse(base_url).map_err(|_| invalid())?;
    let mut url = reqwest::Url::parse(&format!("{base_url}{sub_path}")).map_err(|_| invalid())?;
    let cleaned = clean_path(url.path());
    url.set_path(&cleaned);
    if !allowlist.is_empty() && !allowlist.contains(&cleaned) {
        return Err(None);
    }
    // Still the base's server, and within its path segment by segment
    // (`/prefix` does not cover `/prefix-admin`).
    let base_path = base.path().trim_end_matches('/');
    let within = cleaned == base_path
        || base_path.is_empty()
        || cleaned.starts_with(&format!("{base_path}/"));
    let same_server = url.scheme() == base.scheme()
        && url.host_str() == base.host_str()
        && url.port_or_known_default() == base.port_or_known_default();
    if !within || !same_server {
        return Err(invalid());
    }
    Ok(url)
}

/// `GET /v1/internal/ui/metrics-proxy/*`.
pub async fn metrics_proxy(
    State(st): State<AppState>,
    OriginalUri(uri): OriginalUri,
    mut headers: HeaderMap,
) -> Result<Response, ApiError> {
    let config = st.agent.config();
    if !config.ui.serves() {
        return Err(ApiError::not_found("UI is not enabled"));
    }
    let proxy = &config.ui.metrics_proxy;
    if proxy.base_url.is_empty() {
        return Err(ApiError::not_found("Metrics proxy is not enabled"));
    }
    // Only the headers carry the token here, and it goes no further.
    let token = util::token(&headers, &util::Params::default());
    headers.remove("x-consul-token");
    if headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("bearer"))
    {
        headers.remove("authorization");
    }
    let acl = st.agent.acl();
    if let Some(resolved) = acl.resolve(&acl.effective_secret(&token)).await? {
        resolved.check_all(Resource::Node, Access::Read)?;
        resolved.check_all(Resource::Service, Access::Read)?;
    }
    let sub_path = uri.path().strip_prefix(PREFIX).unwrap_or("");
    let mut url = match target_url(&proxy.base_url, sub_path, &proxy.path_allowlist) {
        Ok(url) => url,
        Err(None) => {
            tracing::error!(base_url = %proxy.base_url, path = %sub_path, "metrics proxy: target URL path is not allowed");
            return Ok(StatusCode::FORBIDDEN.into_response());
        }
        Err(Some(e)) => return Err(e),
    };
    url.set_query(uri.query());
    let mut request = client().get(url.clone());
    // The configured headers replace the caller's of the same name.
    let configured = |name: &str| {
        proxy
            .add_headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(&name.as_str()) && !configured(name.as_str()) {
            request = request.header(name, value);
        }
    }
    for (name, value) in &proxy.add_headers {
        request = request.header(name.as_str(), value.as_str());
    }
    tracing::debug!(to = %url, "metrics proxy: proxying request");
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!(to = %url, error = %e, "metrics proxy: the backend did not answer");
            return Ok(StatusCode::BAD_GATEWAY.into_response());
        }
    };
    let status = answer.status();
    let mut out = HeaderMap::new();
    for (name, value) in answer.headers() {
        if HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            out.append(name, value);
        }
    }
    let body = futures::stream::unfold(Some(answer), |state| async move {
        let mut answer = state?;
        match answer.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, reqwest::Error>(chunk), Some(answer))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() =
        StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    *response.headers_mut() = out;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_and_kept_under_the_base() {
        assert_eq!(clean_path("/a//b/./c/../d/"), "/a/b/d");
        assert_eq!(clean_path("/../../etc/passwd"), "/etc/passwd");
        assert_eq!(clean_path(""), "/");
        let allow = ["/api/v1/query".to_string()];
        let ok = target_url("http://prom:9090", "/api/v1/query", &allow).unwrap();
        assert_eq!(ok.as_str(), "http://prom:9090/api/v1/query");
        assert!(matches!(
            target_url("http://prom:9090", "/api/v1/series", &allow),
            Err(None)
        ));
        // A prefix on the base cannot be left by `..`.
        let escaped = target_url("http://prom:9090/prefix", "/../admin", &[]);
        assert!(matches!(escaped, Err(Some(ref e)) if e.message == "Invalid path."));
        let within = target_url("http://prom:9090/prefix", "/x/../api/v1/query", &[]).unwrap();
        assert_eq!(within.path(), "/prefix/api/v1/query");
        // A sibling path sharing the base's letters is outside it.
        let sibling = target_url("http://prom:9090/prefix", "/../prefix-admin/x", &[]);
        assert!(matches!(sibling, Err(Some(_))), "{sibling:?}");
        // Bases the URL parser rewrites still hold their own paths.
        for base in ["http://PROM:80", "http://prom/", "http://prom:9090/p/"] {
            assert!(target_url(base, "/api/v1/query", &[]).is_ok(), "{base}");
        }
    }
}
