//! Network coordinates on the server: LAN coordinates agents send
//! (`Coordinate.Update`) are queued and written by the leader in batches
//! (Consul's update period and batch size, never one Raft write per
//! update); reads of them; WAN coordinates of every datacenter's servers
//! from the WAN pool's view; and `?near=` sorting by estimated round trip.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use legate_state::{Command, Table, Tables};
use legate_types::coordinate::{CoordinateEntry, DatacenterCoordinates};
use legate_types::{Queried, QueryOptions, RpcError, WriteOptions};

use crate::authorizer::{Access, Resource};
use crate::Server;

/// How often the leader writes the queued updates
/// (`coordinate_update_period`).
pub const UPDATE_PERIOD: Duration = Duration::from_secs(5);
/// Updates per Raft write (`coordinate_update_batch_size`).
pub const BATCH_SIZE: usize = 128;
/// Raft writes per period (`coordinate_update_max_batches`); updates
/// beyond `BATCH_SIZE × MAX_BATCHES` in one period are dropped.
pub const MAX_BATCHES: usize = 5;

/// Coordinates in servers' Raft logs (`ft_co`): the leader writes them
/// only once every server of its datacenter can read them.
pub const FEATURE: &str = "co";

/// Updates waiting for the leader's next batch, the latest per node.
#[derive(Default)]
pub(crate) struct PendingUpdates {
    updates: Mutex<HashMap<String, CoordinateEntry>>,
}

impl PendingUpdates {
    fn push(&self, entry: CoordinateEntry) {
        self.updates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(entry.node.clone(), entry);
    }

    /// Every queued update, in random order (so that over the limit no
    /// node is always the one dropped).
    fn take(&self) -> Vec<CoordinateEntry> {
        use rand::seq::SliceRandom;
        let mut all: Vec<CoordinateEntry> = self
            .updates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, v)| v)
            .collect();
        all.shuffle(&mut rand::rng());
        all
    }

    /// Forgets the queue (this server stopped leading: what it queued may
    /// be older than what the next leader writes).
    pub(crate) fn clear(&self) {
        self.updates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Server {
    pub(crate) async fn coordinate_update_queued(
        &self,
        opts: &WriteOptions,
        entry: CoordinateEntry,
    ) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if !entry.coord.is_valid() {
            return Err(RpcError::Internal("invalid coordinate".into()));
        }
        let own = legate_types::coordinate::Coordinate::new(&Default::default());
        if !own.is_compatible_with(&entry.coord) {
            return Err(RpcError::Internal("incompatible coordinate".into()));
        }
        self.authorize(
            &opts.token,
            Resource::Node(entry.node.clone()),
            Access::Write,
        )?;
        if !self.raft.is_leader() {
            return Err(RpcError::NoLeader);
        }
        self.coordinate_updates.push(entry);
        Ok(())
    }

    /// Writes the queued updates (the leader, every `UPDATE_PERIOD`).
    pub(crate) async fn flush_coordinate_updates(&self) {
        let mut updates = self.coordinate_updates.take();
        if updates.is_empty() {
            return;
        }
        if !self.every_server_stores_coordinates() {
            tracing::debug!(
                dropped = updates.len(),
                "coordinates: not every server stores them yet; updates dropped"
            );
            return;
        }
        let limit = BATCH_SIZE * MAX_BATCHES;
        if updates.len() > limit {
            tracing::warn!(
                discarded = updates.len() - limit,
                "Discarded coordinate updates (more than coordinate_update_batch_size × coordinate_update_max_batches in one period)"
            );
            updates.truncate(limit);
        }
        for batch in updates.chunks(BATCH_SIZE) {
            if let Err(e) = self
                .write(Command::CoordinateBatchUpdate(batch.to_vec()))
                .await
            {
                tracing::warn!(error = %e, "coordinates: writing a batch failed");
                return;
            }
        }
    }

    /// Whether every server of this datacenter — each one gossip knows
    /// and each Raft voter, one gossip has not heard of yet included (a
    /// restart) — advertises the feature.
    fn every_server_stores_coordinates(&self) -> bool {
        if !crate::features::cluster_supports(&self.server_features(), FEATURE) {
            return false;
        }
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        self.raft_peers().iter().all(|peer| {
            *peer == self.config.raft.address
                || members.iter().any(|m| {
                    m.server_port
                        .is_some_and(|port| format!("{}:{port}", m.address) == *peer)
                        && m.features.contains(FEATURE)
                })
        })
    }

    pub(crate) async fn coordinate_list(
        &self,
        opts: &QueryOptions,
        node: Option<String>,
    ) -> Result<Queried<Vec<CoordinateEntry>>, RpcError> {
        // One node's coordinates need read on it (403); the list of all
        // keeps the nodes the token may read.
        if let Some(node) = &node {
            self.authorize(&opts.token, Resource::Node(node.clone()), Access::Read)?;
        }
        let rows = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::Coordinates]),
                |t| {
                    let rows = t
                        .coordinates()
                        .filter(|(name, _)| node.as_ref().is_none_or(|n| n == *name))
                        .map(|(name, coord)| CoordinateEntry {
                            node: name.clone(),
                            segment: String::new(),
                            coord: coord.clone(),
                        })
                        .collect();
                    Ok((t.table_index(Table::Coordinates), rows))
                },
            )
            .await?;
        self.filter_by_acl(&opts.token, rows, |row: &CoordinateEntry| {
            vec![(legate_acl::Resource::Node, row.node.clone())]
        })
    }

    /// Every datacenter's servers with a WAN coordinate, by datacenter name
    /// (this one always listed, with none before the WAN pool runs).
    pub(crate) fn wan_coordinates(&self) -> Vec<DatacenterCoordinates> {
        let view = self.config.wan.borrow();
        let mut all: Vec<DatacenterCoordinates> = view
            .datacenters
            .iter()
            .map(|(dc, servers)| DatacenterCoordinates {
                datacenter: dc.clone(),
                area_id: "wan".into(),
                coordinates: servers
                    .iter()
                    .filter_map(|s| {
                        let coord =
                            if *dc == self.config.datacenter && s.node == self.config.node_name {
                                view.own.clone().or_else(|| s.coord.clone())
                            } else {
                                s.coord.clone()
                            }?;
                        Some(CoordinateEntry {
                            node: format!("{}.{dc}", s.node),
                            segment: String::new(),
                            coord,
                        })
                    })
                    .collect(),
            })
            .collect();
        if !view.knows(&self.config.datacenter) {
            all.push(DatacenterCoordinates {
                datacenter: self.config.datacenter.clone(),
                area_id: "wan".into(),
                coordinates: Vec::new(),
            });
            all.sort_by(|a, b| a.datacenter.cmp(&b.datacenter));
        }
        all
    }
}

/// Sorts `rows` by the estimated round trip from the node `?near=`
/// names (`_ip`: the node at the requester's address), nearest first and
/// nodes without a coordinate last; unchanged when the source node has
/// no coordinate (Consul's rule).
pub(crate) fn sort_near<T>(
    tables: &Tables,
    opts: &QueryOptions,
    rows: &mut [T],
    node_of: impl Fn(&T) -> &str,
) {
    if opts.near.is_empty() {
        return;
    }
    let source = if opts.near == "_ip" {
        match tables
            .nodes()
            .1
            .into_iter()
            .find(|n| !opts.source_ip.is_empty() && n.address == opts.source_ip)
        {
            Some(node) => node.node,
            None => return,
        }
    } else {
        opts.near.clone()
    };
    let Some(from) = tables.coordinate(&source).cloned() else {
        return;
    };
    rows.sort_by_cached_key(|row| {
        tables
            .coordinate(node_of(row))
            .map(|c| from.distance_to(c))
            .unwrap_or(Duration::MAX)
    });
}
