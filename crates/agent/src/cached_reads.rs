//! `?cached` reads (Consul's agent cache, background-refresh kind): the
//! first request for a key is answered by the servers (a MISS) and starts
//! a blocking read that keeps the key current; later requests, blocking
//! ones included, are answered from the agent (a HIT), through a server
//! outage too. Keys never hold a token: the cache reads with the agent's
//! own token, and each answer keeps only what the request's token may
//! read. The prepared-query results cache (simple kind) is
//! [`crate::query_cache`].

use std::collections::BTreeMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use legate_acl::{Access, Resource};
use legate_types::connect::IndexedCaRoots;
use legate_types::rpc::{ChainOverrides, ServerRpc, ServiceQuery};
use legate_types::{CheckServiceNode, Consistency, Queried, QueryOptions, RpcError, ServiceNode};
use serde::Serialize;

use crate::acl::{AclResolver, ResolvedToken};
use crate::acl_tokens::TokenStore;
use crate::cache_config::CacheConfig;
use crate::shared_watch::{json_weigher, Fetched, SharedWatch};

/// What a `?cached` answer tells its client (`X-Cache`, `Age`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStatus {
    /// Answered by the agent (`HIT`) rather than the servers (`MISS`).
    pub hit: bool,
    /// How old the answer may be: zero while the agent's reads succeed,
    /// else the time since they began failing.
    pub age: Duration,
}

/// The read options that shape an answer (everything but the token and
/// the blocking parameters).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReadShape {
    datacenter: String,
    stale: bool,
    filter: String,
    near: String,
    source_ip: String,
}

impl ReadShape {
    pub(crate) fn of(opts: &QueryOptions) -> ReadShape {
        ReadShape {
            datacenter: opts.datacenter.clone(),
            stale: opts.consistency == Consistency::Stale,
            filter: opts.filter.clone(),
            near: opts.near.clone(),
            source_ip: if opts.near == "_ip" {
                opts.source_ip.clone()
            } else {
                String::new()
            },
        }
    }

    fn options(&self, min_index: u64, token: String) -> QueryOptions {
        QueryOptions {
            datacenter: self.datacenter.clone(),
            consistency: if self.stale {
                Consistency::Stale
            } else {
                Consistency::Default
            },
            min_index,
            max_wait: Some(Duration::from_secs(300)),
            token,
            filter: self.filter.clone(),
            near: self.near.clone(),
            source_ip: self.source_ip.clone(),
            max_stale: None,
        }
    }
}

type Reads<A, V> = Arc<SharedWatch<(ReadShape, A), Arc<Queried<V>>>>;

/// The `?cached` caches of one agent.
pub struct CachedReads {
    rpc: Arc<dyn ServerRpc>,
    acl: Arc<AclResolver>,
    health: Reads<ServiceQuery, Vec<CheckServiceNode>>,
    services: Reads<(), BTreeMap<String, Vec<String>>>,
    service_nodes: Reads<ServiceQuery, Vec<ServiceNode>>,
    roots: Reads<(), IndexedCaRoots>,
    chains: Reads<(String, String, ChainOverrides), serde_json::Value>,
}

/// A cache of one call, read with the agent's token.
fn reads<A, V, F, Fut>(
    rpc: &Arc<dyn ServerRpc>,
    tokens: &Arc<TokenStore>,
    config: &CacheConfig,
    name: &'static str,
    call: F,
) -> Reads<A, V>
where
    A: Clone + Eq + Hash + Send + Sync + 'static,
    V: Serialize + Send + Sync + 'static,
    F: Fn(Arc<dyn ServerRpc>, QueryOptions, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Queried<V>, RpcError>> + Send + 'static,
{
    let (rpc, tokens, call) = (rpc.clone(), tokens.clone(), Arc::new(call));
    SharedWatch::new(
        Arc::new(move |(shape, args): (ReadShape, A), min_index| {
            let opts = shape.options(min_index, tokens.agent_token());
            let answer = call(rpc.clone(), opts, args);
            Box::pin(async move {
                let q = answer.await.map_err(|e| e.to_string())?;
                Ok(Fetched {
                    index: q.meta.index,
                    value: Arc::new(q),
                })
            })
        }),
        config.limits(name, config.idle_timeout),
        json_weigher(),
    )
}

impl CachedReads {
    /// The caches of an agent reading through `rpc`.
    pub fn new(
        rpc: Arc<dyn ServerRpc>,
        tokens: Arc<TokenStore>,
        acl: Arc<AclResolver>,
        config: &CacheConfig,
    ) -> CachedReads {
        CachedReads {
            health: reads(
                &rpc,
                &tokens,
                config,
                "cached_health",
                |r, o, q| async move { r.health_service_nodes(&o, q).await },
            ),
            services: reads(
                &rpc,
                &tokens,
                config,
                "cached_services",
                |r, o, ()| async move { r.catalog_services(&o).await },
            ),
            service_nodes: reads(
                &rpc,
                &tokens,
                config,
                "cached_catalog",
                |r, o, q| async move { r.catalog_service_nodes(&o, q).await },
            ),
            roots: reads(
                &rpc,
                &tokens,
                config,
                "cached_roots",
                |r, o, ()| async move { r.ca_roots(&o).await },
            ),
            chains: reads(
                &rpc,
                &tokens,
                config,
                "cached_chains",
                |r, o, (service, compile_dc, overrides)| async move {
                    r.discovery_chain(&o, service, compile_dc, overrides).await
                },
            ),
            rpc,
            acl,
        }
    }

    /// Answers from `cache` when it holds the key (a HIT, blocking on it
    /// as a blocking query would), else asks the servers with the
    /// request's own options (a MISS) and starts following the key.
    async fn read<A, V, Miss, MissFut>(
        &self,
        cache: &Reads<A, V>,
        opts: &QueryOptions,
        args: A,
        miss: Miss,
    ) -> Result<(Queried<V>, CacheStatus), RpcError>
    where
        A: Clone + Eq + Hash + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
        Miss: FnOnce(Arc<dyn ServerRpc>, QueryOptions, A) -> MissFut,
        MissFut: Future<Output = Result<Queried<V>, RpcError>>,
    {
        let key = (ReadShape::of(opts), args.clone());
        if cache.holds(&key) {
            if let Ok(fetched) = cache
                .get(key.clone(), opts.min_index, opts.effective_wait())
                .await
            {
                let mut answer = (*fetched.value).clone();
                answer.meta.index = fetched.index;
                let status = CacheStatus {
                    hit: true,
                    age: cache.stale_for(&key),
                };
                return Ok((answer, status));
            }
        }
        let answer = miss(self.rpc.clone(), opts.clone(), args).await?;
        // Followed only once the servers answered it: a read they refuse
        // (an unknown datacenter, a denied token) holds nothing here.
        cache.follow(key);
        let status = CacheStatus {
            hit: false,
            age: Duration::ZERO,
        };
        Ok((answer, status))
    }

    /// The request's token, resolved (`None` when ACLs are off).
    async fn token(&self, opts: &QueryOptions) -> Result<Option<Arc<ResolvedToken>>, RpcError> {
        self.acl.resolve(&opts.token).await
    }

    /// `/v1/health/service/:s?cached` (and `/v1/health/connect/:s`): the
    /// instances on nodes, of services, the request's token may read.
    pub async fn health_service_nodes(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<(Queried<Vec<CheckServiceNode>>, CacheStatus), RpcError> {
        let (mut answer, status) = self
            .read(&self.health, opts, query, |r, o, q| async move {
                r.health_service_nodes(&o, q).await
            })
            .await?;
        if status.hit {
            if let Some(token) = self.token(opts).await? {
                keep(&mut answer, |csn| {
                    may_read(&token, &csn.node.node, &csn.service.service)
                });
            }
        }
        Ok((answer, status))
    }

    /// `/v1/catalog/services?cached`: the services the token may read.
    pub async fn catalog_services(
        &self,
        opts: &QueryOptions,
    ) -> Result<(Queried<BTreeMap<String, Vec<String>>>, CacheStatus), RpcError> {
        let (mut answer, status) = self
            .read(&self.services, opts, (), |r, o, ()| async move {
                r.catalog_services(&o).await
            })
            .await?;
        if status.hit {
            if let Some(token) = self.token(opts).await? {
                let before = answer.value.len();
                answer.value.retain(|name, _| {
                    token
                        .authorizer
                        .allowed(Resource::Service, name, Access::Read)
                });
                answer.meta.results_filtered_by_acls |= answer.value.len() != before;
            }
        }
        Ok((answer, status))
    }

    /// `/v1/catalog/service/:s?cached`.
    pub async fn catalog_service_nodes(
        &self,
        opts: &QueryOptions,
        query: ServiceQuery,
    ) -> Result<(Queried<Vec<ServiceNode>>, CacheStatus), RpcError> {
        let (mut answer, status) = self
            .read(&self.service_nodes, opts, query, |r, o, q| async move {
                r.catalog_service_nodes(&o, q).await
            })
            .await?;
        if status.hit {
            if let Some(token) = self.token(opts).await? {
                keep(&mut answer, |sn| {
                    may_read(&token, &sn.node, &sn.service_name)
                });
            }
        }
        Ok((answer, status))
    }

    /// `/v1/agent/connect/ca/roots?cached` (roots are anyone's to read).
    pub async fn ca_roots(
        &self,
        opts: &QueryOptions,
    ) -> Result<(Queried<IndexedCaRoots>, CacheStatus), RpcError> {
        self.read(&self.roots, opts, (), |r, o, ()| async move {
            r.ca_roots(&o).await
        })
        .await
    }

    /// `/v1/discovery-chain/:s?cached`: `service:read` on the service.
    pub async fn discovery_chain(
        &self,
        opts: &QueryOptions,
        service: String,
        compile_datacenter: String,
        overrides: ChainOverrides,
    ) -> Result<(Queried<serde_json::Value>, CacheStatus), RpcError> {
        if let Some(token) = self.token(opts).await? {
            token.check(Resource::Service, &service, Access::Read)?;
        }
        self.read(
            &self.chains,
            opts,
            (service, compile_datacenter, overrides),
            |r, o, (s, dc, ov)| async move { r.discovery_chain(&o, s, dc, ov).await },
        )
        .await
    }
}

/// Whether `token` may read an instance of `service` on `node`.
pub(crate) fn may_read(token: &ResolvedToken, node: &str, service: &str) -> bool {
    token.authorizer.allowed(Resource::Node, node, Access::Read)
        && token
            .authorizer
            .allowed(Resource::Service, service, Access::Read)
}

/// Keeps the rows `may` allows, marking the answer filtered when some went.
fn keep<T>(answer: &mut Queried<Vec<T>>, may: impl Fn(&T) -> bool) {
    let before = answer.value.len();
    answer.value.retain(|row| may(row));
    answer.meta.results_filtered_by_acls |= answer.value.len() != before;
}
