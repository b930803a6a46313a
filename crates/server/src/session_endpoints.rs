//! Sessions: create (Consul's TTL bounds and texts), destroy, renew and the
//! reads, behind `session:write`/`session:read` on the node.

use std::time::Duration;

use legate_state::{Command, Table};
use legate_types::duration::{format_go_duration, parse_go_duration};
use legate_types::*;

use crate::endpoints::session_target;
use crate::{Access, Resource, Server};

impl Server {
    pub(crate) async fn session_create_endpoint(
        &self,
        opts: &WriteOptions,
        mut session: Session,
    ) -> Result<String, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if session.node.is_empty() {
            return Err(RpcError::BadRequest("Must provide Node".into()));
        }
        if !session.ttl.is_empty() {
            // Consul's texts and status (500), which HA managers match on
            // to fall back to `SessionTTLMin`; the TTL prints in nanoseconds.
            let ttl = parse_go_duration(&session.ttl).map_err(|e| {
                RpcError::Internal(format!("Session TTL '{}' invalid: {e}", session.ttl))
            })?;
            let min = self.config.session_ttl_min;
            if !ttl.is_zero() && (ttl < min || ttl > SESSION_TTL_MAX) {
                return Err(RpcError::Internal(format!(
                    "Invalid Session TTL '{}', must be between [{}={}]",
                    ttl.as_nanos(),
                    format_go_duration(min),
                    format_go_duration(SESSION_TTL_MAX)
                )));
            }
            if ttl.is_zero() {
                session.ttl.clear();
            }
        }
        self.authorize(
            &opts.token,
            Resource::Session(session.node.clone()),
            Access::Write,
        )?;
        session.id = uuid::Uuid::new_v4().to_string();
        let id = session.id.clone();
        let ttl = session.ttl.clone();
        self.write(Command::SessionCreate(session)).await?;
        if !ttl.is_empty() {
            if let Ok(ttl) = parse_go_duration(&ttl) {
                self.session_timers.reset(&id, ttl);
            }
        }
        Ok(id)
    }

    pub(crate) async fn session_destroy_endpoint(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if id.is_empty() {
            return Err(RpcError::BadRequest("Missing session".into()));
        }
        let node = self
            .store
            .read()
            .session(&id)
            .1
            .map(|s| s.node)
            .unwrap_or_default();
        self.authorize(&opts.token, Resource::Session(node), Access::Write)?;
        self.write(Command::SessionDestroy(id.clone())).await?;
        self.session_timers.clear(&id);
        Ok(())
    }

    pub(crate) async fn session_renew_endpoint(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<Option<Session>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        let session = self.store.read().session(&id).1;
        let Some(session) = session else {
            return Ok(None);
        };
        self.authorize(
            &opts.token,
            Resource::Session(session.node.clone()),
            Access::Write,
        )?;
        if !session.ttl.is_empty() {
            let ttl = parse_go_duration(&session.ttl).unwrap_or(Duration::from_secs(10));
            self.session_timers.reset(&id, ttl);
        }
        Ok(Some(session))
    }

    pub(crate) async fn session_info_endpoint(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Vec<Session>>, RpcError> {
        let sessions = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::Sessions]),
                |t| {
                    let (index, session) = t.session(&id);
                    Ok((index, session.into_iter().collect()))
                },
            )
            .await?;
        self.filter_by_acl(&opts.token, sessions, session_target)
    }

    pub(crate) async fn session_list_endpoint(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<Session>>, RpcError> {
        let sessions = self
            .filtered_list(
                opts,
                legate_filter::rows::session(),
                &[Table::Sessions],
                |t| t.sessions(),
            )
            .await?;
        self.filter_by_acl(&opts.token, sessions, session_target)
    }

    pub(crate) async fn session_node_endpoint(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<Session>>, RpcError> {
        let sessions = self
            .filtered_list(
                opts,
                legate_filter::rows::session(),
                &[Table::Sessions],
                |t| t.node_sessions(&node),
            )
            .await?;
        self.filter_by_acl(&opts.token, sessions, session_target)
    }
}
