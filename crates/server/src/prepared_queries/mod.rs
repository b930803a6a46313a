//! Prepared queries (Consul's `PreparedQuery` endpoint): writes with
//! Consul's validation and `query` rights, reads with tokens redacted,
//! explain, and execute — the local lookup with the query's filters, the
//! ACL filter of the query's own token (else the caller's), shuffle, sort
//! by distance, limit, then failover to other datacenters in order.

mod template;

use legate_state::{QueryMatch, Table};
use legate_types::prepared_query::{
    ExecuteRemoteRequest, ExecuteRequest, ExecuteResponse, ExplainResponse, PreparedQuery,
    PreparedQueryOp, REDACTED_TOKEN,
};
use legate_types::{CheckServiceNode, HealthStatus, Queried, QueryOptions, RpcError, WriteOptions};
use rand::seq::SliceRandom;

use crate::authorizer::{Access, Resource};
use crate::Server;

/// Consul's answer for a query that does not exist.
pub const QUERY_NOT_FOUND: &str = "Query not found";

/// Refused before every server can apply prepared-query commands.
const NOT_YET: &str = "prepared queries are not enabled until every server supports them";

/// Consul's `parseQuery`: the service lookup and the DNS options.
fn validate(query: &PreparedQuery) -> Result<(), String> {
    // Anonymous queries need a session or a template.
    if query.name.is_empty() && !query.is_template() && query.session.is_empty() {
        return Err("Must be bound to a session".into());
    }
    let service = &query.service;
    if service.service.is_empty() {
        return Err("Must provide a Service name to query".into());
    }
    let failover = &service.failover;
    if failover.nearest_n < 0 {
        return Err(format!(
            "Bad NearestN '{}', must be >= 0",
            failover.nearest_n
        ));
    }
    let targets = failover.targets.as_ref().is_some_and(|t| !t.is_empty());
    let by_dc =
        failover.nearest_n != 0 || failover.datacenters.as_ref().is_some_and(|d| !d.is_empty());
    if targets && by_dc {
        return Err("Targets cannot be populated with NearestN or Datacenters".into());
    }
    if !service.sameness_group.is_empty() {
        return Err("sameness groups are a Consul Enterprise feature".into());
    }
    if !service.peer.is_empty() {
        return Err(format!("peer {:?} not found", service.peer));
    }
    if !query.dns.ttl.is_empty() {
        let ttl = &query.dns.ttl;
        match ttl.strip_prefix('-') {
            // Consul prints the negative TTL in nanoseconds.
            Some(magnitude) => match legate_types::duration::parse_go_duration(magnitude) {
                Ok(d) if !d.is_zero() => {
                    return Err(format!("DNS TTL '-{}', must be >=0", d.as_nanos()));
                }
                Ok(_) => {}
                Err(e) => return Err(format!("Bad DNS TTL '{ttl}': {e}")),
            },
            None => {
                legate_types::duration::parse_go_duration(ttl)
                    .map_err(|e| format!("Bad DNS TTL '{ttl}': {e}"))?;
            }
        }
    }
    Ok(())
}

/// Consul answers every refused prepared-query write with a 500 (its
/// generic RPC error path), the state store's refusals too.
fn consuls_status(e: RpcError) -> RpcError {
    match e {
        RpcError::BadRequest(message) => RpcError::Internal(message),
        other => other,
    }
}

/// The name a query's `query` rule is matched against, when it has one
/// (unnamed, non-template queries have none: only management may see them).
fn acl_prefix(query: &PreparedQuery) -> Option<&str> {
    (!query.name.is_empty() || query.is_template()).then_some(query.name.as_str())
}

/// Whether an instance passes the query's health and metadata filters.
fn selected(query: &legate_types::prepared_query::ServiceQuery, row: &CheckServiceNode) -> bool {
    let ignored = |id: &str| query.ignore_check_ids.iter().flatten().any(|i| i == id);
    let healthy = row
        .checks
        .iter()
        .filter(|c| !ignored(&c.check_id))
        .all(|c| {
            c.status == HealthStatus::Passing
                || (!query.only_passing && c.status == HealthStatus::Warning)
        });
    let tags_ok = query.tags.iter().flatten().all(|wanted| {
        let (forbidden, tag) = match wanted.strip_prefix('!') {
            Some(tag) => (true, tag),
            None => (false, wanted.as_str()),
        };
        let has = row.service.tags.iter().any(|t| t.eq_ignore_ascii_case(tag));
        has != forbidden
    });
    let meta_ok = |wanted: &Option<std::collections::BTreeMap<String, String>>,
                   have: &legate_types::catalog::Meta| {
        wanted
            .iter()
            .flatten()
            .all(|(k, v)| have.get(k).is_some_and(|h| h == v))
    };
    healthy
        && tags_ok
        && meta_ok(&query.node_meta, &row.node.meta)
        && meta_ok(&query.service_meta, &row.service.meta)
}

impl Server {
    /// `Ok` once every server can apply the prepared-query commands.
    fn prepared_queries_enabled(&self) -> Result<(), RpcError> {
        let has_rows = self.store.read().has_prepared_queries();
        if has_rows
            || crate::features::cluster_supports(
                &self.server_features(),
                crate::features::PREPARED_QUERIES,
            )
        {
            Ok(())
        } else {
            Err(RpcError::Internal(NOT_YET.into()))
        }
    }

    /// Whether `token` may see queries' tokens (ACL write, or ACLs off).
    fn sees_query_tokens(&self, token: &str) -> bool {
        self.authorize(token, Resource::Acl, Access::Write).is_ok()
    }

    /// Whether `token` may see `query` in a list or explain it: a `query`
    /// read rule on its name; a query without one only with `acl:write`
    /// (Consul's filter).
    fn may_read_query(&self, token: &str, query: &PreparedQuery) -> Result<bool, RpcError> {
        let Some(resolved) = self.request_token(token)? else {
            return Ok(true);
        };
        Ok(match acl_prefix(query) {
            Some(name) => resolved.authorizer.allowed(
                legate_acl::Resource::Query,
                name,
                legate_acl::Access::Read,
            ),
            None => self.sees_query_tokens(token),
        })
    }

    fn redacted(&self, token: &str, mut query: PreparedQuery) -> PreparedQuery {
        if !query.token.is_empty() && !self.sees_query_tokens(token) {
            query.token = REDACTED_TOKEN.into();
        }
        query
    }

    /// `PreparedQuery.Apply`: the new query's ID on create.
    pub(crate) async fn prepared_query_write(
        &self,
        opts: &WriteOptions,
        op: PreparedQueryOp,
        mut query: PreparedQuery,
    ) -> Result<String, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.prepared_queries_enabled()?;
        if op == PreparedQueryOp::Create {
            if !query.id.is_empty() {
                return Err(RpcError::Internal(
                    "ID must be empty when creating a new prepared query".into(),
                ));
            }
            query.id = uuid::Uuid::new_v4().to_string();
        }
        if op != PreparedQueryOp::Delete {
            if let Some(name) = acl_prefix(&query) {
                self.authorize(
                    &opts.token,
                    Resource::Query(name.to_string()),
                    Access::Write,
                )?;
            }
        }
        if op != PreparedQueryOp::Create {
            let (_, existing) = self.store.read().prepared_query(&query.id);
            let Some(existing) = existing else {
                return Err(RpcError::Internal(format!(
                    "Cannot modify non-existent prepared query: '{}'",
                    query.id
                )));
            };
            if let Some(name) = acl_prefix(&existing) {
                self.authorize(
                    &opts.token,
                    Resource::Query(name.to_string()),
                    Access::Write,
                )?;
            }
        }
        if op == PreparedQueryOp::Delete {
            self.write(legate_state::Command::PreparedQueryDelete(query.id.clone()))
                .await?;
            return Ok(query.id);
        }
        validate(&query).map_err(|e| RpcError::Internal(format!("Invalid prepared query: {e}")))?;
        if query.token == REDACTED_TOKEN {
            return Err(RpcError::Internal(format!(
                "Invalid prepared query: Bad Token '{REDACTED_TOKEN}', it looks like a query definition with a redacted token was submitted"
            )));
        }
        if query.is_template() {
            template::compile(&query).map_err(RpcError::Internal)?;
        }
        let id = query.id.clone();
        self.write(legate_state::Command::PreparedQuerySet(Box::new(query)))
            .await
            .map_err(consuls_status)?;
        Ok(id)
    }

    /// `PreparedQuery.Get`: a list of one, 404 when unknown, 403 when the
    /// token may not read it.
    pub(crate) async fn prepared_query_read(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Vec<PreparedQuery>>, RpcError> {
        let found = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::PreparedQueries]),
                |t| Ok(t.prepared_query(&id)),
            )
            .await?;
        let Some(query) = found.value else {
            return Err(RpcError::NotFound(QUERY_NOT_FOUND.into()));
        };
        // By ID, a query without a name is anyone's to read (redacted).
        if acl_prefix(&query).is_some() && !self.may_read_query(&opts.token, &query)? {
            return Err(RpcError::PermissionDenied("Permission denied".into()));
        }
        Ok(Queried {
            meta: found.meta,
            value: vec![self.redacted(&opts.token, query)],
        })
    }

    /// `PreparedQuery.List`: the queries the token may read.
    pub(crate) async fn prepared_query_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<PreparedQuery>>, RpcError> {
        let mut all = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::PreparedQueries]),
                |t| Ok(t.prepared_queries()),
            )
            .await?;
        let mut kept = Vec::with_capacity(all.value.len());
        for query in std::mem::take(&mut all.value) {
            if self.may_read_query(&opts.token, &query)? {
                kept.push(self.redacted(&opts.token, query));
            } else if acl_prefix(&query).is_some() {
                // Only a named query left out marks the answer (Consul's).
                all.meta.results_filtered_by_acls = true;
            }
        }
        all.value = kept;
        Ok(all)
    }

    /// The query `id_or_name` names, rendered when it is a template.
    async fn resolve_query(
        &self,
        opts: &QueryOptions,
        id_or_name: &str,
    ) -> Result<Queried<PreparedQuery>, RpcError> {
        let mut lookup = opts.clone();
        lookup.min_index = 0;
        let found = self
            .blocking_query(
                &lookup,
                |w| w.tables(&[Table::PreparedQueries]),
                |t| Ok(t.prepared_query_resolve(id_or_name)),
            )
            .await?;
        let query = match found.value {
            None => return Err(RpcError::NotFound(QUERY_NOT_FOUND.into())),
            Some(QueryMatch::Id(q)) if q.is_template() => {
                return Err(RpcError::Internal(
                    "prepared query templates can only be resolved up by name, not by ID".into(),
                ))
            }
            Some(QueryMatch::Id(q)) => q,
            Some(QueryMatch::Name(q) | QueryMatch::Prefix(q)) if q.is_template() => {
                template::render(&q, id_or_name).map_err(RpcError::Internal)?
            }
            Some(QueryMatch::Name(q) | QueryMatch::Prefix(q)) => q,
        };
        Ok(Queried {
            meta: found.meta,
            value: query,
        })
    }

    /// `PreparedQuery.Explain`: the rendered query a name resolves to.
    pub(crate) async fn prepared_query_explain_of(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
    ) -> Result<Queried<ExplainResponse>, RpcError> {
        let resolved = self.resolve_query(opts, &id_or_name).await?;
        if !self.may_read_query(&opts.token, &resolved.value)? {
            return Err(RpcError::PermissionDenied("Permission denied".into()));
        }
        Ok(Queried {
            meta: resolved.meta,
            value: ExplainResponse {
                query: self.redacted(&opts.token, resolved.value),
            },
        })
    }

    /// The query run here, without failover: filtered, ACL-filtered with
    /// `token`, shuffled, sorted by distance from `near`, trimmed.
    async fn run_here(
        &self,
        opts: &QueryOptions,
        query: &PreparedQuery,
        token: &str,
        connect: bool,
        near: &str,
        limit: usize,
    ) -> Result<Queried<ExecuteResponse>, RpcError> {
        let mut read = opts.clone();
        read.min_index = 0;
        let service = query.service.clone();
        let connect = connect || service.connect;
        let rows = self
            .blocking_query(
                &read,
                |w| w.service(&service.service),
                |t| {
                    let (index, rows) = t.check_service_nodes(&service.service, connect);
                    let rows: Vec<CheckServiceNode> =
                        rows.into_iter().filter(|r| selected(&service, r)).collect();
                    let index = index.max(t.table_index(Table::PreparedQueries));
                    Ok((index, rows))
                },
            )
            .await?;
        let target = service.service.clone();
        let mut rows = self.filter_by_acl(token, rows, |r| {
            let mut targets = vec![
                (legate_acl::Resource::Service, r.service.service.clone()),
                (legate_acl::Resource::Node, r.node.node.clone()),
            ];
            if connect {
                targets.push((legate_acl::Resource::Service, target.clone()));
            }
            targets
        })?;
        rows.value.shuffle(&mut rand::rng());
        if !near.is_empty() {
            let mut by = opts.clone();
            by.near = near.to_string();
            let tables = self.store.read();
            crate::coordinates::sort_near(&tables, &by, &mut rows.value, |r| &r.node.node);
            // The source node itself, among the first ten, goes first
            // (sorted or not, as Consul's execute does).
            let source = if near == "_ip" {
                tables
                    .nodes()
                    .1
                    .iter()
                    .find(|n| !opts.source_ip.is_empty() && n.address == opts.source_ip)
                    .map(|n| n.node.clone())
            } else {
                Some(near.to_string())
            };
            if let Some(at) = source.and_then(|source| {
                rows.value
                    .iter()
                    .take(10)
                    .position(|r| r.node.node == source)
            }) {
                rows.value[..=at].rotate_right(1);
            }
        }
        if limit > 0 {
            rows.value.truncate(limit);
        }
        Ok(Queried {
            meta: rows.meta,
            value: ExecuteResponse {
                service: service.service,
                nodes: rows.value,
                dns: query.dns.clone(),
                datacenter: self.config.datacenter.clone(),
                peer_name: String::new(),
                failovers: 0,
            },
        })
    }

    /// `PreparedQuery.Execute`.
    pub(crate) async fn prepared_query_run(
        &self,
        opts: &QueryOptions,
        request: ExecuteRequest,
    ) -> Result<Queried<ExecuteResponse>, RpcError> {
        let resolved = self.resolve_query(opts, &request.id_or_name).await?;
        let query = resolved.value;
        let token = if query.token.is_empty() {
            opts.token.clone()
        } else {
            query.token.clone()
        };
        // The request's `?near` wins over the query's `Near`; `_agent` is
        // the agent the request came through.
        let mut near = if opts.near.is_empty() {
            query.service.near.clone()
        } else {
            opts.near.clone()
        };
        if near == "_agent" {
            near = request.agent_node.clone();
        }
        let mut answer = self
            .run_here(opts, &query, &token, request.connect, &near, request.limit)
            .await?;
        if answer.value.nodes.is_empty() {
            self.fail_over(opts, &query, &token, &request, &mut answer)
                .await;
        }
        Ok(answer)
    }

    /// Tries the query's other datacenters in order until one answers
    /// with instances: the `NearestN` nearest, then `Datacenters` (or
    /// `Targets`), each once, unknown ones skipped.
    async fn fail_over(
        &self,
        opts: &QueryOptions,
        query: &PreparedQuery,
        token: &str,
        request: &ExecuteRequest,
        answer: &mut Queried<ExecuteResponse>,
    ) {
        let failover = &query.service.failover;
        let known = self.known_datacenters();
        let local = &self.config.datacenter;
        let mut order: Vec<String> = known
            .iter()
            .filter(|dc| *dc != local)
            .take(failover.nearest_n.max(0) as usize)
            .cloned()
            .collect();
        let listed = failover.datacenters.iter().flatten().cloned().chain(
            failover
                .targets
                .iter()
                .flatten()
                .filter(|t| t.peer.is_empty())
                .map(|t| t.datacenter.clone()),
        );
        for dc in listed {
            if &dc != local && known.contains(&dc) && !order.contains(&dc) {
                order.push(dc);
            }
        }
        let Some(remote) = self.config.remote.as_ref().map(|r| r.0.clone()) else {
            return;
        };
        for dc in order {
            answer.value.failovers += 1;
            let mut there = opts.clone();
            there.datacenter = dc.clone();
            there.token = token.to_string();
            there.min_index = 0;
            there.near = String::new();
            let call = ExecuteRemoteRequest {
                query: query.clone(),
                limit: request.limit,
                connect: request.connect,
            };
            match remote.prepared_query_execute_remote(&there, call).await {
                Ok(found) if !found.value.nodes.is_empty() => {
                    let failovers = answer.value.failovers;
                    answer.value = found.value;
                    answer.value.failovers = failovers;
                    return;
                }
                Ok(empty) => {
                    // All empty: the last datacenter asked answers.
                    let failovers = answer.value.failovers;
                    answer.value = empty.value;
                    answer.value.failovers = failovers;
                }
                Err(e) => {
                    tracing::warn!(datacenter = %dc, error = %e, "prepared query failover: the datacenter could not be asked");
                }
            }
        }
    }

    /// `PreparedQuery.ExecuteRemote`: another datacenter's query run here,
    /// one level deep (no further failover).
    pub(crate) async fn prepared_query_run_remote(
        &self,
        opts: &QueryOptions,
        request: ExecuteRemoteRequest,
    ) -> Result<Queried<ExecuteResponse>, RpcError> {
        let token = opts.token.clone();
        self.run_here(
            opts,
            &request.query,
            &token,
            request.connect,
            "",
            request.limit,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_types::prepared_query::ServiceQuery;

    fn row(tags: &[&str], statuses: &[(&str, HealthStatus)]) -> CheckServiceNode {
        let mut r = CheckServiceNode::default();
        r.node.node = "n1".into();
        r.node.meta.insert("rack".into(), "a".into());
        r.service.service = "db".into();
        r.service.tags = tags.iter().map(|t| t.to_string()).collect();
        r.service.meta.insert("version".into(), "2".into());
        for (id, status) in statuses {
            r.checks.push(legate_types::HealthCheck {
                check_id: id.to_string(),
                status: *status,
                ..Default::default()
            });
        }
        r
    }

    #[test]
    fn health_tags_and_meta_filter_as_consuls() {
        let q = ServiceQuery {
            service: "db".into(),
            ..Default::default()
        };
        let warning = row(
            &[],
            &[
                ("serfHealth", HealthStatus::Passing),
                ("c", HealthStatus::Warning),
            ],
        );
        assert!(selected(&q, &warning));
        let only = ServiceQuery {
            only_passing: true,
            ..q.clone()
        };
        assert!(!selected(&only, &warning));
        let critical = row(&[], &[("c", HealthStatus::Critical)]);
        assert!(!selected(&q, &critical));
        let ignoring = ServiceQuery {
            ignore_check_ids: Some(vec!["c".into()]),
            ..q.clone()
        };
        assert!(selected(&ignoring, &critical));
        let tagged = ServiceQuery {
            tags: Some(vec!["Primary".into(), "!canary".into()]),
            ..q.clone()
        };
        assert!(selected(&tagged, &row(&["primary"], &[])));
        assert!(!selected(&tagged, &row(&["primary", "canary"], &[])));
        assert!(!selected(&tagged, &row(&[], &[])));
        let meta = ServiceQuery {
            node_meta: Some([("rack".to_string(), "a".to_string())].into()),
            service_meta: Some([("version".to_string(), "3".to_string())].into()),
            ..q
        };
        assert!(!selected(&meta, &row(&[], &[])));
    }

    #[test]
    fn queries_are_validated_with_consuls_texts() {
        let mut q = PreparedQuery::default();
        assert_eq!(validate(&q).unwrap_err(), "Must be bound to a session");
        q.name = "q".into();
        assert_eq!(
            validate(&q).unwrap_err(),
            "Must provide a Service name to query"
        );
        q.service.service = "db".into();
        validate(&q).unwrap();
        q.service.failover.nearest_n = -1;
        assert_eq!(validate(&q).unwrap_err(), "Bad NearestN '-1', must be >= 0");
        q.service.failover.nearest_n = 1;
        q.service.failover.targets = Some(vec![Default::default()]);
        assert_eq!(
            validate(&q).unwrap_err(),
            "Targets cannot be populated with NearestN or Datacenters"
        );
        q.service.failover = Default::default();
        q.dns.ttl = "ten".into();
        assert!(validate(&q).unwrap_err().starts_with("Bad DNS TTL 'ten': "));
        q.dns.ttl = "-1s".into();
        assert_eq!(
            validate(&q).unwrap_err(),
            "DNS TTL '-1000000000', must be >=0"
        );
        q.dns.ttl = "10s".into();
        validate(&q).unwrap();
    }
}
