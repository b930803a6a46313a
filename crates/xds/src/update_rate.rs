//! `xds { update_max_per_second }` (Consul's default 250): how many new
//! proxy configurations the agent sends per second across all its xDS
//! streams. A change many proxies see at once (an intention, a root
//! rotation) is spread out instead of rebuilding and pushing every
//! proxy's resources in one burst; a stream that waits then sends the
//! newest snapshot, not the one that made it wait.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Consul's default rate.
pub const DEFAULT_PER_SECOND: f64 = 250.0;

/// The longest wait between two updates, however small the rate: a
/// proxy still gets a change within the hour.
pub const LONGEST_SPACING: Duration = Duration::from_secs(3600);

/// Paces updates: one every `1 / rate` seconds, shared by every stream.
#[derive(Debug)]
pub struct UpdateRate {
    spacing: Duration,
    next: Mutex<Option<Instant>>,
}

impl UpdateRate {
    /// At most `per_second` updates a second (a positive rate; a rate
    /// so small its spacing would pass [`LONGEST_SPACING`] is held there,
    /// and zero, negative or not-a-number rates do not pace at all).
    pub fn new(per_second: f64) -> UpdateRate {
        let spacing = if per_second.is_finite() && per_second > 0.0 {
            Duration::try_from_secs_f64(1.0 / per_second)
                .map_or(LONGEST_SPACING, |spacing| spacing.min(LONGEST_SPACING))
        } else {
            Duration::ZERO
        };
        UpdateRate {
            spacing,
            next: Mutex::new(None),
        }
    }

    /// Waits for this update's turn.
    pub async fn acquire(&self) {
        let slot = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let slot = next.map_or(now, |at| at.max(now));
            *next = Some(slot + self.spacing);
            slot
        };
        // A turn already due is taken at once: with the pace lifted, tens
        // of thousands of streams would otherwise each go through the timer.
        if slot > Instant::now() {
            tokio::time::sleep_until(slot).await;
        }
    }
}

impl Default for UpdateRate {
    fn default() -> Self {
        UpdateRate::new(DEFAULT_PER_SECOND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_rates_are_held_at_the_longest_spacing_instead_of_panicking() {
        for rate in [1e-300, f64::MIN_POSITIVE, 1e-9] {
            assert_eq!(UpdateRate::new(rate).spacing, LONGEST_SPACING, "{rate}");
        }
        assert_eq!(UpdateRate::new(0.5).spacing, Duration::from_secs(2));
        assert_eq!(UpdateRate::new(0.0).spacing, Duration::ZERO);
        assert_eq!(UpdateRate::new(f64::NAN).spacing, Duration::ZERO);
    }

    #[tokio::test]
    async fn updates_are_spaced_at_the_rate_across_callers() {
        let rate = std::sync::Arc::new(UpdateRate::new(100.0));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let rate = rate.clone();
            tasks.push(tokio::spawn(async move {
                rate.acquire().await;
                Instant::now()
            }));
        }
        let mut times = Vec::new();
        for task in tasks {
            times.push(task.await.unwrap() - start);
        }
        times.sort();
        // Each waits its turn: the n-th goes no sooner than n spacings in
        // (a lower bound the pacing guarantees however busy the machine).
        for (n, at) in times.iter().enumerate() {
            assert!(*at >= Duration::from_millis(10) * n as u32, "{times:?}");
        }
        // After a quiet spell the next one does not wait for old turns.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let next = *rate.next.lock().unwrap();
        assert!(next.unwrap() <= Instant::now());
    }
}
