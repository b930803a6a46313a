//! Leadership transfer (`operator raft transfer-leader`) on openraft 0.9,
//! which has no `TimeoutNow`. The leader:
//!
//! 1. holds every new write and membership change (the transfer gate), so
//!    nothing more is appended;
//! 2. waits until the target's log matches its own;
//! 3. stops its heartbeats, so the followers' leader leases — during
//!    which openraft refuses any vote — run out `election_timeout_max`
//!    after the last one;
//! 4. sends the target a [`RaftMessage::TimeoutNow`] just after that. The
//!    target campaigns at once, with an up-to-date log, inside the window
//!    where leases have run out but no other follower's own election
//!    timer (`lease + election_timeout`) can have fired yet;
//! 5. waits until the target leads, then turns its heartbeats back on and
//!    opens the gate (held writes get "not the leader" and are forwarded).
//!
//! Writes stall for about `election_timeout_max` (2 s × `raft_multiplier`
//! between servers), as Consul's writes stall while hashicorp/raft
//! transfers. An older server answers the message as undecodable and the
//! transfer fails with nothing changed but the pause.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::network::{RaftAnswer, RaftMessage};
use crate::{RaftError, RaftNode};

/// Longest wait for the target's log to catch up.
const CATCH_UP: Duration = Duration::from_secs(5);

/// What the target answers a `TimeoutNow`.
#[derive(Debug, Serialize, Deserialize)]
pub enum TimeoutNowAnswer {
    /// It started an election.
    Campaigning,
    /// It did not (already the leader, or its term moved on).
    Refused(String),
}

impl RaftNode {
    /// Hands leadership to voter `target` (this node must lead). Returns
    /// once the target leads, or an error saying why not. The transfer
    /// runs to its end even if the caller stops waiting (an HTTP client
    /// that hangs up): heartbeats are paused in the middle of it, and must
    /// come back.
    pub async fn transfer_leadership(&self, target: u64) -> Result<(), RaftError> {
        let node = self.clone();
        tokio::spawn(async move { node.run_transfer(target).await })
            .await
            .map_err(|e| RaftError::Other(format!("leadership transfer stopped: {e}")))?
    }

    async fn run_transfer(&self, target: u64) -> Result<(), RaftError> {
        let own = self.options.node_id;
        if !self.is_leader() {
            return Err(RaftError::NotLeader {
                leader: self.leader_address(),
            });
        }
        if target == own {
            return Err(RaftError::Other(
                "cannot transfer leadership to itself".into(),
            ));
        }
        let membership = self.membership();
        let Some(address) = membership
            .voters
            .contains(&target)
            .then(|| membership.nodes.get(&target).cloned())
            .flatten()
        else {
            return Err(RaftError::Other(format!("server {target} is not a voter")));
        };
        let Some(transport) = self.options.transport.0.clone() else {
            return Err(RaftError::Other("cannot find peer".into()));
        };
        let _held = self.gate.write().await;
        // Another transfer may have moved leadership while this one waited
        // for the gate.
        if !self.is_leader() {
            return Err(RaftError::NotLeader {
                leader: self.leader_address(),
            });
        }
        self.wait_caught_up(target).await?;
        let lease = Duration::from_millis(self.raft.config().election_timeout_max);
        let heartbeat = Duration::from_millis(self.raft.config().heartbeat_interval);
        let term = self.raft.metrics().borrow().current_term;
        self.raft.runtime_config().heartbeat(false);
        let outcome = async {
            tokio::time::sleep(lease + heartbeat + Duration::from_millis(50)).await;
            let message = serde_json::to_vec(&RaftMessage::TimeoutNow { term })
                .map_err(|e| RaftError::Other(e.to_string()))?;
            let answer = transport
                .send(&address, message, lease)
                .await
                .map_err(|e| RaftError::Other(format!("server {target}: {e}")))?;
            match serde_json::from_slice(&answer) {
                Ok(RaftAnswer::TimeoutNow(TimeoutNowAnswer::Campaigning)) => {}
                Ok(RaftAnswer::TimeoutNow(TimeoutNowAnswer::Refused(why))) => {
                    return Err(RaftError::Other(format!("server {target} refused: {why}")))
                }
                Ok(RaftAnswer::Undecodable(_)) => {
                    return Err(RaftError::Other(format!(
                        "server {target} runs a Legate without leadership transfer"
                    )))
                }
                other => {
                    return Err(RaftError::Other(format!(
                        "unexpected answer from server {target}: {other:?}"
                    )))
                }
            }
            self.wait_until_leads(target, lease * 3).await
        }
        .await;
        self.raft.runtime_config().heartbeat(true);
        outcome
    }

    async fn wait_caught_up(&self, target: u64) -> Result<(), RaftError> {
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        loop {
            let membership = self.membership();
            if membership.matched.get(&target) >= Some(&membership.last_log_index) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RaftError::Other(format!(
                    "server {target} did not catch up with the leader's log"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `target` leads; another server winning the election
    /// is an error naming it (leadership moved, but not where asked).
    async fn wait_until_leads(&self, target: u64, patience: Duration) -> Result<(), RaftError> {
        let own = self.options.node_id;
        let mut metrics = self.raft.metrics();
        let elected = tokio::time::timeout(patience, async {
            loop {
                let leader = metrics.borrow_and_update().current_leader;
                if let Some(leader) = leader.filter(|l| *l != own) {
                    return leader;
                }
                if metrics.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        })
        .await;
        match elected {
            Ok(leader) if leader == target => Ok(()),
            Ok(other) => Err(RaftError::Other(format!(
                "server {other} won the election, not server {target}"
            ))),
            Err(_) => Err(RaftError::Other("leadership transfer timed out".into())),
        }
    }

    /// The target's side: campaign now if the sender's term is still ours
    /// and we do not lead.
    pub(crate) async fn take_timeout_now(&self, term: u64) -> TimeoutNowAnswer {
        if self.is_leader() {
            return TimeoutNowAnswer::Refused("already the leader".into());
        }
        let current = self.raft.metrics().borrow().current_term;
        if current != term {
            return TimeoutNowAnswer::Refused(format!("term {current}, not the transfer's {term}"));
        }
        match self.raft.trigger().elect().await {
            Ok(()) => TimeoutNowAnswer::Campaigning,
            Err(e) => TimeoutNowAnswer::Refused(e.to_string()),
        }
    }
}
