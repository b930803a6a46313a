//! Sends this agent's LAN coordinate to the servers (Consul's
//! `Coordinate.Update`), at an interval that grows with the datacenter so
//! all agents together stay near `sync_coordinate_rate_target` updates a
//! second, never more often than `sync_coordinate_interval_min`, with a
//! random stagger so agents started together do not send together.

use std::sync::Arc;
use std::time::Duration;

use legate_types::coordinate::CoordinateEntry;
use legate_types::WriteOptions;

use crate::Agent;

/// The time between updates for `nodes` agents (Consul's
/// `lib.RateScaledInterval`): `nodes / rate` seconds, at least `min`.
pub fn interval(min: Duration, rate: f64, nodes: usize) -> Duration {
    let scaled = Duration::try_from_secs_f64(nodes as f64 / rate.max(f64::MIN_POSITIVE))
        .unwrap_or(Duration::MAX);
    scaled.max(min).min(Duration::from_secs(24 * 3600))
}

/// Up to `interval / 16` more (Consul's `lib.RandomStagger`).
fn stagger(interval: Duration) -> Duration {
    let cap = (interval / 16).as_millis() as u64;
    Duration::from_millis(if cap == 0 {
        0
    } else {
        rand::random::<u64>() % cap
    })
}

pub(crate) fn spawn(agent: Arc<Agent>) {
    tokio::spawn(async move {
        let mut shutdown = agent.shutdown.subscribe();
        let min = agent.config.wan.sync_coordinate_interval_min;
        let rate = agent.config.wan.sync_coordinate_rate_target;
        loop {
            let members = agent.membership().map(|m| m.members().len()).unwrap_or(1);
            let wait = interval(min, rate, members);
            tokio::select! {
                _ = tokio::time::sleep(wait + stagger(wait)) => {}
                _ = shutdown.wait_for(|v| *v) => return,
            }
            let Some(coord) = agent.membership().and_then(|m| m.coordinate()) else {
                continue;
            };
            let entry = CoordinateEntry {
                node: agent.config.node_name.clone(),
                segment: String::new(),
                coord,
            };
            if let Err(e) = agent
                .rpc()
                .coordinate_update(
                    &WriteOptions {
                        token: agent.tokens().agent_token(),
                        ..Default::default()
                    },
                    entry,
                )
                .await
            {
                tracing::debug!(error = %e, "sending this agent's coordinate failed");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_grows_with_the_datacenter() {
        let min = Duration::from_secs(15);
        assert_eq!(interval(min, 64.0, 3), min);
        assert_eq!(interval(min, 64.0, 6400), Duration::from_secs(100));
        assert!(stagger(Duration::from_secs(16)) < Duration::from_secs(1));
        // A tiny rate does not overflow: a day at most.
        assert_eq!(interval(min, 1e-300, 10), Duration::from_secs(24 * 3600));
    }
}
