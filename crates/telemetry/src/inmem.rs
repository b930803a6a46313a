//! go-metrics' in-memory sink, which `/v1/agent/metrics` reads: counters
//! and samples aggregated per 10 s interval (count, sum, min, max, mean,
//! rate, stddev), the last minute kept, and the most recent **finished**
//! interval shown (the current one while it is the only one). Gauges keep
//! their last value across intervals (go-metrics shows a gauge only in the
//! intervals it was set in; Legate's gauges are set on change, not
//! re-emitted every interval).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use serde_json::{json, Map, Value};

/// The aggregation interval, as Consul's agent runs go-metrics.
pub const INTERVAL_SECS: u64 = 10;
/// Intervals kept per series: the current, the shown one and spares.
const SLOTS: usize = 8;

/// The wall clock in seconds; a test sets it by hand.
#[derive(Debug, Default)]
pub struct Clock {
    manual: Option<AtomicU64>,
}

impl Clock {
    /// A clock a test moves with [`Clock::set`].
    pub fn manual(unix_secs: u64) -> Self {
        Clock {
            manual: Some(AtomicU64::new(unix_secs)),
        }
    }

    /// Moves a manual clock.
    pub fn set(&self, unix_secs: u64) {
        if let Some(manual) = &self.manual {
            manual.store(unix_secs, Ordering::Relaxed);
        }
    }

    fn now(&self) -> u64 {
        match &self.manual {
            Some(manual) => manual.load(Ordering::Relaxed),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }

    fn interval(&self) -> u64 {
        self.now() / INTERVAL_SECS
    }
}

/// go-metrics' `AggregateSample`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Aggregate {
    count: u64,
    sum: f64,
    sum_sq: f64,
    min: f64,
    max: f64,
}

impl Aggregate {
    fn add(&mut self, value: f64) {
        if self.count == 0 {
            self.min = value;
            self.max = value;
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += 1;
        self.sum += value;
        self.sum_sq += value * value;
    }

    fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    fn stddev(&self) -> f64 {
        let n = self.count as f64;
        let div = n * (n - 1.0);
        if div == 0.0 {
            return 0.0;
        }
        ((n * self.sum_sq - self.sum * self.sum) / div)
            .max(0.0)
            .sqrt()
    }
}

/// One counter's or sample's aggregates, one slot per recent interval.
#[derive(Debug, Default)]
struct Series {
    slots: Mutex<[(u64, Aggregate); SLOTS]>,
}

impl Series {
    fn add(&self, interval: u64, value: f64) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut slots[(interval % SLOTS as u64) as usize];
        if slot.0 != interval {
            *slot = (interval, Aggregate::default());
        }
        slot.1.add(value);
    }

    /// The newest interval this series has data for.
    fn newest(&self) -> Option<u64> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.iter().filter(|s| s.1.count > 0).map(|s| s.0).max()
    }

    fn at(&self, interval: u64) -> Option<Aggregate> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots[(interval % SLOTS as u64) as usize];
        (slot.0 == interval && slot.1.count > 0).then_some(slot.1)
    }
}

/// A recording handle of one series.
struct SeriesHandle {
    series: Arc<Series>,
    clock: Arc<Clock>,
}

impl CounterFn for SeriesHandle {
    fn increment(&self, value: u64) {
        self.series.add(self.clock.interval(), value as f64);
    }

    fn absolute(&self, value: u64) {
        self.series.add(self.clock.interval(), value as f64);
    }
}

impl HistogramFn for SeriesHandle {
    fn record(&self, value: f64) {
        self.series.add(self.clock.interval(), value);
    }
}

/// A gauge's last value.
#[derive(Debug, Default)]
struct GaugeCell(Mutex<f64>);

impl GaugeFn for GaugeCell {
    fn increment(&self, value: f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) += value;
    }

    fn decrement(&self, value: f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) -= value;
    }

    fn set(&self, value: f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = value;
    }
}

type Cells<T> = RwLock<HashMap<Key, Arc<T>>>;

fn cell<T: Default>(
    cells: &Cells<T>,
    key: &Key,
    prune: impl FnOnce(&mut HashMap<Key, Arc<T>>),
) -> Arc<T> {
    if let Some(found) = cells.read().unwrap_or_else(|e| e.into_inner()).get(key) {
        return found.clone();
    }
    let mut cells = cells.write().unwrap_or_else(|e| e.into_inner());
    prune(&mut cells);
    cells.entry(key.clone()).or_default().clone()
}

struct State {
    clock: Arc<Clock>,
    first_interval: u64,
    /// The interval of the last pruning (at most one per interval).
    pruned: AtomicU64,
    counters: Cells<Series>,
    samples: Cells<Series>,
    gauges: Cells<GaugeCell>,
}

/// The in-memory sink; clones share it.
#[derive(Clone)]
pub struct Inmem {
    state: Arc<State>,
}

impl State {
    /// A counter's or sample's series; when a new series is added, those
    /// without data in the intervals kept and without a live handle are
    /// let go (once an interval), so labels that come and go (proxies,
    /// routes) do not accumulate.
    fn series(&self, cells: &Cells<Series>, key: &Key) -> Arc<Series> {
        cell(cells, key, |cells| {
            let current = self.clock.interval();
            if self.pruned.swap(current, Ordering::Relaxed) == current {
                return;
            }
            cells.retain(|_, series| {
                Arc::strong_count(series) > 1
                    || series
                        .newest()
                        .is_some_and(|newest| newest + SLOTS as u64 > current)
            });
        })
    }
}

impl Inmem {
    /// Series held now (counters and samples), for tests.
    pub fn series_held(&self) -> usize {
        let count = |cells: &Cells<Series>| cells.read().unwrap_or_else(|e| e.into_inner()).len();
        count(&self.state.counters) + count(&self.state.samples)
    }

    /// A sink whose first interval starts now on `clock`.
    pub fn new(clock: Arc<Clock>) -> Self {
        Inmem {
            state: Arc::new(State {
                first_interval: clock.interval(),
                pruned: AtomicU64::new(clock.interval()),
                clock,
                counters: Default::default(),
                samples: Default::default(),
                gauges: Default::default(),
            }),
        }
    }

    /// go-metrics' `DisplayMetrics`: the most recent finished interval
    /// (the current one during the first), as Consul's JSON.
    pub fn summary(&self) -> Value {
        let state = &self.state;
        let current = state.clock.interval();
        let shown = if current <= state.first_interval {
            current
        } else {
            current - 1
        };
        let mut gauges: Vec<(String, Value, Value)> = state
            .gauges
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(key, gauge)| {
                let value = *gauge.0.lock().unwrap_or_else(|e| e.into_inner());
                (key.name().to_string(), labels(key), json!(value))
            })
            .collect();
        gauges.sort_by(|a, b| (&a.0, a.1.to_string()).cmp(&(&b.0, b.1.to_string())));
        json!({
            "Timestamp": go_time(shown * INTERVAL_SECS),
            "Gauges": gauges.into_iter().map(|(name, labels, value)| {
                json!({"Name": name, "Value": value, "Labels": labels})
            }).collect::<Vec<_>>(),
            "Points": [],
            "Counters": aggregates(&state.counters, shown),
            "Samples": aggregates(&state.samples, shown),
        })
    }
}

fn labels(key: &Key) -> Value {
    Value::Object(
        key.labels()
            .map(|l| (l.key().to_string(), Value::String(l.value().to_string())))
            .collect::<Map<String, Value>>(),
    )
}

/// go-metrics' `SampledValue` rows of one interval, sorted by name.
fn aggregates(cells: &Cells<Series>, interval: u64) -> Vec<Value> {
    let mut rows: Vec<(String, String, Value)> = cells
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(|(key, series)| {
            let agg = series.at(interval)?;
            let labels = labels(key);
            let row = json!({
                "Name": key.name(),
                "Count": agg.count,
                "Rate": agg.sum / INTERVAL_SECS as f64,
                "Sum": agg.sum,
                "Min": agg.min,
                "Max": agg.max,
                "Mean": agg.mean(),
                "Stddev": agg.stddev(),
                "Labels": labels.clone(),
            });
            Some((key.name().to_string(), labels.to_string(), row))
        })
        .collect();
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    rows.into_iter().map(|(_, _, row)| row).collect()
}

/// A Unix time as Go prints a UTC time (`2017-08-08 02:55:10 +0000 UTC`).
pub fn go_time(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} +0000 UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

impl Recorder for Inmem {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(SeriesHandle {
            series: self.state.series(&self.state.counters, key),
            clock: self.state.clock.clone(),
        }))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(cell(&self.state.gauges, key, |_| {}))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(SeriesHandle {
            series: self.state.series(&self.state.samples, key),
            clock: self.state.clock.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000; // an interval boundary

    #[test]
    fn the_first_interval_shows_itself_then_the_last_finished_one() {
        let clock = Arc::new(Clock::manual(T0));
        let sink = Inmem::new(clock.clone());
        metrics::with_local_recorder(&sink, || {
            metrics::counter!("kvs.apply_count").increment(2);
            metrics::counter!("kvs.apply_count").increment(4);
            metrics::histogram!("api.http", "method" => "GET").record(3.0);
            metrics::gauge!("state.nodes").set(5.0);
        });
        let now = sink.summary();
        assert_eq!(now["Timestamp"], "2023-11-14 22:13:20 +0000 UTC");
        let counter = &now["Counters"][0];
        assert_eq!(counter["Name"], "kvs.apply_count");
        assert_eq!(counter["Count"], 2);
        assert_eq!(counter["Sum"], 6.0);
        assert_eq!(counter["Min"], 2.0);
        assert_eq!(counter["Max"], 4.0);
        assert_eq!(counter["Mean"], 3.0);
        assert_eq!(counter["Rate"], 0.6);
        assert!((counter["Stddev"].as_f64().unwrap() - 2f64.sqrt()).abs() < 1e-9);
        assert_eq!(now["Samples"][0]["Labels"], json!({"method": "GET"}));
        assert_eq!(
            now["Gauges"][0],
            json!({"Name": "state.nodes", "Value": 5.0, "Labels": {}})
        );
        assert_eq!(now["Points"], json!([]));

        // In the next interval, the finished one is shown, not the new one.
        clock.set(T0 + INTERVAL_SECS);
        metrics::with_local_recorder(&sink, || {
            metrics::counter!("kvs.apply_count").increment(100);
        });
        let next = sink.summary();
        assert_eq!(next["Counters"][0]["Sum"], 6.0);
        assert_eq!(next["Timestamp"], "2023-11-14 22:13:20 +0000 UTC");
        clock.set(T0 + 2 * INTERVAL_SECS);
        assert_eq!(sink.summary()["Counters"][0]["Sum"], 100.0);
        // An interval without records shows no row; gauges keep their value.
        clock.set(T0 + 3 * INTERVAL_SECS);
        let quiet = sink.summary();
        assert_eq!(quiet["Counters"], json!([]));
        assert_eq!(quiet["Gauges"][0]["Value"], 5.0);
        // A slot reused after SLOTS intervals starts over.
        clock.set(T0 + (SLOTS as u64 + 1) * INTERVAL_SECS);
        metrics::with_local_recorder(&sink, || {
            metrics::counter!("kvs.apply_count").increment(1);
        });
        clock.set(T0 + (SLOTS as u64 + 2) * INTERVAL_SECS);
        assert_eq!(sink.summary()["Counters"][0]["Sum"], 1.0);
    }

    #[test]
    fn series_without_recent_data_are_let_go() {
        let clock = Arc::new(Clock::manual(T0));
        let sink = Inmem::new(clock.clone());
        metrics::with_local_recorder(&sink, || {
            for proxy in 0..100 {
                metrics::counter!("xds.server.pushes", "proxy" => proxy.to_string()).increment(1);
            }
        });
        assert_eq!(sink.series_held(), 100);
        // Still within the intervals kept: nothing goes.
        clock.set(T0 + INTERVAL_SECS);
        metrics::with_local_recorder(&sink, || metrics::counter!("other").increment(1));
        assert_eq!(sink.series_held(), 101);
        // Past them, the next new series lets the idle ones go.
        clock.set(T0 + (SLOTS as u64 + 1) * INTERVAL_SECS);
        metrics::with_local_recorder(&sink, || metrics::counter!("new").increment(1));
        assert_eq!(sink.series_held(), 1);
    }

    #[test]
    fn go_time_prints_seconds() {
        assert_eq!(go_time(0), "1970-01-01 00:00:00 +0000 UTC");
        assert_eq!(go_time(1_502_160_910), "2017-08-08 02:55:10 +0000 UTC");
    }
}
