//! `GET /v1/agent/metrics`: the process metrics as Consul's JSON (Gauges,
//! Counters, Samples), or Prometheus text with `?format=prometheus`.

use axum::http::HeaderValue;
use axum::response::IntoResponse;
use legate_types::metrics::{snapshot, Labels};
use serde_json::{json, Map, Value};

use crate::util::{json, ApiResult};
use crate::Req;

fn labels_json(labels: &Labels) -> Value {
    Value::Object(
        labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<String, Value>>(),
    )
}

fn prometheus_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn prometheus_labels(labels: &Labels) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            format!(
                "{}=\"{}\"",
                prometheus_name(k),
                v.replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

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
    let r = snapshot();
    let accept = req
        .headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if req.params.get("format") == Some("prometheus") || accepts_open_metrics(accept) {
        if st.agent.config().prometheus_retention.is_none() {
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
        let mut out = String::new();
        for ((name, labels), v) in &r.gauges {
            out.push_str(&format!(
                "{}{} {v}\n",
                prometheus_name(name),
                prometheus_labels(labels)
            ));
        }
        for ((name, labels), v) in &r.counters {
            out.push_str(&format!(
                "{}{} {v}\n",
                prometheus_name(name),
                prometheus_labels(labels)
            ));
        }
        for ((name, labels), s) in &r.samples {
            let n = prometheus_name(name);
            let l = prometheus_labels(labels);
            out.push_str(&format!("{n}_count{l} {}\n{n}_sum{l} {}\n", s.count, s.sum));
        }
        let mut response = out.into_response();
        response.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        return Ok(response);
    }
    Ok(json(&req.params, &summary(&r)))
}

/// The metrics in go-metrics' in-memory summary shape (`/v1/agent/metrics`).
fn summary(r: &legate_types::metrics::Registry) -> Value {
    let timestamp = legate_types::metrics_timestamp();
    let gauges: Vec<Value> = r
        .gauges
        .iter()
        .map(|((name, labels), v)| json!({"Name": name, "Value": v, "Labels": labels_json(labels)}))
        .collect();
    let counters: Vec<Value> = r
        .counters
        .iter()
        .map(|((name, labels), v)| {
            json!({"Name": name, "Count": v, "Rate": 0.0, "Sum": v, "Min": 1, "Max": 1, "Mean": 1,
                   "Stddev": 0, "Labels": labels_json(labels)})
        })
        .collect();
    let samples: Vec<Value> = r
        .samples
        .iter()
        .map(|((name, labels), s)| {
            let mean = if s.count == 0 {
                0.0
            } else {
                s.sum / s.count as f64
            };
            json!({"Name": name, "Count": s.count, "Rate": 0.0, "Sum": s.sum, "Min": s.min,
                   "Max": s.max, "Mean": mean, "Stddev": 0.0, "Labels": labels_json(labels)})
        })
        .collect();
    json!({"Timestamp": timestamp, "Gauges": gauges, "Points": [], "Counters": counters, "Samples": samples})
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
        let mut text = serde_json::to_string_pretty(&summary(&snapshot())).unwrap_or_default();
        text.push('\n');
        Some((Ok::<_, std::io::Error>(text.into_bytes()), ()))
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
