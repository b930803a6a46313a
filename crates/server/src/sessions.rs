//! Session TTLs, kept by the leader: a session not renewed within twice its
//! TTL (Consul's multiplier) is destroyed through Raft. Deadlines are local
//! to the leader; a new leader starts every TTL session's clock afresh.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Consul lets a session live for twice its TTL before invalidating it.
const TTL_MULTIPLIER: u32 = 2;

/// Deadlines of TTL sessions.
#[derive(Default)]
pub(crate) struct SessionTimers {
    deadlines: Mutex<HashMap<String, Instant>>,
}

impl SessionTimers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.deadlines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts or restarts a session's clock.
    pub(crate) fn reset(&self, id: &str, ttl: Duration) {
        self.lock()
            .insert(id.to_string(), Instant::now() + ttl * TTL_MULTIPLIER);
    }

    /// Starts a clock only if none runs yet (after a leadership change).
    pub(crate) fn ensure(&self, id: &str, ttl: Duration) {
        self.lock()
            .entry(id.to_string())
            .or_insert_with(|| Instant::now() + ttl * TTL_MULTIPLIER);
    }

    /// Forgets a session.
    pub(crate) fn clear(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Sessions whose deadline has passed; they are forgotten.
    pub(crate) fn take_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let mut map = self.lock();
        let expired: Vec<String> = map
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            map.remove(id);
        }
        expired
    }

    /// Forgets every clock (on losing leadership).
    pub(crate) fn clear_all(&self) {
        self.lock().clear();
    }
}
