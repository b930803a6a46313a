//! Legate's process metrics in Consul's names and shapes.
//!
//! Call sites record through the [`metrics`] facade with Consul's names
//! minus the prefix (`metrics::counter!("raft.apply")`,
//! `metrics::histogram!("kvs.apply")` in milliseconds). [`install`] sets the
//! process-wide recorder: a naming layer ([`names`]: `metrics_prefix`, the
//! host name in gauge names, `prefix_filter`) in front of a fan-out to
//!
//! - go-metrics' in-memory sink ([`inmem`]): 10 s intervals, the JSON of
//!   `/v1/agent/metrics`;
//! - `metrics-exporter-prometheus`, with `prometheus_retention_time` set:
//!   counters without `_total`, timers as summaries (quantiles 0.5, 0.9,
//!   0.99 over 10 s) and the xDS push latency as a histogram; series idle
//!   longer than the retention time are dropped;
//! - statsd and DogStatsD over UDP ([`statsd`]), when configured.
//!
//! Without [`install`] (library tests, benchmarks' "no recorder" runs) the
//! facade's calls cost next to nothing.

pub mod help;
pub mod inmem;
pub mod names;
pub mod statsd;

use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::FanoutBuilder;
use metrics_util::MetricKindMask;

pub use inmem::go_time;

/// The xDS push latency's name (change seen → response written, ms).
pub const XDS_PUSH_LATENCY: &str = "xds.server.push_latency";

/// The push latency histogram's bucket bounds in milliseconds.
pub const XDS_PUSH_BUCKETS: &[f64] = &[
    1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];

/// The `telemetry { }` settings the recorder uses.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// `metrics_prefix` (default "consul").
    pub metrics_prefix: String,
    /// The host name spliced into gauge names.
    pub hostname: String,
    /// `disable_hostname`.
    pub disable_hostname: bool,
    /// `prefix_filter` (`+prefix` / `-prefix`).
    pub prefix_filter: Vec<String>,
    /// `filter_default` (default true).
    pub filter_default: bool,
    /// `prometheus_retention_time`; `None` leaves Prometheus off.
    pub prometheus_retention: Option<Duration>,
    /// `statsd_address`.
    pub statsd_address: Option<String>,
    /// `dogstatsd_addr`.
    pub dogstatsd_addr: Option<String>,
    /// `dogstatsd_tags`.
    pub dogstatsd_tags: Vec<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            metrics_prefix: "consul".into(),
            hostname: String::new(),
            disable_hostname: false,
            prefix_filter: Vec::new(),
            filter_default: true,
            prometheus_retention: None,
            statsd_address: None,
            dogstatsd_addr: None,
            dogstatsd_tags: Vec::new(),
        }
    }
}

/// The installed sinks that the agent's endpoints read.
pub struct Telemetry {
    inmem: inmem::Inmem,
    prometheus: Option<PrometheusHandle>,
    /// The Prometheus sink's retention time, when it is on.
    prometheus_retention: Option<Duration>,
    /// `prefix_filter` entries ignored (neither `+` nor `-`), for a warning.
    pub ignored_filters: Vec<String>,
}

impl Telemetry {
    /// `/v1/agent/metrics`' JSON: the last finished 10 s interval.
    pub fn summary(&self) -> serde_json::Value {
        self.inmem.summary()
    }

    /// Prometheus text format 0.0.4, or `None` without a retention time.
    pub fn prometheus(&self) -> Option<String> {
        self.prometheus.as_ref().map(|handle| handle.render())
    }
}

static INSTALLED: OnceLock<Telemetry> = OnceLock::new();

/// The installed sinks, if [`install`] ran in this process.
pub fn installed() -> Option<&'static Telemetry> {
    INSTALLED.get()
}

/// The Prometheus recorder with Consul's summary and histogram settings.
fn prometheus_recorder(
    retention: Duration,
) -> Result<metrics_exporter_prometheus::PrometheusRecorder, String> {
    let builder = PrometheusBuilder::new()
        .set_quantiles(&[0.5, 0.9, 0.99])
        .and_then(|b| b.set_bucket_duration(Duration::from_secs(2)))
        .map(|b| b.set_bucket_count(NonZeroU32::new(5).expect("non-zero")))
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Suffix(XDS_PUSH_LATENCY.replace('.', "_")),
                XDS_PUSH_BUCKETS,
            )
        })
        .map_err(|e| format!("prometheus: {e}"))?
        // Counters and timers idle longer than the retention time are
        // dropped, as Consul's sink drops them; gauges stay, since Legate
        // sets them when they change where Consul re-emits them.
        .idle_timeout(
            MetricKindMask::COUNTER | MetricKindMask::HISTOGRAM,
            Some(retention),
        );
    Ok(builder.build_recorder())
}

/// Builds the sinks `config` asks for and installs them as the process's
/// recorder. Fails on an unusable statsd address, or when a recorder is
/// already installed.
pub fn install(config: &TelemetryConfig) -> Result<&'static Telemetry, String> {
    if INSTALLED.get().is_some() {
        return Err("metrics are already installed".into());
    }
    let (filter, ignored_filters) =
        names::PrefixFilter::new(&config.prefix_filter, config.filter_default);
    let naming = names::Naming {
        prefix: config.metrics_prefix.clone(),
        hostname: (!config.disable_hostname && !config.hostname.is_empty())
            .then(|| config.hostname.clone()),
        filter,
    };
    let inmem = inmem::Inmem::new(Arc::new(inmem::Clock::default()));
    let mut fanout = FanoutBuilder::default().add_recorder(inmem.clone());
    let mut prometheus = None;
    if let Some(retention) = config.prometheus_retention {
        let recorder = prometheus_recorder(retention)?;
        let handle = recorder.handle();
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(5));
                upkeep.run_upkeep();
            })
            .map_err(|e| format!("metrics upkeep thread: {e}"))?;
        prometheus = Some(handle);
        fanout = fanout.add_recorder(recorder);
    }
    if let Some(address) = &config.statsd_address {
        fanout = fanout.add_recorder(statsd::StatsdSink::start(address, statsd::Flavor::Statsd)?);
    }
    if let Some(address) = &config.dogstatsd_addr {
        let flavor = statsd::Flavor::DogStatsd {
            tags: config.dogstatsd_tags.clone(),
            hostname: naming.hostname.clone(),
        };
        fanout = fanout.add_recorder(statsd::StatsdSink::start(address, flavor)?);
    }
    let telemetry = Telemetry {
        inmem,
        prometheus,
        prometheus_retention: config.prometheus_retention,
        ignored_filters,
    };
    if INSTALLED.set(telemetry).is_err() {
        return Err("metrics are already installed".into());
    }
    metrics::set_global_recorder(names::ConsulNames::new(fanout.build(), naming))
        .map_err(|e| format!("metrics recorder: {e}"))?;
    help::describe_all();
    Ok(INSTALLED.get().expect("just set"))
}

/// How long a counter's or timer's handle may be kept and used again
/// before it is looked up in the recorder anew: half the Prometheus
/// retention time, at most a second. The Prometheus sink drops a series
/// idle longer than its retention time; a handle used within half of it
/// since its lookup (which records at once) keeps its series live, while
/// one kept longer could record into a dropped series. (The in-memory
/// sink never drops a series a handle holds.)
pub fn handle_lifetime() -> Duration {
    let most = Duration::from_secs(1);
    match installed().and_then(|t| t.prometheus_retention) {
        Some(retention) => (retention / 2).min(most),
        None => most,
    }
}

/// Milliseconds since `start`, as Consul's timers record them.
pub fn millis_since(start: std::time::Instant) -> f64 {
    millis_between(start, std::time::Instant::now())
}

/// Milliseconds from `start` to `end` (none when `end` is earlier), for a
/// caller that has read the clock already.
pub fn millis_between(start: std::time::Instant, end: std::time::Instant) -> f64 {
    end.saturating_duration_since(start).as_secs_f64() * 1000.0
}

/// Records the milliseconds from its creation to its drop under `name`
/// (go-metrics' `defer MeasureSince(...)`).
pub struct MeasureSince {
    name: &'static str,
    started: std::time::Instant,
}

impl MeasureSince {
    /// Starts the timer of `name`.
    pub fn start(name: &'static str) -> Self {
        MeasureSince {
            name,
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for MeasureSince {
    fn drop(&mut self) {
        metrics::histogram!(self.name).record(millis_since(self.started));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_names_and_types_follow_consul() {
        let recorder = prometheus_recorder(Duration::from_secs(60)).unwrap();
        let handle = recorder.handle();
        let naming = names::Naming {
            prefix: "consul".into(),
            hostname: None,
            filter: names::PrefixFilter::default(),
        };
        let layered = names::ConsulNames::new(recorder, naming);
        metrics::with_local_recorder(&layered, || {
            metrics::counter!("raft.apply").increment(3);
            metrics::histogram!("raft.commitTime").record(4.0);
            metrics::gauge!("mesh.active-root-ca.expiry").set(100.0);
            metrics::histogram!("api.http", "method" => "GET", "path" => "v1_kv_").record(1.0);
            metrics::histogram!(XDS_PUSH_LATENCY, "type" => "cluster").record(3.0);
        });
        let text = handle.render();
        assert!(text.contains("# TYPE consul_raft_apply counter\nconsul_raft_apply 3\n"));
        assert!(!text.contains("_total"));
        assert!(text.contains("# TYPE consul_raft_commitTime summary"));
        assert!(text.contains("consul_raft_commitTime{quantile=\"0.99\"} 4"));
        assert!(text.contains("consul_raft_commitTime_count 1"));
        assert!(text.contains("consul_mesh_active_root_ca_expiry 100"));
        assert!(text.contains("consul_api_http_count{method=\"GET\",path=\"v1_kv_\"} 1"));
        assert!(text.contains("# TYPE consul_xds_server_push_latency histogram"));
        assert!(text.contains("consul_xds_server_push_latency_bucket{type=\"cluster\",le=\"5\"} 1"));
    }
}
