//! The rules language of ACL policies, HCL or JSON as Consul takes them:
//! labelled resources with exact and `_prefix` forms (`key "a/b" {
//! policy = "write" }`, `service_prefix "" { policy = "read" intentions =
//! "write" }`) and scalar ones (`operator = "read"`), parsed into a flat
//! list of rules with Consul's validation errors.

use serde_json::{Map, Value};

/// A level a rule grants: `write` ⊇ `list` ⊇ `read`; `deny` stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Nothing, and no lower rule or default may grant it.
    Deny,
    /// Read.
    Read,
    /// Read and list (keys only).
    List,
    /// Everything.
    Write,
}

impl Level {
    /// The level a rule's `policy` names; `list` only where `allow_list`.
    pub fn parse(text: &str, allow_list: bool) -> Option<Level> {
        match text {
            "deny" => Some(Level::Deny),
            "read" => Some(Level::Read),
            "list" if allow_list => Some(Level::List),
            "write" => Some(Level::Write),
            _ => None,
        }
    }

    /// Which of two levels for the same rule wins when policies merge:
    /// `deny`, then `write`, `list`, `read`.
    pub fn precedence(self) -> u8 {
        match self {
            Level::Deny => 4,
            Level::Write => 3,
            Level::List => 2,
            Level::Read => 1,
        }
    }

    /// The stronger of two levels by [`Level::precedence`].
    pub fn merge(self, other: Level) -> Level {
        if other.precedence() > self.precedence() {
            other
        } else {
            self
        }
    }

    /// The rules-language word.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Deny => "deny",
            Level::Read => "read",
            Level::List => "list",
            Level::Write => "write",
        }
    }
}

/// The resources rules name (the words of Consul's permission errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// The ACL system itself (scalar).
    Acl,
    /// Agents, by node name.
    Agent,
    /// User events, by name.
    Event,
    /// Intentions, by destination service (from service rules).
    Intention,
    /// KV keys.
    Key,
    /// The gossip keyring (scalar).
    Keyring,
    /// Mesh-wide configuration (scalar; falls back to operator).
    Mesh,
    /// Catalog nodes.
    Node,
    /// Cluster operations (scalar).
    Operator,
    /// Peerings (scalar; falls back to operator).
    Peering,
    /// Prepared queries, by name.
    Query,
    /// Services.
    Service,
    /// Sessions, by node name.
    Session,
}

impl Resource {
    /// The word in permission errors and `/v1/internal/acl/authorize`.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Acl => "acl",
            Resource::Agent => "agent",
            Resource::Event => "event",
            Resource::Intention => "intention",
            Resource::Key => "key",
            Resource::Keyring => "keyring",
            Resource::Mesh => "mesh",
            Resource::Node => "node",
            Resource::Operator => "operator",
            Resource::Peering => "peering",
            Resource::Query => "query",
            Resource::Service => "service",
            Resource::Session => "session",
        }
    }

    /// The resource a word names.
    pub fn parse(word: &str) -> Option<Resource> {
        Some(match word {
            "acl" => Resource::Acl,
            "agent" => Resource::Agent,
            "event" => Resource::Event,
            "intention" => Resource::Intention,
            "key" => Resource::Key,
            "keyring" => Resource::Keyring,
            "mesh" => Resource::Mesh,
            "node" => Resource::Node,
            "operator" => Resource::Operator,
            "peering" => Resource::Peering,
            "query" => Resource::Query,
            "service" => Resource::Service,
            "session" => Resource::Session,
            _ => return None,
        })
    }

    /// Scalar resources take one level, not labelled blocks.
    pub fn is_scalar(self) -> bool {
        matches!(
            self,
            Resource::Acl
                | Resource::Keyring
                | Resource::Mesh
                | Resource::Operator
                | Resource::Peering
        )
    }
}

/// One labelled rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// What it governs.
    pub resource: Resource,
    /// The name (exact) or the prefix it matches.
    pub label: String,
    /// A `_prefix` rule.
    pub prefix: bool,
    /// The level it grants.
    pub level: Level,
}

/// A parsed policy: its scalar levels and its labelled rules (intention
/// rules derived from service rules included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// `acl`, `keyring`, `mesh`, `operator`, `peering`.
    pub scalars: Vec<(Resource, Level)>,
    /// Every labelled rule.
    pub rules: Vec<Rule>,
}

/// The labelled blocks: the rules word, its resource, whether it is the
/// prefix form, the Go type Consul names in its errors and that type's
/// label field.
const BLOCKS: &[(&str, Resource, bool, &str, &str)] = &[
    ("agent", Resource::Agent, false, "AgentRule", "Node"),
    ("agent_prefix", Resource::Agent, true, "AgentRule", "Node"),
    ("event", Resource::Event, false, "EventRule", "Event"),
    ("event_prefix", Resource::Event, true, "EventRule", "Event"),
    ("key", Resource::Key, false, "KeyRule", "Prefix"),
    ("key_prefix", Resource::Key, true, "KeyRule", "Prefix"),
    ("node", Resource::Node, false, "NodeRule", "Name"),
    ("node_prefix", Resource::Node, true, "NodeRule", "Name"),
    (
        "query",
        Resource::Query,
        false,
        "PreparedQueryRule",
        "Prefix",
    ),
    (
        "query_prefix",
        Resource::Query,
        true,
        "PreparedQueryRule",
        "Prefix",
    ),
    ("service", Resource::Service, false, "ServiceRule", "Name"),
    (
        "service_prefix",
        Resource::Service,
        true,
        "ServiceRule",
        "Name",
    ),
    ("session", Resource::Session, false, "SessionRule", "Node"),
    (
        "session_prefix",
        Resource::Session,
        true,
        "SessionRule",
        "Node",
    ),
];

/// Enterprise scopes a Community Edition policy may carry; Consul CE
/// ignores them, and so does Legate.
const ENTERPRISE_BLOCKS: &[&str] = &[
    "namespace",
    "namespace_prefix",
    "partition",
    "partition_prefix",
];

/// Parses policy rules (HCL or JSON). Errors are Consul's texts.
pub fn parse(text: &str) -> Result<Rules, String> {
    let document = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Value>(text)
            .map_err(|e| format!("Failed to parse ACL rules: {e}"))?
    } else {
        legate_hcl::parse(text).map_err(|e| format!("Failed to parse ACL rules: {e}"))?
    };
    let Value::Object(top) = document else {
        return Err("Failed to parse ACL rules: the rules are not an object".into());
    };
    let mut rules = Rules::default();
    for (word, value) in &top {
        if ENTERPRISE_BLOCKS.contains(&word.as_str()) {
            continue;
        }
        if let Some(resource) = Resource::parse(word).filter(|r| r.is_scalar()) {
            let Some(text) = scalar_text(value) else {
                return Err(format!(
                    "Failed to parse ACL rules: {word}: expected a string such as \"read\""
                ));
            };
            let level = Level::parse(&text, false)
                .ok_or_else(|| format!("Invalid {word} policy: {text:?}"))?;
            rules.scalars.push((resource, level));
            continue;
        }
        let Some(&(_, resource, prefix, go_type, label_field)) =
            BLOCKS.iter().find(|(w, ..)| w == word)
        else {
            return Err(format!(
                "Failed to parse ACL rules: unknown resource {word:?}"
            ));
        };
        for (label, body) in labelled_blocks(word, value)? {
            let field = |name: &str| -> Result<String, String> {
                match body.get(name) {
                    None => Ok(String::new()),
                    Some(v) => scalar_text(v).ok_or_else(|| {
                        format!(
                            "Failed to parse ACL rules: {word} {label:?}: {name} must be a string"
                        )
                    }),
                }
            };
            let policy = field("policy")?;
            let intentions = if resource == Resource::Service {
                field("intentions")?
            } else {
                String::new()
            };
            let described = if resource == Resource::Service {
                format!(
                    "&acl.{go_type}{{{label_field}:{label:?}, Policy:{policy:?}, Intentions:{intentions:?}, EnterpriseRule:acl.EnterpriseRule{{}}}}"
                )
            } else {
                format!(
                    "&acl.{go_type}{{{label_field}:{label:?}, Policy:{policy:?}, EnterpriseRule:acl.EnterpriseRule{{}}}}"
                )
            };
            let level = Level::parse(&policy, resource == Resource::Key)
                .ok_or_else(|| format!("Invalid {} policy: {described}", resource.as_str()))?;
            rules.rules.push(Rule {
                resource,
                label: label.clone(),
                prefix,
                level,
            });
            if resource == Resource::Service {
                let intention_level = if intentions.is_empty() {
                    // Omitted: read with read or write, deny with deny.
                    if level == Level::Deny {
                        Level::Deny
                    } else {
                        Level::Read
                    }
                } else {
                    Level::parse(&intentions, false)
                        .ok_or_else(|| format!("Invalid service intentions policy: {described}"))?
                };
                rules.rules.push(Rule {
                    resource: Resource::Intention,
                    label,
                    prefix,
                    level: intention_level,
                });
            }
        }
    }
    Ok(rules)
}

/// A scalar's text (a string, or a list of one string as HCL1 gives for
/// a key written twice, which Consul's decoder also takes: the last wins).
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items.last().and_then(scalar_text),
        _ => None,
    }
}

/// One labelled block: its label and its body.
type Block = (String, Map<String, Value>);

/// The (label, body) pairs of a labelled resource: an object of label to
/// body, or a list of such objects (HCL1's repeated blocks).
fn labelled_blocks(word: &str, value: &Value) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let objects: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    for object in objects {
        let Value::Object(labels) = object else {
            return Err(format!(
                "Failed to parse ACL rules: {word} needs a label and a block, such as {word} \"name\" {{ policy = \"read\" }}"
            ));
        };
        for (label, body) in labels {
            let bodies: Vec<&Value> = match body {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            for body in bodies {
                let Value::Object(body) = body else {
                    return Err(format!(
                        "Failed to parse ACL rules: {word} {label:?} needs a block such as {{ policy = \"read\" }}"
                    ));
                };
                out.push((label.clone(), body.clone()));
            }
        }
    }
    Ok(out)
}
