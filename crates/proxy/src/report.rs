//! The proxy's counters per edge, streamed to its agent as Envoy streams its
//! stats to a metrics service sink: one
//! `envoy.service.metrics.v3.MetricsService/StreamMetrics` call over the
//! same gRPC port as xDS (with the proxy's token), the node in the first
//! message, then every [`FLUSH_INTERVAL`] the cumulative counters as
//! Prometheus metric families with the edge's service as a label. A broken
//! stream is opened again with backoff; nothing is buffered meanwhile (the
//! next report carries the totals).

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::metrics::v3::metrics_service_client::MetricsServiceClient;
use envoy_types::pb::envoy::service::metrics::v3::stream_metrics_message::Identifier;
use envoy_types::pb::envoy::service::metrics::v3::StreamMetricsMessage;
use envoy_types::pb::io::prometheus::client::{
    Counter, LabelPair, Metric, MetricFamily, MetricType,
};
use legate_types::traffic::{names, EdgeCounters, ProxyReport};
use tokio::sync::mpsc;

use crate::data::DataPlane;
use crate::xds::{with_token, AgentLink, Backoff};

/// How often the counters go to the agent (Envoy's `stats_flush_interval`
/// is 5 s; the UI's live view wants them sooner).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// The metric families of `report`.
pub fn families(report: &ProxyReport) -> Vec<MetricFamily> {
    type Pick = fn(&EdgeCounters) -> u64;
    let outbound: [(&str, Pick); 5] = [
        (names::UPSTREAM_CONNECTIONS, |c| c.connections),
        (names::UPSTREAM_BYTES_SENT, |c| c.bytes_to_destination),
        (names::UPSTREAM_BYTES_RECEIVED, |c| c.bytes_to_source),
        (names::UPSTREAM_CONNECT_FAILURES, |c| c.connect_failures),
        (names::UPSTREAM_HANDSHAKE_FAILURES, |c| c.handshake_failures),
    ];
    let inbound: [(&str, Pick); 4] = [
        (names::DOWNSTREAM_CONNECTIONS, |c| c.connections),
        (names::DOWNSTREAM_BYTES_RECEIVED, |c| c.bytes_to_destination),
        (names::DOWNSTREAM_BYTES_SENT, |c| c.bytes_to_source),
        (names::DOWNSTREAM_DENIED, |c| c.denied),
    ];
    let mut out = Vec::new();
    for (side, label, table) in [
        (&report.outbound, names::DESTINATION_LABEL, &outbound[..]),
        (&report.inbound, names::SOURCE_LABEL, &inbound[..]),
    ] {
        for (name, pick) in table {
            let metric = side
                .iter()
                .map(|(service, counters)| counter(Some((label, service)), pick(counters)))
                .collect();
            out.push(family(name, metric));
        }
    }
    out.push(family(
        names::DOWNSTREAM_HANDSHAKE_FAILURES,
        vec![counter(None, report.inbound_handshake_failures)],
    ));
    out
}

fn counter(label: Option<(&str, &String)>, value: u64) -> Metric {
    Metric {
        label: label
            .map(|(name, value)| LabelPair {
                name: Some(name.to_string()),
                value: Some(value.clone()),
            })
            .into_iter()
            .collect(),
        counter: Some(Counter {
            value: Some(value as f64),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn family(name: &str, metric: Vec<Metric>) -> MetricFamily {
    MetricFamily {
        name: Some(name.to_string()),
        r#type: Some(MetricType::Counter as i32),
        metric,
        ..Default::default()
    }
}

/// Streams `plane`'s counters to the agent until aborted.
pub async fn run(agent: AgentLink, proxy_id: String, token: String, plane: Arc<DataPlane>) {
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let mut reported = false;
        if let Err(e) = stream(&agent, &proxy_id, &token, &plane, &mut reported).await {
            tracing::debug!(error = %e, "metrics stream to the agent ended; opening it again");
        }
        backoff.wait(reported).await;
    }
}

async fn stream(
    agent: &AgentLink,
    proxy_id: &str,
    token: &str,
    plane: &DataPlane,
    reported: &mut bool,
) -> Result<(), String> {
    let channel = agent.channel().await?;
    let mut client = MetricsServiceClient::new(channel);
    let (tx, rx) = mpsc::channel::<StreamMetricsMessage>(2);
    let request = with_token(tokio_stream::wrappers::ReceiverStream::new(rx), token);
    let mut call = Box::pin(client.stream_metrics(request));
    let mut identifier = Some(Identifier {
        node: Some(Node {
            id: proxy_id.to_string(),
            cluster: proxy_id.to_string(),
            user_agent_name: "legate-proxy".into(),
            ..Default::default()
        }),
    });
    let mut ticks = tokio::time::interval(FLUSH_INTERVAL);
    loop {
        tokio::select! {
            // The agent answers only when it ends the stream.
            ended = &mut call => {
                return match ended {
                    Ok(_) => Ok(()),
                    Err(status) => Err(format!("{:?}: {}", status.code(), status.message())),
                };
            }
            _ = ticks.tick() => {
                let message = StreamMetricsMessage {
                    identifier: identifier.take(),
                    envoy_metrics: families(&plane.stats.edges.report()),
                };
                // A full queue means the agent is not reading: skip this one.
                match tx.try_send(message) {
                    Ok(()) => *reported = true,
                    Err(mpsc::error::TrySendError::Closed(_)) => return Err("the stream closed".into()),
                    Err(mpsc::error::TrySendError::Full(_)) => {}
                }
            }
        }
    }
}
