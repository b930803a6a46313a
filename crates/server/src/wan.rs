//! What this server knows of other datacenters, from the WAN pool's view
//! (`ServerConfig::wan`).

use crate::Server;

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
