//! The ACL tables: tokens (by AccessorID, with an index by SecretID),
//! policies and roles (by ID, names unique without regard to case), and
//! the index at which the ACL system was bootstrapped.
//!
//! Rows are validated by the server before they are logged; applying
//! keeps only what must hold whatever the order of writes: unique
//! secrets and names, and creation indexes that survive updates.

use std::collections::{BTreeSet, HashMap};

use legate_types::acl::{AclPolicy, AclRole, AclToken};

use crate::{Changes, Table, Tables};

/// The key of the bootstrap index among the table indexes (Consul's
/// `acl-token-bootstrap`): 0 or absent until bootstrapped.
const BOOTSTRAP_INDEX: &str = "acl-token-bootstrap";

impl Tables {
    /// Creates or replaces a token at `index`.
    pub(crate) fn acl_token_set(
        &mut self,
        index: u64,
        token: &AclToken,
        changes: &mut Changes,
    ) -> Result<(), String> {
        self.acl_token_store(index, token, true, changes)
    }

    /// Stores a token; `check_method`: a login token's auth method must
    /// exist here (not for tokens replicated from the primary, where it
    /// lives).
    pub(crate) fn acl_token_store(
        &mut self,
        index: u64,
        token: &AclToken,
        check_method: bool,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if token.accessor_id.is_empty() || token.secret_id.is_empty() {
            return Err("Invalid Token: missing AccessorID or SecretID".into());
        }
        // A login token whose method went away while it was being made
        // (Consul's state store refuses it the same way).
        if check_method
            && !token.auth_method.is_empty()
            && !self.acl_auth_methods.contains_key(&token.auth_method)
        {
            return Err(format!(
                "No such auth method with Name: {}",
                token.auth_method
            ));
        }
        if let Some(owner) = self.acl_token_secrets.get(&token.secret_id) {
            if owner != &token.accessor_id {
                return Err("Invalid Token: SecretID is already in use".into());
            }
        }
        let mut stored = token.clone();
        stored.modify_index = index;
        stored.create_index = match self.acl_tokens.get(&token.accessor_id) {
            Some(old) => {
                if old.secret_id != token.secret_id {
                    self.acl_token_secrets.remove(&old.secret_id);
                }
                old.create_index
            }
            None => index,
        };
        stored.expiration_ttl = None;
        if let Some(old) = self.acl_tokens.get(&token.accessor_id) {
            unindex_login(&mut self.acl_login_tokens, old);
        }
        index_login(&mut self.acl_login_tokens, &stored);
        self.acl_token_secrets
            .insert(stored.secret_id.clone(), stored.accessor_id.clone());
        self.acl_tokens.insert(stored.accessor_id.clone(), stored);
        self.bump(Table::AclTokens, index, changes);
        Ok(())
    }

    /// Deletes a token (nothing when it does not exist).
    pub(crate) fn acl_token_delete(&mut self, index: u64, accessor: &str, changes: &mut Changes) {
        if let Some(old) = self.acl_tokens.remove(accessor) {
            self.acl_token_secrets.remove(&old.secret_id);
            unindex_login(&mut self.acl_login_tokens, &old);
            self.bump(Table::AclTokens, index, changes);
        }
    }

    /// Bootstraps the ACL system with `token`: only when it never was, or
    /// when `reset_index` names the index it was bootstrapped at. Whether
    /// it was applied.
    pub(crate) fn acl_bootstrap(
        &mut self,
        index: u64,
        token: &AclToken,
        reset_index: Option<u64>,
        changes: &mut Changes,
    ) -> Result<bool, String> {
        let done = self.acl_bootstrap_index();
        if done != 0 && reset_index != Some(done) {
            return Ok(false);
        }
        self.acl_token_set(index, token, changes)?;
        self.table_index.insert(BOOTSTRAP_INDEX.to_string(), index);
        Ok(true)
    }

    /// Creates or replaces a policy at `index`.
    pub(crate) fn acl_policy_set(
        &mut self,
        index: u64,
        policy: &AclPolicy,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if let Some(other) = self.acl_policy_by_name(&policy.name) {
            if other.id != policy.id {
                return Err(format!(
                    "Invalid Policy: A Policy with Name {:?} already exists",
                    policy.name
                ));
            }
        }
        let mut stored = policy.clone();
        stored.modify_index = index;
        stored.create_index = self
            .acl_policies
            .get(&policy.id)
            .map(|p| p.create_index)
            .unwrap_or(index);
        self.acl_policies.insert(stored.id.clone(), stored);
        self.bump(Table::AclPolicies, index, changes);
        Ok(())
    }

    /// Deletes a policy (nothing when it does not exist).
    pub(crate) fn acl_policy_delete(&mut self, index: u64, id: &str, changes: &mut Changes) {
        if self.acl_policies.remove(id).is_some() {
            self.bump(Table::AclPolicies, index, changes);
        }
    }

    /// Creates or replaces a role at `index`.
    pub(crate) fn acl_role_set(
        &mut self,
        index: u64,
        role: &AclRole,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if let Some(other) = self.acl_role_by_name(&role.name) {
            if other.id != role.id {
                return Err(format!(
                    "Invalid Role: A Role with Name {:?} already exists",
                    role.name
                ));
            }
        }
        let mut stored = role.clone();
        stored.modify_index = index;
        stored.create_index = self
            .acl_roles
            .get(&role.id)
            .map(|r| r.create_index)
            .unwrap_or(index);
        self.acl_roles.insert(stored.id.clone(), stored);
        self.bump(Table::AclRoles, index, changes);
        Ok(())
    }

    /// Deletes a role (nothing when it does not exist).
    pub(crate) fn acl_role_delete(&mut self, index: u64, id: &str, changes: &mut Changes) {
        if self.acl_roles.remove(id).is_some() {
            self.bump(Table::AclRoles, index, changes);
        }
    }

    /// The index the ACL system was bootstrapped at (0: never).
    pub fn acl_bootstrap_index(&self) -> u64 {
        self.table_index.get(BOOTSTRAP_INDEX).copied().unwrap_or(0)
    }

    /// A token by AccessorID, with the tokens' index.
    pub fn acl_token(&self, accessor: &str) -> (u64, Option<&AclToken>) {
        (
            self.table_index(Table::AclTokens),
            self.acl_tokens.get(accessor),
        )
    }

    /// A token by SecretID.
    pub fn acl_token_by_secret(&self, secret: &str) -> Option<&AclToken> {
        self.acl_token_secrets
            .get(secret)
            .and_then(|accessor| self.acl_tokens.get(accessor))
    }

    /// Every token, by AccessorID, with the tokens' index.
    pub fn acl_tokens(&self) -> (u64, impl Iterator<Item = &AclToken>) {
        (self.table_index(Table::AclTokens), self.acl_tokens.values())
    }

    /// A policy by ID, with the policies' index.
    pub fn acl_policy(&self, id: &str) -> (u64, Option<&AclPolicy>) {
        (
            self.table_index(Table::AclPolicies),
            self.acl_policies.get(id),
        )
    }

    /// A policy by name, compared without regard to case.
    pub fn acl_policy_by_name(&self, name: &str) -> Option<&AclPolicy> {
        self.acl_policies
            .values()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Every policy, by ID, with the policies' index.
    pub fn acl_policies(&self) -> (u64, impl Iterator<Item = &AclPolicy>) {
        (
            self.table_index(Table::AclPolicies),
            self.acl_policies.values(),
        )
    }

    /// A role by ID, with the roles' index.
    pub fn acl_role(&self, id: &str) -> (u64, Option<&AclRole>) {
        (self.table_index(Table::AclRoles), self.acl_roles.get(id))
    }

    /// A role by name, compared without regard to case.
    pub fn acl_role_by_name(&self, name: &str) -> Option<&AclRole> {
        self.acl_roles
            .values()
            .find(|r| r.name.eq_ignore_ascii_case(name))
    }

    /// Every role, by ID, with the roles' index.
    pub fn acl_roles(&self) -> (u64, impl Iterator<Item = &AclRole>) {
        (self.table_index(Table::AclRoles), self.acl_roles.values())
    }

    /// Whether any ACL row is stored (the feature then stays on).
    pub fn has_acl_rows(&self) -> bool {
        !self.acl_tokens.is_empty()
            || !self.acl_policies.is_empty()
            || !self.acl_roles.is_empty()
            || !self.acl_auth_methods.is_empty()
    }

    /// Rebuilds the secret and login indexes after a snapshot is loaded.
    pub(crate) fn index_acl_secrets(&mut self) {
        self.acl_token_secrets = self
            .acl_tokens
            .values()
            .map(|t| (t.secret_id.clone(), t.accessor_id.clone()))
            .collect();
        self.acl_login_tokens.clear();
        for token in self.acl_tokens.values() {
            index_login(&mut self.acl_login_tokens, token);
        }
    }

    /// The tokens auth method `token.auth_method` made that bind what
    /// `token` binds (its service and node identities, roles, policies and
    /// templated policies), expired ones included: found through an index,
    /// so a login's per-identity check does not read every token.
    pub fn acl_login_tokens_like<'a>(
        &'a self,
        token: &AclToken,
    ) -> impl Iterator<Item = &'a AclToken> + 'a {
        login_key(token)
            .and_then(|key| self.acl_login_tokens.get(&key))
            .into_iter()
            .flatten()
            .filter_map(|accessor| self.acl_tokens.get(accessor))
    }
}

/// The login index's key of a token (none for tokens login did not make):
/// its method, and a digest of what it binds (links by ID).
fn login_key(token: &AclToken) -> Option<(String, u64)> {
    use std::hash::{Hash, Hasher};
    if token.auth_method.is_empty() {
        return None;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let ids = |links: &[legate_types::acl::AclLink]| -> Vec<String> {
        links.iter().map(|l| l.id.clone()).collect()
    };
    ids(&token.roles).hash(&mut hasher);
    ids(&token.policies).hash(&mut hasher);
    // Identities and templated policies have no Hash; their JSON is stable.
    serde_json::to_string(&(
        &token.service_identities,
        &token.node_identities,
        &token.templated_policies,
    ))
    .unwrap_or_default()
    .hash(&mut hasher);
    Some((token.auth_method.clone(), hasher.finish()))
}

fn index_login(index: &mut HashMap<(String, u64), BTreeSet<String>>, token: &AclToken) {
    if let Some(key) = login_key(token) {
        index
            .entry(key)
            .or_default()
            .insert(token.accessor_id.clone());
    }
}

fn unindex_login(index: &mut HashMap<(String, u64), BTreeSet<String>>, token: &AclToken) {
    if let Some(key) = login_key(token) {
        if let Some(accessors) = index.get_mut(&key) {
            accessors.remove(&token.accessor_id);
            if accessors.is_empty() {
                index.remove(&key);
            }
        }
    }
}
