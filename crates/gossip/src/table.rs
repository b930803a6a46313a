//! The member table: foca's view of the members plus what this member
//! knows of those gone (left or failed), force-leaves waiting for a
//! failure, and members' latest key fingerprints.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Member, NodeId, Status};

/// The member table: foca's view plus what we know of those gone.
pub(crate) struct Table {
    pub(crate) me: NodeId,
    pub(crate) by_addr: BTreeMap<SocketAddr, Member>,
    /// Force-leaves received for members not (yet) failed here.
    pub(crate) leave_intents: std::collections::HashMap<String, Instant>,
    /// Prunes received for members not (yet) failed here: forgotten, not
    /// recorded, when they fail.
    pub(crate) prune_intents: std::collections::HashMap<String, Instant>,
    /// Key fingerprints members announced after their keyring changed
    /// (newer than the ones in their tags).
    pub(crate) key_states: std::collections::HashMap<String, Vec<String>>,
    /// When each member at an address was last seen going (failed or
    /// left), for reaping.
    pub(crate) gone_since: std::collections::HashMap<SocketAddr, Instant>,
}

/// How long a force-leave waits for the member to fail here.
const LEAVE_INTENT: Duration = Duration::from_secs(60);

impl Table {
    pub(crate) fn up(&mut self, id: &NodeId) {
        // A new identity (a restart) carries its keys in its tags again,
        // and is a member again whatever was pruned before.
        self.key_states.remove(&id.name);
        self.prune_intents.remove(&id.name);
        self.gone_since.remove(&id.addr);
        self.by_addr.insert(
            id.addr,
            Member {
                name: id.name.clone(),
                addr: id.addr,
                tags: id.tags.clone(),
                status: if id.tags.leaving {
                    Status::Left
                } else {
                    Status::Alive
                },
            },
        );
    }

    pub(crate) fn renamed(&mut self, id: &NodeId) {
        self.key_states.remove(&id.name);
        match self.by_addr.get_mut(&id.addr) {
            Some(m) => {
                m.name = id.name.clone();
                m.tags = id.tags.clone();
                if id.tags.leaving {
                    m.status = Status::Left;
                }
            }
            None => self.up(id),
        }
    }

    /// Marks `name` left if it failed; otherwise remembers the intent for
    /// a while, so a failure noticed soon after is recorded as left (a
    /// `force-leave` that reached us before our own failure detector did).
    pub(crate) fn force_leave(&mut self, name: &str) {
        let mut failed = false;
        for m in self.by_addr.values_mut() {
            if m.name == name && m.status == Status::Failed {
                m.status = Status::Left;
                failed = true;
            }
        }
        if !failed {
            self.leave_intents
                .insert(name.to_string(), Instant::now() + LEAVE_INTENT);
        }
    }

    /// Forgets `name` if it left or failed (`force-leave -prune`); a
    /// failed member is first marked left, as `force-leave` does.
    pub(crate) fn prune(&mut self, name: &str) {
        self.force_leave(name);
        self.leave_intents.remove(name);
        self.by_addr
            .retain(|_, m| m.name != name || m.status == Status::Alive);
        // Still alive here (our failure detector is behind the one that
        // pruned): forget it as soon as it fails.
        if self.by_addr.values().any(|m| m.name == name) {
            self.prune_intents
                .insert(name.to_string(), Instant::now() + LEAVE_INTENT);
        }
    }

    pub(crate) fn down(&mut self, id: &NodeId) {
        let now = Instant::now();
        self.gone_since.entry(id.addr).or_insert(now);
        self.leave_intents.retain(|_, until| *until > now);
        self.prune_intents.retain(|_, until| *until > now);
        if self.prune_intents.remove(&id.name).is_some() {
            self.by_addr.retain(|_, m| m.name != id.name);
            return;
        }
        let status = if id.tags.leaving || self.leave_intents.remove(&id.name).is_some() {
            Status::Left
        } else {
            Status::Failed
        };
        self.by_addr
            .entry(id.addr)
            .and_modify(|m| {
                if m.status != Status::Left {
                    m.status = status;
                }
            })
            .or_insert_with(|| Member {
                name: id.name.clone(),
                addr: id.addr,
                tags: id.tags.clone(),
                status,
            });
    }

    /// Forgets failed members gone for longer than their reconnect
    /// timeout (a member's own `rc_tm` tag wins) and members that left
    /// longer than `tombstone` ago; the names forgotten.
    pub(crate) fn reap(
        &mut self,
        now: Instant,
        reconnect: Duration,
        tombstone: Duration,
    ) -> Vec<String> {
        let by_addr = &self.by_addr;
        self.gone_since.retain(|addr, _| by_addr.contains_key(addr));
        let mut reaped = Vec::new();
        let gone_since = &self.gone_since;
        self.by_addr.retain(|addr, m| {
            let timeout = match m.status {
                Status::Failed => own_reconnect_timeout(m).unwrap_or(reconnect),
                Status::Left => tombstone,
                _ => return true,
            };
            let expired = gone_since
                .get(addr)
                .is_some_and(|since| now.saturating_duration_since(*since) >= timeout);
            if expired {
                reaped.push(m.name.clone());
            }
            !expired
        });
        let by_addr = &self.by_addr;
        self.gone_since.retain(|addr, _| by_addr.contains_key(addr));
        reaped
    }

    pub(crate) fn snapshot(&self) -> Vec<Member> {
        let mut all: Vec<Member> = self
            .by_addr
            .values()
            .filter(|m| m.addr != self.me.addr && m.name != self.me.name)
            .cloned()
            .collect();
        all.push(Member {
            name: self.me.name.clone(),
            addr: self.me.addr,
            tags: self.me.tags.clone(),
            status: Status::Alive,
        });
        // A name seen at several addresses: the live one wins.
        all.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then((a.status != Status::Alive).cmp(&(b.status != Status::Alive)))
        });
        all.dedup_by(|later, first| later.name == first.name);
        for member in &mut all {
            if let Some(keys) = self.key_states.get(&member.name) {
                member.tags.keys = keys.clone();
            }
        }
        all
    }
}

/// The reconnect timeout a member advertises (`rc_tm=<duration>`).
fn own_reconnect_timeout(member: &Member) -> Option<Duration> {
    member.tags.features.iter().find_map(|f| {
        let value = f
            .strip_prefix(crate::RECONNECT_TIMEOUT_TAG)?
            .strip_prefix('=')?;
        legate_types::duration::parse_go_duration(value).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, port: u16) -> NodeId {
        NodeId {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            name: name.to_string(),
            bump: 0,
            tags: Default::default(),
        }
    }

    fn table() -> Table {
        Table {
            me: id("me", 1),
            by_addr: BTreeMap::new(),
            leave_intents: Default::default(),
            prune_intents: Default::default(),
            key_states: Default::default(),
            gone_since: Default::default(),
        }
    }

    #[test]
    fn members_gone_past_their_timeouts_are_reaped() {
        let mut table = table();
        let hour = Duration::from_secs(3600);
        let failed = id("failed", 2);
        let mut impatient = id("impatient", 3);
        impatient.tags.features = vec!["rc_tm=1h".into()];
        let mut leaving = id("leaving", 4);
        leaving.tags.leaving = true;
        for member in [&failed, &impatient, &leaving] {
            table.up(member);
            table.down(member);
        }
        table.up(&id("alive", 5));
        let start = Instant::now();
        assert!(table.reap(start, 72 * hour, 24 * hour).is_empty());
        assert_eq!(
            table.reap(start + 2 * hour, 72 * hour, 24 * hour),
            ["impatient"]
        );
        assert_eq!(
            table.reap(start + 25 * hour, 72 * hour, 24 * hour),
            ["leaving"]
        );
        assert_eq!(
            table.reap(start + 73 * hour, 72 * hour, 24 * hour),
            ["failed"]
        );
        let names: Vec<_> = table.by_addr.values().map(|m| m.name.clone()).collect();
        assert_eq!(names, ["alive"]);
        assert!(table.gone_since.is_empty());
        // A member that comes back before its time is not reaped.
        table.up(&failed);
        table.down(&failed);
        table.up(&failed);
        assert!(table.reap(start + 1000 * hour, hour, hour).is_empty());
    }

    #[test]
    fn a_prune_that_arrives_before_the_failure_forgets_the_member_when_it_fails() {
        let mut table = table();
        let b3 = id("b3", 2);
        table.up(&b3);
        table.prune("b3");
        assert_eq!(table.by_addr.len(), 1, "alive here: kept until it fails");
        table.down(&b3);
        assert!(table.by_addr.is_empty(), "{:?}", table.by_addr);
    }

    #[test]
    fn a_prune_after_the_failure_forgets_at_once_and_leaves_no_intent() {
        let mut table = table();
        let b3 = id("b3", 2);
        table.up(&b3);
        table.down(&b3);
        assert_eq!(table.by_addr[&b3.addr].status, Status::Failed);
        table.prune("b3");
        assert!(table.by_addr.is_empty());
        assert!(table.prune_intents.is_empty());
    }
}
