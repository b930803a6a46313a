//! Envoy's metrics service (`envoy.service.metrics.v3.MetricsService`) on
//! the agent's gRPC port: where local proxies stream their traffic counters
//! per edge (`legate connect proxy` does; see `legate_proxy::report`). A
//! stream names its proxy in its first message; the proxy must be one
//! this agent serves, and the stream's token (`x-consul-token`) must be
//! one that may configure it, asked again whenever ACLs change. Each
//! message's counters replace the proxy's last ones in the
//! [`TrafficStore`]; what it keeps is bounded there.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::metrics::v3::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use envoy_types::pb::envoy::service::metrics::v3::{StreamMetricsMessage, StreamMetricsResponse};
use envoy_types::pb::io::prometheus::client::MetricFamily;
use legate_types::traffic::{names, EdgeCounters, ProxyReport, TrafficStore};
use tonic::{Request, Response, Status, Streaming};

use crate::server::{SnapshotSource, StreamAcl};

/// The largest message a proxy may send.
const MAX_MESSAGE: usize = 1 << 20;

/// How long a new stream has to name its proxy.
const FIRST_MESSAGE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Reports closer together than this are ignored (rates need an interval).
const MIN_REPORT_GAP: std::time::Duration = std::time::Duration::from_millis(900);

/// The metrics service: counters from local proxies into a [`TrafficStore`].
#[derive(Clone)]
pub struct TrafficSink {
    source: Arc<dyn SnapshotSource>,
    acl: Option<Arc<dyn StreamAcl>>,
    store: Arc<TrafficStore>,
}

impl TrafficSink {
    /// A sink for the proxies `source` knows, admitted by `acl` when set.
    pub fn new(
        source: Arc<dyn SnapshotSource>,
        acl: Option<Arc<dyn StreamAcl>>,
        store: Arc<TrafficStore>,
    ) -> TrafficSink {
        TrafficSink { source, acl, store }
    }

    /// The tonic service.
    pub fn into_service(self) -> MetricsServiceServer<TrafficSink> {
        MetricsServiceServer::new(self).max_decoding_message_size(MAX_MESSAGE)
    }

    async fn admit(&self, proxy_id: &str, token: &str) -> Result<(), Status> {
        match &self.acl {
            Some(acl) => acl.admit(proxy_id, token).await.map(|_| ()),
            None => Ok(()),
        }
    }
}

/// The report the metric families carry (families and labels this agent
/// does not know are ignored).
pub fn report_of(families: &[MetricFamily]) -> ProxyReport {
    let mut report = ProxyReport::default();
    for family in families {
        let name = family.name.as_deref().unwrap_or_default();
        let (label, field): (&str, fn(&mut EdgeCounters) -> &mut u64) = match name {
            names::UPSTREAM_CONNECTIONS => (names::DESTINATION_LABEL, |c| &mut c.connections),
            names::UPSTREAM_BYTES_SENT => {
                (names::DESTINATION_LABEL, |c| &mut c.bytes_to_destination)
            }
            names::UPSTREAM_BYTES_RECEIVED => {
                (names::DESTINATION_LABEL, |c| &mut c.bytes_to_source)
            }
            names::UPSTREAM_CONNECT_FAILURES => {
                (names::DESTINATION_LABEL, |c| &mut c.connect_failures)
            }
            names::UPSTREAM_HANDSHAKE_FAILURES => {
                (names::DESTINATION_LABEL, |c| &mut c.handshake_failures)
            }
            names::DOWNSTREAM_CONNECTIONS => (names::SOURCE_LABEL, |c| &mut c.connections),
            names::DOWNSTREAM_BYTES_RECEIVED => {
                (names::SOURCE_LABEL, |c| &mut c.bytes_to_destination)
            }
            names::DOWNSTREAM_BYTES_SENT => (names::SOURCE_LABEL, |c| &mut c.bytes_to_source),
            names::DOWNSTREAM_DENIED => (names::SOURCE_LABEL, |c| &mut c.denied),
            names::DOWNSTREAM_HANDSHAKE_FAILURES => {
                report.inbound_handshake_failures = family
                    .metric
                    .iter()
                    .map(|m| value_of(m.counter.as_ref().and_then(|c| c.value)))
                    .sum();
                continue;
            }
            _ => continue,
        };
        let side = if label == names::DESTINATION_LABEL {
            &mut report.outbound
        } else {
            &mut report.inbound
        };
        for metric in &family.metric {
            let Some(service) = metric
                .label
                .iter()
                .find(|l| l.name.as_deref() == Some(label))
                .and_then(|l| l.value.clone())
                .filter(|s| !s.is_empty())
            else {
                continue;
            };
            // Past the bound a new edge is not taken (the store trims too).
            if !side.contains_key(&service) && side.len() > legate_types::traffic::MAX_EDGES {
                continue;
            }
            let value = value_of(metric.counter.as_ref().and_then(|c| c.value));
            *field(side.entry(service).or_default()) = value;
        }
    }
    report
}

/// A counter's value as a count (negative, NaN or missing: 0).
fn value_of(value: Option<f64>) -> u64 {
    match value {
        Some(v) if v.is_finite() && v > 0.0 => v as u64,
        _ => 0,
    }
}

type Answer = Result<Response<StreamMetricsResponse>, Status>;

#[tonic::async_trait]
impl MetricsService for TrafficSink {
    async fn stream_metrics(&self, request: Request<Streaming<StreamMetricsMessage>>) -> Answer {
        let token = request
            .metadata()
            .get("x-consul-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(FIRST_MESSAGE_WITHIN, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no message named the proxy in time"))??;
        let Some(first) = first else {
            return Ok(Response::new(StreamMetricsResponse {}));
        };
        let proxy_id = first
            .identifier
            .as_ref()
            .and_then(|i| i.node.as_ref())
            .map(|n| n.id.clone())
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                Status::invalid_argument(
                    "the first message must name its node (identifier.node.id)",
                )
            })?;
        let mut changes = self.acl.as_ref().map(|acl| {
            let mut changes = acl.changes();
            changes.borrow_and_update();
            changes
        });
        // The token first: a caller that may not configure the proxy
        // learns nothing about which proxies exist.
        self.admit(&proxy_id, &token).await?;
        let Some(snapshots) = self.source.watch(&proxy_id) else {
            return Err(Status::not_found(format!(
                "no proxy {proxy_id:?} is registered with this agent"
            )));
        };
        let mut next: Option<StreamMetricsMessage> = Some(first);
        let mut last_recorded: Option<Instant> = None;
        loop {
            let due = last_recorded.is_none_or(|at| at.elapsed() >= MIN_REPORT_GAP);
            if let Some(message) = next.take().filter(|_| due) {
                let service = snapshots
                    .borrow()
                    .as_ref()
                    .map(|s| s.destination_service.clone());
                if let Some(service) = service {
                    let (report, _) = report_of(&message.envoy_metrics).bounded();
                    self.store
                        .record(&proxy_id, &service, report, Instant::now());
                    last_recorded = Some(Instant::now());
                }
            }
            let acl_changed: Pin<Box<dyn std::future::Future<Output = bool> + Send>> =
                match changes.as_mut() {
                    Some(c) => Box::pin(async move { c.changed().await.is_ok() }),
                    None => Box::pin(std::future::pending()),
                };
            tokio::select! {
                message = inbound.message() => match message? {
                    Some(m) => next = Some(m),
                    None => return Ok(Response::new(StreamMetricsResponse {})),
                },
                moved = acl_changed => {
                    if !moved {
                        changes = None;
                    }
                    self.admit(&proxy_id, &token).await?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::io::prometheus::client::{Counter, LabelPair, Metric};

    fn family(name: &str, label: Option<(&str, &str)>, value: f64) -> MetricFamily {
        MetricFamily {
            name: Some(name.into()),
            metric: vec![Metric {
                label: label
                    .map(|(n, v)| LabelPair {
                        name: Some(n.into()),
                        value: Some(v.into()),
                    })
                    .into_iter()
                    .collect(),
                counter: Some(Counter {
                    value: Some(value),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn families_become_edges_and_odd_ones_are_ignored() {
        let report = report_of(&[
            family(
                names::UPSTREAM_CONNECTIONS,
                Some((names::DESTINATION_LABEL, "db")),
                3.0,
            ),
            family(
                names::UPSTREAM_BYTES_SENT,
                Some((names::DESTINATION_LABEL, "db")),
                12.0,
            ),
            family(
                names::DOWNSTREAM_DENIED,
                Some((names::SOURCE_LABEL, "web")),
                1.0,
            ),
            family(names::DOWNSTREAM_HANDSHAKE_FAILURES, None, 2.0),
            // Unknown name, missing label, wrong label, negative and NaN values.
            family("envoy_other", Some((names::SOURCE_LABEL, "x")), 1.0),
            family(names::DOWNSTREAM_CONNECTIONS, None, 5.0),
            family(
                names::DOWNSTREAM_CONNECTIONS,
                Some((names::DESTINATION_LABEL, "y")),
                5.0,
            ),
            family(
                names::UPSTREAM_BYTES_RECEIVED,
                Some((names::DESTINATION_LABEL, "db")),
                -4.0,
            ),
            family(
                names::UPSTREAM_CONNECT_FAILURES,
                Some((names::DESTINATION_LABEL, "db")),
                f64::NAN,
            ),
        ]);
        let db = report.outbound["db"];
        assert_eq!(
            (db.connections, db.bytes_to_destination, db.bytes_to_source),
            (3, 12, 0)
        );
        assert_eq!(db.connect_failures, 0);
        assert_eq!(report.inbound.len(), 1);
        assert_eq!(report.inbound["web"].denied, 1);
        assert_eq!(report.inbound_handshake_failures, 2);
    }
}
