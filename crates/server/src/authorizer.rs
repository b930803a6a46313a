//! Authorization: every endpoint asks the authorizer before it reads or
//! writes. Until ACLs exist the authorizer allows everything; the ACL work
//! replaces it without touching the endpoints.

use legate_types::RpcError;

/// What kind of object a request touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A node by name.
    Node(String),
    /// A service by name.
    Service(String),
    /// A KV key.
    Key(String),
    /// A session on a node.
    Session(String),
    /// Operator-level state (Raft, status).
    Operator,
    /// User events by name.
    Event(String),
    /// The whole state at once (snapshot save and restore): Consul asks
    /// for a management token.
    Snapshot,
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read.
    Read,
    /// Write.
    Write,
}

/// Decides whether a token may access a resource.
pub trait Authorizer: Send + Sync + 'static {
    /// `Ok` when allowed; `PermissionDenied` naming the permission when not.
    fn authorize(&self, token: &str, resource: &Resource, access: Access) -> Result<(), RpcError>;
}

/// The authorizer in force while ACLs are disabled.
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(
        &self,
        _token: &str,
        _resource: &Resource,
        _access: Access,
    ) -> Result<(), RpcError> {
        Ok(())
    }
}
