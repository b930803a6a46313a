//! Who may register and deregister in the catalog (Consul's
//! `vetRegisterWithACL` and `vetDeregisterWithACL`): a registration needs
//! `node:write` only when it changes the node, `service:write` on its
//! service (and on a proxy's destination), and for each check write on
//! its service or, for the node's own checks, on the node; a
//! deregistration needs write on what it removes.

use legate_types::{DeregisterRequest, HealthCheck, RegisterRequest, RpcError};

use crate::authorizer::{Access, Resource};
use crate::Server;

impl Server {
    /// `Ok` when `token` may apply `req`.
    pub(crate) fn authorize_register(
        &self,
        token: &str,
        req: &RegisterRequest,
    ) -> Result<(), RpcError> {
        if self.request_token(token)?.is_none() {
            return Ok(());
        }
        // What the store says, read first: authorizing reads the store
        // again, and a second read lock taken while a writer waits would
        // deadlock.
        let (changes_node, check_services) = {
            let tables = self.store.read();
            let changes_node = !req.skip_node_update
                && tables.node(&req.node).is_none_or(|n| {
                    n.address != req.address
                        || n.tagged_addresses != req.tagged_addresses
                        || n.meta != req.node_meta
                        || (!req.id.is_empty() && n.id != req.id)
                });
            let check_services: Vec<Option<String>> = req
                .check
                .iter()
                .chain(req.checks.iter())
                .map(|check| {
                    check_service(check, req, |id| {
                        tables
                            .node_service(&req.node, id)
                            .map(|s| s.service.clone())
                    })
                })
                .collect();
            (changes_node, check_services)
        };
        if changes_node {
            self.authorize(token, Resource::Node(req.node.clone()), Access::Write)?;
        }
        if let Some(service) = &req.service {
            self.authorize(
                token,
                Resource::Service(service.service.clone()),
                Access::Write,
            )?;
            if let Some(destination) = service
                .proxy
                .as_ref()
                .map(|p| p.destination_service_name.as_str())
                .filter(|d| !d.is_empty())
            {
                self.authorize(
                    token,
                    Resource::Service(destination.to_string()),
                    Access::Write,
                )?;
            }
        }
        for service in check_services {
            self.authorize_check_owner(token, &req.node, service)?;
        }
        Ok(())
    }

    /// `Ok` when `token` may apply `req`.
    pub(crate) fn authorize_deregister(
        &self,
        token: &str,
        req: &DeregisterRequest,
    ) -> Result<(), RpcError> {
        if self.request_token(token)?.is_none() {
            return Ok(());
        }
        if !req.service_id.is_empty() {
            // Read, and the lock released, before authorizing (see above).
            let stored = self
                .store
                .read()
                .node_service(&req.node, &req.service_id)
                .map(|s| s.service.clone());
            // Nothing to remove is nothing to refuse (Consul's rule).
            return match stored {
                Some(service) => self.authorize(token, Resource::Service(service), Access::Write),
                None => Ok(()),
            };
        }
        if !req.check_id.is_empty() {
            let service = {
                let tables = self.store.read();
                let (_, checks) = tables.node_checks(&req.node);
                checks
                    .iter()
                    .find(|c| c.check_id == req.check_id)
                    .filter(|c| !c.service_id.is_empty())
                    .map(|c| c.service_name.clone())
            };
            return self.authorize_check_owner(token, &req.node, service);
        }
        self.authorize(token, Resource::Node(req.node.clone()), Access::Write)
    }

    /// Write on a check's service, or on its node when it has none.
    fn authorize_check_owner(
        &self,
        token: &str,
        node: &str,
        service: Option<String>,
    ) -> Result<(), RpcError> {
        match service {
            Some(service) => self.authorize(token, Resource::Service(service), Access::Write),
            None => self.authorize(token, Resource::Node(node.to_string()), Access::Write),
        }
    }
}

/// The service a check in a registration belongs to: the request's own
/// service when the IDs match, else the one stored on the node.
fn check_service(
    check: &HealthCheck,
    req: &RegisterRequest,
    stored: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    if check.service_id.is_empty() {
        return None;
    }
    if let Some(service) = req.service.as_ref().filter(|s| s.id == check.service_id) {
        return Some(service.service.clone());
    }
    Some(stored(&check.service_id).unwrap_or_else(|| check.service_name.clone()))
}
