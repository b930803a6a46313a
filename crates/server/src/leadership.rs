//! `operator raft transfer-leader` (Consul's `Operator.TransferLeader`):
//! the voter to hand leadership to, by the ID `list-peers` shows or its
//! server-port address, else the most caught-up other voter; the transfer
//! itself is `legate_raft`'s.

use legate_types::{QueryOptions, RpcError, WriteOptions};

use crate::authorizer::{Access, Resource};
use crate::Server;

impl Server {
    /// Hands leadership over; answers once another server leads.
    pub(crate) async fn transfer_leader(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Operator, Access::Write)?;
        if !self.raft.is_leader() {
            return Err(RpcError::NoLeader);
        }
        let (servers, _) = self.raft.configuration();
        let target = if id.is_empty() {
            // hashicorp/raft's pickServer: the voter furthest along.
            let membership = self.raft.membership();
            servers
                .iter()
                .filter(|(raft_id, _, voter, leader)| {
                    *voter && !leader && membership.voters.contains(raft_id)
                })
                .max_by_key(|(raft_id, ..)| membership.matched.get(raft_id).copied().unwrap_or(0))
                .map(|(raft_id, ..)| *raft_id)
                .ok_or_else(|| RpcError::Internal("cannot find peer".into()))?
        } else {
            let read = QueryOptions {
                token: opts.token.clone(),
                ..Default::default()
            };
            let configuration =
                legate_types::rpc::ServerRpc::raft_configuration(self, &read).await?;
            let address = configuration
                .servers
                .iter()
                .find(|s| s.id == id || s.address == id)
                .map(|s| s.address.clone())
                .ok_or_else(|| {
                    RpcError::Internal(format!("Could not find address for server id {id}"))
                })?;
            servers
                .iter()
                .find(|(_, raft_address, ..)| *raft_address == address)
                .map(|(raft_id, ..)| *raft_id)
                .ok_or_else(|| RpcError::Internal("the Raft configuration changed".into()))?
        };
        self.raft
            .transfer_leadership(target)
            .await
            .map_err(|e| match e {
                legate_raft::RaftError::NotLeader { .. } => RpcError::NoLeader,
                other => RpcError::Internal(
                    other
                        .to_string()
                        .trim_start_matches("raft error: ")
                        .to_string(),
                ),
            })
    }
}
