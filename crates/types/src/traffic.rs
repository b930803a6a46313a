//! Live traffic between services, as the agent's local proxies report it:
//! each proxy streams its cumulative counters per edge (outbound per
//! destination service, inbound per source service) to its agent; the
//! agent keeps the last two reports of each proxy ([`TrafficStore`]) and
//! answers per service with totals and rates ([`ServiceTraffic`]).
//!
//! What the store keeps is bounded: only proxies the agent runs report, at
//! most [`MAX_EDGES`] edges per direction per report, and a proxy that has
//! not reported for [`FORGET_AFTER`] is dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The most edges per direction one report may carry; more are dropped.
pub const MAX_EDGES: usize = 512;

/// How long a proxy's last report is kept once it stops reporting.
pub const FORGET_AFTER: Duration = Duration::from_secs(300);

/// A report older than this gives no rates (its proxy stopped reporting;
/// proxies report every 2 s).
pub const RATES_FRESH_FOR: Duration = Duration::from_secs(6);

/// The counters a proxy streams to its agent, as Envoy's metrics service
/// carries them (`envoy.service.metrics.v3.MetricsService/StreamMetrics`,
/// Prometheus metric families, the edge's service as a label).
pub mod names {
    /// Label naming the destination service of an outbound counter.
    pub const DESTINATION_LABEL: &str = "consul_destination_service";
    /// Label naming the source service of an inbound counter.
    pub const SOURCE_LABEL: &str = "consul_source_service";
    /// Outbound connections made, per destination.
    pub const UPSTREAM_CONNECTIONS: &str = "envoy_cluster_upstream_cx_total";
    /// Outbound bytes sent toward the destination.
    pub const UPSTREAM_BYTES_SENT: &str = "envoy_cluster_upstream_cx_tx_bytes_total";
    /// Outbound bytes received from the destination.
    pub const UPSTREAM_BYTES_RECEIVED: &str = "envoy_cluster_upstream_cx_rx_bytes_total";
    /// Outbound connections that could not be made.
    pub const UPSTREAM_CONNECT_FAILURES: &str = "envoy_cluster_upstream_cx_connect_fail";
    /// Outbound TLS handshakes that failed.
    pub const UPSTREAM_HANDSHAKE_FAILURES: &str = "envoy_cluster_ssl_connection_error";
    /// Inbound connections let through by intentions, per source.
    pub const DOWNSTREAM_CONNECTIONS: &str = "envoy_tcp_downstream_cx_total";
    /// Inbound bytes received from the source (toward the destination).
    pub const DOWNSTREAM_BYTES_RECEIVED: &str = "envoy_tcp_downstream_cx_rx_bytes_total";
    /// Inbound bytes sent back to the source.
    pub const DOWNSTREAM_BYTES_SENT: &str = "envoy_tcp_downstream_cx_tx_bytes_total";
    /// Inbound connections refused by intentions, per source.
    pub const DOWNSTREAM_DENIED: &str = "envoy_rbac_denied";
    /// Inbound TLS handshakes that failed (no label).
    pub const DOWNSTREAM_HANDSHAKE_FAILURES: &str = "envoy_listener_ssl_connection_error";
}

/// One edge's cumulative counters, as one side of it counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EdgeCounters {
    /// Connections let through (inbound: after the intention check).
    pub connections: u64,
    /// Connections refused by intentions (inbound only).
    pub denied: u64,
    /// Bytes toward the destination (the caller's requests).
    pub bytes_to_destination: u64,
    /// Bytes toward the source (the answers).
    pub bytes_to_source: u64,
    /// TLS handshakes with the destination that failed (outbound only).
    pub handshake_failures: u64,
    /// Connections to the destination that could not be made (outbound only).
    pub connect_failures: u64,
}

impl EdgeCounters {
    fn add(&mut self, other: &EdgeCounters) {
        self.connections += other.connections;
        self.denied += other.denied;
        self.bytes_to_destination += other.bytes_to_destination;
        self.bytes_to_source += other.bytes_to_source;
        self.handshake_failures += other.handshake_failures;
        self.connect_failures += other.connect_failures;
    }

    /// What grew from `earlier` to `self` (a counter that went back, as
    /// after a proxy restart, counts from zero).
    fn since(&self, earlier: &EdgeCounters) -> EdgeCounters {
        let grew = |now: u64, then: u64| if now >= then { now - then } else { now };
        EdgeCounters {
            connections: grew(self.connections, earlier.connections),
            denied: grew(self.denied, earlier.denied),
            bytes_to_destination: grew(self.bytes_to_destination, earlier.bytes_to_destination),
            bytes_to_source: grew(self.bytes_to_source, earlier.bytes_to_source),
            handshake_failures: grew(self.handshake_failures, earlier.handshake_failures),
            connect_failures: grew(self.connect_failures, earlier.connect_failures),
        }
    }
}

/// One report of a proxy: its cumulative counters since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyReport {
    /// Per destination service, what this proxy sent through its upstreams.
    pub outbound: BTreeMap<String, EdgeCounters>,
    /// Per source service, what reached this proxy's public listener.
    pub inbound: BTreeMap<String, EdgeCounters>,
    /// Inbound TLS handshakes that failed (no source service is known).
    pub inbound_handshake_failures: u64,
}

impl ProxyReport {
    /// The report with at most [`MAX_EDGES`] edges per direction; the
    /// count of edges dropped.
    pub fn bounded(mut self) -> (ProxyReport, usize) {
        let mut dropped = 0;
        for side in [&mut self.outbound, &mut self.inbound] {
            while side.len() > MAX_EDGES {
                side.pop_last();
                dropped += 1;
            }
        }
        (self, dropped)
    }
}

struct Reported {
    service: String,
    latest: (Instant, ProxyReport),
    previous: Option<(Instant, ProxyReport)>,
}

/// The last two reports of every local proxy that reports.
#[derive(Default)]
pub struct TrafficStore {
    proxies: Mutex<HashMap<String, Reported>>,
}

/// Counters of one edge (`Source` → `Destination`) with the rates of the
/// last report interval, in the JSON form `/v1/internal/ui/traffic` serves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TrafficEdge {
    /// The calling service.
    pub source: String,
    /// The called service.
    pub destination: String,
    /// The edge's counters: connections let through and bytes as the
    /// destination's proxies count them (the source's when the
    /// destination's proxies do not report here), denials as the
    /// destination counts them, handshake and connect failures as the
    /// source does.
    #[serde(flatten)]
    pub counters: EdgeCounters,
    /// Connections (let through or denied) per second over the last interval.
    pub connections_per_second: f64,
    /// Bytes (both ways) per second over the last interval.
    pub bytes_per_second: f64,
    /// Whose counters these are: `destination`, `source` or both.
    pub measured_at: Vec<String>,
}

/// A service's edges both ways (`GET /v1/internal/ui/traffic/:service`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceTraffic {
    /// The service.
    pub service: String,
    /// The local proxies of the service that report.
    pub reported_by: Vec<String>,
    /// Edges from this service to the services it calls.
    pub upstreams: Vec<TrafficEdge>,
    /// Edges from the services that call this one.
    pub downstreams: Vec<TrafficEdge>,
    /// Inbound TLS handshakes that failed at this service's proxies.
    pub inbound_handshake_failures: u64,
    /// Whether edges were left out because the token may not read their
    /// other service.
    #[serde(rename = "FilteredByACLs")]
    pub filtered_by_acls: bool,
}

/// One side's view of an edge: totals and the growth of the last interval.
#[derive(Default, Clone, Copy)]
struct SideView {
    totals: EdgeCounters,
    growth: EdgeCounters,
    seconds: f64,
    seen: bool,
}

impl SideView {
    fn add(&mut self, now: &EdgeCounters, before: Option<&EdgeCounters>, seconds: f64) {
        self.seen = true;
        self.totals.add(now);
        if let Some(before) = before {
            self.growth.add(&now.since(before));
            self.seconds = self.seconds.max(seconds);
        }
    }
}

fn per_second(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

fn edge(source: &str, destination: &str, at_source: SideView, at_dest: SideView) -> TrafficEdge {
    // The destination's count of what it let through and refused is the
    // truth about the edge; the source's fills in when it is all we have.
    let main = if at_dest.seen { at_dest } else { at_source };
    let mut measured_at = Vec::new();
    if at_dest.seen {
        measured_at.push("destination".to_string());
    }
    if at_source.seen {
        measured_at.push("source".to_string());
    }
    let g = main.growth;
    TrafficEdge {
        source: source.to_string(),
        destination: destination.to_string(),
        counters: EdgeCounters {
            connections: main.totals.connections,
            denied: at_dest.totals.denied,
            bytes_to_destination: main.totals.bytes_to_destination,
            bytes_to_source: main.totals.bytes_to_source,
            handshake_failures: at_source.totals.handshake_failures,
            connect_failures: at_source.totals.connect_failures,
        },
        connections_per_second: per_second(g.connections + at_dest.growth.denied, main.seconds),
        bytes_per_second: per_second(g.bytes_to_destination + g.bytes_to_source, main.seconds),
        measured_at,
    }
}

impl TrafficStore {
    /// Records `report` from proxy `proxy_id` of `service`, at `now`.
    pub fn record(&self, proxy_id: &str, service: &str, report: ProxyReport, now: Instant) {
        let mut proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        proxies.retain(|_, r| now.saturating_duration_since(r.latest.0) < FORGET_AFTER);
        match proxies.get_mut(proxy_id) {
            Some(r) if r.service == service => {
                let previous = std::mem::replace(&mut r.latest, (now, report));
                r.previous = Some(previous);
            }
            _ => {
                proxies.insert(
                    proxy_id.to_string(),
                    Reported {
                        service: service.to_string(),
                        latest: (now, report),
                        previous: None,
                    },
                );
            }
        }
    }

    /// How many proxies have reports kept.
    pub fn len(&self) -> usize {
        self.proxies.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no proxy has a report kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `service`'s edges both ways at `now`, from every report kept.
    pub fn service(&self, service: &str, now: Instant) -> ServiceTraffic {
        let proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = ServiceTraffic {
            service: service.to_string(),
            ..Default::default()
        };
        // (source, destination) -> (at source, at destination)
        let mut edges: BTreeMap<(String, String), (SideView, SideView)> = BTreeMap::new();
        let mut reporters = BTreeSet::new();
        for (id, r) in proxies.iter() {
            if now.saturating_duration_since(r.latest.0) >= FORGET_AFTER {
                continue;
            }
            let (at, latest) = &r.latest;
            // No rates from a proxy that went quiet: its totals only.
            let fresh = now.saturating_duration_since(*at) < RATES_FRESH_FOR;
            let previous = r.previous.as_ref().filter(|_| fresh);
            let seconds = previous.map_or(0.0, |(then, _)| (*at - *then).as_secs_f64());
            let zero = EdgeCounters::default();
            if r.service == service {
                reporters.insert(id.clone());
                out.inbound_handshake_failures += latest.inbound_handshake_failures;
            }
            for (destination, counters) in &latest.outbound {
                if r.service != service && destination != service {
                    continue;
                }
                // An edge new since the previous report grew from zero.
                let before = previous.map(|(_, p)| p.outbound.get(destination).unwrap_or(&zero));
                let key = (r.service.clone(), destination.clone());
                edges
                    .entry(key)
                    .or_default()
                    .0
                    .add(counters, before, seconds);
            }
            for (source, counters) in &latest.inbound {
                if r.service != service && source != service {
                    continue;
                }
                let before = previous.map(|(_, p)| p.inbound.get(source).unwrap_or(&zero));
                let key = (source.clone(), r.service.clone());
                edges
                    .entry(key)
                    .or_default()
                    .1
                    .add(counters, before, seconds);
            }
        }
        for ((source, destination), (at_source, at_dest)) in edges {
            let e = edge(&source, &destination, at_source, at_dest);
            if source == service {
                out.upstreams.push(e.clone());
            }
            if destination == service {
                out.downstreams.push(e);
            }
        }
        out.reported_by = reporters.into_iter().collect();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(connections: u64, denied: u64, bytes: u64) -> EdgeCounters {
        EdgeCounters {
            connections,
            denied,
            bytes_to_destination: bytes,
            bytes_to_source: bytes,
            ..Default::default()
        }
    }

    #[test]
    fn an_edge_is_counted_by_its_destination_and_rated_over_the_last_interval() {
        let store = TrafficStore::default();
        let t0 = Instant::now();
        let web = |connections, bytes| ProxyReport {
            outbound: [("db".to_string(), counters(connections, 0, bytes))].into(),
            ..Default::default()
        };
        let db = |connections, denied, bytes| ProxyReport {
            inbound: [("web".to_string(), counters(connections, denied, bytes))].into(),
            inbound_handshake_failures: 2,
            ..Default::default()
        };
        store.record("web-proxy", "web", web(2, 10), t0);
        store.record("db-proxy", "db", db(1, 1, 10), t0);
        store.record("web-proxy", "web", web(6, 50), t0 + Duration::from_secs(2));
        store.record("db-proxy", "db", db(4, 2, 50), t0 + Duration::from_secs(2));
        let now = t0 + Duration::from_secs(3);
        // A proxy silent for longer than a few intervals has no rates.
        let quiet = store.service("db", t0 + RATES_FRESH_FOR + Duration::from_secs(2));
        assert_eq!(quiet.downstreams[0].connections_per_second, 0.0);
        assert_eq!(quiet.downstreams[0].counters.connections, 4);
        // An edge first seen in the latest report grew from zero.
        store.record(
            "web-proxy",
            "web",
            ProxyReport {
                outbound: [
                    ("db".to_string(), counters(6, 0, 50)),
                    ("cache".to_string(), counters(4, 0, 0)),
                ]
                .into(),
                ..Default::default()
            },
            t0 + Duration::from_secs(4),
        );
        let cache = &store
            .service("cache", t0 + Duration::from_secs(4))
            .downstreams[0];
        assert_eq!(cache.connections_per_second, 2.0);

        let db_view = store.service("db", now);
        assert_eq!(db_view.reported_by, vec!["db-proxy"]);
        assert_eq!(db_view.inbound_handshake_failures, 2);
        assert!(db_view.upstreams.is_empty());
        let e = &db_view.downstreams[0];
        assert_eq!((e.source.as_str(), e.destination.as_str()), ("web", "db"));
        assert_eq!((e.counters.connections, e.counters.denied), (4, 2));
        assert_eq!(
            (e.counters.bytes_to_destination, e.counters.bytes_to_source),
            (50, 50)
        );
        // 3 let through + 1 denied over 2 s; 80 bytes over 2 s.
        assert_eq!(e.connections_per_second, 2.0);
        assert_eq!(e.bytes_per_second, 40.0);
        assert_eq!(e.measured_at, vec!["destination", "source"]);
        // The same edge from web's side.
        let web_view = store.service("web", now);
        assert_eq!(
            web_view.upstreams.iter().find(|u| u.destination == "db"),
            Some(e)
        );
    }

    #[test]
    fn the_source_counts_when_the_destination_does_not_report_and_old_reports_go() {
        let store = TrafficStore::default();
        let t0 = Instant::now();
        let report = ProxyReport {
            outbound: [(
                "api".to_string(),
                EdgeCounters {
                    connections: 3,
                    handshake_failures: 1,
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        store.record("web-proxy", "web", report, t0);
        let e = &store.service("api", t0).downstreams[0];
        assert_eq!(
            (e.counters.connections, e.counters.handshake_failures),
            (3, 1)
        );
        assert_eq!(e.measured_at, vec!["source"]);
        assert_eq!(e.connections_per_second, 0.0);
        let later = t0 + FORGET_AFTER;
        assert!(store.service("api", later).downstreams.is_empty());
        store.record("other", "x", ProxyReport::default(), later);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_restarted_proxy_counts_from_zero_and_reports_are_bounded() {
        let before = counters(10, 0, 100);
        let after = counters(2, 0, 5);
        assert_eq!(after.since(&before), after);
        let mut report = ProxyReport::default();
        for i in 0..MAX_EDGES + 3 {
            report.inbound.insert(format!("s{i:04}"), counters(1, 0, 1));
        }
        let (report, dropped) = report.bounded();
        assert_eq!((report.inbound.len(), dropped), (MAX_EDGES, 3));
    }
}
