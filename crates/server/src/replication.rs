//! The loop every replicator of a secondary's leader shares (Consul's
//! `replication.go`): rounds limited to one a second with a burst of five,
//! each a blocking read of the primary followed by paced applies; an error
//! resets the remote index (the next round compares everything) and backs
//! off with jitter up to two minutes; a remote index that goes backwards
//! (the primary was rebuilt) also forces a full comparison.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use legate_types::{Consistency, QueryOptions, RpcError};
use tokio::time::Instant;

use crate::Server;

/// Rounds per second, and how many may run back to back (Consul's
/// `*ReplicationRate`, `*ReplicationBurst`).
const ROUND_RATE: f64 = 1.0;
const ROUND_BURST: u32 = 5;
/// Writes per second a replicator applies (Consul's `*ReplicationApplyLimit`).
pub(crate) const APPLY_RATE: f64 = 100.0;
/// The longest back-off after failed rounds.
const MAX_BACKOFF: Duration = Duration::from_secs(120);
/// How long one blocking read of the primary waits for a change.
pub(crate) const FETCH_WAIT: Duration = Duration::from_secs(30);

/// A token bucket: `take` waits until a token is free.
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket refilled at `rate` tokens a second up to `burst`.
    pub(crate) fn new(rate: f64, burst: u32) -> TokenBucket {
        TokenBucket {
            rate,
            burst: burst as f64,
            tokens: burst as f64,
            at: Instant::now(),
        }
    }

    /// Waits for one token and takes it.
    pub(crate) async fn take(&mut self) {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.burst);
        self.at = now;
        if self.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
            tokio::time::sleep(wait).await;
            self.tokens = 1.0;
            self.at = Instant::now();
        }
        self.tokens -= 1.0;
    }
}

/// The wait after `failures` failed rounds in a row: doubling from one
/// second up to two minutes, with up to half of it random.
pub(crate) fn backoff(failures: u32) -> Duration {
    let base = Duration::from_secs(1u64 << failures.saturating_sub(1).min(7)).min(MAX_BACKOFF);
    let jitter = base.mul_f64(rand::random::<f64>() * 0.5);
    (base / 2 + jitter).max(Duration::from_millis(500))
}

/// The options of a blocking read of the primary at `min_index` (stale:
/// any of its servers answers), with the replication token.
pub(crate) fn fetch_options(server: &Server, primary: &str, min_index: u64) -> QueryOptions {
    QueryOptions {
        datacenter: primary.to_string(),
        token: server.replication_token(),
        consistency: Consistency::Stale,
        min_index,
        max_wait: Some(FETCH_WAIT),
        ..Default::default()
    }
}

/// Resolves when the WAN pool, having known a live server of the
/// primary, knows none any more: a round blocked on a connection that
/// went silent (a cut network) fails then rather than at its timeout.
async fn primary_lost(server: &Server) {
    let primary = server.primary_datacenter().to_string();
    let mut wan = server.config.wan.clone();
    let mut seen_alive = !wan.borrow_and_update().alive(&primary).is_empty();
    loop {
        if wan.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        let alive = !wan.borrow_and_update().alive(&primary).is_empty();
        if seen_alive && !alive {
            return;
        }
        seen_alive |= alive;
    }
}

/// Runs `round` until the task is aborted: `round(server, last_index)`
/// replicates once and answers the remote index it is current at;
/// `observe` sees every round's outcome.
pub(crate) async fn run<F, Fut, O>(
    server: Arc<Server>,
    name: &'static str,
    mut round: F,
    observe: O,
) where
    F: FnMut(Arc<Server>, u64) -> Fut,
    Fut: Future<Output = Result<u64, RpcError>>,
    O: Fn(&Server, &Result<u64, RpcError>),
{
    let mut rounds = TokenBucket::new(ROUND_RATE, ROUND_BURST);
    let mut index = 0u64;
    let mut failures = 0u32;
    tracing::info!(replicator = name, "replication: started");
    loop {
        rounds.take().await;
        let outcome = tokio::select! {
            outcome = round(server.clone(), index) => outcome,
            () = primary_lost(&server) => Err(RpcError::DatacenterUnavailable(
                server.primary_datacenter().to_string(),
            )),
        };
        observe(&server, &outcome);
        // Consul's `leader.replication.<kind>.status`: 1 after a good
        // round, 0 after a failed one.
        let kind = if name == "federation-states" {
            "federation-state"
        } else {
            name
        };
        metrics::gauge!(format!("leader.replication.{kind}.status")).set(if outcome.is_ok() {
            1.0
        } else {
            0.0
        });
        match outcome {
            Ok(remote) => {
                if failures > 0 {
                    tracing::info!(replicator = name, "replication: recovered");
                }
                failures = 0;
                if remote < index {
                    tracing::warn!(
                        replicator = name,
                        remote,
                        local = index,
                        "replication: the remote index went backwards; comparing everything"
                    );
                    index = 0;
                } else {
                    index = remote;
                }
            }
            Err(e) => {
                failures += 1;
                index = 0;
                let wait = backoff(failures);
                tracing::warn!(replicator = name, error = %e, retry_in = ?wait, "replication: round failed");
                // A primary with no live server known (a WAN pool still
                // joining, a partition) is tried again as soon as one shows,
                // rather than after the backoff; rounds stay rate-limited.
                let primary = server.primary_datacenter().to_string();
                let mut wan = server.config.wan.clone();
                let unreachable = wan.borrow_and_update().alive(&primary).is_empty();
                let shows = async {
                    while unreachable && wan.changed().await.is_ok() {
                        if !wan.borrow_and_update().alive(&primary).is_empty() {
                            return;
                        }
                    }
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shows => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_two_minutes_with_jitter() {
        for failures in 1..20 {
            let wait = backoff(failures);
            assert!(wait <= MAX_BACKOFF, "{failures}: {wait:?}");
            assert!(wait >= Duration::from_millis(500));
        }
        assert!(backoff(1) <= Duration::from_secs(1));
        assert!(backoff(12) >= Duration::from_secs(60));
    }

    #[tokio::test]
    async fn rounds_burst_then_go_at_the_rate() {
        let mut bucket = TokenBucket::new(20.0, 5);
        let started = Instant::now();
        for _ in 0..5 {
            bucket.take().await;
        }
        assert!(started.elapsed() < Duration::from_millis(40));
        for _ in 0..3 {
            bucket.take().await;
        }
        // Three more tokens at 20 a second: about 150 ms.
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(140), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    }
}
