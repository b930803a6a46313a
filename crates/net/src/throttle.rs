//! At most one log line per interval for a recurring condition, with the
//! number of occurrences it stands for.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Decides when a recurring event is worth another log line.
pub struct Throttle {
    interval: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// One line per `interval`.
    pub const fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            state: Mutex::new((None, 0)),
        }
    }

    /// Counts one occurrence; `Some(n)` when a line should be logged now,
    /// `n` being the occurrences since the last line (this one included).
    pub fn hit(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 += 1;
        let now = Instant::now();
        match state.0 {
            Some(last) if now.duration_since(last) < self.interval => None,
            _ => {
                state.0 = Some(now);
                let count = state.1;
                state.1 = 0;
                Some(count)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_counting_the_rest() {
        let t = Throttle::new(Duration::from_millis(200));
        assert_eq!(t.hit(), Some(1));
        for _ in 0..99 {
            assert_eq!(t.hit(), None);
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(t.hit(), Some(100));
    }
}
