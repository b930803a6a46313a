//! ACL wire shapes: tokens, policies and roles as Consul's `/v1/acl/*`
//! shows them, with the links and identities a token or role carries.

use serde::{Deserialize, Serialize};

/// The AccessorID of the anonymous token.
pub const ANONYMOUS_TOKEN_ID: &str = "00000000-0000-0000-0000-000000000002";
/// The SecretID of the anonymous token.
pub const ANONYMOUS_TOKEN_SECRET: &str = "anonymous";
/// The ID of the builtin `global-management` policy.
pub const GLOBAL_MANAGEMENT_POLICY_ID: &str = "00000000-0000-0000-0000-000000000001";
/// Its name.
pub const GLOBAL_MANAGEMENT_POLICY_NAME: &str = "global-management";
/// The ID of the builtin `builtin/global-read-only` policy.
pub const GLOBAL_READ_ONLY_POLICY_ID: &str = "00000000-0000-0000-0000-000000000002";
/// Its name.
pub const GLOBAL_READ_ONLY_POLICY_NAME: &str = "builtin/global-read-only";

/// A link from a token or role to a policy or role, by ID (names are
/// filled in at read time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclLink {
    /// The linked object's ID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
}

/// A service identity: write on the service (and its sidecar), read for
/// discovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ServiceIdentity {
    /// The service.
    #[serde(default)]
    pub service_name: String,
    /// Where it applies (every datacenter when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datacenters: Vec<String>,
}

/// A node identity: write on one node of one datacenter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct NodeIdentity {
    /// The node.
    #[serde(default)]
    pub node_name: String,
    /// Its datacenter.
    #[serde(default)]
    pub datacenter: String,
}

/// The variables a templated policy is filled with. Consul answers with
/// a lower-case `name` (its struct's JSON tag) and reads either case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TemplateVariables {
    /// The name the template's `{{.Name}}` becomes.
    #[serde(rename = "name", alias = "Name", default)]
    pub name: String,
}

/// A link to one of Consul's built-in rule templates, filled with its
/// variables (`builtin/service` for `web`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct TemplatedPolicy {
    /// Consul's fixed ID of the template (set by the server).
    #[serde(
        rename = "TemplateID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub template_id: String,
    /// The template (`builtin/service`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template_name: String,
    /// Its variables (none for templates that take none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_variables: Option<TemplateVariables>,
    /// Where it applies (every datacenter when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datacenters: Vec<String>,
}

/// An ACL token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclToken {
    /// The public identifier.
    #[serde(rename = "AccessorID", default)]
    pub accessor_id: String,
    /// The secret presented with requests.
    #[serde(rename = "SecretID", default)]
    pub secret_id: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Linked policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<AclLink>,
    /// Linked roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<AclLink>,
    /// Service identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_identities: Vec<ServiceIdentity>,
    /// Node identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_identities: Vec<NodeIdentity>,
    /// Templated policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templated_policies: Vec<TemplatedPolicy>,
    /// Valid only in the datacenter that made it.
    #[serde(default)]
    pub local: bool,
    /// The auth method that made it (login tokens).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub auth_method: String,
    /// When it stops being valid (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Input only: a lifetime from now (`"5m"` or nanoseconds).
    #[serde(rename = "ExpirationTTL", default, skip_serializing)]
    pub expiration_ttl: Option<serde_json::Value>,
    /// When it was made (RFC 3339).
    #[serde(default)]
    pub create_time: String,
    /// A digest of its contents (base64).
    #[serde(default)]
    pub hash: String,
    /// Raft index of creation.
    #[serde(default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(default)]
    pub modify_index: u64,
}

/// An ACL policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclPolicy {
    /// Its ID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Its unique name.
    #[serde(default)]
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// The rules (HCL or JSON text).
    #[serde(default)]
    pub rules: String,
    /// Where it applies (every datacenter when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datacenters: Vec<String>,
    /// A digest of its contents (base64).
    #[serde(default)]
    pub hash: String,
    /// Raft index of creation.
    #[serde(default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(default)]
    pub modify_index: u64,
}

/// An ACL role: a named set of policies and identities tokens link to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclRole {
    /// Its ID.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// Its unique name.
    #[serde(default)]
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Linked policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<AclLink>,
    /// Service identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_identities: Vec<ServiceIdentity>,
    /// Node identities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_identities: Vec<NodeIdentity>,
    /// Templated policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templated_policies: Vec<TemplatedPolicy>,
    /// A digest of its contents (base64).
    #[serde(default)]
    pub hash: String,
    /// Raft index of creation.
    #[serde(default)]
    pub create_index: u64,
    /// Raft index of the last change.
    #[serde(default)]
    pub modify_index: u64,
}

/// The filters of `GET /v1/acl/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AclTokenFilter {
    /// Only tokens linking this policy ID.
    pub policy: String,
    /// Only tokens linking this role ID.
    pub role: String,
    /// Only tokens made by this auth method.
    pub auth_method: String,
    /// Only tokens with a service identity for this service.
    pub service_name: String,
    /// Only global tokens (what a secondary replicates; an older server
    /// ignores it, so the replicator filters again).
    #[serde(default)]
    pub global_only: bool,
}

/// One question of `POST /v1/internal/acl/authorize`, answered in `Allow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct AclAuthorizationCheck {
    /// The resource word (`key`, `service`, `operator`, ...).
    #[serde(default)]
    pub resource: String,
    /// The name within it (empty for scalar resources).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub segment: String,
    /// `read`, `list` or `write`.
    #[serde(default)]
    pub access: String,
    /// The answer (absent in questions).
    #[serde(default)]
    pub allow: bool,
}

/// A token resolved for an agent, which builds its authorizer from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AclIdentity {
    /// The token's AccessorID.
    pub accessor_id: String,
    /// The rules of every policy the token carries in this datacenter.
    pub rules: Vec<String>,
    /// Whether the token is local to the datacenter that answered.
    #[serde(default)]
    pub local: bool,
    /// The datacenter that answered (where a local token lives).
    #[serde(default)]
    pub source_datacenter: String,
    /// When the token stops being valid (`ExpirationTime`, RFC 3339).
    #[serde(default)]
    pub expiration_time: Option<String>,
}

/// The time Consul shows for "never" (Go's zero `time.Time`).
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// `GET /v1/acl/replication`: what the leader of this datacenter's
/// replication of policies, roles and (optionally) tokens is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AclReplicationStatus {
    /// Whether this datacenter replicates ACLs (a secondary with ACLs on).
    pub enabled: bool,
    /// Whether the leader's replicators run.
    pub running: bool,
    /// The datacenter replicated from (the primary).
    pub source_datacenter: String,
    /// `policies` (policies and roles) or `tokens` (and global tokens).
    pub replication_type: String,
    /// The primary's policies index replicated up to.
    pub replicated_index: u64,
    /// The primary's roles index replicated up to.
    pub replicated_role_index: u64,
    /// The primary's tokens index replicated up to.
    pub replicated_token_index: u64,
    /// When a round last succeeded (RFC 3339, UTC, whole seconds).
    pub last_success: String,
    /// When a round last failed.
    pub last_error: String,
    /// Why it failed.
    pub last_error_message: String,
}

impl Default for AclReplicationStatus {
    fn default() -> Self {
        AclReplicationStatus {
            enabled: false,
            running: false,
            source_datacenter: String::new(),
            replication_type: String::new(),
            replicated_index: 0,
            replicated_role_index: 0,
            replicated_token_index: 0,
            last_success: ZERO_TIME.into(),
            last_error: ZERO_TIME.into(),
            last_error_message: String::new(),
        }
    }
}
