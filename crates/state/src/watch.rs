//! Change notification for blocking queries. Readers subscribe *before*
//! reading, then wait for any of their channels to change. Writers collect
//! what they touched while holding the write lock and notify after it.
//!
//! Granularity: one channel per table, one per watched KV prefix, and one
//! per watched service name, so a watcher of `health/service/web` is not
//! woken by writes to `db`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

/// The tables a query can watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Catalog nodes.
    Nodes,
    /// Catalog services.
    Services,
    /// Health checks.
    Checks,
    /// KV entries (and tombstones).
    Kvs,
    /// Sessions.
    Sessions,
    /// Config entries (generic table).
    ConfigEntries,
    /// Connect CA roots.
    CaRoots,
    /// Connect CA configuration.
    CaConfig,
    /// Network coordinates of nodes.
    Coordinates,
    /// Federation states (one per datacenter).
    FederationStates,
    /// ACL tokens.
    AclTokens,
    /// ACL policies.
    AclPolicies,
    /// ACL roles.
    AclRoles,
    /// Prepared queries.
    PreparedQueries,
    /// ACL auth methods.
    AclAuthMethods,
    /// ACL binding rules.
    AclBindingRules,
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 16] = [
        Table::Nodes,
        Table::Services,
        Table::Checks,
        Table::Kvs,
        Table::Sessions,
        Table::ConfigEntries,
        Table::CaRoots,
        Table::CaConfig,
        Table::Coordinates,
        Table::FederationStates,
        Table::AclTokens,
        Table::AclPolicies,
        Table::AclRoles,
        Table::PreparedQueries,
        Table::AclAuthMethods,
        Table::AclBindingRules,
    ];

    /// The name used in index bookkeeping.
    pub fn name(self) -> &'static str {
        match self {
            Table::Nodes => "nodes",
            Table::Services => "services",
            Table::Checks => "checks",
            Table::Kvs => "kvs",
            Table::Sessions => "sessions",
            Table::ConfigEntries => "config-entries",
            Table::CaRoots => "connect-ca-roots",
            Table::CaConfig => "connect-ca-config",
            Table::Coordinates => "coordinates",
            Table::FederationStates => "federation-states",
            Table::AclTokens => "acl-tokens",
            Table::AclPolicies => "acl-policies",
            Table::AclRoles => "acl-roles",
            Table::PreparedQueries => "prepared-queries",
            Table::AclAuthMethods => "acl-auth-methods",
            Table::AclBindingRules => "acl-binding-rules",
        }
    }
}

/// What one write touched, collected under the write lock.
#[derive(Debug, Default)]
pub struct Changes {
    /// Tables that changed.
    pub tables: BTreeSet<Table>,
    /// KV keys that changed (set, deleted, lock state).
    pub kv_keys: BTreeSet<String>,
    /// KV prefixes deleted as a whole.
    pub kv_prefixes: BTreeSet<String>,
    /// Service names whose instances, checks or nodes changed.
    pub services: BTreeSet<String>,
    /// Everything changed (a snapshot restore): every watcher wakes.
    pub everything: bool,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
            && self.kv_keys.is_empty()
            && self.kv_prefixes.is_empty()
            && self.services.is_empty()
            && !self.everything
    }
}

/// The registry of channels.
pub struct Watches {
    tables: HashMap<Table, watch::Sender<u64>>,
    kv_prefixes: Mutex<HashMap<String, watch::Sender<u64>>>,
    services: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Fires on a change to any service (batched watches of many names).
    any_service: watch::Sender<u64>,
}

impl Default for Watches {
    fn default() -> Self {
        Watches {
            tables: Table::ALL
                .iter()
                .map(|t| (*t, watch::channel(0).0))
                .collect(),
            kv_prefixes: Mutex::new(HashMap::new()),
            services: Mutex::new(HashMap::new()),
            any_service: watch::channel(0).0,
        }
    }
}

/// A set of subscriptions a blocking query waits on.
#[derive(Default)]
pub struct WatchSet {
    receivers: Vec<watch::Receiver<u64>>,
}

impl WatchSet {
    /// True when nothing is subscribed (a wait is then a plain sleep).
    pub fn is_empty(&self) -> bool {
        self.receivers.is_empty()
    }

    /// Waits until any subscription changes or `timeout` passes; returns
    /// `true` when something changed.
    pub async fn wait(mut self, timeout: Duration) -> bool {
        if self.receivers.is_empty() {
            tokio::time::sleep(timeout).await;
            return false;
        }
        if let [receiver] = self.receivers.as_mut_slice() {
            // The common case (one key, one service, one table) without
            // the boxed futures a choice among several needs.
            return tokio::time::timeout(timeout, receiver.changed())
                .await
                .is_ok();
        }
        let futures: Vec<_> = self
            .receivers
            .iter_mut()
            .map(|rx| Box::pin(rx.changed()))
            .collect();
        tokio::time::timeout(timeout, futures::future::select_all(futures))
            .await
            .is_ok()
    }

    /// Adds another set's subscriptions.
    pub fn extend(&mut self, other: WatchSet) {
        self.receivers.extend(other.receivers);
    }
}

impl Watches {
    /// Subscribes to tables.
    pub fn tables(&self, tables: &[Table]) -> WatchSet {
        WatchSet {
            receivers: tables.iter().map(|t| self.tables[t].subscribe()).collect(),
        }
    }

    /// Subscribes to one KV prefix (a single key is a prefix of itself).
    pub fn kv_prefix(&self, prefix: &str) -> WatchSet {
        let mut map = self.kv_prefixes.lock().unwrap_or_else(|e| e.into_inner());
        let sender = map
            .entry(prefix.to_string())
            .or_insert_with(|| watch::channel(0).0);
        WatchSet {
            receivers: vec![sender.subscribe()],
        }
    }

    /// Subscribes to one service name.
    pub fn service(&self, name: &str) -> WatchSet {
        let mut map = self.services.lock().unwrap_or_else(|e| e.into_inner());
        let sender = map
            .entry(name.to_string())
            .or_insert_with(|| watch::channel(0).0);
        WatchSet {
            receivers: vec![sender.subscribe()],
        }
    }

    /// Subscribes to changes of every service at once (a watch of many
    /// names checks which of them changed when it wakes).
    pub fn any_service(&self) -> WatchSet {
        WatchSet {
            receivers: vec![self.any_service.subscribe()],
        }
    }

    /// Wakes everything `changes` concerns.
    pub fn notify(&self, index: u64, changes: &Changes) {
        for table in &changes.tables {
            self.tables[table].send_replace(index);
        }
        if !changes.kv_keys.is_empty() || !changes.kv_prefixes.is_empty() {
            let mut map = self.kv_prefixes.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, sender| sender.receiver_count() > 0);
            for key in &changes.kv_keys {
                // Every prefix of the key, the empty prefix included.
                for (cut, _) in key.char_indices().chain(std::iter::once((key.len(), ' '))) {
                    if let Some(sender) = map.get(&key[..cut]) {
                        sender.send_replace(index);
                    }
                }
            }
            for deleted in &changes.kv_prefixes {
                for (watched, sender) in map.iter() {
                    if watched.starts_with(deleted.as_str())
                        || deleted.starts_with(watched.as_str())
                    {
                        sender.send_replace(index);
                    }
                }
            }
        }
        if !changes.services.is_empty() {
            self.any_service.send_replace(index);
            let mut map = self.services.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, sender| sender.receiver_count() > 0);
            for name in &changes.services {
                if let Some(sender) = map.get(name) {
                    sender.send_replace(index);
                }
            }
        }
    }

    /// Wakes every subscription (after a snapshot restore).
    pub fn notify_all(&self, index: u64) {
        self.any_service.send_replace(index);
        for sender in self.tables.values() {
            sender.send_replace(index);
        }
        for sender in self
            .kv_prefixes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            sender.send_replace(index);
        }
        for sender in self
            .services
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            sender.send_replace(index);
        }
    }
}
