//! The Raft network between servers, over a transport the caller supplies
//! (the server port in production; nothing for a single server). Messages
//! are JSON: a [`RaftMessage`] out, a [`RaftAnswer`] back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};

use crate::TypeConfig;

/// The largest Raft message sent (the server port's frame limit is 64 MiB).
pub const MAX_MESSAGE: usize = 48 << 20;

/// Carries encoded Raft messages to another server and brings back its answer.
#[async_trait]
pub trait RaftTransport: Send + Sync + 'static {
    /// Sends `message` to the server at `address`; the answer, within `timeout`.
    async fn send(
        &self,
        address: &str,
        message: Vec<u8>,
        timeout: Duration,
    ) -> std::io::Result<Vec<u8>>;
}

/// A Raft message between servers.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum RaftMessage {
    /// Log replication and heartbeats.
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// A vote request.
    Vote(VoteRequest<u64>),
    /// One chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// From a leader handing leadership over: campaign now if still in
    /// `term` (older servers answer it as undecodable).
    TimeoutNow {
        /// The leader's term when it sent the message.
        term: u64,
    },
}

/// The answer to a [`RaftMessage`].
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftAnswer {
    /// To `AppendEntries`.
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// To `Vote`.
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// To `InstallSnapshot`.
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// To `TimeoutNow`.
    TimeoutNow(crate::transfer::TimeoutNowAnswer),
    /// The message could not be read.
    Undecodable(String),
}

/// Makes a network client per target server.
#[derive(Clone, Default)]
pub struct Network {
    transport: Option<Arc<dyn RaftTransport>>,
}

impl Network {
    /// A network over `transport`; `None` reaches nobody (a single server).
    pub fn new(transport: Option<Arc<dyn RaftTransport>>) -> Network {
        Network { transport }
    }
}

/// The network client of one target server.
pub struct Client {
    transport: Option<Arc<dyn RaftTransport>>,
    target: u64,
    address: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Client;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        Client {
            transport: self.transport.clone(),
            target,
            address: node.addr.clone(),
        }
    }
}

fn io_error(message: impl Into<String>) -> std::io::Error {
    std::io::Error::other(message.into())
}

impl Client {
    /// Sends one message; transport failures become `Unreachable` (openraft
    /// backs off), undecodable answers `Network`.
    async fn exchange<E: std::error::Error>(
        &self,
        message: RaftMessage,
        option: &RPCOption,
    ) -> Result<RaftAnswer, RPCError<u64, BasicNode, E>> {
        let Some(transport) = &self.transport else {
            return Err(RPCError::Unreachable(Unreachable::new(&io_error(
                "this server has no Raft transport",
            ))));
        };
        let bytes = serde_json::to_vec(&message)
            .map_err(|e| RPCError::Network(NetworkError::new(&io_error(e.to_string()))))?;
        if bytes.len() > MAX_MESSAGE {
            // openraft resends fewer entries at a time (the hint halves them).
            let entries = match &message {
                RaftMessage::AppendEntries(r) => r.entries.len() as u64,
                _ => 1,
            };
            return Err(RPCError::PayloadTooLarge(
                openraft::error::PayloadTooLarge::new_entries_hint((entries / 2).max(1)),
            ));
        }
        let started = Instant::now();
        let answer = transport
            .send(&self.address, bytes, option.hard_ttl())
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        tracing::trace!(target = self.target, elapsed = ?started.elapsed(), "raft message answered");
        serde_json::from_slice(&answer)
            .map_err(|e| RPCError::Network(NetworkError::new(&io_error(e.to_string()))))
    }

    fn unexpected<E: std::error::Error>(&self, answer: RaftAnswer) -> RPCError<u64, BasicNode, E> {
        RPCError::Network(NetworkError::new(&io_error(format!(
            "unexpected answer from {}: {answer:?}",
            self.address
        ))))
    }
}

impl RaftNetwork<TypeConfig> for Client {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self
            .exchange(RaftMessage::AppendEntries(rpc), &option)
            .await?
        {
            RaftAnswer::AppendEntries(Ok(r)) => Ok(r),
            RaftAnswer::AppendEntries(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(self.unexpected(other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        match self
            .exchange(RaftMessage::InstallSnapshot(rpc), &option)
            .await?
        {
            RaftAnswer::InstallSnapshot(Ok(r)) => Ok(r),
            RaftAnswer::InstallSnapshot(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(self.unexpected(other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.exchange(RaftMessage::Vote(rpc), &option).await? {
            RaftAnswer::Vote(Ok(r)) => Ok(r),
            RaftAnswer::Vote(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(self.unexpected(other)),
        }
    }
}
