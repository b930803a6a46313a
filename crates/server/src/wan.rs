//! What this server knows of other datacenters, from the WAN pool's view
//! (`ServerConfig::wan`).

use std::sync::Arc;

use legate_types::rpc::ServerRpc;
use legate_types::{RpcError, WriteOptions};

use crate::Server;

/// Where a global write goes from a secondary: the way out, and the
/// options naming the primary.
pub(crate) type GlobalRoute = (Arc<dyn ServerRpc>, WriteOptions);

impl Server {
    /// The primary datacenter (this one when none is configured).
    pub(crate) fn primary_datacenter(&self) -> &str {
        if self.config.primary_datacenter.is_empty() {
            &self.config.datacenter
        } else {
            &self.config.primary_datacenter
        }
    }

    /// Whether this server's datacenter is a secondary.
    pub(crate) fn is_secondary(&self) -> bool {
        self.primary_datacenter() != self.config.datacenter
    }

    /// The token this server's own calls to the primary carry
    /// (`acl.tokens.replication`; none when unset).
    pub(crate) fn replication_token(&self) -> String {
        self.config.acl.replication_token.borrow().clone()
    }

    /// The way to other datacenters, for calls a secondary makes of its
    /// primary.
    pub(crate) fn to_primary(&self) -> Result<(Arc<dyn ServerRpc>, String), RpcError> {
        let primary = self.primary_datacenter().to_string();
        match &self.config.remote {
            Some(remote) => Ok((remote.0.clone(), primary)),
            None => Err(RpcError::NoPathToDatacenter(primary)),
        }
    }

    /// Where a global write (config entries, intentions, the CA
    /// configuration, federation states) goes: `None` when this server
    /// applies it (its datacenter is the primary, or the write names
    /// another datacenter, which `check_datacenter` refuses); otherwise the
    /// primary, with the options naming it.
    pub(crate) fn global_write(
        &self,
        opts: &WriteOptions,
    ) -> Result<Option<GlobalRoute>, RpcError> {
        let local = opts.datacenter.is_empty() || opts.datacenter == self.config.datacenter;
        if !local || !self.is_secondary() {
            return Ok(None);
        }
        let (remote, primary) = self.to_primary()?;
        let mut routed = opts.clone();
        routed.datacenter = primary;
        Ok(Some((remote, routed)))
    }
}

impl Server {
    /// Every datacenter the WAN pool knows, nearest first (this one, then
    /// by the median estimated round trip to their servers); only this one
    /// without a WAN pool.
    pub(crate) fn known_datacenters(&self) -> Vec<String> {
        let local = &self.config.datacenter;
        let mut all = self.config.wan.borrow().by_distance(local);
        if !all.contains(local) {
            all.insert(0, local.clone());
        }
        all
    }
}

/// The largest encoded user event gossip is handed (a datagram is 1,400
/// bytes; foca's header and the broadcast envelope take the rest).
const USER_EVENT_ENCODED_LIMIT: usize = 900;

impl Server {
    /// Hands a user event to LAN gossip (through the binary's channel).
    pub(crate) fn spread_event(
        &self,
        opts: &legate_types::QueryOptions,
        event: legate_types::event::UserEvent,
    ) -> Result<(), legate_types::RpcError> {
        use legate_types::event::USER_EVENT_SIZE_LIMIT;
        use legate_types::RpcError;
        self.check_datacenter(&opts.datacenter)?;
        if event.name.is_empty() {
            return Err(RpcError::BadRequest("Missing name".into()));
        }
        self.authorize(
            &opts.token,
            crate::authorizer::Resource::Event(event.name.clone()),
            crate::authorizer::Access::Write,
        )?;
        let payload = event
            .payload
            .as_deref()
            .map(|p| p.len() * 3 / 4)
            .unwrap_or(0);
        let filters = event.node_filter.len() + event.service_filter.len() + event.tag_filter.len();
        if event.name.len() + payload + filters > USER_EVENT_SIZE_LIMIT {
            return Err(RpcError::Internal(format!(
                "user event exceeds configured limit of {USER_EVENT_SIZE_LIMIT} bytes before encoding"
            )));
        }
        // What gossip carries must fit one datagram with room for foca's
        // header (Serf's own sanity limit, with its text).
        let encoded = serde_json::to_vec(&event)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if encoded > USER_EVENT_ENCODED_LIMIT {
            return Err(RpcError::Internal(format!(
                "user event exceeds sane limit of {USER_EVENT_ENCODED_LIMIT} bytes after encoding"
            )));
        }
        self.authorize(
            &opts.token,
            crate::authorizer::Resource::Event(event.name.clone()),
            crate::authorizer::Access::Write,
        )?;
        match &self.config.events {
            Some(sink) if sink.send(event).is_ok() => Ok(()),
            _ => Err(RpcError::Internal(
                "this server does not spread user events".into(),
            )),
        }
    }
}
