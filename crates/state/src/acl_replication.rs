//! ACL rows a secondary replicates from its primary, applied as one Raft
//! entry a batch (FSM command 33): deletions first, then the primary's
//! rows as they are. The primary is the source of truth for policies,
//! roles and global tokens, so a replicated policy or role takes its name
//! from a local row of another ID (a rename and a re-use of the old name
//! met in one round), and a replicated login token is stored even though
//! its auth method lives only in the primary. Local tokens of this
//! datacenter are never replaced or deleted by a batch (Consul refuses to
//! replicate local tokens): a replicated token that is marked local, or
//! whose AccessorID or SecretID a local token already holds, is skipped,
//! and a deletion naming a local token is ignored.

use legate_types::acl::{AclPolicy, AclRole, AclToken};
use serde::{Deserialize, Serialize};

use crate::{Changes, Tables};

/// One batch of replicated ACL rows.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AclReplicationBatch {
    /// Policy IDs to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_policies: Vec<String>,
    /// Role IDs to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_roles: Vec<String>,
    /// Token AccessorIDs to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_tokens: Vec<String>,
    /// Policies to store as the primary has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<AclPolicy>,
    /// Roles to store as the primary has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<AclRole>,
    /// Global tokens to store as the primary has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<AclToken>,
}

impl AclReplicationBatch {
    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.delete_policies.is_empty()
            && self.delete_roles.is_empty()
            && self.delete_tokens.is_empty()
            && self.policies.is_empty()
            && self.roles.is_empty()
            && self.tokens.is_empty()
    }
}

impl Tables {
    /// Applies a replicated batch at `index`; answers how many tokens were
    /// skipped because they would have replaced a local token.
    pub(crate) fn acl_replicate(
        &mut self,
        index: u64,
        batch: &AclReplicationBatch,
        changes: &mut Changes,
    ) -> usize {
        for id in &batch.delete_policies {
            self.acl_policy_delete(index, id, changes);
        }
        for id in &batch.delete_roles {
            self.acl_role_delete(index, id, changes);
        }
        for accessor in &batch.delete_tokens {
            if self.acl_tokens.get(accessor).is_some_and(|t| !t.local) {
                self.acl_token_delete(index, accessor, changes);
            }
        }
        for policy in &batch.policies {
            let taken = self
                .acl_policy_by_name(&policy.name)
                .filter(|other| other.id != policy.id)
                .map(|other| other.id.clone());
            if let Some(other) = taken {
                self.acl_policy_delete(index, &other, changes);
            }
            // The name is free now, so this cannot be refused.
            let _ = self.acl_policy_set(index, policy, changes);
        }
        for role in &batch.roles {
            let taken = self
                .acl_role_by_name(&role.name)
                .filter(|other| other.id != role.id)
                .map(|other| other.id.clone());
            if let Some(other) = taken {
                self.acl_role_delete(index, &other, changes);
            }
            let _ = self.acl_role_set(index, role, changes);
        }
        let mut skipped = 0;
        for token in &batch.tokens {
            let replaces_local = token.local
                || self
                    .acl_tokens
                    .get(&token.accessor_id)
                    .is_some_and(|t| t.local);
            if replaces_local || self.acl_token_store(index, token, false, changes).is_err() {
                skipped += 1;
            }
        }
        skipped
    }
}
