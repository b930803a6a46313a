//! What the UI's internal endpoints read from the servers: every instance
//! with its checks, every node with its services and checks, and the
//! catalog's health overview (Consul's `Internal.ServiceDump`,
//! `Internal.NodeDump`/`NodeInfo` and `Internal.CatalogOverview`).

use legate_acl::{Access, Resource};
use legate_state::Table;
use legate_types::ui::{CatalogSummary, NodeInfo};
use legate_types::{CheckServiceNode, Queried, QueryOptions, RpcError};

use crate::Server;

impl Server {
    /// Every instance the token may read (service and node), blocking.
    pub(crate) async fn service_dump_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        let answer = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::Nodes, Table::Services, Table::Checks]),
                |t| Ok(t.check_service_nodes_all()),
            )
            .await?;
        self.filter_by_acl(&opts.token, answer, |csn: &CheckServiceNode| {
            vec![
                (Resource::Service, csn.service.service.clone()),
                (Resource::Node, csn.node.node.clone()),
            ]
        })
    }

    /// Every node (or `only`) the token may read, with the services and
    /// the checks of services it may read (Consul's `filterNodeDump`),
    /// blocking.
    pub(crate) async fn node_dump_of(
        &self,
        opts: &QueryOptions,
        only: Option<String>,
    ) -> Result<Queried<Vec<NodeInfo>>, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        let mut answer = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::Nodes, Table::Services, Table::Checks]),
                |t| Ok(t.node_dump(only.as_deref())),
            )
            .await?;
        let Some(resolved) = self.request_token(&opts.token)? else {
            return Ok(answer);
        };
        let may_read =
            |resource, name: &str| resolved.authorizer.allowed(resource, name, Access::Read);
        let mut filtered = false;
        answer.value.retain_mut(|info| {
            if !may_read(Resource::Node, &info.node) {
                filtered = true;
                return false;
            }
            let (services, checks) = (info.services.len(), info.checks.len());
            info.services
                .retain(|s| may_read(Resource::Service, &s.service));
            info.checks.retain(|c| {
                c.service_name.is_empty() || may_read(Resource::Service, &c.service_name)
            });
            filtered |= info.services.len() < services || info.checks.len() < checks;
            true
        });
        answer.meta.results_filtered_by_acls = filtered;
        Ok(answer)
    }

    /// The catalog's health overview; needs `operator:read`.
    pub(crate) fn catalog_overview_now(
        &self,
        opts: &QueryOptions,
    ) -> Result<CatalogSummary, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, crate::Resource::Operator, crate::Access::Read)?;
        Ok(self.store.read().catalog_overview())
    }
}
