//! Counters per edge: what this proxy sent to each destination service
//! through its upstreams, and what each source service sent to its public
//! listener (let through or refused by intentions). They are what the
//! proxy reports to its agent ([`crate::report`]). At most
//! [`legate_types::traffic::MAX_EDGES`] services are counted each way.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use legate_types::traffic::{EdgeCounters, ProxyReport, MAX_EDGES};

/// One edge's counters.
#[derive(Debug, Default)]
pub struct Edge {
    connections: AtomicU64,
    denied: AtomicU64,
    bytes_to_destination: AtomicU64,
    bytes_to_source: AtomicU64,
    handshake_failures: AtomicU64,
    connect_failures: AtomicU64,
}

impl Edge {
    /// A connection let through.
    pub fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection refused by intentions.
    pub fn denied(&self) {
        self.denied.fetch_add(1, Ordering::Relaxed);
    }

    /// A failed TLS handshake with the destination.
    pub fn handshake_failed(&self) {
        self.handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection to the destination that could not be made.
    pub fn connect_failed(&self) {
        self.connect_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Bytes a finished connection carried each way.
    pub fn carried(&self, to_destination: u64, to_source: u64) {
        self.bytes_to_destination
            .fetch_add(to_destination, Ordering::Relaxed);
        self.bytes_to_source.fetch_add(to_source, Ordering::Relaxed);
    }

    fn counters(&self) -> EdgeCounters {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EdgeCounters {
            connections: load(&self.connections),
            denied: load(&self.denied),
            bytes_to_destination: load(&self.bytes_to_destination),
            bytes_to_source: load(&self.bytes_to_source),
            handshake_failures: load(&self.handshake_failures),
            connect_failures: load(&self.connect_failures),
        }
    }
}

type Side = Mutex<BTreeMap<String, Arc<Edge>>>;

/// Every edge this proxy has counted.
#[derive(Debug, Default)]
pub struct EdgeStats {
    outbound: Side,
    inbound: Side,
    inbound_handshake_failures: AtomicU64,
}

fn edge_of(side: &Side, service: &str) -> Option<Arc<Edge>> {
    if service.is_empty() {
        return None;
    }
    let mut map = side.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(edge) = map.get(service) {
        return Some(edge.clone());
    }
    if map.len() >= MAX_EDGES {
        return None;
    }
    let edge = Arc::new(Edge::default());
    map.insert(service.to_string(), edge.clone());
    Some(edge)
}

fn snapshot(side: &Side) -> BTreeMap<String, EdgeCounters> {
    side.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(service, edge)| (service.clone(), edge.counters()))
        .collect()
}

impl EdgeStats {
    /// The edge to `destination` (`None` past the bound or for no name).
    pub fn outbound(&self, destination: &str) -> Option<Arc<Edge>> {
        edge_of(&self.outbound, destination)
    }

    /// The edge from `source` (`None` past the bound or for no name).
    pub fn inbound(&self, source: &str) -> Option<Arc<Edge>> {
        edge_of(&self.inbound, source)
    }

    /// An inbound TLS handshake that failed.
    pub fn inbound_handshake_failed(&self) {
        self.inbound_handshake_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter now.
    pub fn report(&self) -> ProxyReport {
        ProxyReport {
            outbound: snapshot(&self.outbound),
            inbound: snapshot(&self.inbound),
            inbound_handshake_failures: self.inbound_handshake_failures.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_are_counted_per_service_and_bounded() {
        let stats = EdgeStats::default();
        let db = stats.outbound("db").unwrap();
        db.connected();
        db.carried(5, 7);
        stats.outbound("db").unwrap().connected();
        stats.inbound("web").unwrap().denied();
        stats.inbound_handshake_failed();
        assert!(stats.inbound("").is_none());
        let report = stats.report();
        let out = report.outbound["db"];
        assert_eq!(
            (
                out.connections,
                out.bytes_to_destination,
                out.bytes_to_source
            ),
            (2, 5, 7)
        );
        assert_eq!(report.inbound["web"].denied, 1);
        assert_eq!(report.inbound_handshake_failures, 1);
        for i in 0..MAX_EDGES {
            stats.inbound(&format!("s{i}"));
        }
        assert!(stats.inbound("one-too-many").is_none());
        assert!(
            stats.inbound("web").is_some(),
            "a known edge is still counted"
        );
    }
}
