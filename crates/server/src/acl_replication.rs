//! ACL replication into a secondary (Consul's `acl_replication.go`): the
//! leader of a secondary datacenter with ACLs on copies the primary's
//! policies and roles, and with `acl.enable_token_replication` its global
//! tokens, through blocking reads made with `acl.tokens.replication`.
//! Each kind has its own replicator in the shared loop of
//! [`crate::replication`]: a round compares the primary's rows with this
//! datacenter's by ID and content, deletes what the primary no longer
//! has, and writes the rest in batches of one Raft entry each (FSM
//! command 33), paced as Consul paces them. Local tokens of the
//! secondary are never touched. A token list whose secrets the primary
//! hid (a replication token without `acl:write`) fails the round with
//! Consul's text rather than storing `<hidden>` as a secret.
//!
//! `GET /v1/acl/replication` reads [`AclReplicationStatus`], which the
//! rounds keep up to date on the leader.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use legate_state::{AclReplicationBatch, Command, CommandResult};
use legate_types::acl::AclTokenFilter;
use legate_types::acl::{AclLink, AclPolicy, AclReplicationStatus, AclRole, AclToken};
use legate_types::RpcError;

use crate::replication::{fetch_options, TokenBucket, APPLY_RATE};
use crate::Server;

/// The largest share of one Raft entry a batch of upserts takes (Consul's
/// `aclBatchUpsertSize`).
const BATCH_BYTES: usize = 256 * 1024;
/// The most deletions one batch carries (Consul's `aclBatchDeleteSize`).
const BATCH_DELETES: usize = 4096;
/// The secret the primary shows to a token without `acl:write`.
const REDACTED: &str = "<hidden>";

/// What one replicator copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AclKind {
    Policies,
    Roles,
    Tokens,
}

impl AclKind {
    fn plural(self) -> &'static str {
        match self {
            AclKind::Policies => "policies",
            AclKind::Roles => "roles",
            AclKind::Tokens => "tokens",
        }
    }

    /// The replicator's name in logs and metrics (Consul's).
    fn task_name(self) -> &'static str {
        match self {
            AclKind::Policies => "acl-policies",
            AclKind::Roles => "acl-roles",
            AclKind::Tokens => "acl-tokens",
        }
    }
}

/// The leader's replication status, as `ACL.ReplicationStatus` answers it.
#[derive(Default)]
pub(crate) struct ReplicationStatus(Mutex<AclReplicationStatus>);

impl ReplicationStatus {
    fn update(&self, change: impl FnOnce(&mut AclReplicationStatus)) {
        change(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn get(&self) -> AclReplicationStatus {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Now as Consul shows replication times: UTC, whole seconds.
fn now_rounded() -> String {
    let now = std::time::SystemTime::now();
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64().round() as u64)
        .unwrap_or(0);
    crate::acl_endpoints::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

impl Server {
    /// `ACL.ReplicationStatus`: the leader's (no permission needed, as in
    /// Consul: it is read by health checks). A primary's is all zero.
    pub(crate) fn acl_replication_status_of_leader(
        &self,
    ) -> Result<AclReplicationStatus, RpcError> {
        if !self.raft.is_leader() {
            return Err(RpcError::NoLeader);
        }
        Ok(self.acl_replication.get())
    }

    /// Whether this secondary resolves tokens from its own replicated
    /// copy only (Consul's rule: token replication on and the tokens table
    /// written to), never asking the primary.
    pub(crate) fn tokens_replicated(&self) -> bool {
        self.config.acl.enable_token_replication
            && self.is_secondary()
            && self
                .store
                .read()
                .table_index(legate_state::Table::AclTokens)
                > 0
    }

    fn record_round(&self, kind: AclKind, result: &Result<u64, RpcError>) {
        self.acl_replication.update(|s| match result {
            Ok(index) => {
                s.last_success = now_rounded();
                match kind {
                    AclKind::Policies => s.replicated_index = *index,
                    AclKind::Roles => s.replicated_role_index = *index,
                    AclKind::Tokens => s.replicated_token_index = *index,
                }
            }
            Err(e) => {
                s.last_error = now_rounded();
                s.last_error_message = match e {
                    // A read given up because the primary went away.
                    RpcError::DatacenterUnavailable(_) => {
                        format!("failed to retrieve remote ACL {}: {e}", kind.plural())
                    }
                    other => other.to_string(),
                };
            }
        });
    }
}

/// Starts a secondary leader's ACL replicators (none in the primary or
/// without ACLs).
pub(crate) fn start(server: &Arc<Server>, tasks: &mut Vec<tokio::task::JoinHandle<()>>) {
    if !server.config.acl.enabled || !server.is_secondary() {
        return;
    }
    let tokens = server.config.acl.enable_token_replication;
    let primary = server.primary_datacenter().to_string();
    server.acl_replication.update(|s| {
        s.enabled = true;
        s.running = true;
        s.source_datacenter = primary;
        s.replication_type = if tokens { "tokens" } else { "policies" }.into();
    });
    let mut kinds = vec![AclKind::Policies, AclKind::Roles];
    if tokens {
        kinds.push(AclKind::Tokens);
    }
    for kind in kinds {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            // Consul runs no round until a replication token is set.
            replication_token_set(&server).await;
            crate::replication::run(
                server,
                kind.task_name(),
                move |server, index| async move { round(&server, kind, index).await },
                move |server, outcome| server.record_round(kind, outcome),
            )
            .await
        }));
    }
}

/// Marks the replicators stopped (leadership lost).
pub(crate) fn stopped(server: &Server) {
    server.acl_replication.update(|s| s.running = false);
}

/// Resolves once a replication token is set (Consul skips rounds until
/// then; a token cleared later makes the rounds fail with the anonymous
/// token's refusal, shown in the status).
async fn replication_token_set(server: &Server) {
    let mut token = server.config.acl.replication_token.clone();
    loop {
        if !token.borrow_and_update().is_empty() {
            return;
        }
        if token.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// One round of `kind`: a blocking read of the primary's rows at
/// `last_index`, the difference applied here. Answers the primary's index.
async fn round(server: &Arc<Server>, kind: AclKind, last_index: u64) -> Result<u64, RpcError> {
    if !server.acl_replication_writable() {
        return Err(RpcError::Internal(
            "ACL replication needs every server of this datacenter to run this version of Legate"
                .into(),
        ));
    }
    let (remote, primary) = server.to_primary()?;
    let options = fetch_options(server, &primary, last_index);
    let failed = |e: RpcError| {
        RpcError::Internal(format!(
            "failed to retrieve remote ACL {}: {e}",
            kind.plural()
        ))
    };
    let (index, batches) = match kind {
        AclKind::Policies => {
            let fetched = remote.acl_policy_list(&options).await.map_err(failed)?;
            let local: Vec<AclPolicy> = server.store.read().acl_policies().1.cloned().collect();
            let (deletes, changed) = plan(&local, &fetched.value, |p| &p.id, bare_policy);
            let batches = batches(
                deletes,
                changed.into_iter().map(bare_policy).collect(),
                |b, ids| b.delete_policies = ids,
                |b, p| b.policies.push(p),
            );
            (fetched.meta.index, batches)
        }
        AclKind::Roles => {
            let fetched = remote
                .acl_role_list(&options, String::new())
                .await
                .map_err(failed)?;
            let local: Vec<AclRole> = server.store.read().acl_roles().1.cloned().collect();
            let (deletes, changed) = plan(&local, &fetched.value, |r| &r.id, bare_role);
            let batches = batches(
                deletes,
                changed.into_iter().map(bare_role).collect(),
                |b, ids| b.delete_roles = ids,
                |b, r| b.roles.push(r),
            );
            (fetched.meta.index, batches)
        }
        AclKind::Tokens => {
            let filter = AclTokenFilter {
                global_only: true,
                ..Default::default()
            };
            let fetched = remote
                .acl_token_list(&options, filter)
                .await
                .map_err(failed)?;
            let global: Vec<AclToken> = fetched.value.into_iter().filter(|t| !t.local).collect();
            let local: Vec<AclToken> = server
                .store
                .read()
                .acl_tokens()
                .1
                .filter(|t| !t.local)
                .cloned()
                .collect();
            // Compared without secrets (which never change), as Consul
            // compares hashes: a token without acl:write fails the round
            // only when a token must be written.
            let (deletes, changed) = plan(&local, &global, |t| &t.accessor_id, token_content);
            if changed.iter().any(|t| t.secret_id == REDACTED) {
                return Err(RpcError::Internal(
                    "failed to retrieve unredacted tokens - replication token in use does not grant acl:write"
                        .into(),
                ));
            }
            let batches = batches(
                deletes,
                changed.into_iter().map(bare_token).collect(),
                |b, ids| b.delete_tokens = ids,
                |b, t| b.tokens.push(t),
            );
            (fetched.meta.index, batches)
        }
    };
    let mut pace = TokenBucket::new(APPLY_RATE, 1);
    for batch in batches {
        pace.take().await;
        match server.write(Command::AclReplicate(Box::new(batch))).await? {
            (_, CommandResult::Applied(true)) => {}
            (_, CommandResult::Applied(false)) => tracing::warn!(
                "replication: a global token was skipped: a local token of this datacenter holds its SecretID"
            ),
            (_, other) => {
                return Err(RpcError::Internal(format!(
                    "unexpected ACL replication result {other:?}"
                )))
            }
        }
    }
    Ok(index)
}

impl Server {
    /// Whether replicated ACL rows may be written: every server advertises
    /// `ar`.
    fn acl_replication_writable(&self) -> bool {
        crate::features::cluster_supports(&self.server_features(), crate::features::ACL_REPLICATION)
    }
}

/// Links compared and stored by ID only (names are filled in on reads).
fn bare_links(links: &mut [AclLink]) {
    for link in links {
        link.name.clear();
    }
}

fn bare_policy(policy: &AclPolicy) -> AclPolicy {
    AclPolicy {
        create_index: 0,
        modify_index: 0,
        ..policy.clone()
    }
}

fn bare_role(role: &AclRole) -> AclRole {
    let mut bare = AclRole {
        create_index: 0,
        modify_index: 0,
        ..role.clone()
    };
    bare_links(&mut bare.policies);
    bare
}

/// What a token's replication compares: everything but its indexes, link
/// names and secret.
fn token_content(token: &AclToken) -> AclToken {
    AclToken {
        secret_id: String::new(),
        ..bare_token(token)
    }
}

fn bare_token(token: &AclToken) -> AclToken {
    let mut bare = AclToken {
        create_index: 0,
        modify_index: 0,
        expiration_ttl: None,
        ..token.clone()
    };
    bare_links(&mut bare.policies);
    bare_links(&mut bare.roles);
    bare
}

/// What makes `local` equal to `remote`: the IDs only `local` has, and
/// the remote rows whose `content` `local` lacks or holds otherwise, each
/// in ID order.
fn plan<'a, T, K, F, C>(
    local: &[T],
    remote: &'a [T],
    id: F,
    content: C,
) -> (Vec<String>, Vec<&'a T>)
where
    K: PartialEq,
    F: Fn(&T) -> &String,
    C: Fn(&T) -> K,
{
    let local: BTreeMap<&String, K> = local.iter().map(|row| (id(row), content(row))).collect();
    let remote: BTreeMap<&String, &T> = remote.iter().map(|row| (id(row), row)).collect();
    let deletes = local
        .keys()
        .filter(|k| !remote.contains_key(*k))
        .map(|k| k.to_string())
        .collect();
    let upserts = remote
        .into_iter()
        .filter(|(k, row)| local.get(k) != Some(&content(row)))
        .map(|(_, row)| row)
        .collect();
    (deletes, upserts)
}

/// The plan cut into batches of at most [`BATCH_DELETES`] deletions and
/// [`BATCH_BYTES`] of rows; deletions go first.
fn batches<T: serde::Serialize>(
    deletes: Vec<String>,
    upserts: Vec<T>,
    set_deletes: impl Fn(&mut AclReplicationBatch, Vec<String>),
    push: impl Fn(&mut AclReplicationBatch, T),
) -> Vec<AclReplicationBatch> {
    let mut out = Vec::new();
    for chunk in deletes.chunks(BATCH_DELETES) {
        let mut batch = AclReplicationBatch::default();
        set_deletes(&mut batch, chunk.to_vec());
        out.push(batch);
    }
    let mut batch = AclReplicationBatch::default();
    let mut bytes = 0;
    for row in upserts {
        let size = serde_json::to_vec(&row).map(|v| v.len()).unwrap_or(0);
        if bytes > 0 && bytes + size > BATCH_BYTES {
            out.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += size;
        push(&mut batch, row);
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(id: &str, rules: &str, index: u64) -> AclPolicy {
        AclPolicy {
            id: id.into(),
            name: format!("name-{id}"),
            rules: rules.into(),
            create_index: index,
            modify_index: index,
            ..Default::default()
        }
    }

    #[test]
    fn plan_deletes_what_the_primary_lacks_and_writes_what_differs() {
        let local = vec![
            policy("a", "same", 3),
            policy("b", "old", 4),
            policy("gone", "x", 5),
        ];
        let remote = vec![
            policy("a", "same", 90),
            policy("b", "new", 91),
            policy("c", "added", 92),
        ];
        let (deletes, upserts) = plan(&local, &remote, |p| &p.id, bare_policy);
        assert_eq!(deletes, ["gone"]);
        let ids: Vec<&str> = upserts.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["b", "c"]);
        let (deletes, upserts) = plan(&remote, &remote, |p| &p.id, bare_policy);
        assert!(deletes.is_empty() && upserts.is_empty());
    }

    #[test]
    fn tokens_compare_without_link_names() {
        let link = |name: &str| AclLink {
            id: "p1".into(),
            name: name.into(),
        };
        let stored = AclToken {
            accessor_id: "t".into(),
            secret_id: "s".into(),
            policies: vec![link("")],
            modify_index: 7,
            ..Default::default()
        };
        let shown = AclToken {
            policies: vec![link("ops")],
            modify_index: 70,
            ..stored.clone()
        };
        let (deletes, upserts) = plan(
            std::slice::from_ref(&stored),
            std::slice::from_ref(&shown),
            |t| &t.accessor_id,
            token_content,
        );
        assert!(deletes.is_empty() && upserts.is_empty());
        // A list read without acl:write shows no secret: nothing to write
        // when nothing changed, so the round does not fail.
        let redacted = AclToken {
            secret_id: REDACTED.into(),
            ..shown
        };
        let (_, upserts) = plan(
            std::slice::from_ref(&stored),
            std::slice::from_ref(&redacted),
            |t| &t.accessor_id,
            token_content,
        );
        assert!(upserts.is_empty());
        let changed = AclToken {
            description: "changed".into(),
            ..redacted
        };
        let (_, upserts) = plan(
            std::slice::from_ref(&stored),
            std::slice::from_ref(&changed),
            |t| &t.accessor_id,
            token_content,
        );
        assert_eq!(upserts[0].secret_id, REDACTED, "found, so the round fails");
    }

    #[test]
    fn batches_are_bounded() {
        let deletes: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
        let big = "x".repeat(100 * 1024);
        let upserts: Vec<AclPolicy> = (0..5).map(|i| policy(&i.to_string(), &big, 1)).collect();
        let out = batches(
            deletes,
            upserts,
            |b, ids| b.delete_policies = ids,
            |b, p| b.policies.push(p),
        );
        let shape: Vec<(usize, usize)> = out
            .iter()
            .map(|b| (b.delete_policies.len(), b.policies.len()))
            .collect();
        assert_eq!(shape, [(4096, 0), (904, 0), (0, 2), (0, 2), (0, 1)]);
    }
}
