//! Federation states (Consul's `federation_state_endpoint.go`,
//! `leader_federation_state_ae.go`, `federation_state_replication.go`):
//! each datacenter's leader keeps its own datacenter's state in the
//! primary current with its `mesh-gateway` services (anti-entropy), every
//! secondary's leader replicates all states from the primary, and the
//! primary's leader prunes the states of datacenters the WAN pool no
//! longer knows. Everything is off until every server of the datacenter
//! advertises `fs`, and stays on once any state is stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use legate_state::{Command, Table};
use legate_types::federation_state::{now_rfc3339, FederationState, FederationStateOp, ZERO_TIME};
use legate_types::{CheckServiceNode, Queried, QueryOptions, RpcError, WriteOptions};

use crate::replication::{fetch_options, TokenBucket, APPLY_RATE};
use crate::{Access, Resource, Server};

/// Consul's error while some server does not support federation states.
pub const FEDERATION_STATES_DISABLED: &str =
    "Federation states are currently disabled until all servers in the datacenter support the feature";
/// Consul's error of a secondary that cannot replicate them yet.
pub const FEDERATION_STATES_NOT_REPLICATED: &str =
    "Not all servers in the datacenter support federation states - preventing replication";

/// The kind of service a federation state lists.
pub const MESH_GATEWAY_KIND: &str = "mesh-gateway";

/// How long anti-entropy lets catalog changes gather before it compares.
const COALESCE: Duration = Duration::from_secs(1);
/// How long it waits for a change before comparing anyway.
const RECHECK: Duration = Duration::from_secs(60);
/// How long an upsert sent to the primary is trusted to come back by
/// replication before it is sent again.
const RESEND_AFTER: Duration = Duration::from_secs(30);

impl Server {
    /// `Ok` when federation states are on in this datacenter.
    pub(crate) fn federation_states_enabled(&self) -> Result<(), RpcError> {
        use crate::features::{cluster_supports, FEDERATION_STATES, FEDERATION_STATE_TABLE};
        let sticky = self.store.read().has_federation_states();
        let servers = self.server_features();
        if sticky
            || (cluster_supports(&servers, FEDERATION_STATES)
                && cluster_supports(&servers, FEDERATION_STATE_TABLE))
        {
            Ok(())
        } else {
            Err(RpcError::Internal(FEDERATION_STATES_DISABLED.into()))
        }
    }

    /// `FederationState.Apply`: in the primary only (a secondary forwards).
    pub(crate) async fn federation_state_write(
        &self,
        opts: &WriteOptions,
        op: FederationStateOp,
    ) -> Result<(), RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.federation_state_apply(&routed, op).await;
        }
        self.check_datacenter(&opts.datacenter)?;
        self.federation_states_enabled()?;
        self.authorize(&opts.token, Resource::Operator, Access::Write)?;
        self.apply_federation_state_op(op).await
    }

    /// Applies `op` here, unchecked: the leader's own writes (a primary's
    /// anti-entropy of its own state) need no token.
    async fn apply_federation_state_op(&self, op: FederationStateOp) -> Result<(), RpcError> {
        let command = match op {
            FederationStateOp::Upsert(mut state) => {
                if state.datacenter.is_empty() {
                    return Err(missing_datacenter());
                }
                if state.updated_at.is_empty() || state.updated_at == ZERO_TIME {
                    state.updated_at = now_rfc3339();
                }
                Command::FederationStateSet(Box::new(state))
            }
            FederationStateOp::Delete(datacenter) if datacenter.is_empty() => {
                return Err(missing_datacenter())
            }
            FederationStateOp::Delete(datacenter) => Command::FederationStateDelete(datacenter),
        };
        self.write(command).await.map(|_| ())
    }

    /// `FederationState.Get` (blocking, operator read).
    pub(crate) async fn federation_state_read(
        &self,
        opts: &QueryOptions,
        datacenter: String,
    ) -> Result<Queried<Option<FederationState>>, RpcError> {
        self.federation_states_enabled()?;
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::FederationStates]),
            |t| Ok(t.federation_state(&datacenter)),
        )
        .await
    }

    /// `FederationState.List` (blocking, operator read).
    pub(crate) async fn federation_state_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<FederationState>>, RpcError> {
        self.federation_states_enabled()?;
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        self.federation_states_held(opts).await
    }

    /// The federation states this server holds (blocking as `opts` says),
    /// unchecked: for this server's own WAN federation (its gateway
    /// locator), where nothing leaves the process and no token applies.
    pub async fn federation_states_held(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<FederationState>>, RpcError> {
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::FederationStates]),
            |t| Ok(t.federation_states()),
        )
        .await
    }

    /// `FederationState.ListMeshGateways`: the gateways of each datacenter
    /// that has any (blocking).
    pub(crate) async fn federation_state_gateways(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<BTreeMap<String, Vec<CheckServiceNode>>>, RpcError> {
        self.federation_states_enabled()?;
        let resolved = self.request_token(&opts.token)?;
        let readable = |gateway: &CheckServiceNode| {
            resolved.as_ref().is_none_or(|r| {
                r.authorizer.allowed(
                    legate_acl::Resource::Node,
                    &gateway.node.node,
                    legate_acl::Access::Read,
                ) && r.authorizer.allowed(
                    legate_acl::Resource::Service,
                    &gateway.service.service,
                    legate_acl::Access::Read,
                )
            })
        };
        let mut answer = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::FederationStates]),
                |t| {
                    let (index, states) = t.federation_states();
                    Ok((index, states))
                },
            )
            .await?;
        let mut filtered = false;
        let gateways = std::mem::take(&mut answer.value)
            .into_iter()
            .filter_map(|s| {
                let before = s.mesh_gateways.len();
                let kept: Vec<CheckServiceNode> = s
                    .mesh_gateways
                    .into_iter()
                    .filter(|g| readable(g))
                    .collect();
                filtered |= kept.len() < before;
                (!kept.is_empty()).then_some((s.datacenter, kept))
            })
            .collect();
        answer.meta.results_filtered_by_acls = filtered;
        Ok(legate_types::Queried {
            value: gateways,
            meta: answer.meta,
        })
    }

    /// This datacenter's state as its catalog says it should be, and the
    /// copy stored here (the canonical one in the primary, the replicated
    /// one in a secondary).
    fn own_federation_state(&self) -> (FederationState, Option<FederationState>) {
        let tables = self.store.read();
        let (_, gateways) = tables.check_service_nodes_of_kind(MESH_GATEWAY_KIND);
        let wanted = FederationState {
            datacenter: self.config.datacenter.clone(),
            mesh_gateways: gateways,
            ..Default::default()
        };
        (wanted, tables.federation_state(&self.config.datacenter).1)
    }
}

fn missing_datacenter() -> RpcError {
    RpcError::BadRequest("invalid request: missing federation state datacenter".into())
}

/// Anti-entropy of this datacenter's state into the primary, run by the
/// leader of every datacenter: on any catalog change (gathered for a
/// second) or replicated copy change, the state is compared and, when it
/// differs, upserted with `UpdatedAt` now.
pub(crate) async fn anti_entropy(server: Arc<Server>) {
    let mut sent: Option<(FederationState, tokio::time::Instant)> = None;
    let mut failures = 0u32;
    let mut warned = false;
    loop {
        let watch = server.store.watches().tables(&[
            Table::Nodes,
            Table::Services,
            Table::Checks,
            Table::FederationStates,
        ]);
        if let Err(e) = server.federation_states_enabled() {
            if !warned {
                tracing::info!(reason = %e, "federation state anti-entropy: waiting");
                warned = true;
            }
            watch.wait(COALESCE).await;
            continue;
        }
        let (wanted, stored) = server.own_federation_state();
        let current = stored.is_some_and(|s| s.same_content(&wanted));
        let just_sent = sent
            .as_ref()
            .is_some_and(|(s, at)| s.same_content(&wanted) && at.elapsed() < RESEND_AFTER);
        if !current && !just_sent {
            let mut state = wanted.clone();
            state.updated_at = now_rfc3339();
            let op = FederationStateOp::Upsert(state);
            // The primary's leader writes its own state itself; a
            // secondary's goes to the primary as any write does.
            let written = if server.is_secondary() {
                let opts = WriteOptions {
                    token: server.replication_token(),
                    ..Default::default()
                };
                server.federation_state_write(&opts, op).await
            } else {
                server.apply_federation_state_op(op).await
            };
            match written {
                Ok(()) => {
                    failures = 0;
                    sent = Some((wanted, tokio::time::Instant::now()));
                    tracing::debug!("federation state anti-entropy: state updated");
                }
                Err(e) => {
                    failures += 1;
                    let wait = crate::replication::backoff(failures);
                    tracing::warn!(error = %e, retry_in = ?wait, "federation state anti-entropy: update failed");
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
        }
        watch.wait(if current { RECHECK } else { COALESCE }).await;
        tokio::time::sleep(COALESCE).await;
    }
}

/// One replication round of a secondary: a blocking read of the
/// primary's states, then the difference stored here with each state's
/// `PrimaryModifyIndex`. Answers the primary's index.
pub(crate) async fn replication_round(
    server: Arc<Server>,
    last_index: u64,
) -> Result<u64, RpcError> {
    if server.federation_states_enabled().is_err() {
        return Err(RpcError::Internal(FEDERATION_STATES_NOT_REPLICATED.into()));
    }
    let (remote, primary) = server.to_primary()?;
    let fetched = remote
        .federation_state_list(&fetch_options(&server, &primary, last_index))
        .await?;
    let local: BTreeMap<String, FederationState> = server
        .store
        .read()
        .federation_states()
        .1
        .into_iter()
        .map(|s| (s.datacenter.clone(), s))
        .collect();
    let mut commands = Vec::new();
    for datacenter in local.keys() {
        if !fetched.value.iter().any(|s| &s.datacenter == datacenter) {
            commands.push(Command::FederationStateDelete(datacenter.clone()));
        }
    }
    for state in &fetched.value {
        let fresh = local.get(&state.datacenter).is_none_or(|mine| {
            mine.primary_modify_index != state.raft.modify_index || !mine.same_content(state)
        });
        if fresh {
            let mut copy = state.clone();
            copy.primary_modify_index = state.raft.modify_index;
            commands.push(Command::FederationStateSet(Box::new(copy)));
        }
    }
    let mut pace = TokenBucket::new(APPLY_RATE, APPLY_RATE as u32);
    for command in commands {
        pace.take().await;
        server.write(command).await?;
    }
    Ok(fetched.meta.index)
}

/// The primary's leader: every `federation_state_prune_interval`, removes
/// the states of datacenters the WAN pool no longer holds.
pub(crate) async fn prune(server: Arc<Server>) {
    let every = server.config.federation_state_prune_interval;
    loop {
        tokio::time::sleep(every).await;
        let known: Vec<String> = server.known_datacenters();
        let (_, states) = server.store.read().federation_states();
        for state in states {
            if known.contains(&state.datacenter) {
                continue;
            }
            tracing::info!(datacenter = %state.datacenter, "federation states: pruning a datacenter the WAN pool no longer knows");
            let result = server
                .write(Command::FederationStateDelete(state.datacenter.clone()))
                .await;
            if let Err(e) = result {
                tracing::warn!(datacenter = %state.datacenter, error = %e, "federation states: pruning failed");
            }
        }
    }
}
