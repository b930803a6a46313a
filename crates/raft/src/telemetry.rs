//! Raft's metrics in hashicorp/raft's names (Consul's `raft.*`): a counter
//! per state entered (`raft.state.candidate`, `.leader`, `.follower`), and
//! on a leader with followers `raft.leader.lastContact` (ms since a quorum
//! last acknowledged it), sampled every 500 ms as hashicorp/raft's lease
//! check does. Writes record `raft.apply` and `raft.commitTime` where
//! they are made.

use std::time::Duration;

use openraft::{Raft, ServerState};

use crate::TypeConfig;

/// How often the leader samples its last contact with a quorum.
const LEASE_CHECK: Duration = Duration::from_millis(500);

fn state_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Candidate => "candidate",
        ServerState::Follower => "follower",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// Follows `raft`'s metrics until it shuts down.
pub(crate) async fn run(raft: Raft<TypeConfig>) {
    let mut receiver = raft.metrics();
    let mut last_state: Option<ServerState> = None;
    let mut lease = tokio::time::interval(LEASE_CHECK);
    lease.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (state, quorum_ack, voters) = {
            let m = receiver.borrow_and_update();
            (
                m.state,
                m.millis_since_quorum_ack,
                m.membership_config.membership().voter_ids().count(),
            )
        };
        if last_state != Some(state) {
            last_state = Some(state);
            if state == ServerState::Shutdown {
                return;
            }
            if state != ServerState::Learner {
                metrics::counter!(format!("raft.state.{}", state_name(state))).increment(1);
            }
        }
        tokio::select! {
            changed = receiver.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = lease.tick() => {
                if state == ServerState::Leader && voters > 1 {
                    if let Some(ms) = quorum_ack {
                        metrics::histogram!("raft.leader.lastContact").record(ms as f64);
                    }
                }
            }
        }
    }
}
