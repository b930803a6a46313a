//! The agent's leaf certificate manager (`/v1/agent/connect/ca/leaf/:service`).
//!
//! One entry per service name (never per token, so a proxy that rotates its
//! token does not multiply certificates). Each entry has a task that keeps
//! its certificate fresh:
//!
//! - it renews at a random point in the second half of the certificate's
//!   life, so a fleet issued together does not renew together;
//! - after a root rotation it re-requests at a random point within
//!   [`LeafSettings::rotation_window`] (30 s, as Consul), spreading the load
//!   of every agent re-issuing at once;
//! - when a server answers `Rate limit reached, try again later`, it retries
//!   once per [`LeafSettings::rate_limit_window`] (30 s) at a random offset,
//!   keeping the certificate it has meanwhile.
//!
//! Entries nobody asked for within [`LeafSettings::idle_expiry`] (3 days,
//! Consul's cache TTL) are dropped. Private keys are generated here (EC
//! P-256) and never leave the agent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use legate_ca::SpiffeId;
use legate_types::connect::{CaSignRequest, IndexedCaRoots, IssuedCert};
use legate_types::rpc::ServerRpc;
use legate_types::{QueryOptions, RpcError, WriteOptions};
use rand::Rng;
use tokio::sync::watch;

/// Timing of the leaf manager.
#[derive(Debug, Clone, Copy)]
pub struct LeafSettings {
    /// Re-issue spread after a root rotation.
    pub rotation_window: Duration,
    /// Retry window after a rate-limited request.
    pub rate_limit_window: Duration,
    /// Drop entries unused for this long.
    pub idle_expiry: Duration,
}

impl Default for LeafSettings {
    fn default() -> Self {
        LeafSettings {
            rotation_window: Duration::from_secs(30),
            rate_limit_window: Duration::from_secs(30),
            idle_expiry: Duration::from_secs(3 * 24 * 3600),
        }
    }
}

/// What an entry currently holds.
#[derive(Debug, Clone, Default)]
struct LeafState {
    cert: Option<IssuedCert>,
    /// The last failure when there is no certificate to serve.
    error: Option<RpcError>,
    /// Increases on every new certificate.
    index: u64,
}

struct LeafEntry {
    state: watch::Sender<LeafState>,
    last_used: Mutex<Instant>,
    /// The token of the latest request that named one, and how many times
    /// it changed: the servers check it when they sign (the entry is still
    /// one per service).
    token: Mutex<(String, u64)>,
    /// Wakes the entry's task to sign now (a new token after a refusal).
    retry_now: tokio::sync::Notify,
}

/// The manager; one per agent.
pub struct LeafManager {
    rpc: Arc<dyn ServerRpc>,
    datacenter: String,
    settings: LeafSettings,
    entries: Mutex<HashMap<String, Arc<LeafEntry>>>,
    roots: watch::Sender<Option<(u64, IndexedCaRoots)>>,
    stop: watch::Sender<bool>,
}

/// A random point in the second half of `[valid_after, valid_before)`,
/// before the last tenth, as a delay from now.
pub fn renewal_delay(valid_after: &str, valid_before: &str) -> Duration {
    let parse = |s: &str| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
    };
    let (Some(start), Some(end)) = (parse(valid_after), parse(valid_before)) else {
        return Duration::from_secs(60);
    };
    let life = (end - start).as_seconds_f64().max(1.0);
    let point = start + time::Duration::seconds_f64(life * rand::rng().random_range(0.5..0.9));
    let from_now = (point - time::OffsetDateTime::now_utc()).as_seconds_f64();
    Duration::from_secs_f64(from_now.max(0.0))
}

/// A uniformly random delay in `[0, window)`.
pub fn jitter(window: Duration) -> Duration {
    if window.is_zero() {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(rand::rng().random_range(0.0..window.as_secs_f64()))
}

impl LeafManager {
    /// Starts the manager and its roots watch.
    pub fn start(
        rpc: Arc<dyn ServerRpc>,
        datacenter: String,
        settings: LeafSettings,
    ) -> Arc<LeafManager> {
        let manager = Arc::new(LeafManager {
            rpc,
            datacenter,
            settings,
            entries: Mutex::new(HashMap::new()),
            roots: watch::channel(None).0,
            stop: watch::channel(false).0,
        });
        tokio::spawn(watch_roots(
            Arc::downgrade(&manager),
            manager.stop.subscribe(),
        ));
        manager
    }

    /// Stops every background task.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The CA roots as last seen, waiting for the first read.
    pub async fn roots(&self) -> Result<IndexedCaRoots, RpcError> {
        let mut rx = self.roots.subscribe();
        let seen = tokio::time::timeout(
            Duration::from_secs(30),
            rx.wait_for(|r| r.as_ref().is_some_and(|(_, r)| !r.roots.is_empty())),
        )
        .await;
        match seen {
            Ok(Ok(r)) => Ok(r.as_ref().map(|(_, r)| r.clone()).unwrap_or_default()),
            _ => Err(RpcError::Internal(
                "the Connect CA is not initialised yet".into(),
            )),
        }
    }

    /// The certificate for `service`: the cached one when its index is past
    /// `min_index`, else waits (up to `wait`) for a newer one. The first
    /// request for a service waits until one is issued or the server
    /// refuses — rate limiting included, as Consul answers a first fetch
    /// (`Rate limit reached, try again later`, 429), while the entry's task
    /// keeps trying in the background.
    pub async fn get(
        self: &Arc<Self>,
        service: &str,
        min_index: u64,
        wait: Duration,
    ) -> Result<IssuedCert, RpcError> {
        self.get_with_token(service, "", min_index, wait).await
    }

    /// [`LeafManager::get`] for a request carrying `token`, which signs
    /// this service's certificates from now on (when not empty).
    pub async fn get_with_token(
        self: &Arc<Self>,
        service: &str,
        token: &str,
        min_index: u64,
        wait: Duration,
    ) -> Result<IssuedCert, RpcError> {
        if service.is_empty() {
            return Err(RpcError::BadRequest("missing service name".into()));
        }
        let entry = self.entry(service, token);
        *entry.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        let mut rx = entry.state.subscribe();
        let ready = |s: &LeafState| match &s.cert {
            Some(_) => s.index > min_index,
            None => s.error.is_some(),
        };
        let deadline = tokio::time::Instant::now() + wait;
        let outcome = tokio::time::timeout_at(deadline, rx.wait_for(ready))
            .await
            .ok()
            .and_then(|r| r.ok())
            .map(|state| state.clone());
        let state = outcome.unwrap_or_else(|| rx.borrow().clone());
        match (state.cert, state.error) {
            (Some(cert), _) => Ok(cert),
            (None, Some(error)) => Err(error),
            (None, None) => Err(RpcError::Internal(format!(
                "no certificate for {service} yet"
            ))),
        }
    }

    fn entry(self: &Arc<Self>, service: &str, token: &str) -> Arc<LeafEntry> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = entries.get(service) {
            if !token.is_empty() {
                // Under the token lock, so a refusal of the old token is
                // never published after this: it is not this request's
                // answer, and the entry signs again at once with this one.
                let mut held = entry.token.lock().unwrap_or_else(|e| e.into_inner());
                if held.0 != token {
                    *held = (token.to_string(), held.1 + 1);
                    if entry.state.borrow().error.is_some() {
                        entry.state.send_modify(|s| s.error = None);
                    }
                    entry.retry_now.notify_one();
                }
            }
            return entry.clone();
        }
        let entry = Arc::new(LeafEntry {
            state: watch::channel(LeafState::default()).0,
            last_used: Mutex::new(Instant::now()),
            token: Mutex::new((token.to_string(), 0)),
            retry_now: tokio::sync::Notify::new(),
        });
        entries.insert(service.to_string(), entry.clone());
        tokio::spawn(keep_fresh(self.clone(), service.to_string(), entry.clone()));
        entry
    }

    /// Services with a managed certificate.
    pub fn services(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    async fn sign(&self, service: &str, token: String) -> Result<IssuedCert, RpcError> {
        let roots = self.roots().await?;
        let id = SpiffeId::service(&roots.trust_domain, &self.datacenter, service);
        let (csr, key) =
            legate_ca::builtin::make_csr(&id).map_err(|e| RpcError::Internal(e.to_string()))?;
        let opts = WriteOptions {
            datacenter: self.datacenter.clone(),
            token,
        };
        let mut cert = self
            .rpc
            .ca_sign(
                &opts,
                CaSignRequest {
                    csr,
                    service: service.to_string(),
                },
            )
            .await?;
        cert.private_key_pem = key;
        Ok(cert)
    }
}

/// Follows the servers' roots with blocking queries.
async fn watch_roots(manager: std::sync::Weak<LeafManager>, mut stop: watch::Receiver<bool>) {
    let mut index = 0;
    let mut failures = 0u32;
    loop {
        let Some(m) = manager.upgrade() else { return };
        let opts = QueryOptions {
            min_index: index,
            max_wait: Some(Duration::from_secs(300)),
            consistency: legate_types::Consistency::Stale,
            ..Default::default()
        };
        let rpc = m.rpc.clone();
        drop(m);
        let result = tokio::select! {
            r = rpc.ca_roots(&opts) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Some(m) = manager.upgrade() else { return };
        match result {
            Ok(q) => {
                failures = 0;
                if q.meta.index < index {
                    // The servers' index went backwards (restore): start over.
                    index = 0;
                    continue;
                }
                index = q.meta.index;
                if q.value.roots.is_empty() {
                    // Not initialised yet: ask again shortly.
                    drop(m);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    index = 0;
                    continue;
                }
                m.roots.send_if_modified(|current| {
                    let changed = current.as_ref().map(|(i, _)| *i) != Some(q.meta.index);
                    if changed {
                        *current = Some((q.meta.index, q.value.clone()));
                    }
                    changed
                });
            }
            Err(e) => {
                failures += 1;
                tracing::debug!(error = %e, "watching CA roots failed");
                drop(m);
                let backoff = Duration::from_millis(200 * 2u64.pow(failures.min(7)));
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Keeps one service's certificate fresh for as long as it is used.
async fn keep_fresh(manager: Arc<LeafManager>, service: String, entry: Arc<LeafEntry>) {
    let settings = manager.settings;
    let mut stop = manager.stop.subscribe();
    let mut roots = manager.roots.subscribe();
    let mut window_start: Option<tokio::time::Instant> = None;
    let mut failures = 0u32;
    loop {
        let (token, generation) = entry
            .token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let result = tokio::select! {
            r = manager.sign(&service, token) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        // A refusal of a token replaced meanwhile is nobody's answer: try
        // again at once with the new one.
        let current = || entry.token.lock().unwrap_or_else(|e| e.into_inner()).1 == generation;
        if result.is_err() && !current() {
            continue;
        }
        // A refusal is published under the token lock, and only while the
        // token is still the one refused, so a replacement cannot slip in.
        let publish_error = |error: RpcError, always: bool| {
            let held = entry.token.lock().unwrap_or_else(|e| e.into_inner());
            if held.1 == generation {
                entry.state.send_modify(|s| {
                    if always || s.cert.is_none() {
                        s.error = Some(error);
                    }
                });
            }
        };
        let next = match result {
            Ok(mut cert) => {
                window_start = None;
                failures = 0;
                let delay = renewal_delay(&cert.valid_after, &cert.valid_before);
                entry.state.send_modify(|s| {
                    let index = (s.index + 1).max(cert.raft.modify_index);
                    cert.raft.create_index = s
                        .cert
                        .as_ref()
                        .map(|c| c.raft.create_index)
                        .unwrap_or(index);
                    cert.raft.modify_index = index;
                    s.index = index;
                    s.cert = Some(cert);
                    s.error = None;
                });
                Some(delay)
            }
            Err(RpcError::RateLimited) => {
                // Once per window, at a random offset within the next one.
                let now = tokio::time::Instant::now();
                let start = match window_start {
                    Some(previous) => (previous + settings.rate_limit_window).max(now),
                    None => now,
                };
                window_start = Some(start);
                publish_error(RpcError::RateLimited, true);
                let at = start + jitter(settings.rate_limit_window);
                Some(at.saturating_duration_since(now))
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(service = %service, error = %e, "leaf certificate request failed");
                publish_error(e, false);
                Some(Duration::from_secs(2u64.pow(failures.min(5))))
            }
        };
        let delay = next.unwrap_or_default();
        let signed_with = active_root_id(&mut roots);
        // Wait for renewal time, or a root rotation (then a random point
        // within the rotation window), whichever comes first.
        let failed = entry.state.borrow().cert.is_none();
        let rotated = tokio::select! {
            _ = tokio::time::sleep(delay) => false,
            changed = wait_for_rotation(&mut roots, signed_with.clone()) => changed,
            _ = entry.retry_now.notified(), if failed => false,
            _ = stop.wait_for(|s| *s) => return,
        };
        if rotated {
            tokio::select! {
                _ = tokio::time::sleep(jitter(settings.rotation_window)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let idle = entry
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed();
        if idle > settings.idle_expiry {
            manager
                .entries
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&service);
            return;
        }
    }
}

fn active_root_id(roots: &mut watch::Receiver<Option<(u64, IndexedCaRoots)>>) -> Option<String> {
    roots
        .borrow_and_update()
        .as_ref()
        .map(|(_, r)| r.active_root_id.clone())
}

/// Resolves `true` once the active root differs from `signed_with` (never
/// when the certificate was issued before any roots were seen).
async fn wait_for_rotation(
    roots: &mut watch::Receiver<Option<(u64, IndexedCaRoots)>>,
    signed_with: Option<String>,
) -> bool {
    let Some(signed_with) = signed_with else {
        return std::future::pending().await;
    };
    let rotated = roots
        .wait_for(|r| {
            r.as_ref().is_some_and(|(_, r)| {
                !r.active_root_id.is_empty() && r.active_root_id != signed_with
            })
        })
        .await
        .is_ok();
    if !rotated {
        std::future::pending::<()>().await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_falls_in_the_second_half_of_life() {
        let now = time::OffsetDateTime::now_utc();
        let fmt = |t: time::OffsetDateTime| legate_ca::info::rfc3339(t);
        let after = fmt(now);
        let before = fmt(now + time::Duration::hours(10));
        for _ in 0..200 {
            let d = renewal_delay(&after, &before).as_secs_f64() / 3600.0;
            assert!((4.99..9.0).contains(&d), "{d}");
        }
        // An expired certificate renews at once.
        let past = fmt(now - time::Duration::hours(20));
        let ended = fmt(now - time::Duration::hours(10));
        assert_eq!(renewal_delay(&past, &ended), Duration::ZERO);
    }

    #[test]
    fn jitter_spreads_over_the_whole_window() {
        let window = Duration::from_secs(30);
        let samples: Vec<f64> = (0..10_000).map(|_| jitter(window).as_secs_f64()).collect();
        assert!(samples.iter().all(|s| (0.0..30.0).contains(s)));
        // Every 3-second bucket gets a share near 10%.
        for bucket in 0..10 {
            let lo = bucket as f64 * 3.0;
            let n = samples
                .iter()
                .filter(|s| (lo..lo + 3.0).contains(*s))
                .count();
            assert!((800..1200).contains(&n), "bucket {bucket}: {n}");
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
