//! Cluster-wide changes spread by gossip (foca custom broadcasts):
//! `force-leave` and keyring operations reach every member, each applying
//! the change once; a broadcast is known by a random id and forwarded a
//! bounded number of times, as foca does for its own updates.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use foca::{BroadcastHandler, Invalidates};
use serde::{Deserialize, Serialize};

/// A change every member applies. Shown (`Display`, `Debug`) without key
/// material: keys appear as fingerprints.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClusterChange {
    /// Mark a failed member as left.
    ForceLeave(String),
    /// Forget a member that left or failed (`force-leave -prune`).
    Prune(String),
    /// A user event for every member (each keeps it or not by its filters).
    UserEvent(legate_types::event::UserEvent),
    /// Install a gossip key (base64).
    KeyInstall(String),
    /// Make an installed key primary.
    KeyUse(String),
    /// Remove an installed key that is not primary.
    KeyRemove(String),
    /// What a member's keyring holds now (key fingerprints, primary first).
    KeyState {
        /// The member's name.
        member: String,
        /// Its key fingerprints.
        keys: Vec<String>,
    },
}

impl std::fmt::Display for ClusterChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fingerprint = |encoded: &str| {
            crate::Key::parse(encoded)
                .map(|k| k.fingerprint())
                .unwrap_or_else(|_| "<not a key>".into())
        };
        match self {
            ClusterChange::ForceLeave(name) => write!(f, "force-leave {name}"),
            ClusterChange::Prune(name) => write!(f, "force-leave -prune {name}"),
            ClusterChange::UserEvent(e) => write!(f, "user event {} ({})", e.name, e.id),
            ClusterChange::KeyInstall(k) => write!(f, "install key {}", fingerprint(k)),
            ClusterChange::KeyUse(k) => write!(f, "use key {}", fingerprint(k)),
            ClusterChange::KeyRemove(k) => write!(f, "remove key {}", fingerprint(k)),
            ClusterChange::KeyState { member, keys } => {
                write!(f, "{member} holds keys {}", keys.join(","))
            }
        }
    }
}

impl std::fmt::Debug for ClusterChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[derive(Serialize, Deserialize)]
struct Broadcast {
    id: u128,
    change: ClusterChange,
}

/// A broadcast as received: a change this build does not know (a newer
/// member's) is forwarded like any other but not applied, so members of
/// mixed versions keep spreading each other's changes.
#[derive(Deserialize)]
struct Received {
    id: u128,
    change: serde_json::Value,
}

/// Encodes a new broadcast of `change`.
pub(crate) fn encode(change: ClusterChange) -> Vec<u8> {
    let broadcast = Broadcast {
        id: rand::random(),
        change,
    };
    serde_json::to_vec(&broadcast).unwrap_or_default()
}

/// A broadcast's identity: foca keeps one copy per id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BroadcastKey(u128);

impl Invalidates for BroadcastKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

/// A broadcast that does not decode.
#[derive(Debug)]
pub(crate) struct BadBroadcast(String);

impl std::fmt::Display for BadBroadcast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "undecodable cluster change: {}", self.0)
    }
}

impl std::error::Error for BadBroadcast {}

/// How many broadcast ids are remembered (older ones could be applied
/// twice, which every change tolerates).
const REMEMBERED: usize = 4096;

/// Receives broadcasts: new ones are queued for the gossip loop to apply
/// and handed back to foca to forward; repeats are dropped.
pub(crate) struct ChangeHandler {
    seen: HashSet<u128>,
    order: VecDeque<u128>,
    received: Arc<Mutex<Vec<ClusterChange>>>,
}

impl ChangeHandler {
    pub(crate) fn new(received: Arc<Mutex<Vec<ClusterChange>>>) -> ChangeHandler {
        ChangeHandler {
            seen: HashSet::new(),
            order: VecDeque::new(),
            received,
        }
    }
}

impl<T> BroadcastHandler<T> for ChangeHandler {
    type Key = BroadcastKey;
    type Error = BadBroadcast;

    fn receive_item(
        &mut self,
        data: &[u8],
        _sender: Option<&T>,
    ) -> Result<Option<BroadcastKey>, BadBroadcast> {
        let broadcast: Received =
            serde_json::from_slice(data).map_err(|e| BadBroadcast(e.to_string()))?;
        if !self.seen.insert(broadcast.id) {
            return Ok(None);
        }
        self.order.push_back(broadcast.id);
        if self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        match serde_json::from_value::<ClusterChange>(broadcast.change) {
            Ok(change) => self
                .received
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(change),
            Err(e) => {
                tracing::debug!(error = %e, "gossip: forwarding a cluster change this version does not know")
            }
        }
        Ok(Some(BroadcastKey(broadcast.id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_changes_are_forwarded_but_not_applied() {
        let received = Arc::new(Mutex::new(Vec::new()));
        let mut handler = ChangeHandler::new(received.clone());
        let newer = br#"{"id": 7, "change": {"SomethingNew": {"x": 1}}}"#;
        let key = BroadcastHandler::<()>::receive_item(&mut handler, newer, None).unwrap();
        assert_eq!(key, Some(BroadcastKey(7)), "kept for forwarding");
        assert!(received.lock().unwrap().is_empty(), "not applied");
        let known = encode(ClusterChange::Prune("b1.dc2".into()));
        assert!(
            BroadcastHandler::<()>::receive_item(&mut handler, &known, None)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            *received.lock().unwrap(),
            vec![ClusterChange::Prune("b1.dc2".into())]
        );
        // Not even an envelope: an error, as before.
        assert!(BroadcastHandler::<()>::receive_item(&mut handler, b"nonsense", None).is_err());
    }

    #[test]
    fn changes_never_show_key_material() {
        let key = crate::Key::generate();
        for change in [
            ClusterChange::KeyInstall(key.clone()),
            ClusterChange::KeyUse(key.clone()),
            ClusterChange::KeyRemove(key.clone()),
        ] {
            let shown = format!("{change} {change:?}");
            assert!(!shown.contains(&key), "{shown}");
            assert!(shown.contains(&crate::Key::parse(&key).unwrap().fingerprint()));
        }
    }
}
