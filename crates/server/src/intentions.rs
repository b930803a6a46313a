//! Intentions over `service-intentions` config entries: the legacy
//! ID-based API and the by-name API read and write the same entries (one
//! per destination), so the two paths can never disagree. Writes are
//! read-modify-write with check-and-set on the entry, retried on conflict.

use std::collections::BTreeMap;

use legate_chain::intentions::{self as eval, check_intentions, Action};
use legate_state::{Command, CommandResult, Table, Tables};
use legate_types::config_entry::{self, ConfigEntry};
use legate_types::intention::{Intention, IntentionCheck, IntentionLookup, IntentionOp, MatchBy};
use legate_types::{Queried, QueryOptions, RaftIndex, RpcError, WriteOptions};
use serde_json::{json, Map, Value};

use crate::{Access, Resource, Server};

/// The kind intentions are stored as.
pub const INTENTIONS_KIND: &str = "service-intentions";
/// System metadata key recording that intentions live in config entries.
pub const INTENTION_FORMAT_KEY: &str = "intention-format";
/// Its value once every server supports intentions as config entries.
pub const INTENTION_FORMAT_CONFIG_ENTRY: &str = "config-entry";
/// Consul's error while a cluster has not switched yet.
pub const INTENTIONS_READ_ONLY: &str =
    "Intentions are read only while being upgraded to config entries";

const MAX_CAS_RETRIES: usize = 8;

fn text(m: &Map<String, Value>, key: &str) -> String {
    m.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

fn or_default_ns(ns: String) -> String {
    if ns.is_empty() {
        "default".into()
    } else {
        ns
    }
}

/// Flattens one entry into intentions, in its source order (Consul's `ToIntentions`).
pub fn intentions_of(entry: &ConfigEntry) -> Vec<Intention> {
    let entry_meta: BTreeMap<String, String> = entry
        .body
        .get("Meta")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    let destination_ns = or_default_ns(text(&entry.body, "Namespace"));
    let sources = entry
        .body
        .get("Sources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    sources
        .iter()
        .filter_map(Value::as_object)
        .map(|s| {
            let legacy_id = text(s, "LegacyID");
            let meta = if legacy_id.is_empty() {
                entry_meta.clone()
            } else {
                s.get("LegacyMeta")
                    .and_then(|m| serde_json::from_value(m.clone()).ok())
                    .unwrap_or_default()
            };
            let name = text(s, "Name");
            Intention {
                created_at: s
                    .get("LegacyCreateTime")
                    .and_then(Value::as_str)
                    .map(String::from),
                updated_at: s
                    .get("LegacyUpdateTime")
                    .and_then(Value::as_str)
                    .map(String::from),
                id: legacy_id,
                description: text(s, "Description"),
                source_ns: or_default_ns(text(s, "Namespace")),
                precedence: s
                    .get("Precedence")
                    .and_then(Value::as_i64)
                    .unwrap_or_else(|| eval::precedence("default", &name, "default", &entry.name)),
                source_name: name,
                destination_ns: destination_ns.clone(),
                destination_name: entry.name.clone(),
                source_peer: text(s, "Peer"),
                source_type: {
                    let t = text(s, "Type");
                    if t.is_empty() {
                        "consul".into()
                    } else {
                        t
                    }
                },
                action: text(s, "Action"),
                permissions: s
                    .get("Permissions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                meta,
                raft: entry.raft,
                ..Default::default()
            }
        })
        .collect()
}

/// Consul's order: precedence (highest first), then source, then destination.
pub fn sort_intentions(list: &mut [Intention]) {
    list.sort_by(|a, b| {
        b.precedence.cmp(&a.precedence).then_with(|| {
            (
                &a.source_ns,
                &a.source_name,
                &a.destination_ns,
                &a.destination_name,
            )
                .cmp(&(
                    &b.source_ns,
                    &b.source_name,
                    &b.destination_ns,
                    &b.destination_name,
                ))
        })
    });
}

pub(crate) fn all_intentions(tables: &Tables) -> (u64, Vec<Intention>) {
    let (index, entries) = tables.config_entries_of_kind(INTENTIONS_KIND);
    let mut list: Vec<Intention> = entries.iter().flat_map(intentions_of).collect();
    sort_intentions(&mut list);
    (index, list)
}

fn wildcard_rule(field: &str, value: &str) -> Result<(), RpcError> {
    if value.contains('*') && value != "*" {
        return Err(RpcError::BadRequest(format!(
            "{field}: wildcard character '*' cannot be used with partial values"
        )));
    }
    Ok(())
}

/// Consul's `Intention.Validate` for legacy writes.
fn validate_legacy(intention: &Intention) -> Result<(), RpcError> {
    let bad = |m: &str| Err(RpcError::BadRequest(m.to_string()));
    if intention.source_name.is_empty() {
        return bad("SourceName must be set");
    }
    if intention.destination_name.is_empty() {
        return bad("DestinationName must be set");
    }
    wildcard_rule("SourceName", &intention.source_name)?;
    wildcard_rule("DestinationName", &intention.destination_name)?;
    if intention.description.chars().count() > 512 {
        return bad("Description exceeds maximum length 512");
    }
    if intention.meta.len() > 64 {
        return bad("Meta exceeds maximum element count 64");
    }
    for (k, v) in &intention.meta {
        if k.len() > 128 {
            return Err(RpcError::BadRequest(format!(
                "Meta key {k:?} exceeds maximum length 128"
            )));
        }
        if v.len() > 512 {
            return Err(RpcError::BadRequest(format!(
                "Meta value for key {k:?} exceeds maximum length 512"
            )));
        }
    }
    if !intention.permissions.is_empty() {
        return bad("Permissions must not be set when using the legacy APIs");
    }
    if Action::parse(&intention.action).is_none() {
        return bad("Action must be set to 'allow' or 'deny'");
    }
    if !intention.source_type.is_empty() && intention.source_type != "consul" {
        return bad("SourceType must be set to 'consul'");
    }
    for (field, value) in [
        ("SourceNS", &intention.source_ns),
        ("DestinationNS", &intention.destination_ns),
    ] {
        if !value.is_empty() && value != "default" {
            return Err(RpcError::BadRequest(format!(
                "{field}: namespaces other than \"default\" need Consul Enterprise"
            )));
        }
    }
    if !intention.source_partition.is_empty() && intention.source_partition != "default" {
        return bad("Cannot specify a source partition with this endpoint");
    }
    if !intention.destination_partition.is_empty() && intention.destination_partition != "default" {
        return bad("Cannot specify a destination partition with this endpoint");
    }
    if !intention.source_peer.is_empty() {
        return bad(
            "SourcePeer field is not supported on this endpoint. Use config entries instead",
        );
    }
    Ok(())
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A legacy source: what `POST`/`PUT :id` store.
fn legacy_source(intention: &Intention, id: &str, created: &str) -> Value {
    let mut m = Map::new();
    m.insert("Name".into(), json!(intention.source_name));
    m.insert(
        "Action".into(),
        json!(intention.action.to_ascii_lowercase()),
    );
    if !intention.description.is_empty() {
        m.insert("Description".into(), json!(intention.description));
    }
    m.insert("Type".into(), json!("consul"));
    m.insert("LegacyID".into(), json!(id));
    m.insert("LegacyMeta".into(), json!(intention.meta));
    m.insert("LegacyCreateTime".into(), json!(created));
    m.insert("LegacyUpdateTime".into(), json!(now()));
    Value::Object(m)
}

fn sources_mut(entry: &mut ConfigEntry) -> &mut Vec<Value> {
    let sources = entry
        .body
        .entry("Sources")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !sources.is_array() {
        *sources = Value::Array(Vec::new());
    }
    match sources {
        Value::Array(list) => list,
        _ => unreachable!("just made an array"),
    }
}

fn source_name(v: &Value) -> &str {
    v.get("Name").and_then(Value::as_str).unwrap_or("")
}

fn legacy_id(v: &Value) -> &str {
    v.get("LegacyID").and_then(Value::as_str).unwrap_or("")
}

fn new_entry(destination: &str) -> ConfigEntry {
    let mut body = Map::new();
    body.insert("Sources".into(), Value::Array(Vec::new()));
    ConfigEntry {
        kind: INTENTIONS_KIND.into(),
        name: destination.into(),
        body,
        raft: RaftIndex::default(),
    }
}

/// What one mutation does to the destination's entry.
enum Outcome {
    Write(ConfigEntry),
    Delete,
    Unchanged,
}

impl Server {
    /// Whether this cluster stores intentions as config entries yet.
    pub(crate) fn intentions_writable(&self) -> Result<(), RpcError> {
        let tables = self.store.read();
        if tables.system_metadata(INTENTION_FORMAT_KEY) == Some(INTENTION_FORMAT_CONFIG_ENTRY) {
            Ok(())
        } else {
            Err(RpcError::Internal(INTENTIONS_READ_ONLY.into()))
        }
    }

    /// Reads the destination's entry, applies `mutate`, and writes the
    /// result with check-and-set, retrying when another write got there first.
    async fn mutate_intentions(
        &self,
        destination: &str,
        legacy_write: bool,
        mutate: impl Fn(Option<&ConfigEntry>) -> Result<Outcome, RpcError>,
    ) -> Result<(), RpcError> {
        for _ in 0..MAX_CAS_RETRIES {
            let current = self
                .store
                .read()
                .config_entry(INTENTIONS_KIND, destination)
                .1;
            let cas = current.as_ref().map(|e| e.raft.modify_index).unwrap_or(0);
            let command = match mutate(current.as_ref())? {
                Outcome::Unchanged => return Ok(()),
                Outcome::Delete => {
                    self.check_chains_after(INTENTIONS_KIND, destination, None)?;
                    Command::ConfigEntryDelete {
                        kind: INTENTIONS_KIND.into(),
                        name: destination.into(),
                        cas: Some(cas),
                    }
                }
                Outcome::Write(mut entry) => {
                    legate_chain::normalize_intentions(&mut entry, legacy_write);
                    config_entry::validate(&entry).map_err(RpcError::BadRequest)?;
                    legate_chain::entries_more::validate_intentions_entry(&entry, legacy_write)
                        .map_err(RpcError::BadRequest)?;
                    self.check_chains_after(INTENTIONS_KIND, destination, Some(&entry))?;
                    Command::ConfigEntrySet {
                        entry: Box::new(entry),
                        cas: Some(cas),
                    }
                }
            };
            match self.write(command).await? {
                (_, CommandResult::Applied(true)) => return Ok(()),
                (_, CommandResult::Applied(false)) => continue,
                (_, other) => {
                    return Err(RpcError::Internal(format!(
                        "unexpected intention write result {other:?}"
                    )))
                }
            }
        }
        Err(RpcError::Internal(
            "intention write kept conflicting with other writes; try again".into(),
        ))
    }

    fn find_by_id(&self, id: &str) -> Option<Intention> {
        let tables = self.store.read();
        all_intentions(&tables).1.into_iter().find(|i| i.id == id)
    }

    /// `Intention.Apply`.
    pub(crate) async fn intention_write(
        &self,
        opts: &WriteOptions,
        op: IntentionOp,
    ) -> Result<String, RpcError> {
        // A secondary refuses while its own datacenter (or the primary's)
        // has not switched to config entries, then forwards.
        self.intentions_writable()?;
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.intention_apply(&routed, op).await;
        }
        self.check_datacenter(&opts.datacenter)?;
        match op {
            IntentionOp::Create(intention) => {
                if !intention.id.is_empty() {
                    return Err(RpcError::BadRequest(
                        "ID must be empty when creating a new intention".into(),
                    ));
                }
                validate_legacy(&intention)?;
                self.authorize(
                    &opts.token,
                    Resource::Intention(intention.destination_name.clone()),
                    Access::Write,
                )?;
                let id = uuid::Uuid::new_v4().to_string();
                let created = now();
                let destination = intention.destination_name.clone();
                self.mutate_intentions(&destination, true, |current| {
                    let mut entry = current.cloned().unwrap_or_else(|| new_entry(&destination));
                    guard_legacy_ownership(&entry)?;
                    sources_mut(&mut entry).push(legacy_source(&intention, &id, &created));
                    Ok(Outcome::Write(entry))
                })
                .await?;
                Ok(id)
            }
            IntentionOp::Update(intention) => {
                let id = intention.id.clone();
                validate_legacy(&intention)?;
                let existing = self.find_by_id(&id).ok_or_else(|| {
                    RpcError::NotFound(format!("Cannot modify non-existent intention: '{id}'"))
                })?;
                if existing.destination_name != intention.destination_name {
                    return Err(RpcError::BadRequest(
                        "Cannot modify Destination partition/namespace/name for an intention once it exists.".into(),
                    ));
                }
                self.authorize(
                    &opts.token,
                    Resource::Intention(existing.destination_name.clone()),
                    Access::Write,
                )?;
                let destination = existing.destination_name.clone();
                self.mutate_intentions(&destination, true, |current| {
                    let mut entry = current.cloned().ok_or_else(|| {
                        RpcError::NotFound(format!("Cannot modify non-existent intention: '{id}'"))
                    })?;
                    guard_legacy_ownership(&entry)?;
                    let sources = sources_mut(&mut entry);
                    let slot =
                        sources
                            .iter_mut()
                            .find(|s| legacy_id(s) == id)
                            .ok_or_else(|| {
                                RpcError::NotFound(format!(
                                    "Cannot modify non-existent intention: '{id}'"
                                ))
                            })?;
                    let created = slot
                        .get("LegacyCreateTime")
                        .and_then(Value::as_str)
                        .map(String::from)
                        .unwrap_or_else(now);
                    *slot = legacy_source(&intention, &id, &created);
                    Ok(Outcome::Write(entry))
                })
                .await?;
                Ok(id)
            }
            IntentionOp::Delete(id) => {
                let existing = self.find_by_id(&id).ok_or_else(|| {
                    RpcError::NotFound(format!("Cannot delete non-existent intention: '{id}'"))
                })?;
                self.authorize(
                    &opts.token,
                    Resource::Intention(existing.destination_name.clone()),
                    Access::Write,
                )?;
                self.mutate_intentions(&existing.destination_name, true, |current| {
                    let Some(entry) = current else {
                        return Ok(Outcome::Unchanged);
                    };
                    guard_legacy_ownership(entry)?;
                    let mut entry = entry.clone();
                    let sources = sources_mut(&mut entry);
                    sources.retain(|s| legacy_id(s) != id);
                    Ok(if sources.is_empty() {
                        Outcome::Delete
                    } else {
                        Outcome::Write(entry)
                    })
                })
                .await?;
                Ok(id)
            }
            IntentionOp::Upsert(intention) => {
                if !intention.id.is_empty() {
                    return Err(RpcError::BadRequest("ID must not be specified".into()));
                }
                let (source, destination) = (
                    intention.source_name.clone(),
                    intention.destination_name.clone(),
                );
                self.authorize(
                    &opts.token,
                    Resource::Intention(destination.clone()),
                    Access::Write,
                )?;
                self.mutate_intentions(&destination, false, |current| {
                    let entry_meta: BTreeMap<String, String> = current
                        .and_then(|e| e.body.get("Meta"))
                        .and_then(|m| serde_json::from_value(m.clone()).ok())
                        .unwrap_or_default();
                    if !intention.meta.is_empty() {
                        if current.is_none() {
                            return Err(RpcError::BadRequest("Meta must not be specified".into()));
                        }
                        if intention.meta != entry_meta {
                            return Err(RpcError::BadRequest(
                                "Meta must not be specified, or should be unchanged during an update."
                                    .into(),
                            ));
                        }
                    }
                    let mut entry = current.cloned().unwrap_or_else(|| new_entry(&destination));
                    let mut m = Map::new();
                    m.insert("Name".into(), json!(source));
                    if !intention.action.is_empty() {
                        m.insert("Action".into(), json!(intention.action.to_ascii_lowercase()));
                    }
                    if !intention.permissions.is_empty() {
                        m.insert("Permissions".into(), json!(intention.permissions));
                    }
                    if !intention.description.is_empty() {
                        m.insert("Description".into(), json!(intention.description));
                    }
                    m.insert(
                        "Type".into(),
                        json!(if intention.source_type.is_empty() {
                            "consul"
                        } else {
                            intention.source_type.as_str()
                        }),
                    );
                    let sources = sources_mut(&mut entry);
                    match sources.iter_mut().find(|s| source_name(s) == source) {
                        Some(slot) => *slot = Value::Object(m),
                        None => sources.push(Value::Object(m)),
                    }
                    Ok(Outcome::Write(entry))
                })
                .await?;
                Ok(String::new())
            }
            IntentionOp::DeleteExact {
                source,
                destination,
            } => {
                self.authorize(
                    &opts.token,
                    Resource::Intention(destination.clone()),
                    Access::Write,
                )?;
                self.mutate_intentions(&destination, false, |current| {
                    let Some(entry) = current else {
                        return Ok(Outcome::Unchanged);
                    };
                    let mut entry = entry.clone();
                    let sources = sources_mut(&mut entry);
                    let before = sources.len();
                    sources.retain(|s| source_name(s) != source);
                    Ok(if sources.len() == before {
                        Outcome::Unchanged
                    } else if sources.is_empty() {
                        Outcome::Delete
                    } else {
                        Outcome::Write(entry)
                    })
                })
                .await?;
                Ok(String::new())
            }
        }
    }

    /// `GET /v1/connect/intentions`.
    pub(crate) async fn intention_list_query(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<Intention>>, RpcError> {
        let list = self
            .filtered_list(
                opts,
                legate_filter::rows::intention(),
                &[Table::ConfigEntries],
                all_intentions,
            )
            .await?;
        // Each intention is readable with `intentions = "read"` on its
        // destination.
        self.filter_by_acl(&opts.token, list, |i| {
            vec![(legate_acl::Resource::Intention, i.destination_name.clone())]
        })
    }

    /// A blocking read over every intention (in Consul's order).
    async fn intentions_query<T>(
        &self,
        opts: &QueryOptions,
        view: impl Fn(Vec<Intention>) -> T,
    ) -> Result<Queried<T>, RpcError> {
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::ConfigEntries]),
            |t| {
                let (index, list) = all_intentions(t);
                Ok((index, view(list)))
            },
        )
        .await
    }

    /// `GET /v1/connect/intentions/:id` and `/exact`.
    pub(crate) async fn intention_get_query(
        &self,
        opts: &QueryOptions,
        lookup: IntentionLookup,
    ) -> Result<Queried<Option<Intention>>, RpcError> {
        // By name, the destination is known before the lookup: a token
        // that may not read it learns nothing, found or not.
        if let IntentionLookup::Exact { destination, .. } = &lookup {
            self.authorize(
                &opts.token,
                Resource::Intention(destination.clone()),
                Access::Read,
            )?;
        }
        let found = self
            .intentions_query(opts, |list| {
                list.into_iter().find(|i| match &lookup {
                    IntentionLookup::Id(id) => !id.is_empty() && &i.id == id,
                    IntentionLookup::Exact {
                        source,
                        destination,
                    } => &i.source_name == source && &i.destination_name == destination,
                })
            })
            .await?;
        if let Some(intention) = &found.value {
            self.authorize(
                &opts.token,
                Resource::Intention(intention.destination_name.clone()),
                Access::Read,
            )?;
        }
        Ok(found)
    }

    /// `GET /v1/connect/intentions/match`: per name, the intentions that
    /// cover it on the chosen side, in evaluation order.
    pub(crate) async fn intention_match_query(
        &self,
        opts: &QueryOptions,
        by: MatchBy,
        names: Vec<String>,
    ) -> Result<Queried<Vec<(String, Vec<Intention>)>>, RpcError> {
        for name in &names {
            self.authorize(&opts.token, Resource::Intention(name.clone()), Access::Read)?;
        }
        self.intentions_query(opts, |list| {
            names
                .iter()
                .map(|name| {
                    let matched: Vec<Intention> = list
                        .iter()
                        .filter(|i| {
                            let side = match by {
                                MatchBy::Source => &i.source_name,
                                MatchBy::Destination => &i.destination_name,
                            };
                            side == "*" || side == name
                        })
                        .cloned()
                        .collect();
                    (name.clone(), matched)
                })
                .collect()
        })
        .await
    }

    /// `GET /v1/connect/intentions/check`.
    pub(crate) async fn intention_check_query(
        &self,
        opts: &QueryOptions,
        source: String,
        destination: String,
    ) -> Result<Queried<IntentionCheck>, RpcError> {
        self.authorize(
            &opts.token,
            Resource::Service(destination.clone()),
            Access::Read,
        )?;
        let default_allow = self.config.default_intention_allow;
        self.intentions_query(opts, |list| {
            check_intentions(&list, &source, &destination, default_allow)
        })
        .await
    }
}

/// Consul refuses legacy edits of a destination someone edited as a config entry.
fn guard_legacy_ownership(entry: &ConfigEntry) -> Result<(), RpcError> {
    let owned_by_entry = entry
        .body
        .get("Sources")
        .and_then(Value::as_array)
        .is_some_and(|s| s.iter().any(|s| legacy_id(s).is_empty()));
    if owned_by_entry {
        return Err(RpcError::BadRequest(format!(
            "cannot use legacy intention API to edit intentions with a destination of {:?} after editing them via a service-intentions config entry",
            entry.name
        )));
    }
    Ok(())
}
