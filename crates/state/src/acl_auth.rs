//! The auth-method and binding-rule tables. Deleting a method deletes
//! its binding rules and every token it made, in the same write, as
//! Consul's does.

use legate_types::acl_auth::{AclAuthMethod, AclBindingRule};

use crate::{Changes, Table, Tables};

impl Tables {
    /// Creates or replaces an auth method at `index`.
    pub(crate) fn acl_auth_method_set(
        &mut self,
        index: u64,
        method: &AclAuthMethod,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if method.name.is_empty() {
            return Err("Invalid Auth Method: no Name is set".into());
        }
        let mut stored = method.clone();
        stored.modify_index = index;
        stored.create_index = self
            .acl_auth_methods
            .get(&method.name)
            .map(|m| m.create_index)
            .unwrap_or(index);
        self.acl_auth_methods.insert(stored.name.clone(), stored);
        self.bump(Table::AclAuthMethods, index, changes);
        Ok(())
    }

    /// Deletes an auth method, its binding rules and its tokens (nothing
    /// when it does not exist). Only tokens of the method's locality go
    /// (Consul's rule): in a secondary, global tokens a primary method of
    /// the same name made, replicated here, stay.
    pub(crate) fn acl_auth_method_delete(&mut self, index: u64, name: &str, changes: &mut Changes) {
        let Some(method) = self.acl_auth_methods.remove(name) else {
            return;
        };
        let local_tokens = method.token_locality != "global";
        self.bump(Table::AclAuthMethods, index, changes);
        let rules: Vec<String> = self
            .acl_binding_rules
            .values()
            .filter(|r| r.auth_method == name)
            .map(|r| r.id.clone())
            .collect();
        for id in rules {
            self.acl_binding_rule_delete(index, &id, changes);
        }
        let tokens: Vec<String> = self
            .acl_tokens
            .values()
            .filter(|t| t.auth_method == name && t.local == local_tokens)
            .map(|t| t.accessor_id.clone())
            .collect();
        for accessor in tokens {
            self.acl_token_delete(index, &accessor, changes);
        }
    }

    /// Creates or replaces a binding rule at `index`.
    pub(crate) fn acl_binding_rule_set(
        &mut self,
        index: u64,
        rule: &AclBindingRule,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if !self.acl_auth_methods.contains_key(&rule.auth_method) {
            return Err(format!(
                "cannot find auth method with name {:?}",
                rule.auth_method
            ));
        }
        let mut stored = rule.clone();
        stored.modify_index = index;
        stored.create_index = self
            .acl_binding_rules
            .get(&rule.id)
            .map(|r| r.create_index)
            .unwrap_or(index);
        self.acl_binding_rules.insert(stored.id.clone(), stored);
        self.bump(Table::AclBindingRules, index, changes);
        Ok(())
    }

    /// Deletes a binding rule (nothing when it does not exist).
    pub(crate) fn acl_binding_rule_delete(&mut self, index: u64, id: &str, changes: &mut Changes) {
        if self.acl_binding_rules.remove(id).is_some() {
            self.bump(Table::AclBindingRules, index, changes);
        }
    }

    /// An auth method by name, with the methods' index.
    pub fn acl_auth_method(&self, name: &str) -> (u64, Option<&AclAuthMethod>) {
        (
            self.table_index(Table::AclAuthMethods),
            self.acl_auth_methods.get(name),
        )
    }

    /// Every auth method, by name, with the methods' index.
    pub fn acl_auth_methods(&self) -> (u64, impl Iterator<Item = &AclAuthMethod>) {
        (
            self.table_index(Table::AclAuthMethods),
            self.acl_auth_methods.values(),
        )
    }

    /// A binding rule by ID, with the rules' index.
    pub fn acl_binding_rule(&self, id: &str) -> (u64, Option<&AclBindingRule>) {
        (
            self.table_index(Table::AclBindingRules),
            self.acl_binding_rules.get(id),
        )
    }

    /// Every binding rule, by ID, with the rules' index.
    pub fn acl_binding_rules(&self) -> (u64, impl Iterator<Item = &AclBindingRule>) {
        (
            self.table_index(Table::AclBindingRules),
            self.acl_binding_rules.values(),
        )
    }
}
