//! The error every server endpoint returns; the HTTP layer maps each variant
//! to one status code.

/// An endpoint failure, carrying a message that tells the user what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum RpcError {
    /// The request was malformed or violated a rule (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// The named object does not exist (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// The token lacks a permission (HTTP 403).
    #[error("Permission denied: {0}")]
    PermissionDenied(String),
    /// The token's secret names no token (HTTP 403, as Consul).
    #[error("ACL not found")]
    AclNotFound,
    /// ACLs are not enabled on this agent (HTTP 401 on `/v1/acl/*`).
    #[error("ACL support disabled")]
    AclDisabled,
    /// A value exceeded a size limit (HTTP 413).
    #[error("{0}")]
    TooLarge(String),
    /// The request named a datacenter this server cannot reach (HTTP 500, as Consul).
    #[error("No path to datacenter")]
    NoPathToDatacenter(String),
    /// The datacenter is known but none of its servers can be reached
    /// now (HTTP 500, as Consul; DNS answers NXDOMAIN).
    #[error("Remote DC has no server currently reachable")]
    DatacenterUnavailable(String),
    /// A server refused work over its rate limit (HTTP 429); the text is
    /// Consul's, which clients match on.
    #[error("Rate limit reached, try again later")]
    RateLimited,
    /// No Raft leader is known (HTTP 500).
    #[error("No cluster leader")]
    NoLeader,
    /// A server could not be reached over the network (HTTP 500); the
    /// caller may try another.
    #[error("rpc error: {0}")]
    Unreachable(String),
    /// The request reached a server but no answer came back (the
    /// connection broke, the leader changed): it may or may not have been
    /// applied (HTTP 500). Reads may be retried; writes never are.
    #[error("{0}")]
    Indeterminate(String),
    /// Anything else (HTTP 500).
    #[error("{0}")]
    Internal(String),
    /// Refused with Consul's own 403 text (`ACL not found: auth method
    /// "x" not found`, a bare `Permission denied`).
    #[error("{0}")]
    Forbidden(String),
}
