//! Every door and the permission it needs, in one place: each HTTP route
//! (`METHOD /path`, as the router registers it, a `?param` suffix where
//! a query parameter changes what is asked) and each server-port call
//! (the `ServerRpc` method's name). Tests walk the HTTP router and the RPC
//! dispatcher and fail on anything without a row here, then try every row
//! with a token that has exactly what the row names and with one that
//! lacks it. Config entries decide per kind ([`CONFIG_ENTRY_KINDS`]).
//!
//! The permissions are Consul's (its `API_ENDPOINTS` table, the ACL rules
//! documentation and the endpoints' code).

use crate::authorizer::Access;
use crate::rules::Resource;

/// Where the name a permission is checked on comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// None: the resource is a scalar (`operator`, `acl`, `keyring`, `mesh`).
    None,
    /// A path segment (`{service}`).
    Path(&'static str),
    /// A query parameter.
    Query(&'static str),
    /// A field of the request body, or of a server-port call's argument.
    Body(&'static str),
    /// This agent's own node name.
    ThisAgent,
    /// A field of each result: lists are filtered item by item.
    Each(&'static str),
    /// Something stored with the object the request names (the session's
    /// node, the check's service, the intention's destination).
    Stored(&'static str),
    /// Every name: a rule on the empty prefix and none granting less
    /// (Consul's `NodeReadAll`, `ServiceReadAll`).
    Every,
}

/// One permission: a resource, the access asked for, and on which name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// The rules' resource.
    pub resource: Resource,
    /// Read, list or write.
    pub access: Access,
    /// Where the name comes from.
    pub name: Name,
}

impl Need {
    /// The same need one level down (`write` or `list` → `read`), or
    /// `None` for `read`: what a token that just misses it holds.
    pub fn weaker(&self) -> Option<Need> {
        match self.access {
            Access::Write | Access::List => Some(Need {
                access: Access::Read,
                ..*self
            }),
            Access::Read => None,
        }
    }

    /// Rules granting exactly this need on `name` (the name is ignored for
    /// scalar resources; an intention rule sits in a service rule that
    /// grants nothing of the service itself).
    pub fn granting_rules(&self, name: &str) -> String {
        let level = self.access.as_str();
        match self.resource {
            Resource::Acl
            | Resource::Operator
            | Resource::Keyring
            | Resource::Mesh
            | Resource::Peering => format!("{} = \"{level}\"\n", self.resource.as_str()),
            Resource::Intention => {
                format!("service {name:?} {{ policy = \"deny\" intentions = \"{level}\" }}\n")
            }
            other if self.name == Name::Every => {
                format!(
                    "{}_prefix \"\" {{ policy = \"{level}\" }}\n",
                    other.as_str()
                )
            }
            other => format!("{} {name:?} {{ policy = \"{level}\" }}\n", other.as_str()),
        }
    }
}

/// What a door needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: open to any caller, with or without a token.
    Nothing,
    /// A token the servers know (any rules): it answers about itself.
    KnownToken,
    /// Every one of these, else 403 `Permission denied`.
    All(&'static [Need]),
    /// Results are filtered: items failing any of these are left out and
    /// `X-Consul-Results-Filtered-By-ACLs: true` is set (a fully filtered
    /// KV list answers 404).
    Filtered(&'static [Need]),
    /// Each operation of the request is checked on its own; one denied
    /// fails the whole request (`/v1/txn`: 409 with `Errors`, nothing
    /// applied).
    EachOperation(&'static [Need]),
    /// Config entries: what the entry's kind asks for reading (a list is
    /// filtered by it) or writing, by [`CONFIG_ENTRY_KINDS`].
    ByKind(Side),
}

/// Reading or writing, for [`Needs::ByKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// One entry (or a list, filtered).
    Read,
    /// Setting or deleting an entry.
    Write,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Door {
    /// `METHOD /path` (HTTP) or the call's name (server port).
    pub door: &'static str,
    /// What it needs.
    pub needs: Needs,
    /// What the row does not say by itself (extra checks in some cases).
    pub note: &'static str,
}

/// What one config entry kind needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindNeeds {
    /// The kind.
    pub kind: &'static str,
    /// To read an entry (`None`: anyone may).
    pub read: Option<Need>,
    /// To write or delete one.
    pub write: Need,
}

const fn need(resource: Resource, access: Access, name: Name) -> Need {
    Need {
        resource,
        access,
        name,
    }
}

const fn read(resource: Resource, name: Name) -> Need {
    need(resource, Access::Read, name)
}

const fn write(resource: Resource, name: Name) -> Need {
    need(resource, Access::Write, name)
}

const fn row(door: &'static str, needs: Needs) -> Door {
    Door {
        door,
        needs,
        note: "",
    }
}

const fn noted(door: &'static str, needs: Needs, note: &'static str) -> Door {
    Door { door, needs, note }
}

use Name::{Body, Each, Path, Query, Stored, ThisAgent};
use Resource as R;

const OPERATOR_READ: Needs = Needs::All(&[read(R::Operator, Name::None)]);
const OPERATOR_WRITE: Needs = Needs::All(&[write(R::Operator, Name::None)]);
const ACL_READ: Needs = Needs::All(&[read(R::Acl, Name::None)]);
const ACL_WRITE: Needs = Needs::All(&[write(R::Acl, Name::None)]);
const AGENT_READ: Needs = Needs::All(&[read(R::Agent, ThisAgent)]);
const AGENT_WRITE: Needs = Needs::All(&[write(R::Agent, ThisAgent)]);
const KEYRING_READ: Needs = Needs::All(&[read(R::Keyring, Name::None)]);
const KEYRING_WRITE: Needs = Needs::All(&[write(R::Keyring, Name::None)]);
const SNAPSHOT: Needs = Needs::All(&[write(R::Acl, Name::None)]);
const SERVICE_CHECK_WRITE: Needs = Needs::All(&[write(R::Service, Stored("the check's service"))]);
const METRICS_PROXY: Needs =
    Needs::All(&[read(R::Node, Name::Every), read(R::Service, Name::Every)]);
const METRICS_PROXY_NOTE: &str =
    "404 before any check with the UI off or no metrics_proxy.base_url; the token from headers only";
const CHECK_NOTE: &str = "node:write on this agent's node for a check of the node itself";
const HEALTH_ROWS: Needs = Needs::Filtered(&[
    read(R::Node, Each("Node")),
    read(R::Service, Each("ServiceName")),
]);
const SERVICE_NODES: Needs = Needs::Filtered(&[
    read(R::Service, Path("service")),
    read(R::Node, Each("Node")),
]);

const CONNECT_NOTE: &str =
    "each proxy instance is also filtered by service:read on its own name (the sidecar's)";

/// Every HTTP route.
pub const HTTP: &[Door] = &[
    // The agent's own endpoints, answered by the agent's resolver.
    row("GET /v1/agent/self", AGENT_READ),
    row("GET /v1/agent/metrics", AGENT_READ),
    row("GET /v1/agent/metrics/stream", AGENT_READ),
    row("GET /v1/agent/monitor", AGENT_READ),
    row("GET /v1/agent/host", OPERATOR_READ),
    row("GET /v1/agent/version", Needs::Nothing),
    row(
        "GET /v1/agent/members",
        Needs::Filtered(&[read(R::Node, Each("Name"))]),
    ),
    row(
        "GET /v1/agent/services",
        Needs::Filtered(&[read(R::Service, Each("Service"))]),
    ),
    row(
        "GET /v1/agent/service/{id}",
        Needs::All(&[read(R::Service, Stored("the service's name"))]),
    ),
    noted(
        "PUT /v1/agent/service/register",
        Needs::All(&[write(R::Service, Body("Name"))]),
        "also service:write on a connect-proxy's Proxy.DestinationServiceName and on the sidecar it brings",
    ),
    row(
        "PUT /v1/agent/service/deregister/{id}",
        Needs::All(&[write(R::Service, Stored("the service's name"))]),
    ),
    row(
        "PUT /v1/agent/service/maintenance/{id}",
        Needs::All(&[write(R::Service, Stored("the service's name"))]),
    ),
    row(
        "PUT /v1/agent/maintenance",
        Needs::All(&[write(R::Node, ThisAgent)]),
    ),
    row(
        "GET /v1/agent/checks",
        Needs::Filtered(&[read(R::Service, Each("ServiceName"))]),
    ),
    noted(
        "PUT /v1/agent/check/register",
        Needs::All(&[write(R::Service, Body("ServiceID"))]),
        CHECK_NOTE,
    ),
    noted(
        "PUT /v1/agent/check/deregister/{id}",
        SERVICE_CHECK_WRITE,
        CHECK_NOTE,
    ),
    noted("PUT /v1/agent/check/pass/{id}", SERVICE_CHECK_WRITE, CHECK_NOTE),
    noted("PUT /v1/agent/check/warn/{id}", SERVICE_CHECK_WRITE, CHECK_NOTE),
    noted("PUT /v1/agent/check/fail/{id}", SERVICE_CHECK_WRITE, CHECK_NOTE),
    noted(
        "PUT /v1/agent/check/update/{id}",
        SERVICE_CHECK_WRITE,
        CHECK_NOTE,
    ),
    row(
        "GET /v1/agent/health/service/id/{id}",
        Needs::All(&[read(R::Service, Stored("the service's name"))]),
    ),
    row(
        "GET /v1/agent/health/service/name/{name}",
        Needs::All(&[read(R::Service, Path("name"))]),
    ),
    row("GET /v1/agent/connect/ca/roots", Needs::Nothing),
    row(
        "GET /v1/agent/connect/ca/leaf/{service}",
        Needs::All(&[write(R::Service, Path("service"))]),
    ),
    row(
        "POST /v1/agent/connect/authorize",
        Needs::All(&[write(R::Service, Body("Target"))]),
    ),
    row(
        "PUT /v1/agent/connect/authorize",
        Needs::All(&[write(R::Service, Body("Target"))]),
    ),
    row("PUT /v1/agent/reload", AGENT_WRITE),
    row("PUT /v1/agent/leave", AGENT_WRITE),
    row("PUT /v1/agent/join/{address}", AGENT_WRITE),
    row("PUT /v1/agent/force-leave/{node}", OPERATOR_WRITE),
    row("PUT /v1/agent/token/{kind}", AGENT_WRITE),
    row("GET /v1/operator/keyring", KEYRING_READ),
    row("POST /v1/operator/keyring", KEYRING_WRITE),
    row("PUT /v1/operator/keyring", KEYRING_WRITE),
    row("DELETE /v1/operator/keyring", KEYRING_WRITE),
    row(
        "GET /v1/event/list",
        Needs::Filtered(&[read(R::Event, Each("Name"))]),
    ),
    row(
        "PUT /v1/event/fire/{name}",
        Needs::All(&[write(R::Event, Path("name"))]),
    ),
    // Intentions and the CA.
    row(
        "GET /v1/connect/intentions",
        Needs::Filtered(&[read(R::Intention, Each("DestinationName"))]),
    ),
    row(
        "POST /v1/connect/intentions",
        Needs::All(&[write(R::Intention, Body("DestinationName"))]),
    ),
    row(
        "GET /v1/connect/intentions/exact",
        Needs::All(&[read(R::Intention, Query("destination"))]),
    ),
    row(
        "PUT /v1/connect/intentions/exact",
        Needs::All(&[write(R::Intention, Query("destination"))]),
    ),
    row(
        "DELETE /v1/connect/intentions/exact",
        Needs::All(&[write(R::Intention, Query("destination"))]),
    ),
    row(
        "GET /v1/connect/intentions/match",
        Needs::All(&[read(R::Intention, Query("name"))]),
    ),
    row(
        "GET /v1/connect/intentions/check",
        Needs::All(&[read(R::Service, Query("destination"))]),
    ),
    row(
        "GET /v1/connect/intentions/{id}",
        Needs::All(&[read(R::Intention, Stored("the intention's destination"))]),
    ),
    row(
        "PUT /v1/connect/intentions/{id}",
        Needs::All(&[write(R::Intention, Stored("the intention's destination"))]),
    ),
    row(
        "DELETE /v1/connect/intentions/{id}",
        Needs::All(&[write(R::Intention, Stored("the intention's destination"))]),
    ),
    row("GET /v1/connect/ca/roots", Needs::Nothing),
    row("GET /v1/connect/ca/configuration", OPERATOR_READ),
    row("PUT /v1/connect/ca/configuration", OPERATOR_WRITE),
    // Catalog and health.
    noted(
        "PUT /v1/catalog/register",
        Needs::All(&[write(R::Service, Body("Service.Service"))]),
        "also node:write on Node when the registration changes the node (a new node, another address or meta), and service:write on a proxy's destination",
    ),
    noted(
        "PUT /v1/catalog/deregister",
        Needs::All(&[write(R::Service, Stored("the service's name"))]),
        "node:write on Node to remove the node, or a check of the node",
    ),
    row("GET /v1/catalog/datacenters", Needs::Nothing),
    row(
        "GET /v1/catalog/nodes",
        Needs::Filtered(&[read(R::Node, Each("Node"))]),
    ),
    row(
        "GET /v1/catalog/services",
        Needs::Filtered(&[read(R::Service, Each("the service name"))]),
    ),
    row("GET /v1/catalog/service/{service}", SERVICE_NODES),
    noted("GET /v1/catalog/connect/{service}", SERVICE_NODES, CONNECT_NOTE),
    noted(
        "GET /v1/catalog/gateway-services/{gateway}",
        Needs::All(&[read(R::Service, Path("gateway"))]),
        "each row is also filtered by service:read on its service",
    ),
    row(
        "GET /v1/catalog/node/{node}",
        Needs::Filtered(&[read(R::Node, Path("node")), read(R::Service, Each("Service"))]),
    ),
    row(
        "GET /v1/catalog/node-services/{node}",
        Needs::Filtered(&[read(R::Node, Path("node")), read(R::Service, Each("Service"))]),
    ),
    row(
        "GET /v1/health/node/{node}",
        Needs::Filtered(&[read(R::Node, Path("node")), read(R::Service, Each("ServiceName"))]),
    ),
    row(
        "GET /v1/health/checks/{service}",
        Needs::Filtered(&[read(R::Service, Path("service")), read(R::Node, Each("Node"))]),
    ),
    row("GET /v1/health/state/{state}", HEALTH_ROWS),
    row("GET /v1/health/service/{service}", SERVICE_NODES),
    noted(
        "GET /v1/health/ingress/{service}",
        SERVICE_NODES,
        "the gateways' instances are also filtered by service:read on the gateway",
    ),
    noted("GET /v1/health/connect/{service}", SERVICE_NODES, CONNECT_NOTE),
    // Config entries and discovery chains.
    row("PUT /v1/config", Needs::ByKind(Side::Write)),
    row("GET /v1/config/{kind}", Needs::ByKind(Side::Read)),
    row("GET /v1/config/{kind}/{name}", Needs::ByKind(Side::Read)),
    row("DELETE /v1/config/{kind}/{name}", Needs::ByKind(Side::Write)),
    row(
        "GET /v1/discovery-chain/{service}",
        Needs::All(&[read(R::Service, Path("service"))]),
    ),
    row(
        "POST /v1/discovery-chain/{service}",
        Needs::All(&[read(R::Service, Path("service"))]),
    ),
    // KV and transactions.
    row(
        "GET /v1/kv/{*key}",
        Needs::All(&[read(R::Key, Path("key"))]),
    ),
    noted(
        "GET /v1/kv/{*key}?recurse",
        Needs::Filtered(&[read(R::Key, Each("Key"))]),
        "with enable_key_list_policy, key:list on the prefix first (403)",
    ),
    noted(
        "GET /v1/kv/{*key}?keys",
        Needs::Filtered(&[read(R::Key, Each("the key"))]),
        "with enable_key_list_policy, key:list on the prefix first (403)",
    ),
    row(
        "PUT /v1/kv/{*key}",
        Needs::All(&[write(R::Key, Path("key"))]),
    ),
    row(
        "DELETE /v1/kv/{*key}",
        Needs::All(&[write(R::Key, Path("key"))]),
    ),
    noted(
        "DELETE /v1/kv/{*key}?recurse",
        Needs::All(&[write(R::Key, Path("key"))]),
        "write on every key under the prefix: a deny anywhere below refuses it",
    ),
    noted(
        "GET /v1/kv/?recurse",
        Needs::Filtered(&[read(R::Key, Each("Key"))]),
        "the root: every key",
    ),
    noted(
        "PUT /v1/kv/",
        Needs::All(&[write(R::Key, Path("key"))]),
        "refused before any check: a key is required",
    ),
    noted(
        "DELETE /v1/kv/?recurse",
        Needs::All(&[write(R::Key, Path("key"))]),
        "every key",
    ),
    noted(
        "PUT /v1/txn",
        Needs::EachOperation(&[write(R::Key, Body("KV.Key"))]),
        "reads need key:read and are filtered",
    ),
    // Prepared queries.
    noted(
        "POST /v1/query",
        Needs::All(&[write(R::Query, Body("Name"))]),
        "a query with neither a name nor a template needs no query rule",
    ),
    noted(
        "GET /v1/query",
        Needs::Filtered(&[read(R::Query, Each("Name"))]),
        "unnamed queries only with acl:read; tokens shown only with acl:write",
    ),
    noted(
        "GET /v1/query/{id}",
        Needs::All(&[read(R::Query, Stored("the query's name"))]),
        "403 when the token may not read it",
    ),
    noted(
        "PUT /v1/query/{id}",
        Needs::All(&[write(R::Query, Stored("the query's name"))]),
        "and on the new name when the body renames it",
    ),
    row(
        "DELETE /v1/query/{id}",
        Needs::All(&[write(R::Query, Stored("the query's name"))]),
    ),
    noted(
        "GET /v1/query/{id}/execute",
        Needs::Filtered(&[
            read(R::Service, Each("Service.Service")),
            read(R::Node, Each("Node.Node")),
        ]),
        "filtered with the query's own token when it has one, else the caller's",
    ),
    row(
        "GET /v1/query/{id}/explain",
        Needs::All(&[read(R::Query, Stored("the query's name"))]),
    ),
    // Sessions.
    row(
        "PUT /v1/session/create",
        Needs::All(&[write(R::Session, Body("Node"))]),
    ),
    row(
        "PUT /v1/session/destroy/{id}",
        Needs::All(&[write(R::Session, Stored("the session's node"))]),
    ),
    row(
        "PUT /v1/session/renew/{id}",
        Needs::All(&[write(R::Session, Stored("the session's node"))]),
    ),
    row(
        "GET /v1/session/info/{id}",
        Needs::Filtered(&[read(R::Session, Each("Node"))]),
    ),
    row(
        "GET /v1/session/node/{node}",
        Needs::Filtered(&[read(R::Session, Each("Node"))]),
    ),
    row(
        "GET /v1/session/list",
        Needs::Filtered(&[read(R::Session, Each("Node"))]),
    ),
    // Status, operator, snapshots, federation states.
    row("GET /v1/status/leader", Needs::Nothing),
    row("GET /v1/status/peers", Needs::Nothing),
    row("GET /v1/operator/raft/configuration", OPERATOR_READ),
    row("DELETE /v1/operator/raft/peer", OPERATOR_WRITE),
    row("POST /v1/operator/raft/transfer-leader", OPERATOR_WRITE),
    row("GET /v1/operator/autopilot/health", OPERATOR_READ),
    row("GET /v1/operator/autopilot/state", OPERATOR_READ),
    row("GET /v1/operator/usage", OPERATOR_READ),
    row("GET /v1/operator/autopilot/configuration", OPERATOR_READ),
    row("PUT /v1/operator/autopilot/configuration", OPERATOR_WRITE),
    row("GET /v1/snapshot", SNAPSHOT),
    row("PUT /v1/snapshot", SNAPSHOT),
    row("GET /v1/internal/federation-states", OPERATOR_READ),
    row(
        "GET /v1/internal/federation-states/mesh-gateways",
        Needs::Filtered(&[read(R::Service, Each("Service")), read(R::Node, Each("Node"))]),
    ),
    noted(
        "GET /v1/internal/federation-state/",
        OPERATOR_READ,
        "refused before any check: a datacenter is required",
    ),
    row("GET /v1/internal/federation-state/{dc}", OPERATOR_READ),
    row("GET /v1/internal/gateway-locator", OPERATOR_READ),
    row(
        "GET /v1/internal/ui/services",
        Needs::Filtered(&[read(R::Service, Each("Name")), read(R::Node, Each("Nodes"))]),
    ),
    noted(
        "GET /v1/internal/ui/nodes",
        Needs::Filtered(&[read(R::Node, Each("Node"))]),
        "and within a node, its services and their checks by service:read",
    ),
    noted(
        "GET /v1/internal/ui/node/",
        Needs::Nothing,
        "Consul's 400 for a missing name",
    ),
    noted(
        "GET /v1/internal/ui/node/{node}",
        Needs::Filtered(&[read(R::Node, Path("node"))]),
        "404 when the token may not read the node, as Consul's",
    ),
    noted(
        "GET /v1/internal/ui/service-topology/",
        Needs::Nothing,
        "Consul's 400 for a missing name",
    ),
    noted(
        "GET /v1/internal/ui/service-topology/{service}",
        Needs::All(&[read(R::Service, Path("service"))]),
        "the neighbours' instances filtered by service:read and node:read (FilteredByACLs)",
    ),
    noted(
        "GET /v1/internal/ui/gateway-intentions/",
        Needs::Nothing,
        "Consul's 400 for a missing name",
    ),
    noted(
        "GET /v1/internal/ui/gateway-intentions/{gateway}",
        Needs::All(&[read(R::Service, Path("gateway"))]),
        "each intention is also filtered by intentions read on its destination",
    ),
    noted(
        "GET /v1/internal/ui/gateway-services-nodes/",
        Needs::Nothing,
        "Consul's 400 for a missing name",
    ),
    noted(
        "GET /v1/internal/ui/gateway-services-nodes/{gateway}",
        Needs::All(&[read(R::Service, Path("gateway"))]),
        "each linked service is also filtered by service:read, its instances by node:read",
    ),
    row("GET /v1/internal/ui/catalog-overview", OPERATOR_READ),
    noted("GET /v1/internal/ui/metrics-proxy/", METRICS_PROXY, METRICS_PROXY_NOTE),
    noted(
        "GET /v1/internal/ui/metrics-proxy/{*path}",
        METRICS_PROXY,
        METRICS_PROXY_NOTE,
    ),
    noted(
        "GET /v1/internal/ui/proxy/{id}",
        Needs::All(&[read(R::Service, Stored("the local service's name"))]),
        "Legate's own; 404 for a service this agent does not run",
    ),
    noted(
        "GET /v1/internal/ui/traffic/{service}",
        Needs::All(&[read(R::Service, Path("service"))]),
        "Legate's own; each edge is also filtered by service:read on its other service",
    ),
    // Coordinates.
    row("GET /v1/coordinate/datacenters", Needs::Nothing),
    row(
        "GET /v1/coordinate/nodes",
        Needs::Filtered(&[read(R::Node, Each("Node"))]),
    ),
    row(
        "GET /v1/coordinate/node/{node}",
        Needs::All(&[read(R::Node, Path("node"))]),
    ),
    row(
        "PUT /v1/coordinate/update",
        Needs::All(&[write(R::Node, Body("Node"))]),
    ),
    // The ACL system.
    row("PUT /v1/acl/bootstrap", Needs::Nothing),
    noted(
        "GET /v1/acl/replication",
        Needs::Nothing,
        "read by health checks; shows no secret (Consul's)",
    ),
    row("PUT /v1/acl/token", ACL_WRITE),
    row("GET /v1/acl/token/self", Needs::KnownToken),
    row("GET /v1/acl/token/{id}", ACL_READ),
    row("PUT /v1/acl/token/{id}", ACL_WRITE),
    row("DELETE /v1/acl/token/{id}", ACL_WRITE),
    row("PUT /v1/acl/token/{id}/clone", ACL_WRITE),
    row("GET /v1/acl/tokens", ACL_READ),
    row("PUT /v1/acl/policy", ACL_WRITE),
    row("GET /v1/acl/policy/{id}", ACL_READ),
    row("PUT /v1/acl/policy/{id}", ACL_WRITE),
    row("DELETE /v1/acl/policy/{id}", ACL_WRITE),
    row("GET /v1/acl/policy/name/{*name}", ACL_READ),
    row("GET /v1/acl/policies", ACL_READ),
    row("PUT /v1/acl/role", ACL_WRITE),
    row("GET /v1/acl/role/{id}", ACL_READ),
    row("PUT /v1/acl/role/{id}", ACL_WRITE),
    row("DELETE /v1/acl/role/{id}", ACL_WRITE),
    row("GET /v1/acl/role/name/{*name}", ACL_READ),
    row("GET /v1/acl/roles", ACL_READ),
    row("PUT /v1/acl/auth-method", ACL_WRITE),
    row("GET /v1/acl/auth-method/{name}", ACL_READ),
    row("PUT /v1/acl/auth-method/{name}", ACL_WRITE),
    row("DELETE /v1/acl/auth-method/{name}", ACL_WRITE),
    row("GET /v1/acl/auth-methods", ACL_READ),
    row("PUT /v1/acl/binding-rule", ACL_WRITE),
    row("GET /v1/acl/binding-rule/{id}", ACL_READ),
    row("PUT /v1/acl/binding-rule/{id}", ACL_WRITE),
    row("DELETE /v1/acl/binding-rule/{id}", ACL_WRITE),
    row("GET /v1/acl/binding-rules", ACL_READ),
    noted(
        "POST /v1/acl/login",
        Needs::Nothing,
        "the bearer token is the credential",
    ),
    noted(
        "POST /v1/acl/logout",
        Needs::KnownToken,
        "deletes the request's own token, which login must have made",
    ),
    row("GET /v1/acl/templated-policies", ACL_READ),
    row("GET /v1/acl/templated-policy/name/{*name}", ACL_READ),
    noted(
        "POST /v1/acl/templated-policy/preview/{*name}",
        ACL_READ,
        "answered by the agent, as Consul's",
    ),
    noted(
        "POST /v1/internal/acl/authorize",
        Needs::Nothing,
        "answers what the request's own token may do",
    ),
    noted(
        "PUT /v1/acl/create",
        Needs::Nothing,
        "the legacy ACL API: 410 Gone for everyone",
    ),
    noted("PUT /v1/acl/update", Needs::Nothing, "legacy: 410"),
    noted("PUT /v1/acl/destroy/{id}", Needs::Nothing, "legacy: 410"),
    noted("GET /v1/acl/info/{id}", Needs::Nothing, "legacy: 410"),
    noted("PUT /v1/acl/clone/{id}", Needs::Nothing, "legacy: 410"),
    noted("GET /v1/acl/list", Needs::Nothing, "legacy: 410"),
];

/// Every server-port call (`ServerRpc`): what servers check themselves,
/// whoever calls (a client agent, another server, another datacenter).
pub const RPC: &[Door] = &[
    row("status_leader", Needs::Nothing),
    row("status_peers", Needs::Nothing),
    row("raft_configuration", OPERATOR_READ),
    row("raft_remove_peer", OPERATOR_WRITE),
    row("raft_transfer_leader", OPERATOR_WRITE),
    row("autopilot_health", OPERATOR_READ),
    row("autopilot_config", OPERATOR_READ),
    row("autopilot_set_config", OPERATOR_WRITE),
    row("operator_usage", OPERATOR_READ),
    row("snapshot_save", SNAPSHOT),
    row("snapshot_restore", SNAPSHOT),
    noted(
        "catalog_register",
        Needs::All(&[write(R::Service, Body("Service.Service"))]),
        "also node:write on Node when the registration changes the node, and service:write on a proxy's destination",
    ),
    noted(
        "catalog_deregister",
        Needs::All(&[write(R::Service, Stored("the service's name"))]),
        "node:write on Node to remove the node, or a check of the node",
    ),
    row("catalog_datacenters", Needs::Nothing),
    row(
        "catalog_nodes",
        Needs::Filtered(&[read(R::Node, Each("Node"))]),
    ),
    row(
        "catalog_services",
        Needs::Filtered(&[read(R::Service, Each("the service name"))]),
    ),
    row(
        "catalog_service_nodes",
        Needs::Filtered(&[read(R::Service, Body("Service")), read(R::Node, Each("Node"))]),
    ),
    row(
        "catalog_node_services",
        Needs::Filtered(&[read(R::Node, Body("node")), read(R::Service, Each("Service"))]),
    ),
    row(
        "health_node_checks",
        Needs::Filtered(&[read(R::Node, Body("node")), read(R::Service, Each("ServiceName"))]),
    ),
    row(
        "health_service_checks",
        Needs::Filtered(&[read(R::Service, Body("service")), read(R::Node, Each("Node"))]),
    ),
    row("health_checks_in_state", HEALTH_ROWS),
    row(
        "health_service_nodes",
        Needs::Filtered(&[read(R::Service, Body("Service")), read(R::Node, Each("Node"))]),
    ),
    row(
        "event_fire",
        Needs::All(&[write(R::Event, Body("Name"))]),
    ),
    row("coordinate_datacenters", Needs::Nothing),
    row(
        "coordinate_nodes",
        Needs::Filtered(&[read(R::Node, Each("Node"))]),
    ),
    row(
        "coordinate_node",
        Needs::All(&[read(R::Node, Body("node"))]),
    ),
    row(
        "coordinate_update",
        Needs::All(&[write(R::Node, Body("Node"))]),
    ),
    row("kv_get", Needs::All(&[read(R::Key, Body("key"))])),
    row(
        "kv_list",
        Needs::Filtered(&[read(R::Key, Each("Key"))]),
    ),
    row(
        "kv_keys",
        Needs::Filtered(&[read(R::Key, Each("the key"))]),
    ),
    noted(
        "kv_apply",
        Needs::All(&[write(R::Key, Body("Key"))]),
        "delete-tree: write on every key under the prefix",
    ),
    noted(
        "txn",
        Needs::EachOperation(&[write(R::Key, Body("KV.Key"))]),
        "reads need key:read and are filtered",
    ),
    noted(
        "prepared_query_apply",
        Needs::All(&[write(R::Query, Body("Name"))]),
        "an update or delete also on the stored name",
    ),
    row(
        "prepared_query_get",
        Needs::All(&[read(R::Query, Stored("the query's name"))]),
    ),
    row(
        "prepared_query_list",
        Needs::Filtered(&[read(R::Query, Each("Name"))]),
    ),
    noted(
        "prepared_query_execute",
        Needs::Filtered(&[
            read(R::Service, Each("Service.Service")),
            read(R::Node, Each("Node.Node")),
        ]),
        "filtered with the query's own token when it has one, else the caller's",
    ),
    noted(
        "prepared_query_execute_remote",
        Needs::Filtered(&[
            read(R::Service, Each("Service.Service")),
            read(R::Node, Each("Node.Node")),
        ]),
        "the token the calling datacenter chose (the query's or its caller's)",
    ),
    row(
        "prepared_query_explain",
        Needs::All(&[read(R::Query, Stored("the query's name"))]),
    ),
    row(
        "session_create",
        Needs::All(&[write(R::Session, Body("Node"))]),
    ),
    row(
        "session_destroy",
        Needs::All(&[write(R::Session, Stored("the session's node"))]),
    ),
    row(
        "session_renew",
        Needs::All(&[write(R::Session, Stored("the session's node"))]),
    ),
    row(
        "session_info",
        Needs::Filtered(&[read(R::Session, Each("Node"))]),
    ),
    row(
        "session_list",
        Needs::Filtered(&[read(R::Session, Each("Node"))]),
    ),
    row(
        "session_node",
        Needs::Filtered(&[read(R::Session, Each("Node"))]),
    ),
    row("config_apply", Needs::ByKind(Side::Write)),
    row("config_get", Needs::ByKind(Side::Read)),
    row("config_list", Needs::ByKind(Side::Read)),
    row("config_list_all", Needs::ByKind(Side::Read)),
    row("config_delete", Needs::ByKind(Side::Write)),
    row(
        "discovery_chain",
        Needs::All(&[read(R::Service, Body("service"))]),
    ),
    noted(
        "changes_since",
        Needs::Filtered(&[read(R::Service, Each("the watched service"))]),
        "indices only; a watched service the token cannot read never reports a change",
    ),
    row("ca_roots", Needs::Nothing),
    row("ca_config_get", OPERATOR_READ),
    row("ca_config_set", OPERATOR_WRITE),
    noted(
        "ca_sign",
        Needs::All(&[write(R::Service, Stored("the CSR's service"))]),
        "node:write for an agent's certificate; operator:write for a mesh gateway's or a server's",
    ),
    row("ca_sign_intermediate", OPERATOR_WRITE),
    row("federation_state_apply", OPERATOR_WRITE),
    row("federation_state_get", OPERATOR_READ),
    row("federation_state_list", OPERATOR_READ),
    row(
        "federation_state_mesh_gateways",
        Needs::Filtered(&[read(R::Service, Each("Service")), read(R::Node, Each("Node"))]),
    ),
    row("acl_bootstrap", Needs::Nothing),
    noted(
        "acl_replication_status",
        Needs::Nothing,
        "read by health checks; shows no secret (Consul's)",
    ),
    row("acl_token_set", ACL_WRITE),
    row("acl_token_get", ACL_READ),
    row("acl_token_self", Needs::KnownToken),
    row("acl_token_list", ACL_READ),
    row("acl_token_delete", ACL_WRITE),
    row("acl_token_clone", ACL_WRITE),
    row("acl_policy_set", ACL_WRITE),
    row("acl_policy_get", ACL_READ),
    row("acl_policy_list", ACL_READ),
    row("acl_policy_delete", ACL_WRITE),
    row("acl_role_set", ACL_WRITE),
    row("acl_role_get", ACL_READ),
    row("acl_role_list", ACL_READ),
    row("acl_role_delete", ACL_WRITE),
    row("acl_auth_method_set", ACL_WRITE),
    row("acl_auth_method_get", ACL_READ),
    row("acl_auth_method_list", ACL_READ),
    row("acl_auth_method_delete", ACL_WRITE),
    row("acl_binding_rule_set", ACL_WRITE),
    row("acl_binding_rule_get", ACL_READ),
    row("acl_binding_rule_list", ACL_READ),
    row("acl_binding_rule_delete", ACL_WRITE),
    noted(
        "acl_login",
        Needs::Nothing,
        "the bearer token is the credential; no ACL token is asked for",
    ),
    noted(
        "acl_logout",
        Needs::KnownToken,
        "deletes the request's own token, which login must have made",
    ),
    noted(
        "acl_resolve",
        Needs::KnownToken,
        "an agent resolving the token of a request it answers",
    ),
    noted(
        "acl_resolve_for",
        Needs::KnownToken,
        "a secondary's server resolving, in the primary, the token of a request it answers",
    ),
    row(
        "catalog_service_dump",
        Needs::Filtered(&[read(R::Service, Each("Service")), read(R::Node, Each("Node"))]),
    ),
    row(
        "catalog_service_dump_all",
        Needs::Filtered(&[read(R::Service, Each("Service")), read(R::Node, Each("Node"))]),
    ),
    noted(
        "catalog_node_dump",
        Needs::Filtered(&[read(R::Node, Each("Node"))]),
        "and within a node, its services and their checks by service:read",
    ),
    noted(
        "catalog_service_topology",
        Needs::All(&[read(R::Service, Body("service"))]),
        "instances of its neighbours filtered by service:read and node:read",
    ),
    row("catalog_overview", OPERATOR_READ),
    noted(
        "acl_authorize",
        Needs::Nothing,
        "answers what the request's own token may do",
    ),
    row(
        "intention_apply",
        Needs::All(&[write(R::Intention, Body("DestinationName"))]),
    ),
    row(
        "intention_list",
        Needs::Filtered(&[read(R::Intention, Each("DestinationName"))]),
    ),
    row(
        "intention_get",
        Needs::All(&[read(R::Intention, Stored("the intention's destination"))]),
    ),
    row(
        "intention_match",
        Needs::All(&[read(R::Intention, Body("names"))]),
    ),
    row(
        "intention_check",
        Needs::All(&[read(R::Service, Body("destination"))]),
    ),
];

const MESH_WRITE: Need = write(R::Mesh, Name::None);
const SERVICE_READ: Option<Need> = Some(read(R::Service, Body("Name")));
const SERVICE_WRITE: Need = write(R::Service, Body("Name"));

/// What each config entry kind needs (Consul's `CanRead`/`CanWrite`).
pub const CONFIG_ENTRY_KINDS: &[KindNeeds] = &[
    KindNeeds {
        kind: "proxy-defaults",
        read: None,
        write: MESH_WRITE,
    },
    KindNeeds {
        kind: "mesh",
        read: None,
        write: MESH_WRITE,
    },
    KindNeeds {
        kind: "service-defaults",
        read: SERVICE_READ,
        write: SERVICE_WRITE,
    },
    KindNeeds {
        kind: "service-router",
        read: SERVICE_READ,
        write: SERVICE_WRITE,
    },
    KindNeeds {
        kind: "service-splitter",
        read: SERVICE_READ,
        write: SERVICE_WRITE,
    },
    KindNeeds {
        kind: "service-resolver",
        read: SERVICE_READ,
        write: SERVICE_WRITE,
    },
    KindNeeds {
        kind: "service-intentions",
        read: Some(read(R::Intention, Body("Name"))),
        write: write(R::Intention, Body("Name")),
    },
    KindNeeds {
        kind: "ingress-gateway",
        read: SERVICE_READ,
        write: MESH_WRITE,
    },
    KindNeeds {
        kind: "terminating-gateway",
        read: SERVICE_READ,
        write: MESH_WRITE,
    },
    KindNeeds {
        kind: "exported-services",
        read: Some(read(R::Mesh, Name::None)),
        write: MESH_WRITE,
    },
];

/// The row of an HTTP route (`method`, `path` as registered), ignoring
/// `?param` variants.
pub fn http_door(method: &str, path: &str) -> Option<&'static Door> {
    HTTP.iter().find(|d| {
        let base = d.door.split('?').next().unwrap_or(d.door);
        base.split_once(' ') == Some((method, path))
    })
}

/// The names the tests that exercise every row write their rules for
/// and make their fixtures with (the HTTP half and the server-port half
/// share them).
pub mod example {
    use crate::rules::Resource;

    /// The node (and agent) name.
    pub const NODE: &str = "fx-node";
    /// The service name.
    pub const SERVICE: &str = "fx-web";
    /// The key.
    pub const KEY: &str = "app/config";
    /// The user event name.
    pub const EVENT: &str = "deploy";
    /// The prepared query's name.
    pub const QUERY: &str = "fx-query";

    /// The name a rule on `resource` is written for (`""` for scalars).
    pub fn name_for(resource: Resource) -> &'static str {
        match resource {
            Resource::Service | Resource::Intention => SERVICE,
            Resource::Node | Resource::Agent | Resource::Session => NODE,
            Resource::Key => KEY,
            Resource::Event => EVENT,
            Resource::Query => QUERY,
            _ => "",
        }
    }
}

/// The row of a server-port call.
pub fn rpc_door(call: &str) -> Option<&'static Door> {
    RPC.iter().find(|d| d.door == call)
}

/// What a config entry kind needs (`None` for a kind not in the table).
pub fn config_entry_needs(kind: &str) -> Option<&'static KindNeeds> {
    CONFIG_ENTRY_KINDS.iter().find(|k| k.kind == kind)
}
