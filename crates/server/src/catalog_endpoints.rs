//! Catalog and health reads: nodes, services (tags of the matching
//! instances only), service instances with their filters and `?near` order,
//! node services, checks by node, service and state; rows filtered by what
//! the token may read.

use std::collections::BTreeMap;

use legate_state::Table;
use legate_types::rpc::ServiceQuery;
use legate_types::*;

use crate::blocking::{apply_filter, parse_filter};
use crate::endpoints::{check_targets, connect_targets, has_all_tags};
use crate::Server;

impl Server {
    pub(crate) async fn catalog_nodes_endpoint(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<Node>>, RpcError> {
        let nodes = self
            .filtered_list(opts, legate_filter::rows::node(), &[Table::Nodes], |t| {
                let (index, mut nodes) = t.nodes();
                crate::coordinates::sort_near(t, opts, &mut nodes, |n| &n.node);
                (index, nodes)
            })
            .await?;
        self.filter_by_acl(&opts.token, nodes, |n| {
            vec![(legate_acl::Resource::Node, n.node.clone())]
        })
    }

    pub(crate) async fn catalog_services_endpoint(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<BTreeMap<String, Vec<String>>>, RpcError> {
        let filter = parse_filter(&opts.filter, legate_filter::rows::service_node())?;
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::Services]),
            |t| {
                let (index, services) = t.services();
                if filter.is_none() {
                    return Ok((index, services));
                }
                // Filters apply to instances (ServiceNode rows): a name with
                // at least one matching instance, with the tags of those
                // instances only (Consul's `servicesTagsByName`).
                let mut out = BTreeMap::new();
                for name in services.into_keys() {
                    let (_, rows) = t.service_nodes(&name, false);
                    let matching = apply_filter(rows, &filter);
                    if matching.is_empty() {
                        continue;
                    }
                    let tags: std::collections::BTreeSet<String> = matching
                        .into_iter()
                        .flat_map(|row| row.service_tags)
                        .collect();
                    out.insert(name, tags.into_iter().collect());
                }
                Ok((index, out))
            },
        )
        .await
        .and_then(|services| {
            let names = Queried {
                meta: services.meta,
                value: services.value.into_iter().collect::<Vec<_>>(),
            };
            let kept = self.filter_by_acl(&opts.token, names, |(name, _)| {
                vec![(legate_acl::Resource::Service, name.clone())]
            })?;
            Ok(Queried {
                meta: kept.meta,
                value: kept.value.into_iter().collect(),
            })
        })
    }

    pub(crate) async fn catalog_service_nodes_endpoint(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<Queried<Vec<ServiceNode>>, RpcError> {
        let filter = parse_filter(&opts.filter, legate_filter::rows::service_node())?;
        let rows = self
            .blocking_query(
                opts,
                |w| w.service(&query.service),
                |t| {
                    let (index, rows) = t.service_nodes(&query.service, query.connect);
                    let mut rows: Vec<ServiceNode> = rows
                        .into_iter()
                        .filter(|r| has_all_tags(&r.service_tags, &query.tags))
                        .collect();
                    crate::coordinates::sort_near(t, opts, &mut rows, |r| &r.node);
                    Ok((index, apply_filter(rows, &filter)))
                },
            )
            .await?;
        self.filter_by_acl(&opts.token, rows, |r| {
            connect_targets(
                &query,
                vec![
                    (legate_acl::Resource::Service, r.service_name.clone()),
                    (legate_acl::Resource::Node, r.node.clone()),
                ],
            )
        })
    }

    pub(crate) async fn catalog_node_services_endpoint(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Option<NodeServices>>, RpcError> {
        let filter = parse_filter(&opts.filter, legate_filter::rows::node_service())?;
        let found = self
            .blocking_query(
                opts,
                |w| w.tables(&[Table::Nodes, Table::Services]),
                |t| {
                    let (index, found) = t.node_services(&node);
                    let found = found.map(|mut ns| {
                        if filter.is_some() {
                            let kept: Vec<NodeService> =
                                apply_filter(ns.services.values().cloned().collect(), &filter);
                            ns.services = kept.into_iter().map(|s| (s.id.clone(), s)).collect();
                        }
                        ns
                    });
                    Ok((index, found))
                },
            )
            .await?;
        self.filter_node_services(&opts.token, found)
    }

    pub(crate) async fn health_node_checks_endpoint(
        &self,
        opts: &QueryOptions,
        node: String,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError> {
        let checks = self
            .filtered_list(
                opts,
                legate_filter::rows::health_check(),
                &[Table::Checks],
                |t| t.node_checks(&node),
            )
            .await?;
        self.filter_by_acl(&opts.token, checks, check_targets)
    }

    pub(crate) async fn health_service_checks_endpoint(
        &self,
        opts: &QueryOptions,
        service: String,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError> {
        let checks = self
            .filtered_list(
                opts,
                legate_filter::rows::health_check(),
                &[Table::Checks],
                |t| t.service_checks(&service),
            )
            .await?;
        self.filter_by_acl(&opts.token, checks, check_targets)
    }

    pub(crate) async fn health_checks_in_state_endpoint(
        &self,
        opts: &QueryOptions,
        state: Option<HealthStatus>,
    ) -> Result<Queried<Vec<HealthCheck>>, RpcError> {
        let checks = self
            .filtered_list(
                opts,
                legate_filter::rows::health_check(),
                &[Table::Checks],
                |t| t.checks_in_state(state),
            )
            .await?;
        self.filter_by_acl(&opts.token, checks, check_targets)
    }

    pub(crate) async fn health_service_nodes_endpoint(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<Queried<Vec<CheckServiceNode>>, RpcError> {
        let filter = parse_filter(&opts.filter, legate_filter::rows::check_service_node())?;
        let rows = self
            .blocking_query(
                opts,
                |w| w.service(&query.service),
                |t| {
                    let (index, rows) = t.check_service_nodes(&query.service, query.connect);
                    let mut rows: Vec<CheckServiceNode> = rows
                        .into_iter()
                        .filter(|r| has_all_tags(&r.service.tags, &query.tags))
                        .filter(|r| {
                            !query.passing_only
                                || r.checks.iter().all(|c| c.status == HealthStatus::Passing)
                        })
                        .collect();
                    crate::coordinates::sort_near(t, opts, &mut rows, |r| &r.node.node);
                    Ok((index, apply_filter(rows, &filter)))
                },
            )
            .await?;
        self.filter_by_acl(&opts.token, rows, |r| {
            connect_targets(
                &query,
                vec![
                    (legate_acl::Resource::Service, r.service.service.clone()),
                    (legate_acl::Resource::Node, r.node.node.clone()),
                ],
            )
        })
    }
}
