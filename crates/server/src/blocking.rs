//! Blocking queries and read consistency, as Consul documents them: a read
//! with `min_index` waits until the result's index passes it or the wait
//! (default 5m, max 10m, plus up to wait/16 of jitter) runs out; indexes
//! are never 0.

use std::time::Duration;

use legate_state::{Table, Tables, WatchSet, Watches};
use legate_types::rpc::{Watched, MAX_WATCHED};
use legate_types::{Consistency, Queried, QueryMeta, QueryOptions, RpcError};
use rand::Rng;

use crate::{Access, Resource, Server};

impl Server {
    /// Checks that a request targets this datacenter.
    pub(crate) fn check_datacenter(&self, datacenter: &str) -> Result<(), RpcError> {
        if datacenter.is_empty() || datacenter == self.config.datacenter {
            Ok(())
        } else {
            Err(RpcError::NoPathToDatacenter(datacenter.to_string()))
        }
    }

    /// Makes a read safe to answer with `consistency`: `?consistent`
    /// confirms leadership with a quorum; a default read needs a known
    /// leader (forwarding brings default reads to it); `?stale` needs
    /// nothing.
    pub(crate) async fn check_consistency(&self, consistency: Consistency) -> Result<(), RpcError> {
        match consistency {
            Consistency::Consistent => self
                .raft
                .ensure_linearizable()
                .await
                .map_err(|_| RpcError::NoLeader),
            Consistency::Default
                if !self.raft.is_leader() && self.raft.leader_address().is_none() =>
            {
                Err(RpcError::NoLeader)
            }
            _ => Ok(()),
        }
    }

    /// Runs a read with the request's consistency and blocking options.
    /// `watch` subscribes to what the read depends on (called before any
    /// read that may be followed by a wait, so no change between read and
    /// wait is missed); `read` returns the result with its index.
    pub(crate) async fn blocking_query<T>(
        &self,
        opts: &QueryOptions,
        watch: impl Fn(&Watches) -> WatchSet,
        read: impl Fn(&Tables) -> Result<(u64, T), RpcError>,
    ) -> Result<Queried<T>, RpcError> {
        self.blocking_read(opts, watch, read, |index, _| index > opts.min_index)
            .await
    }

    /// [`Server::blocking_query`] with its own test of whether a result
    /// ends the wait (`ready`); a blocking read (`min_index` > 0) answers
    /// once `ready` holds, a snapshot is restored or the wait runs out.
    /// Nothing a read returned is kept while waiting.
    pub(crate) async fn blocking_read<T>(
        &self,
        opts: &QueryOptions,
        watch: impl Fn(&Watches) -> WatchSet,
        read: impl Fn(&Tables) -> Result<(u64, T), RpcError>,
        ready: impl Fn(u64, &T) -> bool,
    ) -> Result<Queried<T>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.check_consistency(opts.consistency).await?;
        metrics::counter!("rpc.query").increment(1);
        let _blocking = (opts.min_index > 0).then(BlockingGuard::enter);
        let deadline = if opts.min_index > 0 {
            let wait = opts.effective_wait().min(self.config.max_query_time);
            let jitter_cap = (wait / 16).as_millis() as u64;
            let jitter = if jitter_cap > 0 {
                rand::rng().random_range(0..=jitter_cap)
            } else {
                0
            };
            Some(tokio::time::Instant::now() + wait + Duration::from_millis(jitter))
        } else {
            None
        };
        // A snapshot restore during the wait ends it even when the rows'
        // indexes went back (the client resets on the lower index).
        let restores = self.store.read().restores();
        // One read: the answer when it ends the query, nothing otherwise
        // (a result held while waiting would cost its size for every
        // blocking query in flight).
        let answer = || -> Result<Option<Queried<T>>, RpcError> {
            let (index, value, restored) = {
                let tables = self.store.read();
                let (index, value) = read(&tables)?;
                (index, value, tables.restores() != restores)
            };
            let index = index.max(1);
            let done = match deadline {
                None => true,
                Some(deadline) => {
                    ready(index, &value) || restored || tokio::time::Instant::now() >= deadline
                }
            };
            Ok(done.then(|| Queried {
                meta: self.query_meta(index, opts.consistency),
                value,
            }))
        };
        loop {
            // Subscribed only when the read may wait: a subscription to a
            // service keeps its channel until the next write to it. The
            // subscription comes before the read, so no change between
            // the read and the wait is missed.
            let watches = deadline.map(|_| watch(self.store.watches()));
            if let Some(answer) = answer()? {
                return Ok(answer);
            }
            let remaining = deadline
                .map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
                .unwrap_or_default();
            let watches = watches.unwrap_or_default();
            // A stopping server wakes every subscription after raising its
            // flag (`Server::begin_shutdown`), so the flag read after
            // subscribing covers a stop on either side of it; only a wait
            // with nothing to wake it waits for the stop itself.
            if !self.shutdown.is_triggered() {
                if watches.is_empty() {
                    tokio::select! {
                        _ = watches.wait(remaining) => {}
                        _ = self.shutdown.wait() => {}
                    }
                } else {
                    watches.wait(remaining).await;
                }
            }
            if self.shutdown.is_triggered() {
                // Counted against the task's budget, as the shutdown
                // channel's wait was: a caller that asks again at once (the
                // agent's own watch loops) still yields to the tasks that
                // finish the stop, rather than holding its worker.
                tokio::task::consume_budget().await;
                let (index, value) = read(&self.store.read())?;
                return Ok(Queried {
                    meta: self.query_meta(index, opts.consistency),
                    value,
                });
            }
            // A wake mostly brings what the query waits for: read first,
            // and subscribe (then read again) only when it did not.
            if let Some(answer) = answer()? {
                return Ok(answer);
            }
        }
    }

    pub(crate) fn query_meta(&self, index: u64, consistency: Consistency) -> QueryMeta {
        QueryMeta {
            index: index.max(1),
            known_leader: self.raft.leader_address().is_some(),
            last_contact: self.raft.last_contact(),
            consistency,
            results_filtered_by_acls: false,
        }
    }
}

impl Server {
    /// A blocking list read over whole tables, with the request's filter
    /// applied to the rows.
    pub(crate) async fn filtered_list<T: serde::Serialize>(
        &self,
        opts: &QueryOptions,
        shape: &legate_filter::Shape,
        tables: &[legate_state::Table],
        read: impl Fn(&Tables) -> (u64, Vec<T>),
    ) -> Result<Queried<Vec<T>>, RpcError> {
        let filter = parse_filter(&opts.filter, shape)?;
        self.blocking_query(
            opts,
            |w| w.tables(tables),
            |t| {
                let (index, rows) = read(t);
                Ok((index, apply_filter(rows, &filter)))
            },
        )
        .await
    }
}

/// Parses a filter once and checks its selectors against the rows'
/// `shape`, so a bad expression fails before any blocking.
pub(crate) fn parse_filter(
    filter: &str,
    shape: &legate_filter::Shape,
) -> Result<Option<legate_filter::Expr>, RpcError> {
    if filter.trim().is_empty() {
        return Ok(None);
    }
    legate_filter::Expr::parse_for(filter, shape)
        .map(Some)
        .map_err(|e| RpcError::BadRequest(e.to_string()))
}

/// Keeps the rows an optional filter matches.
pub(crate) fn apply_filter<T: serde::Serialize>(
    rows: Vec<T>,
    filter: &Option<legate_filter::Expr>,
) -> Vec<T> {
    match filter {
        None => rows,
        Some(expr) => rows
            .into_iter()
            .filter(|row| expr.matches_row(row))
            .collect(),
    }
}

impl Server {
    /// [`legate_types::rpc::ServerRpc::changes_since`]: one blocking wait
    /// for many services (and the config entries), answered with the
    /// positions that changed after the index beside each.
    pub(crate) async fn changes_since_query(
        &self,
        opts: &QueryOptions,
        watched: Vec<(Watched, u64)>,
    ) -> Result<Queried<Vec<u32>>, RpcError> {
        if watched.len() > MAX_WATCHED {
            return Err(RpcError::BadRequest(format!(
                "a watch of {} entries is more than the {MAX_WATCHED} one call may follow",
                watched.len()
            )));
        }
        // An entry the token may not read is never reported (rather than
        // failing the call for every other entry): its reader's own read
        // answers the denial.
        let mut hidden = false;
        let watched: Vec<(Watched, u64)> = watched
            .into_iter()
            .map(|(item, since)| match &item {
                Watched::Service(name)
                    if self
                        .authorize(&opts.token, Resource::Service(name.clone()), Access::Read)
                        .is_err() =>
                {
                    hidden = true;
                    (item, u64::MAX)
                }
                _ => (item, since),
            })
            .collect();
        let config_entries = watched.iter().any(|(w, _)| *w == Watched::ConfigEntries);
        let acl = watched.iter().any(|(w, _)| *w == Watched::Acl);
        let services = watched
            .iter()
            .any(|(w, _)| matches!(w, Watched::Service(_)));
        self.blocking_read(
            opts,
            |w| {
                let mut set = if services {
                    w.any_service()
                } else {
                    WatchSet::default()
                };
                if config_entries {
                    set.extend(w.tables(&[Table::ConfigEntries]));
                }
                if acl {
                    set.extend(w.tables(&[Table::AclTokens, Table::AclPolicies, Table::AclRoles]));
                }
                set
            },
            |t| Ok(changed_positions(t, &watched)),
            |_, changed| !changed.is_empty(),
        )
        .await
        .map(|mut answer| {
            answer.meta.results_filtered_by_acls = hidden;
            answer
        })
    }
}

/// The positions of `watched` that changed after their index, and the
/// index the answer is current at: the highest index among the watched
/// entries and the tables, so none of them can be newer than the answer
/// (and be reported again, forever).
fn changed_positions(tables: &Tables, watched: &[(Watched, u64)]) -> (u64, Vec<u32>) {
    let mut current = Table::ALL
        .iter()
        .map(|t| tables.table_index(*t))
        .max()
        .unwrap_or(0);
    let mut changed = Vec::new();
    for (position, (item, since)) in watched.iter().enumerate() {
        let (is_changed, index) = match item {
            Watched::Service(name) => (
                tables.service_changed_after(name, *since),
                tables.service_index(name),
            ),
            Watched::ConfigEntries => {
                let index = tables.table_index(Table::ConfigEntries);
                (index > *since, index)
            }
            Watched::Acl => {
                let index =
                    tables.max_index(&[Table::AclTokens, Table::AclPolicies, Table::AclRoles]);
                (index > *since, index)
            }
        };
        current = current.max(index);
        if is_changed {
            changed.push(position as u32);
        }
    }
    (current, changed)
}

/// Blocking queries in flight on this server (`rpc.queries_blocking`).
static BLOCKING: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// The gauge of blocking queries, looked up once: ten thousand watchers
/// waking at once each set it. (Gauges stay in every sink; counters and
/// timers are looked up on each use, since the Prometheus sink drops
/// them when idle and a kept handle would record into nothing. The agent
/// installs its recorder before it serves anything.)
fn blocking_gauge() -> &'static metrics::Gauge {
    static GAUGE: std::sync::OnceLock<metrics::Gauge> = std::sync::OnceLock::new();
    GAUGE.get_or_init(|| metrics::gauge!("rpc.queries_blocking"))
}

/// Counts one blocking query while it lives.
struct BlockingGuard;

impl BlockingGuard {
    fn enter() -> BlockingGuard {
        let now = BLOCKING.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        blocking_gauge().set(now as f64);
        BlockingGuard
    }
}

impl Drop for BlockingGuard {
    fn drop(&mut self) {
        let now = BLOCKING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed) - 1;
        blocking_gauge().set(now as f64);
    }
}
