//! What a server needs to run in a cluster: its Raft messages and RPC
//! calls on the server port, the Raft transport over that port, and
//! forwarding of calls to the leader.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_raft::RaftTransport;
use legate_rpc::{serve_rpc, FrameHandler, Kind, Leadership, Listener, Pool};
use legate_types::rpc::ServerRpc;
use legate_types::RpcError;

use crate::Server;

/// Raft messages over the server port, through a shared dialer.
pub struct PortTransport(pub Arc<Pool>);

#[async_trait]
impl RaftTransport for PortTransport {
    async fn send(
        &self,
        address: &str,
        message: Vec<u8>,
        timeout: Duration,
    ) -> std::io::Result<Vec<u8>> {
        Ok(self.0.call(address, Kind::Raft, &message, timeout).await?)
    }
}

/// Answers Raft connections with this server's Raft node.
struct RaftFrames(Arc<Server>);

#[async_trait]
impl FrameHandler for RaftFrames {
    async fn handle(&self, _peer: SocketAddr, request: Vec<u8>) -> Vec<u8> {
        self.0.raft.handle_message(&request).await
    }
}

impl Leadership for Server {
    fn is_leader(&self) -> bool {
        self.raft.is_leader()
    }

    fn leader_address(&self) -> Option<String> {
        self.raft.leader_address()
    }

    fn last_contact(&self) -> std::time::Duration {
        self.raft.last_contact()
    }
}

impl Server {
    /// Routes the server port to this server: Raft messages to Raft, RPC
    /// calls to `rpc` (a [`legate_rpc::Forwarding`] over this server, so
    /// calls from client agents reach the leader).
    pub fn route(self: &Arc<Self>, listener: &mut Listener, rpc: Arc<dyn ServerRpc>) {
        listener.route(Kind::Raft, Arc::new(RaftFrames(self.clone())));
        listener.route(Kind::Rpc, serve_rpc(rpc));
    }

    /// Initialises a new cluster of `voters` (Raft id → server-port
    /// address); every server of it must be given the same voters.
    pub async fn initialize_cluster(&self, voters: BTreeMap<u64, String>) -> Result<(), RpcError> {
        self.raft
            .initialize_cluster(voters)
            .await
            .map_err(|e| RpcError::Internal(e.to_string()))
    }

    /// The Raft ids and addresses of the voters, as this server knows them.
    pub fn raft_peers(&self) -> Vec<String> {
        self.raft.peer_addresses()
    }
}
