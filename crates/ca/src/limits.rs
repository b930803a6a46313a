//! CSR signing limits, as Consul applies them on servers: a rate limit
//! (`csr_max_per_second`, when above 0) or else a concurrency limit
//! (`csr_max_concurrent`, when above 0). A request over the limit waits
//! briefly for room, then fails with exactly Consul's error, which clients
//! match on to back off.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The error text clients recognise.
pub const RATE_LIMIT_ERROR: &str = "Rate limit reached, try again later";

/// How long an over-limit request waits for room before failing.
pub const LIMIT_WAIT: Duration = Duration::from_millis(500);

/// Consul's default `csr_max_per_second`.
pub const DEFAULT_CSR_MAX_PER_SECOND: f64 = 50.0;

/// The request was over the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Rate limit reached, try again later")]
pub struct RateLimited;

struct Bucket {
    tokens: f64,
    updated: Instant,
}

enum Mode {
    Unlimited,
    Rate {
        per_second: f64,
        burst: f64,
        bucket: Mutex<Bucket>,
    },
    Concurrent(Arc<Semaphore>),
}

/// The limiter in front of CSR signing.
pub struct CsrLimiter {
    mode: Mode,
}

/// Held while a CSR is being signed (concurrency mode).
pub struct CsrPermit {
    _permit: Option<OwnedSemaphorePermit>,
}

impl CsrLimiter {
    /// A limiter for Consul's two settings.
    pub fn new(max_per_second: f64, max_concurrent: u32) -> CsrLimiter {
        let mode = if max_per_second > 0.0 {
            let burst = max_per_second.ceil().max(1.0);
            Mode::Rate {
                per_second: max_per_second,
                burst,
                bucket: Mutex::new(Bucket {
                    tokens: burst,
                    updated: Instant::now(),
                }),
            }
        } else if max_concurrent > 0 {
            Mode::Concurrent(Arc::new(Semaphore::new(max_concurrent as usize)))
        } else {
            Mode::Unlimited
        };
        CsrLimiter { mode }
    }

    /// Waits up to [`LIMIT_WAIT`] for room to sign one CSR.
    pub async fn acquire(&self) -> Result<CsrPermit, RateLimited> {
        match &self.mode {
            Mode::Unlimited => Ok(CsrPermit { _permit: None }),
            Mode::Concurrent(semaphore) => {
                match tokio::time::timeout(LIMIT_WAIT, semaphore.clone().acquire_owned()).await {
                    Ok(Ok(permit)) => Ok(CsrPermit {
                        _permit: Some(permit),
                    }),
                    _ => Err(RateLimited),
                }
            }
            Mode::Rate {
                per_second,
                burst,
                bucket,
            } => {
                let deadline = Instant::now() + LIMIT_WAIT;
                loop {
                    let wait = {
                        let mut b = bucket.lock().unwrap_or_else(|e| e.into_inner());
                        let now = Instant::now();
                        let refill = now.duration_since(b.updated).as_secs_f64() * per_second;
                        b.tokens = (b.tokens + refill).min(*burst);
                        b.updated = now;
                        if b.tokens >= 1.0 {
                            b.tokens -= 1.0;
                            return Ok(CsrPermit { _permit: None });
                        }
                        // A tiny rate (1e-30/s) means a wait no Duration holds:
                        // treat it as longer than any deadline.
                        Duration::try_from_secs_f64((1.0 - b.tokens) / per_second)
                            .unwrap_or(Duration::MAX)
                    };
                    if wait > deadline.saturating_duration_since(Instant::now()) {
                        return Err(RateLimited);
                    }
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rate_limit_lets_a_burst_through_and_refuses_the_excess() {
        let limiter = Arc::new(CsrLimiter::new(5.0, 0));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(
                async move { limiter.acquire().await.map(|_| ()) },
            ));
        }
        let mut ok = 0;
        let mut limited = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => ok += 1,
                Err(e) => {
                    assert_eq!(e.to_string(), RATE_LIMIT_ERROR);
                    limited += 1;
                }
            }
        }
        // 5 at once, plus what refills while the others wait (about 2.5 per
        // 500 ms; more only if the machine is slow to start the tasks).
        assert!((5..=15).contains(&ok), "{ok} succeeded");
        assert!(limited >= 35, "{limited} were limited");
        assert_eq!(ok + limited, 50);
        // After backing off, requests succeed again.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        for _ in 0..5 {
            assert!(limiter.acquire().await.is_ok());
        }
    }

    #[tokio::test]
    async fn extreme_rates_answer_rather_than_panic() {
        // 1e-30 per second: the one token of the burst, then refusals (the
        // refill wait is beyond any Duration), never a panic.
        let slow = CsrLimiter::new(1e-30, 0);
        assert!(slow.acquire().await.is_ok());
        assert_eq!(slow.acquire().await.err(), Some(RateLimited));
        let fast = CsrLimiter::new(f64::MAX, 0);
        for _ in 0..100 {
            assert!(fast.acquire().await.is_ok());
        }
    }

    #[tokio::test]
    async fn concurrency_limit_holds_while_signing() {
        let limiter = Arc::new(CsrLimiter::new(0.0, 2));
        let a = limiter.acquire().await.unwrap();
        let _b = limiter.acquire().await.unwrap();
        let started = Instant::now();
        assert_eq!(limiter.acquire().await.err(), Some(RateLimited));
        assert!(started.elapsed() >= LIMIT_WAIT);
        drop(a);
        assert!(limiter.acquire().await.is_ok());
        let unlimited = CsrLimiter::new(0.0, 0);
        for _ in 0..1000 {
            assert!(unlimited.acquire().await.is_ok());
        }
    }
}
