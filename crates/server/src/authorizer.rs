//! Authorization: every endpoint names what it touches and how, and asks
//! [`crate::Server::authorize`] before it reads or writes. With ACLs off
//! everything is allowed; with them on the request's token is resolved
//! (see [`crate::acl`]) and its rules decide.

/// What a request touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// The ACL system.
    Acl,
    /// An agent, by node name.
    Agent(String),
    /// A node by name.
    Node(String),
    /// A service by name.
    Service(String),
    /// Intentions whose destination is this service.
    Intention(String),
    /// A KV key.
    Key(String),
    /// Every key under a prefix at once (`DELETE ?recurse`).
    KeyPrefix(String),
    /// A session on a node.
    Session(String),
    /// Operator-level state (Raft, autopilot, the CA configuration).
    Operator,
    /// Mesh-wide configuration (falls back to operator).
    Mesh,
    /// The gossip keyring.
    Keyring,
    /// A prepared query, by name.
    Query(String),
    /// User events by name.
    Event(String),
    /// The whole state at once (snapshot save and restore): Consul asks
    /// for a management token.
    Snapshot,
}

impl Resource {
    /// The rules' resource and the name a rule matches (empty for scalars).
    pub(crate) fn rule_target(&self) -> (legate_acl::Resource, &str) {
        use legate_acl::Resource as R;
        match self {
            Resource::Acl | Resource::Snapshot => (R::Acl, ""),
            Resource::Agent(n) => (R::Agent, n),
            Resource::Node(n) => (R::Node, n),
            Resource::Service(n) => (R::Service, n),
            Resource::Intention(n) => (R::Intention, n),
            Resource::Key(n) | Resource::KeyPrefix(n) => (R::Key, n),
            Resource::Session(n) => (R::Session, n),
            Resource::Operator => (R::Operator, ""),
            Resource::Mesh => (R::Mesh, ""),
            Resource::Keyring => (R::Keyring, ""),
            Resource::Query(n) => (R::Query, n),
            Resource::Event(n) => (R::Event, n),
        }
    }
}

/// Read, list or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read.
    Read,
    /// List (recursive KV reads with `enable_key_list_policy`).
    List,
    /// Write.
    Write,
}

impl Access {
    pub(crate) fn to_acl(self) -> legate_acl::Access {
        match self {
            Access::Read => legate_acl::Access::Read,
            Access::List => legate_acl::Access::List,
            Access::Write => legate_acl::Access::Write,
        }
    }
}

impl Resource {
    /// The resource a rule resource and a name stand for.
    pub(crate) fn named(resource: legate_acl::Resource, name: &str) -> Resource {
        use legate_acl::Resource as R;
        let name = name.to_string();
        match resource {
            R::Acl => Resource::Acl,
            R::Agent => Resource::Agent(name),
            R::Event => Resource::Event(name),
            R::Intention => Resource::Intention(name),
            R::Key => Resource::Key(name),
            R::Keyring => Resource::Keyring,
            R::Mesh => Resource::Mesh,
            R::Node => Resource::Node(name),
            R::Operator | R::Peering => Resource::Operator,
            R::Query => Resource::Query(name),
            R::Service => Resource::Service(name),
            R::Session => Resource::Session(name),
        }
    }
}

impl Access {
    /// The access a rule access stands for.
    pub(crate) fn from_acl(access: legate_acl::Access) -> Access {
        match access {
            legate_acl::Access::Read => Access::Read,
            legate_acl::Access::List => Access::List,
            legate_acl::Access::Write => Access::Write,
        }
    }
}
