//! Consul's `api.http` timer of a routed request, labelled with the
//! method and the route's pattern as Consul names it (`/v1/kv/{*key}` →
//! `v1_kv_`).
//!
//! The labels are made once per (method, route) and kept for the process
//! (routes are few). The timer's handle is looked up in the recorder when
//! the request ends, and each worker thread keeps it for the next
//! requests of that route for at most [`legate_telemetry::handle_lifetime`]:
//! the Prometheus sink drops a series idle past its retention time, and a
//! handle kept longer could record into a dropped series. A request holds
//! no handle while it runs, so the ten thousand blocking queries one
//! write wakes record into their thread's handle instead of each
//! dropping one of its own.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};
use std::time::Instant;

use axum::http::Method;

use crate::util;

/// One (method, route)'s `api.http` labels.
pub(crate) struct RouteTimer {
    method: &'static str,
    path: metrics::SharedString,
}

/// The timer of `method` on the route `pattern`.
pub(crate) fn route_timer(method: &Method, pattern: &str) -> &'static RouteTimer {
    type Timers = HashMap<String, Vec<&'static RouteTimer>>;
    static TIMERS: OnceLock<RwLock<Timers>> = OnceLock::new();
    let method = util::static_method(method);
    let timers = TIMERS.get_or_init(Default::default);
    let find = |timers: &Timers| {
        timers
            .get(pattern)
            .and_then(|of_route| of_route.iter().find(|t| t.method == method).copied())
    };
    if let Some(timer) = find(&timers.read().unwrap_or_else(|e| e.into_inner())) {
        return timer;
    }
    let mut timers = timers.write().unwrap_or_else(|e| e.into_inner());
    if let Some(timer) = find(&timers) {
        return timer;
    }
    let timer: &'static RouteTimer = Box::leak(Box::new(RouteTimer {
        method,
        path: metrics::SharedString::from_owned(path_label(pattern)),
    }));
    timers.entry(pattern.to_string()).or_default().push(timer);
    timer
}

thread_local! {
    /// This thread's handles, by timer, with when each was looked up.
    static HANDLES: RefCell<HashMap<usize, (metrics::Histogram, Instant)>> =
        RefCell::new(HashMap::new());
}

impl RouteTimer {
    /// Records a request that began at `started` and ends now.
    pub(crate) fn record_since(&'static self, started: Instant) {
        let now = Instant::now();
        self.record(legate_telemetry::millis_between(started, now), now);
    }

    /// Records `millis` at `now` through this thread's handle, looked up
    /// again when it is older than the handles' lifetime.
    fn record(&'static self, millis: f64, now: Instant) {
        let key = self as *const RouteTimer as usize;
        HANDLES.with_borrow_mut(|handles| {
            if let Some((handle, since)) = handles.get(&key) {
                if now.saturating_duration_since(*since) < legate_telemetry::handle_lifetime() {
                    handle.record(millis);
                    return;
                }
            }
            let handle = metrics::histogram!("api.http", "method" => self.method, "path" => self.path.clone());
            handle.record(millis);
            handles.insert(key, (handle, now));
        });
    }
}

/// The `path` label of a route pattern: what precedes its first
/// parameter, without the leading slash, slashes as underscores.
fn path_label(pattern: &str) -> String {
    let prefix = pattern.split('{').next().unwrap_or(pattern);
    prefix.trim_start_matches('/').replace('/', "_")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use legate_telemetry::inmem::{Clock, Inmem};

    use super::*;

    fn sink() -> Inmem {
        Inmem::new(std::sync::Arc::new(Clock::manual(1_700_000_000)))
    }

    /// (method, path, count, sum) of every `api.http` sample in `sink`.
    fn samples(sink: &Inmem) -> Vec<(String, String, u64, f64)> {
        let summary = sink.summary();
        let mut seen: Vec<(String, String, u64, f64)> = summary["Samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|sample| {
                assert_eq!(sample["Name"], "api.http");
                (
                    sample["Labels"]["method"].as_str().unwrap().to_string(),
                    sample["Labels"]["path"].as_str().unwrap().to_string(),
                    sample["Count"].as_u64().unwrap(),
                    sample["Sum"].as_f64().unwrap(),
                )
            })
            .collect();
        seen.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
        seen
    }

    #[test]
    fn route_patterns_name_their_timer_as_consul_does() {
        assert_eq!(path_label("/v1/kv/{*key}"), "v1_kv_");
        assert_eq!(path_label("/v1/agent/self"), "v1_agent_self");
        assert_eq!(
            path_label("/v1/health/service/{service}"),
            "v1_health_service_"
        );
    }

    #[test]
    fn each_route_and_method_keeps_its_own_timer() {
        let sink = sink();
        let now = Instant::now();
        metrics::with_local_recorder(&sink, || {
            route_timer(&Method::GET, "/v1/timer-test/{*key}").record(1.0, now);
            route_timer(&Method::GET, "/v1/timer-test/{*key}").record(3.0, now);
            route_timer(&Method::PUT, "/v1/timer-test/{*key}").record(5.0, now);
            route_timer(&Method::GET, "/v1/timer-test-other").record(7.0, now);
        });
        assert_eq!(
            samples(&sink),
            vec![
                ("GET".into(), "v1_timer-test-other".into(), 1, 7.0),
                ("GET".into(), "v1_timer-test_".into(), 2, 4.0),
                ("PUT".into(), "v1_timer-test_".into(), 1, 5.0),
            ]
        );
        assert!(std::ptr::eq(
            route_timer(&Method::GET, "/v1/timer-test/{*key}"),
            route_timer(&Method::GET, "/v1/timer-test/{*key}")
        ));
    }

    #[test]
    fn a_kept_handle_is_looked_up_again_once_its_lifetime_passed() {
        let (first, second) = (sink(), sink());
        let timer = route_timer(&Method::GET, "/v1/lifetime-test");
        let now = Instant::now();
        metrics::with_local_recorder(&first, || timer.record(1.0, now));
        // Within its lifetime the thread's handle is the first sink's.
        metrics::with_local_recorder(&second, || timer.record(2.0, now));
        let later = now + legate_telemetry::handle_lifetime() + Duration::from_millis(1);
        metrics::with_local_recorder(&second, || timer.record(4.0, later));
        let path = "v1_lifetime-test".to_string();
        assert_eq!(samples(&first), vec![("GET".into(), path.clone(), 2, 3.0)]);
        assert_eq!(samples(&second), vec![("GET".into(), path, 1, 4.0)]);
    }
}
