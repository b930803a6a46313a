//! Who may run a transaction (Consul's `kvsPreApply` per operation): a
//! write needs `key:write` on its key (a delete-tree on every key under
//! its prefix), a check needs `key:read`; gets are not refused but their
//! results are filtered to the keys the token may read.

use legate_types::rpc::{TxnError, TxnOp, TxnResponse};
use legate_types::{KvVerb, RpcError};

use crate::authorizer::{Access, Resource};
use crate::Server;

impl Server {
    /// Each refused operation with Consul's permission text (empty when
    /// all may run).
    pub(crate) fn txn_denials(
        &self,
        token: &str,
        ops: &[TxnOp],
    ) -> Result<Vec<TxnError>, RpcError> {
        if self.request_token(token)?.is_none() {
            return Ok(Vec::new());
        }
        let mut denied = Vec::new();
        for (op_index, op) in ops.iter().enumerate() {
            let key = op.kv.key.clone();
            let asked = match op.kv.verb {
                KvVerb::Get | KvVerb::GetTree => None,
                KvVerb::DeleteTree => Some((Resource::KeyPrefix(key), Access::Write)),
                verb if verb.is_read() => Some((Resource::Key(key), Access::Read)),
                _ => Some((Resource::Key(key), Access::Write)),
            };
            if let Some((resource, access)) = asked {
                match self.authorize(token, resource, access) {
                    Ok(()) => {}
                    Err(e @ RpcError::PermissionDenied(_)) => denied.push(TxnError {
                        op_index,
                        what: e.to_string(),
                    }),
                    Err(other) => return Err(other),
                }
            }
        }
        Ok(denied)
    }

    /// The results without the entries the token may not read.
    pub(crate) fn filter_txn_results(
        &self,
        token: &str,
        mut response: TxnResponse,
    ) -> Result<TxnResponse, RpcError> {
        let Some(resolved) = self.request_token(token)? else {
            return Ok(response);
        };
        if let Some(results) = response.results.as_mut() {
            results.retain(|r| {
                resolved.authorizer.allowed(
                    legate_acl::Resource::Key,
                    &r.kv.key,
                    legate_acl::Access::Read,
                )
            });
        }
        Ok(response)
    }
}
