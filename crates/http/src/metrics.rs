//! `GET /v1/agent/metrics`: the process metrics as Consul's JSON (Gauges,
//! Counters, Samples), or Prometheus text with `?format=prometheus`.

use axum::http::HeaderValue;
use axum::response::IntoResponse;
use serde_json::{json, Value};

use crate::util::{json, ApiResult};
use crate::Req;

/// Whether an `Accept` header asks for Prometheus' format (Consul's
/// `acceptsOpenMetricsMimeType`): `application/openmetrics-text`, or
/// `text/plain` whose first parameter is `version=0.4.0`.
fn accepts_open_metrics(accept: &str) -> bool {
    accept.split(',').any(|kind| {
        let mut parts = kind.split(';');
        let mime = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        mime == "application/openmetrics-text"
            || (mime == "text/plain" && parts.next().map(str::trim) == Some("version=0.4.0"))
    })
}

/// The handler: Consul's JSON summary, or Prometheus text when
/// `?format=prometheus` or the `Accept` header asks for it — only with
/// `telemetry.prometheus_retention_time` set, else Consul's 415.
pub async fn agent_metrics(
    axum::extract::State(st): axum::extract::State<crate::AppState>,
    req: Req,
) -> ApiResult {
    crate::agent_acl::check_agent(&st, &req, legate_acl::Access::Read).await?;
    let accept = req
        .headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if req.params.get("format") == Some("prometheus") || accepts_open_metrics(accept) {
        if st.agent.config().telemetry.prometheus_retention.is_none() {
            let mut response = (
                axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Prometheus is not enabled since its retention time is not positive",
            )
                .into_response();
            response
                .headers_mut()
                .insert("content-type", HeaderValue::from_static("text/plain"));
            return Ok(response);
        }
        let out = legate_telemetry::installed()
            .and_then(|telemetry| telemetry.prometheus())
            .unwrap_or_default();
        let mut response = out.into_response();
        response.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        return Ok(response);
    }
    Ok(json(&req.params, &summary()))
}

/// The metrics in go-metrics' in-memory summary shape (`/v1/agent/metrics`):
/// the last finished 10 s interval; empty lists when no recorder runs.
fn summary() -> Value {
    legate_telemetry::installed()
        .map(|telemetry| telemetry.summary())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            json!({"Timestamp": legate_telemetry::go_time(now), "Gauges": [], "Points": [],
                   "Counters": [], "Samples": []})
        })
}

/// How often `/v1/agent/metrics/stream` writes a summary (go-metrics'
/// in-memory interval, as Consul's agent runs it).
pub const STREAM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// `GET /v1/agent/metrics/stream`: `agent:read`; a 200 at once, then
/// every [`STREAM_INTERVAL`] one indented summary, until the client goes.
pub async fn agent_metrics_stream(
    axum::extract::State(st): axum::extract::State<crate::AppState>,
    req: Req,
) -> ApiResult {
    crate::agent_acl::check_agent(&st, &req, legate_acl::Access::Read).await?;
    let ticks = futures::stream::unfold((), |()| async {
        tokio::time::sleep(STREAM_INTERVAL).await;
        // Consul's stream indents by four spaces.
        let mut text = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut text, formatter);
        let _ = serde::Serialize::serialize(&summary(), &mut serializer);
        text.push(b'\n');
        Some((Ok::<_, std::io::Error>(text), ()))
    });
    let mut response = axum::body::Body::from_stream(ticks).into_response();
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::accepts_open_metrics;

    #[test]
    fn accept_headers_choose_prometheus_as_consul_does() {
        assert!(accepts_open_metrics(
            "application/openmetrics-text; version=1.0.0"
        ));
        assert!(accepts_open_metrics("text/html, text/plain; version=0.4.0"));
        assert!(accepts_open_metrics("Application/OpenMetrics-Text"));
        assert!(!accepts_open_metrics("text/plain"));
        assert!(!accepts_open_metrics(
            "text/plain; charset=utf-8; version=0.4.0"
        ));
        assert!(!accepts_open_metrics("application/json"));
        assert!(!accepts_open_metrics(""));
    }
}
