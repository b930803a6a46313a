//! A small process-wide metrics registry (Consul's go-metrics shape):
//! counters, gauges and samples keyed by name and labels, read by
//! `/v1/agent/metrics` as Consul's JSON or Prometheus text.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Labels of one series, sorted by name.
pub type Labels = Vec<(String, String)>;

/// A sample series' summary.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    /// Observations.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

/// Everything recorded so far.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Counters.
    pub counters: BTreeMap<(String, Labels), u64>,
    /// Gauges.
    pub gauges: BTreeMap<(String, Labels), f64>,
    /// Samples (timings in milliseconds).
    pub samples: BTreeMap<(String, Labels), Summary>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Registry::default()))
}

fn key(name: &str, labels: &[(&str, &str)]) -> (String, Labels) {
    let mut labels: Labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    (name.to_string(), labels)
}

/// Adds to a counter.
pub fn counter_add(name: &str, labels: &[(&str, &str)], n: u64) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    *r.counters.entry(key(name, labels)).or_default() += n;
}

/// Sets a gauge.
pub fn gauge_set(name: &str, labels: &[(&str, &str)], value: f64) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    r.gauges.insert(key(name, labels), value);
}

/// Records one observation (e.g. a latency in milliseconds).
pub fn sample(name: &str, labels: &[(&str, &str)], value: f64) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    let s = r.samples.entry(key(name, labels)).or_default();
    if s.count == 0 {
        s.min = value;
        s.max = value;
    } else {
        s.min = s.min.min(value);
        s.max = s.max.max(value);
    }
    s.count += 1;
    s.sum += value;
}

/// A copy of everything recorded.
pub fn snapshot() -> Registry {
    registry().lock().unwrap_or_else(|e| e.into_inner()).clone()
}
