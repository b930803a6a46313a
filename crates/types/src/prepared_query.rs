//! Prepared queries (Consul's `PreparedQuery`): a stored service lookup
//! with health, tag and metadata filters, failover to other datacenters
//! and DNS options, run by ID or name (`/v1/query/:id/execute`, DNS
//! `<name>.query.consul`), optionally a template for every name with its
//! prefix.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{CheckServiceNode, RaftIndex};

/// The only template type Consul knows.
pub const TEMPLATE_NAME_PREFIX_MATCH: &str = "name_prefix_match";

/// What a read shows instead of a query's token to a caller who may not
/// see it.
pub const REDACTED_TOKEN: &str = "<hidden>";

/// A stored prepared query, in Consul's field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct PreparedQuery {
    /// Made by the server on create.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Optional; unique (case-insensitively) among queries.
    #[serde(default)]
    pub name: String,
    /// A session the query lives and dies with.
    #[serde(default)]
    pub session: String,
    /// The token the query runs with (else the caller's).
    #[serde(default)]
    pub token: String,
    /// Set when the query is a template.
    #[serde(default)]
    pub template: QueryTemplate,
    /// The lookup.
    #[serde(default)]
    pub service: ServiceQuery,
    /// Options of answers over DNS.
    #[serde(rename = "DNS", default)]
    pub dns: QueryDns,
    /// Raft bookkeeping.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

impl PreparedQuery {
    /// Whether the query is a template.
    pub fn is_template(&self) -> bool {
        !self.template.kind.is_empty()
    }
}

/// A template's settings (`Type` empty: not a template).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct QueryTemplate {
    /// `name_prefix_match`.
    #[serde(rename = "Type", default)]
    pub kind: String,
    /// An optional RE2 expression applied to the looked-up name; its
    /// groups are `${match(N)}`.
    #[serde(default)]
    pub regexp: String,
    /// Drop empty tags from the rendered `Tags`.
    #[serde(default)]
    pub remove_empty_tags: bool,
}

/// The service lookup of a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceQuery {
    /// The service (required).
    #[serde(default)]
    pub service: String,
    /// Enterprise sameness groups (refused unless empty).
    #[serde(default)]
    pub sameness_group: String,
    /// Where to look when the local datacenter has no healthy instance.
    #[serde(default)]
    pub failover: QueryFailover,
    /// Keep passing instances only (warning ones are dropped too).
    #[serde(default)]
    pub only_passing: bool,
    /// Checks that do not count for health.
    #[serde(rename = "IgnoreCheckIDs", default)]
    pub ignore_check_ids: Option<Vec<String>>,
    /// A node to sort by distance from (`_agent`, `_ip`).
    #[serde(default)]
    pub near: String,
    /// Required tags; `!tag` forbids one.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Node metadata every result must carry.
    #[serde(default)]
    pub node_meta: Option<BTreeMap<String, String>>,
    /// Service metadata every result must carry.
    #[serde(default)]
    pub service_meta: Option<BTreeMap<String, String>>,
    /// Look up the service's mesh instances (its sidecars and native
    /// instances) instead.
    #[serde(default)]
    pub connect: bool,
    /// A cluster peer to query (no peers exist in Legate).
    #[serde(default)]
    pub peer: String,
}

/// Failover to other datacenters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct QueryFailover {
    /// How many of the nearest other datacenters to try, by WAN round trip.
    #[serde(rename = "NearestN", default)]
    pub nearest_n: i64,
    /// Datacenters to try next, in order.
    #[serde(default)]
    pub datacenters: Option<Vec<String>>,
    /// Datacenters or peers to try, in order (not with the two above).
    #[serde(default)]
    pub targets: Option<Vec<QueryFailoverTarget>>,
}

/// One failover target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct QueryFailoverTarget {
    /// A cluster peer.
    #[serde(default)]
    pub peer: String,
    /// A datacenter.
    #[serde(default)]
    pub datacenter: String,
}

/// DNS options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct QueryDns {
    /// The answers' TTL, a Go duration (empty: the agent's).
    #[serde(rename = "TTL", default)]
    pub ttl: String,
}

/// What `POST/PUT/DELETE /v1/query` asks of the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreparedQueryOp {
    /// A new query (the server makes its ID).
    Create,
    /// Replace the query with the same ID.
    Update,
    /// Remove the query with the same ID.
    Delete,
}

/// A query run: by ID or name, from where, how many.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ExecuteRequest {
    /// The query's ID or a name (templates render with it).
    pub id_or_name: String,
    /// Keep at most this many results (0: all).
    pub limit: usize,
    /// Look up mesh instances whatever the query says.
    pub connect: bool,
    /// The node the request came through (`Near: "_agent"`).
    pub agent_node: String,
}

/// A query run in one datacenter on behalf of another's failover: the
/// whole (rendered) query travels, since that datacenter does not hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRemoteRequest {
    /// The rendered query.
    pub query: PreparedQuery,
    /// Keep at most this many results (0: all).
    pub limit: usize,
    /// Look up mesh instances.
    pub connect: bool,
}

/// The answer of a query run, in Consul's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ExecuteResponse {
    /// The service looked up.
    pub service: String,
    /// The instances found, `[]` when none.
    pub nodes: Vec<CheckServiceNode>,
    /// The query's DNS options.
    #[serde(rename = "DNS")]
    pub dns: QueryDns,
    /// The datacenter the nodes come from.
    pub datacenter: String,
    /// The peer they come from (always empty).
    pub peer_name: String,
    /// How many other datacenters were asked.
    pub failovers: u32,
}

/// The answer of `explain`: the query a name resolves to, rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ExplainResponse {
    /// The rendered query.
    pub query: PreparedQuery,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_has_consuls_empty_forms() {
        let json = serde_json::to_value(PreparedQuery::default()).unwrap();
        assert_eq!(json["Service"]["Tags"], serde_json::Value::Null);
        assert_eq!(json["Service"]["NodeMeta"], serde_json::Value::Null);
        assert_eq!(
            json["Service"]["Failover"]["Datacenters"],
            serde_json::Value::Null
        );
        assert_eq!(json["Service"]["Failover"]["NearestN"], 0);
        assert_eq!(json["DNS"]["TTL"], "");
        assert_eq!(json["Template"]["Type"], "");
        assert_eq!(json["CreateIndex"], 0);
        let back: PreparedQuery = serde_json::from_value(json).unwrap();
        assert_eq!(back, PreparedQuery::default());
        let binary = crate::binary::encode(&PreparedQuery::default()).unwrap();
        assert_eq!(
            crate::binary::decode::<PreparedQuery>(&binary).unwrap(),
            PreparedQuery::default()
        );
    }
}
