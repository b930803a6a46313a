//! `/v1/txn` on the server (Consul's `Txn.Apply` and `Txn.Read`): limits,
//! each operation's checks before anything runs (Consul's `preCheck`:
//! validation and ACLs, every failing operation reported), the read-only
//! fast path, the write through Raft, and the results filtered to what
//! the token may read.
//!
//! Stricter than Consul on purpose: a service or check operation on an
//! existing instance also needs `service:write` on the instance's stored
//! name, not only on the name the operation claims (Consul trusts the
//! claimed `Service`/`ServiceName`, so a token for one service could
//! rewrite another's instance or checks through a transaction).

use legate_state::Command;
use legate_types::rpc::{TxnError, TxnOp, TxnResponse};
use legate_types::txn::VERB_GET;
use legate_types::WriteOptions;
use legate_types::{KvVerb, RpcError, KV_MAX_VALUE_SIZE};

use crate::authorizer::{Access, Resource};
use crate::Server;

/// Consul's limit on operations per transaction (`maxTxnOps`, 128 since
/// Consul 1.13; 64 before).
pub const MAX_TXN_OPS: usize = 128;

impl Server {
    /// Runs a transaction: 413 past the limits, 409 (errors, nothing
    /// applied) when an operation is refused or fails.
    pub(crate) async fn txn_run(
        &self,
        opts: &WriteOptions,
        mut ops: Vec<TxnOp>,
    ) -> Result<TxnResponse, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if ops.len() > MAX_TXN_OPS {
            return Err(RpcError::TooLarge(format!(
                "Transaction contains too many operations ({} > {MAX_TXN_OPS})",
                ops.len()
            )));
        }
        for kv in ops.iter().filter_map(|op| op.kv.as_ref()) {
            if kv.value.len() > KV_MAX_VALUE_SIZE {
                return Err(RpcError::TooLarge(format!(
                    "Value for key {:?} is too large ({} > {KV_MAX_VALUE_SIZE} bytes)",
                    kv.key,
                    kv.value.len()
                )));
            }
        }
        let mut errors = Vec::new();
        for (op_index, op) in ops.iter_mut().enumerate() {
            if let Err(e) = self.txn_pre_check(&opts.token, op) {
                let what = match e {
                    RpcError::PermissionDenied(_) | RpcError::BadRequest(_) => e.to_string(),
                    other => return Err(other),
                };
                errors.push(TxnError { op_index, what });
            }
        }
        if !errors.is_empty() {
            return Ok(TxnResponse {
                results: None,
                errors: Some(errors),
                index: 0,
            });
        }
        if ops.iter().all(TxnOp::is_read) {
            let response = self.store.read().txn_read(&ops);
            return self.filter_txn_results(&opts.token, response);
        }
        let command = if ops.iter().any(needs_newer_command) {
            if !crate::features::cluster_supports(
                &self.server_features(),
                crate::features::CATALOG_TXN,
            ) {
                return Err(RpcError::Internal(
                    "transaction operations other than KV need every server to run this \
                     version of Legate"
                        .into(),
                ));
            }
            Command::TxnWithCatalog(ops)
        } else {
            Command::Txn(ops)
        };
        match self.write(command).await? {
            (_, legate_state::CommandResult::Txn(response)) => {
                self.filter_txn_results(&opts.token, response)
            }
            (_, other) => Err(RpcError::Internal(format!(
                "unexpected transaction result {other:?}"
            ))),
        }
    }

    /// One operation's validation and ACL check (Consul's `kvsPreApply`,
    /// `vetNodeTxnOp`, `servicePreApply`, `checkPreApply` and
    /// `vetCheckTxnOp`); fills the defaults Consul fills.
    fn txn_pre_check(&self, token: &str, op: &mut TxnOp) -> Result<(), RpcError> {
        if let Some(kv) = &op.kv {
            if kv.key.is_empty() && kv.verb != KvVerb::DeleteTree {
                return Err(RpcError::BadRequest("Must provide key".into()));
            }
            let key = kv.key.clone();
            let asked = match kv.verb {
                KvVerb::Get | KvVerb::GetOrEmpty | KvVerb::GetTree => return Ok(()),
                KvVerb::DeleteTree => (Resource::KeyPrefix(key), Access::Write),
                KvVerb::CheckIndex | KvVerb::CheckSession => (Resource::Key(key), Access::Read),
                _ => (Resource::Key(key), Access::Write),
            };
            return self.authorize(token, asked.0, asked.1);
        }
        if let Some(node) = &op.node {
            if node.verb == VERB_GET {
                return Ok(());
            }
            return self.authorize(token, Resource::Node(node.node.node.clone()), Access::Write);
        }
        if let Some(op) = op.service.as_mut() {
            if op.verb == VERB_GET {
                return Ok(());
            }
            let service = &mut op.service;
            // Only what Consul's API carries for a transaction's service.
            service.kind.clear();
            service.tagged_addresses.clear();
            service.socket_path.clear();
            service.proxy = None;
            service.connect = None;
            if service.id.is_empty() && !service.service.is_empty() {
                service.id = service.service.clone();
            }
            if !service.id.is_empty() && service.service.is_empty() {
                return Err(RpcError::BadRequest(
                    "Must provide service name with ID".into(),
                ));
            }
            if matches!(service.address.as_str(), "0.0.0.0" | "::" | "[::]") {
                return Err(RpcError::BadRequest("Invalid service address".into()));
            }
            let stored = self
                .store
                .read()
                .node_service(&op.node, &service.id)
                .map(|s| s.service.clone());
            for name in std::iter::once(service.service.clone()).chain(stored) {
                self.authorize(token, Resource::Service(name), Access::Write)?;
            }
            return Ok(());
        }
        if let Some(op) = op.check.as_mut() {
            if op.verb == VERB_GET {
                return Ok(());
            }
            let check = &mut op.check;
            if check.check_id.is_empty() && !check.name.is_empty() {
                check.check_id = check.name.clone();
            }
            if check.service_id.is_empty() {
                return self.authorize(token, Resource::Node(check.node.clone()), Access::Write);
            }
            let stored = self
                .store
                .read()
                .node_service(&check.node, &check.service_id)
                .map(|s| s.service.clone());
            let name = stored.unwrap_or_else(|| check.service_name.clone());
            return self.authorize(token, Resource::Service(name), Access::Write);
        }
        if let Some(op) = &op.session {
            let node = self
                .store
                .read()
                .session(&op.session.id)
                .1
                .map(|s| s.node)
                .unwrap_or_default();
            return self.authorize(token, Resource::Session(node), Access::Write);
        }
        Ok(())
    }

    /// The results without the rows the token may not read (Consul's
    /// `FilterTxnResults`).
    pub(crate) fn filter_txn_results(
        &self,
        token: &str,
        mut response: TxnResponse,
    ) -> Result<TxnResponse, RpcError> {
        let Some(resolved) = self.request_token(token)? else {
            return Ok(response);
        };
        use legate_acl::{Access as A, Resource as R};
        let may_read =
            |resource: R, name: &str| resolved.authorizer.allowed(resource, name, A::Read);
        if let Some(results) = response.results.as_mut() {
            results.retain(|r| {
                if let Some(kv) = &r.kv {
                    return may_read(R::Key, &kv.key);
                }
                if let Some(node) = &r.node {
                    return may_read(R::Node, &node.node);
                }
                if let Some(service) = &r.service {
                    return may_read(R::Service, &service.service);
                }
                match &r.check {
                    Some(c) if c.service_name.is_empty() => may_read(R::Node, &c.node),
                    Some(c) => may_read(R::Service, &c.service_name),
                    None => true,
                }
            });
        }
        Ok(response)
    }
}

/// Whether a transaction holding `op` must be logged as the newer
/// command older servers cannot apply.
fn needs_newer_command(op: &TxnOp) -> bool {
    op.is_catalog()
        || op
            .kv
            .as_ref()
            .is_some_and(|kv| kv.verb == KvVerb::GetOrEmpty)
}
