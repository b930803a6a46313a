//! Answers for names under our domains, from the catalog as the agent's
//! servers see it (stale reads unless they are older than `max_stale`),
//! shaped as Consul's DNS interface answers them.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use legate_agent::dns_config::DnsConfig;
use legate_types::rpc::{ServerRpc, ServiceQuery};
use legate_types::{
    CheckServiceNode, Consistency, HealthStatus, Node, Queried, QueryOptions, RpcError,
};
use rand::seq::SliceRandom;

use crate::names::{self, Lookup, Parsed};
use legate_agent::shared_watch::{
    json_weigher, polled, CacheLimits, Fetch, Fetched, Freshness, SharedWatch,
};
use legate_types::prepared_query::ExecuteResponse;

/// A prepared query looked up by DNS: (name or ID, datacenter asked for
/// or empty, the agent's node).
/// A prepared query's answer key: query, datacenter, the agent's node
/// (`Near: "_agent"`) and the client's address (`Near: "_ip"`).
type QueryKey = (String, String, String, String);

/// How often a prepared query answered from the DNS cache is run again
/// when `dns_config.cache_max_age` does not say (the same refresh as a
/// prepared-query upstream's).
pub const QUERY_REFRESH: std::time::Duration = std::time::Duration::from_secs(3);
use std::time::Duration;

/// The largest DNS message (TCP's two-byte length).
const MAX_MESSAGE: usize = 65_535;
/// Room kept for the header's OPT record when sizing an answer.
const OPT_ROOM: usize = 16;
/// The most name servers NS answers list.
const MAX_NAME_SERVERS: usize = 3;

/// How the answer travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP; the size the client accepts (512, or its EDNS buffer size).
    Udp {
        /// The client's buffer size.
        max_size: u16,
    },
    /// TCP (one message of at most 64 KiB).
    Tcp,
}

/// A response's content, before it is encoded.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The response code.
    pub code: ResponseCode,
    /// AA: the name is in one of our domains.
    pub authoritative: bool,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section (the SOA of negative answers).
    pub authority: Vec<Record>,
    /// Additional section (addresses of SRV targets, node metadata).
    pub additional: Vec<Record>,
    /// TC: answers were cut and `enable_truncate` is set.
    pub truncated: bool,
    /// Answers were left out while building (the transport's count limit).
    cut: bool,
    /// The answer is some of these addresses in a random order, and stays
    /// so while they are current: what the UDP fast path needs to answer
    /// the same question again without asking.
    pub(crate) pool: Option<crate::fast::Pool>,
}

impl Answer {
    fn new(code: ResponseCode) -> Answer {
        Answer {
            code,
            authoritative: true,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            truncated: false,
            cut: false,
            pool: None,
        }
    }
}

/// The name is outside our domains (or an address the catalog does not
/// know, with recursors configured): recursors answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotOurs;

/// A service lookup's key in the cache: service, tag, connect.
/// (service, tag, connect, token): entries read with a token no longer in
/// use expire as idle ones do.
type ServiceKey = (String, Option<String>, bool, String);

/// The token DNS reads with, asked per query (`acl.tokens.dns`, else
/// `default`, else the anonymous token), so a token set at run time counts
/// at once.
pub type DnsToken = Arc<dyn Fn() -> String + Send + Sync>;

/// Instances of a service as the cache holds them.
type Instances = Arc<Vec<CheckServiceNode>>;

/// How many service lookups the cache holds at most.
const CACHE_CAPACITY: usize = 10_000;
/// How long a lookup nobody asks for stays cached.
pub const CACHE_IDLE_TTL: Duration = Duration::from_secs(60);
/// How long one background blocking read waits.
const CACHE_WAIT: Duration = Duration::from_secs(300);

/// Answers queries for one agent.
pub struct Resolver {
    rpc: Arc<dyn ServerRpc>,
    config: DnsConfig,
    datacenter: String,
    token: DnsToken,
    /// Local-datacenter service lookups, kept current by blocking queries
    /// (`use_cache`): a query costs a lookup, not a catalog read.
    services: Option<Arc<SharedWatch<ServiceKey, Instances>>>,
    /// Prepared-query answers (`use_cache`): run again every
    /// [`QUERY_REFRESH`] for as long as they are asked for, and answered
    /// from here meanwhile.
    queries: Option<Arc<SharedWatch<QueryKey, Arc<ExecuteResponse>>>>,
    /// The agent's node (a prepared query's `Near: "_agent"`).
    agent_node: String,
}

/// A name built from labels we parsed or validated; one that still fails
/// (a node name with characters DNS cannot carry) is `None`.
fn name(text: &str) -> Option<Name> {
    let mut n = Name::from_ascii(text).ok()?;
    n.set_fqdn(true);
    Some(n)
}

fn ttl_of(d: std::time::Duration) -> u32 {
    d.as_secs().min(u32::MAX as u64) as u32
}

/// An A or AAAA record for `ip`.
fn address_record(owner: &Name, ip: IpAddr, ttl: u32) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(owner.clone(), ttl, data)
}

/// Whether an `ip` record answers `qtype`.
fn family_matches(ip: IpAddr, qtype: RecordType) -> bool {
    match qtype {
        RecordType::A => ip.is_ipv4(),
        RecordType::AAAA => ip.is_ipv6(),
        _ => true,
    }
}

/// Node metadata as TXT records, RFC 1464 `key=value` (keys starting
/// `rfc1035-` give their value alone).
fn meta_txt(owner: &Name, node: &Node, ttl: u32) -> Vec<Record> {
    node.meta
        .iter()
        .map(|(k, v)| {
            let text = if k.to_ascii_lowercase().starts_with("rfc1035-") {
                v.clone()
            } else {
                let key = k.replace('`', "``").replace('=', "`=").replace(' ', "` ");
                format!("{key}={}", v.replace('`', "``"))
            };
            Record::from_rdata(owner.clone(), ttl, RData::TXT(TXT::new(vec![text])))
        })
        .collect()
}

/// The encoded size of a response with these sections.
fn encoded_len(qname: &Name, qtype: RecordType, a: &Answer) -> usize {
    let mut m = Message::response(0, hickory_proto::op::OpCode::Query);
    m.add_query(Query::query(qname.clone(), qtype));
    m.add_answers(a.answers.iter().cloned());
    m.add_authorities(a.authority.iter().cloned());
    m.add_additionals(a.additional.iter().cloned());
    m.to_vec().map(|v| v.len()).unwrap_or(usize::MAX)
}

impl Resolver {
    /// A resolver over `rpc` for an agent in `datacenter` (call within a
    /// tokio runtime: the cache runs background reads).
    pub fn new(rpc: Arc<dyn ServerRpc>, config: DnsConfig, datacenter: String) -> Resolver {
        Resolver::with_token(rpc, config, datacenter, Arc::new(String::new))
    }

    /// [`Resolver::new`] reading with `token`: the servers answer only what
    /// it may read (`service:read`, `node:read`), so what it may not read
    /// has no records.
    pub fn with_token(
        rpc: Arc<dyn ServerRpc>,
        config: DnsConfig,
        datacenter: String,
        token: DnsToken,
    ) -> Resolver {
        let limits = CacheLimits {
            name: "dns",
            max_entries: CACHE_CAPACITY,
            max_bytes: legate_agent::cache_config::DEFAULT_MAX_BYTES,
            idle_ttl: CACHE_IDLE_TTL,
        };
        Resolver::with_limits(rpc, config, datacenter, token, limits)
    }

    /// [`Resolver::with_token`] whose cache (`use_cache`) keeps within
    /// `limits` (the agent's `cache` block).
    pub fn with_limits(
        rpc: Arc<dyn ServerRpc>,
        config: DnsConfig,
        datacenter: String,
        token: DnsToken,
        limits: CacheLimits,
    ) -> Resolver {
        let services = config.use_cache.then(|| {
            let (rpc, dc) = (rpc.clone(), datacenter.clone());
            let fetch: Fetch<ServiceKey, Instances> = Arc::new(
                move |(service, tag, connect, token): ServiceKey, min_index| {
                    let (rpc, dc) = (rpc.clone(), dc.clone());
                    Box::pin(async move {
                        let opts = QueryOptions {
                            datacenter: dc,
                            token,
                            min_index,
                            max_wait: Some(CACHE_WAIT),
                            consistency: Consistency::Stale,
                            ..Default::default()
                        };
                        let query = ServiceQuery {
                            service,
                            tags: tag.into_iter().collect(),
                            passing_only: false,
                            connect,
                        };
                        let found = rpc
                            .health_service_nodes(&opts, query)
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok(Fetched {
                            index: found.meta.index,
                            value: Arc::new(found.value),
                        })
                    })
                },
            );
            SharedWatch::new(fetch, limits, json_weigher())
        });
        let queries = config.use_cache.then(|| {
            let (rpc, token, local) = (rpc.clone(), token.clone(), datacenter.clone());
            let (allow_stale, max_stale) = (config.allow_stale, config.max_stale);
            let refresh = if config.cache_max_age.is_zero() {
                QUERY_REFRESH
            } else {
                config.cache_max_age
            };
            let fetch = polled(
                refresh,
                move |(query, dc, agent_node, source_ip): QueryKey, _first| {
                    let rpc = rpc.clone();
                    let opts = |consistency| QueryOptions {
                        datacenter: if dc.is_empty() {
                            local.clone()
                        } else {
                            dc.clone()
                        },
                        consistency,
                        token: token(),
                        source_ip: source_ip.clone(),
                        ..Default::default()
                    };
                    let (stale, leader) = (opts(Consistency::Stale), opts(Consistency::Default));
                    let request = legate_types::prepared_query::ExecuteRequest {
                        id_or_name: query,
                        agent_node,
                        ..Default::default()
                    };
                    async move {
                        let mut answer = rpc
                            .prepared_query_execute(
                                if allow_stale { &stale } else { &leader },
                                request.clone(),
                            )
                            .await
                            .map_err(|e| e.to_string())?;
                        if allow_stale && answer.meta.last_contact > max_stale {
                            answer = rpc
                                .prepared_query_execute(&leader, request)
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        Ok(Arc::new(answer.value))
                    }
                },
            );
            SharedWatch::new(
                fetch,
                CacheLimits {
                    name: "dns_queries",
                    ..limits
                },
                json_weigher(),
            )
        });
        Resolver {
            rpc,
            config,
            datacenter,
            token,
            services,
            queries,
            agent_node: String::new(),
        }
    }

    /// This resolver, for prepared queries that sort near the agent,
    /// answering for `node`.
    pub fn for_agent_node(mut self, node: String) -> Resolver {
        self.agent_node = node;
        self
    }

    /// The instances of a service: from the cache for the local
    /// datacenter (with a handle telling whether they are still current,
    /// and the token they were read with), else (or when the cache has no
    /// answer) a catalog read.
    async fn instances(
        &self,
        wanted: &Wanted<'_>,
    ) -> Result<(Instances, Option<(Freshness, String)>), RpcError> {
        let local = wanted.datacenter.is_none_or(|dc| dc == self.datacenter);
        if let (Some(cache), true) = (&self.services, local) {
            let token = (self.token)();
            let key = (
                wanted.service.to_string(),
                wanted.tag.map(str::to_string),
                wanted.connect,
                token.clone(),
            );
            if let Ok((found, fresh)) = cache.get_tracked(key, 0, Duration::from_secs(5)).await {
                return Ok((found.value, Some((fresh, token))));
            }
        }
        let rpc = self.rpc.clone();
        let query = ServiceQuery {
            service: wanted.service.to_string(),
            tags: wanted.tag.map(|t| vec![t.to_string()]).unwrap_or_default(),
            passing_only: false,
            connect: wanted.connect,
        };
        let found = self
            .read(wanted.datacenter, |opts| {
                let (rpc, query) = (rpc.clone(), query.clone());
                async move { rpc.health_service_nodes(&opts, query).await }
            })
            .await?;
        Ok((Arc::new(found.value), None))
    }

    /// Where the DNS token in use is read from.
    pub(crate) fn token_source(&self) -> DnsToken {
        self.token.clone()
    }

    /// The configuration answers follow.
    pub fn config(&self) -> &DnsConfig {
        &self.config
    }

    fn domains(&self) -> Vec<&str> {
        let mut d = vec![self.config.domain.as_str()];
        if let Some(alt) = &self.config.alt_domain {
            d.push(alt);
        }
        d
    }

    /// The SOA of `domain` (TTL `min_ttl`, serial the current Unix time).
    pub fn soa(&self, domain: &str) -> Option<Record> {
        let serial = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let soa = &self.config.soa;
        Some(Record::from_rdata(
            name(&format!("{domain}."))?,
            soa.min_ttl,
            RData::SOA(SOA::new(
                name(&format!("ns.{domain}."))?,
                name(&format!("hostmaster.{domain}."))?,
                serial,
                soa.refresh.min(i32::MAX as u32) as i32,
                soa.retry.min(i32::MAX as u32) as i32,
                soa.expire.min(i32::MAX as u32) as i32,
                soa.min_ttl,
            )),
        ))
    }

    fn negative(&self, code: ResponseCode, domain: &str) -> Answer {
        let mut a = Answer::new(code);
        a.authority.extend(self.soa(domain));
        a
    }

    fn options(&self, datacenter: Option<&str>, consistency: Consistency) -> QueryOptions {
        QueryOptions {
            datacenter: datacenter.unwrap_or(&self.datacenter).to_string(),
            consistency,
            token: (self.token)(),
            ..Default::default()
        }
    }

    /// Reads with `read`, stale when allowed; a stale answer older than
    /// `max_stale` is read again from the leader.
    async fn read<T, F, Fut>(
        &self,
        datacenter: Option<&str>,
        read: F,
    ) -> Result<Queried<T>, RpcError>
    where
        F: Fn(QueryOptions) -> Fut,
        Fut: std::future::Future<Output = Result<Queried<T>, RpcError>>,
    {
        if !self.config.allow_stale {
            return read(self.options(datacenter, Consistency::Default)).await;
        }
        let answer = read(self.options(datacenter, Consistency::Stale)).await?;
        if answer.meta.last_contact > self.config.max_stale {
            return read(self.options(datacenter, Consistency::Default)).await;
        }
        Ok(answer)
    }

    /// Answers one question.
    pub async fn resolve(
        &self,
        qname: &Name,
        qtype: RecordType,
        transport: Transport,
    ) -> Result<Answer, NotOurs> {
        self.resolve_for(qname, qtype, transport, None).await
    }

    /// Answers one question asked from `client` (prepared queries sorted
    /// `Near: "_ip"` start from the node registered at its address).
    pub async fn resolve_for(
        &self,
        qname: &Name,
        qtype: RecordType,
        transport: Transport,
        client: Option<std::net::IpAddr>,
    ) -> Result<Answer, NotOurs> {
        let text = qname.to_ascii();
        let domains = self.domains();
        let mut answer = match names::parse(&text, &domains, qtype == RecordType::SRV) {
            Parsed::Outside => return Err(NotOurs),
            Parsed::Reverse(ip) => return self.reverse(qname, ip).await,
            Parsed::Ours { domain, lookup } => {
                self.ours(
                    qname,
                    qtype,
                    &domain,
                    lookup,
                    self.count_limit(transport),
                    client,
                )
                .await
            }
        };
        self.trim(qname, qtype, transport, &mut answer);
        Ok(answer)
    }

    /// How many answers a response may carry: over UDP without EDNS
    /// `min(8, udp_answer_limit)`, as Consul; otherwise the size decides.
    fn count_limit(&self, transport: Transport) -> usize {
        match transport {
            Transport::Udp { max_size } if max_size <= 512 => self.config.udp_answer_limit.min(8),
            _ => usize::MAX,
        }
    }

    async fn ours(
        &self,
        qname: &Name,
        qtype: RecordType,
        domain: &str,
        lookup: Lookup,
        count_limit: usize,
        client: Option<std::net::IpAddr>,
    ) -> Answer {
        let result = match (qtype, lookup) {
            // SOA and NS are answered for any name under the domain.
            (RecordType::SOA, _) => self.soa_answer(domain).await,
            (RecordType::NS, _) => self.ns_answer(domain).await,
            (RecordType::AXFR | RecordType::IXFR, _) => Ok(Answer::new(ResponseCode::NotImp)),
            (_, Lookup::Addr(ip)) => Ok(self.addr(qname, qtype, ip)),
            (_, Lookup::Node { node, datacenter }) => {
                self.node(qname, qtype, domain, &node, datacenter.as_deref())
                    .await
            }
            (
                _,
                Lookup::Service {
                    service,
                    tag,
                    datacenter,
                    connect,
                },
            ) => {
                let wanted = Wanted {
                    service: &service,
                    tag: tag.as_deref(),
                    datacenter: datacenter.as_deref(),
                    connect,
                };
                self.service(qname, qtype, domain, wanted, count_limit)
                    .await
            }
            (_, Lookup::Query { query, datacenter }) => {
                self.query(
                    qname,
                    qtype,
                    domain,
                    (&query, datacenter.as_deref()),
                    count_limit,
                    client,
                )
                .await
            }
            (_, Lookup::Apex | Lookup::Unsupported(_) | Lookup::Invalid) => {
                Ok(self.negative(ResponseCode::NXDomain, domain))
            }
        };
        match result {
            Ok(answer) => answer,
            // An unknown datacenter has no such names.
            Err(RpcError::NoPathToDatacenter(_) | RpcError::DatacenterUnavailable(_)) => {
                self.negative(ResponseCode::NXDomain, domain)
            }
            Err(e) => {
                tracing::warn!(name = %qname, error = %e, "DNS lookup failed");
                Answer::new(ResponseCode::ServFail)
            }
        }
    }

    /// Up to three healthy servers (the `consul` service) as name servers of
    /// `domain`, with their addresses.
    async fn name_servers(&self, domain: &str) -> Result<(Vec<Record>, Vec<Record>), RpcError> {
        let rpc = self.rpc.clone();
        let servers = self
            .read(None, |opts| {
                let rpc = rpc.clone();
                async move {
                    let query = ServiceQuery {
                        service: "consul".into(),
                        ..Default::default()
                    };
                    rpc.health_service_nodes(&opts, query).await
                }
            })
            .await?;
        let mut servers: Vec<CheckServiceNode> = servers
            .value
            .into_iter()
            .filter(|s| !s.checks.iter().any(|c| c.status == HealthStatus::Critical))
            .collect();
        servers.shuffle(&mut rand::rng());
        let ttl = ttl_of(self.config.node_ttl);
        let (mut ns, mut glue) = (Vec::new(), Vec::new());
        let Some(apex) = name(&format!("{domain}.")) else {
            return Ok((ns, glue));
        };
        for server in servers.iter().take(MAX_NAME_SERVERS) {
            let host = server.node.node.to_ascii_lowercase();
            if !host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                continue;
            }
            let Some(target) = name(&format!("{host}.node.{}.{domain}.", self.datacenter)) else {
                continue;
            };
            ns.push(Record::from_rdata(
                apex.clone(),
                ttl,
                RData::NS(NS(target.clone())),
            ));
            if let Ok(ip) = server.node.address.parse::<IpAddr>() {
                glue.push(address_record(&target, ip, ttl));
            }
        }
        Ok((ns, glue))
    }

    async fn soa_answer(&self, domain: &str) -> Result<Answer, RpcError> {
        let mut a = Answer::new(ResponseCode::NoError);
        a.answers.extend(self.soa(domain));
        let (ns, glue) = self.name_servers(domain).await?;
        a.authority = ns;
        a.additional = glue;
        Ok(a)
    }

    async fn ns_answer(&self, domain: &str) -> Result<Answer, RpcError> {
        let mut a = Answer::new(ResponseCode::NoError);
        let (ns, glue) = self.name_servers(domain).await?;
        a.answers = ns;
        a.additional = glue;
        Ok(a)
    }

    /// `<hex>.addr`: the address in the answer when its family was asked
    /// for, else in the additional section.
    fn addr(&self, qname: &Name, qtype: RecordType, ip: IpAddr) -> Answer {
        let mut a = Answer::new(ResponseCode::NoError);
        let record = address_record(qname, ip, ttl_of(self.config.node_ttl));
        if family_matches(ip, qtype)
            && matches!(qtype, RecordType::A | RecordType::AAAA | RecordType::ANY)
        {
            a.answers.push(record);
        } else {
            a.additional.push(record);
        }
        a
    }

    async fn node(
        &self,
        qname: &Name,
        qtype: RecordType,
        domain: &str,
        node: &str,
        datacenter: Option<&str>,
    ) -> Result<Answer, RpcError> {
        let rpc = self.rpc.clone();
        let found = self
            .read(datacenter, |opts| {
                let (rpc, node) = (rpc.clone(), node.to_string());
                async move { rpc.catalog_node_services(&opts, node).await }
            })
            .await?;
        let Some(services) = found.value else {
            return Ok(self.negative(ResponseCode::NXDomain, domain));
        };
        let node = &services.node;
        let ttl = ttl_of(self.config.node_ttl);
        let mut a = Answer::new(ResponseCode::NoError);
        let address = self.node_address(node, datacenter, qtype);
        match qtype {
            RecordType::A | RecordType::AAAA | RecordType::ANY => {
                match address.parse::<IpAddr>() {
                    Ok(ip) if family_matches(ip, qtype) => {
                        a.answers.push(address_record(qname, ip, ttl))
                    }
                    Ok(_) => {}
                    Err(_) => a.answers.extend(cname(qname, &address, ttl)),
                }
                if qtype == RecordType::ANY {
                    a.answers.extend(meta_txt(qname, node, ttl));
                } else if self.config.enable_additional_node_meta_txt {
                    a.additional.extend(meta_txt(qname, node, ttl));
                }
            }
            RecordType::TXT => a.answers.extend(meta_txt(qname, node, ttl)),
            // Other types: NOERROR and nothing, as Consul.
            _ => {}
        }
        Ok(a)
    }

    /// Whether answers for `datacenter` use WAN addresses
    /// (`translate_wan_addrs` and another datacenter).
    fn wan(&self, datacenter: Option<&str>) -> bool {
        self.config.translate_wan_addrs && datacenter.is_some_and(|dc| dc != self.datacenter)
    }

    /// The node address to give out for `qtype` (see [`pick_address`]).
    fn node_address(&self, node: &Node, datacenter: Option<&str>, qtype: RecordType) -> String {
        pick_address(
            &node.address,
            |k| node.tagged_addresses.get(k).cloned(),
            self.wan(datacenter),
            qtype,
        )
    }

    async fn service(
        &self,
        qname: &Name,
        qtype: RecordType,
        domain: &str,
        wanted: Wanted<'_>,
        count_limit: usize,
    ) -> Result<Answer, RpcError> {
        let (all, tracked) = self.instances(&wanted).await?;
        let only_passing = self.config.only_passing;
        let mut instances: Vec<&CheckServiceNode> = all
            .iter()
            .filter(|csn| {
                if only_passing {
                    csn.checks.iter().all(|c| c.status == HealthStatus::Passing)
                } else {
                    !csn.checks
                        .iter()
                        .any(|c| c.status == HealthStatus::Critical)
                }
            })
            .collect();
        if instances.is_empty() {
            return Ok(self.negative(ResponseCode::NXDomain, domain));
        }
        // A random order; with a count limit only the first few need one.
        let needed = count_limit.min(instances.len());
        instances.partial_shuffle(&mut rand::rng(), needed);
        let ttl = ttl_of(self.config.service_ttl(wanted.service));
        let from = Source {
            datacenter: wanted.datacenter,
            domain,
            ttl,
        };
        let mut answer = self.instance_records(qname, qtype, &instances, &from, count_limit);
        if let Some((freshness, token)) = tracked {
            answer.pool = crate::fast::Pool::of(&answer, qtype, freshness, token, || {
                instances
                    .iter()
                    .map(|csn| self.instance_address(csn, from.datacenter, qtype).0)
            });
        }
        Ok(answer)
    }

    /// A prepared query's answer: its instances, in the order the servers
    /// gave (shuffled, then by distance), with the query's TTL, else the
    /// service's.
    async fn query(
        &self,
        qname: &Name,
        qtype: RecordType,
        domain: &str,
        (query, datacenter): (&str, Option<&str>),
        count_limit: usize,
        client: Option<std::net::IpAddr>,
    ) -> Result<Answer, RpcError> {
        let source_ip = client.map(|ip| ip.to_string()).unwrap_or_default();
        let key: QueryKey = (
            query.to_string(),
            datacenter.unwrap_or("").to_string(),
            self.agent_node.clone(),
            source_ip.clone(),
        );
        let cached = match &self.queries {
            Some(cache) if cache.holds(&key) => cache
                .get(key.clone(), 0, std::time::Duration::ZERO)
                .await
                .ok()
                .map(|f| f.value),
            _ => None,
        };
        let found = match cached {
            Some(found) => found,
            None => {
                let rpc = self.rpc.clone();
                let request = legate_types::prepared_query::ExecuteRequest {
                    id_or_name: query.to_string(),
                    agent_node: self.agent_node.clone(),
                    ..Default::default()
                };
                let found = self
                    .read(datacenter, |mut opts| {
                        let (rpc, request) = (rpc.clone(), request.clone());
                        opts.source_ip = source_ip.clone();
                        async move { rpc.prepared_query_execute(&opts, request).await }
                    })
                    .await;
                match found {
                    Ok(found) => {
                        // Followed from now on: later lookups are answered here.
                        if let Some(cache) = &self.queries {
                            cache.follow(key);
                        }
                        Arc::new(found.value)
                    }
                    Err(RpcError::NotFound(_)) => {
                        return Ok(self.negative(ResponseCode::NXDomain, domain))
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        if found.nodes.is_empty() {
            return Ok(self.negative(ResponseCode::NXDomain, domain));
        }
        // The query's TTL (0 when it does not parse, as Consul), else the
        // service's.
        let ttl = if found.dns.ttl.is_empty() {
            ttl_of(self.config.service_ttl(&found.service))
        } else {
            legate_types::duration::parse_go_duration(&found.dns.ttl)
                .map(ttl_of)
                .unwrap_or(0)
        };
        let instances: Vec<&CheckServiceNode> = found.nodes.iter().collect();
        let from = Source {
            datacenter: Some(found.datacenter.as_str()).filter(|dc| *dc != self.datacenter),
            domain,
            ttl,
        };
        Ok(self.instance_records(qname, qtype, &instances, &from, count_limit))
    }

    /// A, AAAA or SRV records of `instances` (non-empty), in their order.
    fn instance_records(
        &self,
        qname: &Name,
        qtype: RecordType,
        instances: &[&CheckServiceNode],
        from: &Source<'_>,
        count_limit: usize,
    ) -> Answer {
        let (domain, ttl) = (from.domain, from.ttl);
        let dc = from.datacenter.unwrap_or(&self.datacenter);
        let mut a = Answer::new(ResponseCode::NoError);
        match qtype {
            RecordType::A | RecordType::AAAA | RecordType::ANY => {
                let limit = match self.config.a_record_limit {
                    0 => count_limit,
                    n => n.min(count_limit),
                };
                let mut seen = BTreeSet::new();
                let mut first_cname = None;
                for csn in instances {
                    let (address, _) = self.instance_address(csn, from.datacenter, qtype);
                    match address.parse::<IpAddr>() {
                        Ok(ip) if family_matches(ip, qtype) && seen.insert(ip) => {
                            if a.answers.len() < limit {
                                a.answers.push(address_record(qname, ip, ttl));
                            } else {
                                a.cut = count_limit < usize::MAX;
                                break;
                            }
                        }
                        Ok(_) => {}
                        Err(_) if first_cname.is_none() => {
                            first_cname = cname(qname, &address, ttl)
                        }
                        Err(_) => {}
                    }
                }
                // Addresses win over host names; else the first host name.
                if a.answers.is_empty() {
                    a.answers.extend(first_cname);
                }
            }
            RecordType::SRV => {
                let mut seen = BTreeSet::new();
                for csn in instances {
                    let (address, port) = self.instance_address(csn, from.datacenter, qtype);
                    if address.is_empty()
                        || !seen.insert((csn.node.node.clone(), address.clone(), port))
                    {
                        continue;
                    }
                    if a.answers.len() >= count_limit {
                        a.cut = true;
                        break;
                    }
                    let weight = match csn.aggregate_status() {
                        HealthStatus::Warning => csn.service.weights.warning,
                        _ => csn.service.weights.passing,
                    }
                    .clamp(1, u16::MAX as i64) as u16;
                    let Some(target) = self.srv_target(csn, &address, dc, domain, ttl, &mut a)
                    else {
                        continue;
                    };
                    a.answers.push(Record::from_rdata(
                        qname.clone(),
                        ttl,
                        RData::SRV(SRV::new(1, weight, port, target)),
                    ));
                }
            }
            _ => {}
        }
        if a.answers.is_empty() {
            a.authority.extend(self.soa(domain));
        }
        a
    }

    /// The address and port an instance is reached at for `qtype`: its
    /// service address (tagged addresses as for nodes; a WAN one brings its
    /// port), else its node's.
    fn instance_address(
        &self,
        csn: &CheckServiceNode,
        datacenter: Option<&str>,
        qtype: RecordType,
    ) -> (String, u16) {
        let tagged = &csn.service.tagged_addresses;
        let wan = self.wan(datacenter);
        let address = pick_address(
            &csn.service.address,
            |k| tagged.get(k).map(|t| t.address.clone()),
            wan,
            qtype,
        );
        let port = match tagged.get("wan").filter(|t| wan && t.port != 0) {
            Some(t) => t.port,
            None => csn.service.port,
        };
        if address.is_empty() {
            (self.node_address(&csn.node, datacenter, qtype), port)
        } else {
            (address, port)
        }
    }

    /// An SRV target for an instance, adding its address (and the node's
    /// metadata) to the additional section: the node's name when the
    /// service has no address of its own, `<hex>.addr` for a service IP, the
    /// host name itself otherwise.
    fn srv_target(
        &self,
        csn: &CheckServiceNode,
        address: &str,
        dc: &str,
        domain: &str,
        ttl: u32,
        a: &mut Answer,
    ) -> Option<Name> {
        let ip = address.parse::<IpAddr>();
        // The node's own name when the address is the node's as registered.
        if address == csn.node.address {
            if let Ok(ip) = ip {
                let node_name = name(&format!("{}.node.{dc}.{domain}.", csn.node.node))?;
                a.additional.push(address_record(&node_name, ip, ttl));
                if self.config.enable_additional_node_meta_txt {
                    a.additional.extend(meta_txt(&node_name, &csn.node, ttl));
                }
                return Some(node_name);
            }
        } else if let Ok(ip) = ip {
            let target = name(&format!("{}.addr.{dc}.{domain}.", names::addr_label(ip)))?;
            a.additional.push(address_record(&target, ip, ttl));
            return Some(target);
        }
        name(&format!("{}.", address.trim_end_matches('.')))
    }

    /// Reverse lookups of node addresses in this datacenter.
    async fn reverse(&self, qname: &Name, ip: IpAddr) -> Result<Answer, NotOurs> {
        let rpc = self.rpc.clone();
        let nodes = self
            .read(None, |opts| {
                let rpc = rpc.clone();
                async move { rpc.catalog_nodes(&opts).await }
            })
            .await;
        let domain = self.config.domain.clone();
        let nodes = match nodes {
            Ok(n) => n.value,
            Err(e) => {
                tracing::warn!(name = %qname, error = %e, "DNS reverse lookup failed");
                return Ok(Answer::new(ResponseCode::ServFail));
            }
        };
        let found = nodes
            .iter()
            .find(|n| n.address.parse::<IpAddr>() == Ok(ip))
            .and_then(|n| name(&format!("{}.node.{}.{domain}.", n.node, self.datacenter)));
        match found {
            Some(target) => {
                let mut a = Answer::new(ResponseCode::NoError);
                a.answers.push(Record::from_rdata(
                    qname.clone(),
                    0,
                    RData::PTR(PTR(target)),
                ));
                Ok(a)
            }
            // Not a catalog address: recursors may know it.
            None if !self.config.recursors.is_empty() => Err(NotOurs),
            None => Ok(self.negative(ResponseCode::NXDomain, &domain)),
        }
    }

    /// Applies the size limit of the transport (512 bytes or the EDNS
    /// buffer over UDP, 64 KiB over TCP): when the answer does not fit, the
    /// authority section goes first, then answers from the end, each with
    /// the additional records of its SRV target. TC is set when answers were
    /// left out and `enable_truncate` is on, as in Consul.
    fn trim(&self, qname: &Name, qtype: RecordType, transport: Transport, a: &mut Answer) {
        let max_size = match transport {
            Transport::Udp { max_size } => max_size.max(512) as usize,
            Transport::Tcp => MAX_MESSAGE,
        } - OPT_ROOM;
        if a.answers.len() > 1 && encoded_len(qname, qtype, a) > max_size {
            a.authority.clear();
            // Sizes without name compression: an upper bound, so what is
            // kept always fits.
            let mut by_owner: std::collections::BTreeMap<Name, Vec<Record>> = Default::default();
            for r in std::mem::take(&mut a.additional) {
                by_owner.entry(r.name.clone()).or_default().push(r);
            }
            let mut used = 12 + record_len_bound(&Query::query(qname.clone(), qtype));
            let mut kept = Vec::new();
            for answer in std::mem::take(&mut a.answers) {
                let target = match &answer.data {
                    RData::SRV(srv) => Some(srv.target.clone()),
                    _ => None,
                };
                let extra: Vec<Record> =
                    target.and_then(|t| by_owner.remove(&t)).unwrap_or_default();
                let cost =
                    record_len_bound(&answer) + extra.iter().map(record_len_bound).sum::<usize>();
                if used + cost > max_size && !kept.is_empty() {
                    a.cut = true;
                    break;
                }
                used += cost;
                kept.push(answer);
                a.additional.extend(extra);
            }
            a.answers = kept;
        }
        if a.cut {
            keep_additional_for_answers(a);
            a.truncated = self.config.enable_truncate;
        }
    }
}

/// The encoded size of a record (or question) on its own: names are not
/// compressed against anything, so this bounds its size in any message.
fn record_len_bound<T: hickory_proto::serialize::binary::BinEncodable>(item: &T) -> usize {
    let mut bytes = Vec::with_capacity(64);
    let mut encoder = hickory_proto::serialize::binary::BinEncoder::new(&mut bytes);
    match item.emit(&mut encoder) {
        Ok(()) => bytes.len(),
        Err(_) => MAX_MESSAGE,
    }
}

/// Keeps only the additional records that name a kept SRV target.
fn keep_additional_for_answers(a: &mut Answer) {
    let targets: BTreeSet<Name> = a
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(srv) => Some(srv.target.clone()),
            _ => None,
        })
        .collect();
    a.additional.retain(|r| targets.contains(&r.name));
}

/// What a service lookup asks for.
/// Where instances come from, for their records.
struct Source<'a> {
    /// Another datacenter (its addresses may be translated), or `None`.
    datacenter: Option<&'a str>,
    /// The domain the question was under.
    domain: &'a str,
    /// The records' TTL.
    ttl: u32,
}

struct Wanted<'a> {
    service: &'a str,
    tag: Option<&'a str>,
    datacenter: Option<&'a str>,
    connect: bool,
}

/// The address to give out, as Consul chooses among tagged addresses:
/// `lan_ipv4` / `lan_ipv6` (with WAN translation: `wan`, `wan_ipv4`,
/// `wan_ipv6` first) by the family asked for; ANY and SRV prefer IPv6.
/// Empty when nothing suits an A or AAAA question.
fn pick_address(
    default: &str,
    tagged: impl Fn(&str) -> Option<String>,
    wan: bool,
    qtype: RecordType,
) -> String {
    let get = |k: &str| tagged(k).filter(|a| !a.is_empty());
    let mut default = default.to_string();
    let (mut v4, mut v6) = (get("lan_ipv4"), get("lan_ipv6"));
    if wan {
        default = get("wan").unwrap_or(default);
        v4 = get("wan_ipv4").or(v4);
        v6 = get("wan_ipv6").or(v6);
    }
    // A host name suits either family.
    let suits = |a: &str, want_v6: bool| {
        a.parse::<IpAddr>()
            .map_or(true, |ip| ip.is_ipv6() == want_v6)
    };
    match qtype {
        RecordType::A => v4.unwrap_or_else(|| {
            if suits(&default, false) {
                default
            } else {
                String::new()
            }
        }),
        RecordType::AAAA => v6.unwrap_or_else(|| {
            if suits(&default, true) {
                default
            } else {
                String::new()
            }
        }),
        _ => v6.or(v4).unwrap_or(default),
    }
}

/// A CNAME to a host name.
fn cname(owner: &Name, host: &str, ttl: u32) -> Option<Record> {
    if host.is_empty() {
        return None;
    }
    let target = name(&format!("{}.", host.trim_end_matches('.')))?;
    Some(Record::from_rdata(
        owner.clone(),
        ttl,
        RData::CNAME(CNAME(target)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pick(default: &str, tags: &[(&str, &str)], wan: bool, qtype: RecordType) -> String {
        let tags: BTreeMap<String, String> = tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pick_address(default, |k| tags.get(k).cloned(), wan, qtype)
    }

    #[test]
    fn addresses_are_chosen_as_consul_chooses_them() {
        let dual = [("lan_ipv4", "10.0.0.4"), ("lan_ipv6", "2001:db8::6")];
        assert_eq!(pick("10.0.0.1", &dual, false, RecordType::A), "10.0.0.4");
        assert_eq!(
            pick("10.0.0.1", &dual, false, RecordType::AAAA),
            "2001:db8::6"
        );
        assert_eq!(
            pick("10.0.0.1", &dual, false, RecordType::SRV),
            "2001:db8::6"
        );
        assert_eq!(pick("10.0.0.1", &[], false, RecordType::AAAA), "");
        assert_eq!(pick("2001:db8::1", &[], false, RecordType::A), "");
        assert_eq!(
            pick("db.example.com", &[], false, RecordType::A),
            "db.example.com"
        );
        // WAN translation only when asked for.
        let wan = [("wan", "198.18.0.1"), ("lan_ipv4", "10.0.0.4")];
        assert_eq!(pick("10.0.0.1", &wan, false, RecordType::SRV), "10.0.0.4");
        assert_eq!(
            pick("10.0.0.1", &[("wan", "198.18.0.1")], true, RecordType::A),
            "198.18.0.1"
        );
        assert_eq!(
            pick(
                "10.0.0.1",
                &[("wan_ipv4", "198.18.0.2")],
                true,
                RecordType::A
            ),
            "198.18.0.2"
        );
    }
}
