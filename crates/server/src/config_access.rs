//! Who may read and write config entries: each kind's permission comes
//! from [`legate_acl::doors::CONFIG_ENTRY_KINDS`] (Consul's `CanRead` and
//! `CanWrite`), on the entry's name; lists keep the entries the token may
//! read.

use legate_acl::doors::{config_entry_needs, Need};
use legate_types::config_entry::ConfigEntry;
use legate_types::{Queried, RpcError};

use crate::authorizer::{Access, Resource};
use crate::Server;

impl Server {
    /// `Ok` when `token` may set or delete the `kind` entry `name`.
    pub(crate) fn authorize_config_write(
        &self,
        token: &str,
        kind: &str,
        name: &str,
    ) -> Result<(), RpcError> {
        match config_entry_needs(kind) {
            Some(needs) => self.authorize_need(token, &needs.write, name),
            None => self.authorize(token, Resource::Operator, Access::Write),
        }
    }

    /// `Ok` when `token` may read the `kind` entry `name`.
    pub(crate) fn authorize_config_read(
        &self,
        token: &str,
        kind: &str,
        name: &str,
    ) -> Result<(), RpcError> {
        match config_entry_needs(kind).map(|n| n.read) {
            Some(Some(need)) => self.authorize_need(token, &need, name),
            Some(None) => Ok(()),
            None => self.authorize(token, Resource::Operator, Access::Read),
        }
    }

    /// Keeps the entries `token` may read.
    pub(crate) fn filter_config_entries(
        &self,
        token: &str,
        mut entries: Queried<Vec<ConfigEntry>>,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError> {
        if self.request_token(token)?.is_none() {
            return Ok(entries);
        }
        let before = entries.value.len();
        entries
            .value
            .retain(|e| self.authorize_config_read(token, &e.kind, &e.name).is_ok());
        entries.meta.results_filtered_by_acls = entries.value.len() < before;
        Ok(entries)
    }

    fn authorize_need(&self, token: &str, need: &Need, name: &str) -> Result<(), RpcError> {
        self.authorize(
            token,
            Resource::named(need.resource, name),
            Access::from_acl(need.access),
        )
    }
}
