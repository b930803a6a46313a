//! The Raft configuration as `/v1/operator/raft/configuration` shows it
//! (servers named from the catalog's `consul` service) and the removal
//! of a peer by ID or address.

use legate_types::{QueryOptions, RpcError, WriteOptions};

use crate::{Access, Resource, Server};

impl Server {
    /// `Operator.RaftGetConfiguration`: every server with its node name,
    /// ID, address, leadership and vote.
    pub(crate) fn raft_configuration_named(
        &self,
        opts: &QueryOptions,
    ) -> Result<legate_types::rpc::RaftConfiguration, RpcError> {
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        let (servers, index) = self.raft.configuration();
        // Names from the catalog's `consul` service (address:port).
        let tables = self.store.read();
        let (_, instances) = tables.service_nodes(crate::CONSUL_SERVICE, false);
        let name_of = |address: &str| {
            instances
                .iter()
                .find(|sn| {
                    let host = if sn.service_address.is_empty() {
                        &sn.address
                    } else {
                        &sn.service_address
                    };
                    format!("{host}:{}", sn.service_port) == address
                })
                .map(|sn| (sn.node.clone(), sn.id.clone()))
        };
        Ok(legate_types::rpc::RaftConfiguration {
            servers: servers
                .into_iter()
                .map(|(id, address, voter, leader)| {
                    let (node, node_id) =
                        name_of(&address).unwrap_or_else(|| (String::new(), id.to_string()));
                    legate_types::rpc::RaftServer {
                        id: node_id,
                        node,
                        address,
                        leader,
                        protocol_version: "3".into(),
                        voter,
                        last_index: index,
                    }
                })
                .collect(),
            index,
        })
    }

    /// `Operator.RaftRemovePeerByAddress`/`ByID`.
    pub(crate) async fn remove_raft_peer(
        &self,
        opts: &WriteOptions,
        id_or_address: String,
    ) -> Result<(), RpcError> {
        self.authorize(&opts.token, Resource::Operator, Access::Write)?;
        let read = QueryOptions {
            token: opts.token.clone(),
            ..Default::default()
        };
        let configuration = self.raft_configuration_named(&read)?;
        let (servers, _) = self.raft.configuration();
        let wanted = configuration
            .servers
            .iter()
            .find(|s| s.id == id_or_address || s.address == id_or_address)
            .map(|s| s.address.clone())
            .ok_or_else(|| {
                RpcError::BadRequest(format!(
                    "id/address {id_or_address:?} was not found in the Raft configuration"
                ))
            })?;
        let raft_id = servers
            .iter()
            .find(|(_, address, _, _)| *address == wanted)
            .map(|(id, ..)| *id)
            .ok_or_else(|| RpcError::Internal("the Raft configuration changed".into()))?;
        self.raft.remove_server(raft_id).await.map_err(|e| match e {
            legate_raft::RaftError::NotLeader { .. } => RpcError::NoLeader,
            other => RpcError::Internal(other.to_string()),
        })
    }
}
