//! The fast path against the reference path: the same random valid
//! queries, and the same queries broken in every way, answered the way
//! the UDP server answers them (a template when one is current, else the
//! resolver) and by the resolver alone, compared byte for byte (the ID
//! and the choice and order of shuffled addresses aside), while the
//! catalog changes underneath.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};
use legate_agent::dns_config::DnsConfig;
use legate_server::{Server, ServerConfig};
use legate_types::rpc::ServerRpc;
use legate_types::{RegisterRequest, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fast::FastAnswers;
use crate::udp::reference_answer;
use crate::{DnsHandler, Resolver, Transport};

const CLIENT: &str = "127.0.0.1:5353";

async fn register(server: &Server, body: serde_json::Value) {
    let request: RegisterRequest = serde_json::from_value(body).unwrap();
    server
        .catalog_register(&WriteOptions::default(), request)
        .await
        .unwrap();
}

/// `name` with instances at `addresses` (a critical check on the ones
/// marked `!`), each on its own node.
async fn service(server: &Server, name: &str, addresses: &[&str]) {
    for (i, address) in addresses.iter().enumerate() {
        let (address, critical) = match address.strip_prefix('!') {
            Some(a) => (a, true),
            None => (*address, false),
        };
        let checks = if critical {
            serde_json::json!([{"CheckID": format!("c-{name}{i}"), "Name": "down",
                "Status": "critical", "ServiceID": format!("{name}{i}")}])
        } else {
            serde_json::json!([])
        };
        register(
            server,
            serde_json::json!({
                "Node": format!("{name}-n{i}"), "Address": "10.9.0.1",
                "NodeMeta": {"zone": "a"},
                "Service": {"ID": format!("{name}{i}"), "Service": name, "Port": 8000 + i,
                            "Address": address, "Tags": [if i % 2 == 0 { "even" } else { "odd" }]},
                "Checks": checks,
            }),
        )
        .await;
    }
}

async fn catalog() -> Arc<Server> {
    let server = Server::start(ServerConfig::in_memory("dc1", "differential"))
        .await
        .unwrap();
    assert!(server.wait_for_leader(Duration::from_secs(10)).await);
    service(&server, "web", &["10.0.0.1"]).await;
    let mut big: Vec<String> = (0..60)
        .map(|i| format!("10.1.{}.{}", i / 200, i % 200 + 1))
        .collect();
    big.extend(["10.1.0.1", "10.1.0.2"].map(String::from)); // duplicates
    big.extend(["!10.1.9.1", "!10.1.9.2", "2001:db8::7", "big.example.com"].map(String::from));
    let big: Vec<&str> = big.iter().map(String::as_str).collect();
    service(&server, "big", &big).await;
    service(
        &server,
        "six",
        &["2001:db8::1", "2001:db8::2", "2001:db8::3"],
    )
    .await;
    service(&server, "host", &["a.example.com", "b.example.com"]).await;
    service(&server, "down", &["!10.3.0.1"]).await;
    service(&server, "mixed", &["10.4.0.1", "2001:db8::4", "10.4.0.2"]).await;
    server
}

const NAMES: &[&str] = &[
    "web.service.consul",
    "WeB.SeRvIcE.cOnSuL",
    "big.service.consul",
    "big.service.dc1.consul",
    "big.service.dc9.consul",
    "even.big.service.consul",
    "odd.big.service.consul",
    "six.service.consul",
    "mixed.service.consul",
    "host.service.consul",
    "down.service.consul",
    "missing.service.consul",
    "_big._tcp.service.consul",
    "_web._even.service.consul",
    "big.connect.consul",
    "web-n0.node.consul",
    "web-n0.node.dc1.consul",
    "0a000001.addr.consul",
    "consul",
    "service.consul",
    "example.com",
    "1.0.0.10.in-addr.arpa",
];

const TYPES: &[RecordType] = &[
    RecordType::A,
    RecordType::A,
    RecordType::A,
    RecordType::AAAA,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::ANY,
    RecordType::TXT,
    RecordType::MX,
    RecordType::SOA,
    RecordType::NS,
    RecordType::PTR,
];

/// A random valid query.
fn random_query(rng: &mut StdRng) -> Vec<u8> {
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let qtype = TYPES[rng.random_range(0..TYPES.len())];
    let mut message = Message::new(rng.random(), MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = rng.random_bool(0.7);
    message.metadata.checking_disabled = rng.random_bool(0.1);
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if rng.random_bool(0.5) {
        let mut edns = Edns::new();
        edns.set_max_payload([0, 512, 1232, 4096, 65_535][rng.random_range(0..5)]);
        edns.set_dnssec_ok(rng.random_bool(0.2));
        if rng.random_bool(0.3) {
            edns.options_mut().insert(EdnsOption::Unknown(
                EdnsCode::Cookie.into(),
                rng.random::<[u8; 8]>().to_vec(),
            ));
        }
        message.set_edns(edns);
    }
    message.to_vec().unwrap()
}

/// The query broken one way or another.
fn mutate(rng: &mut StdRng, query: &[u8]) -> Vec<u8> {
    let mut broken = query.to_vec();
    match rng.random_range(0..5) {
        0 => broken.truncate(rng.random_range(0..query.len())),
        1 => {
            let at = rng.random_range(0..broken.len());
            broken[at] ^= 1 << rng.random_range(0..8);
        }
        2 => broken.extend((0..rng.random_range(1..20)).map(|_| rng.random::<u8>())),
        3 => {
            let at = rng.random_range(2..broken.len());
            broken[at] = rng.random();
        }
        _ => broken[2] ^= 0x80, // a response
    }
    broken
}

/// A response's header and question, answer records, and the rest.
type Sections<'a> = (&'a [u8], Vec<&'a [u8]>, &'a [u8]);

/// Splits a response into its header and question, its answer records
/// and what follows; `None` if it does not parse that way.
fn sections(message: &[u8]) -> Option<Sections<'_>> {
    let parsed = Message::from_vec(message).ok()?;
    let mut at = 12;
    for _ in 0..parsed.queries.len() {
        at = crate::fast::skip_name(message, at, at)? + 4;
    }
    let head = &message[..at];
    let mut records = Vec::new();
    for _ in 0..parsed.answers.len() {
        let rdata = crate::fast::skip_name(message, at, message.len())? + 10;
        let length = u16::from_be_bytes([message[rdata - 2], message[rdata - 1]]) as usize;
        records.push(&message[at..rdata + length]);
        at = rdata + length;
    }
    Some((head, records, &message[at..]))
}

/// Whether the fast answer is the reference answer up to the shuffled
/// addresses: same bytes, or same header, question, record framing and
/// trailing sections, with distinct answer records each of which is one
/// of `everything` (every record the question may be answered with).
fn equivalent(fast: &[u8], reference: &[u8], everything: &[Vec<u8>]) -> bool {
    if fast == reference {
        return true;
    }
    let (Some((fh, fr, ft)), Some((rh, rr, rt))) = (sections(fast), sections(reference)) else {
        return false;
    };
    if fast.len() != reference.len() || fh[2..] != rh[2..] || ft != rt || fr.len() != rr.len() {
        return false;
    }
    let distinct: std::collections::HashSet<&[u8]> = fr.iter().copied().collect();
    distinct.len() == fr.len() && fr.iter().all(|r| everything.iter().any(|e| e == r))
}

struct Paths {
    handler: DnsHandler,
    /// The same settings without `a_record_limit`, asked over TCP for
    /// every record a question may get.
    unlimited: Resolver,
    /// The templates the UDP server would answer from.
    fast: FastAnswers,
    /// Templates built by the reference path and never read.
    unused: FastAnswers,
}

impl Paths {
    fn new(rpc: Arc<dyn ServerRpc>, config: DnsConfig) -> Paths {
        Paths::with_token(rpc, config, Arc::new(String::new))
    }

    fn with_token(rpc: Arc<dyn ServerRpc>, config: DnsConfig, token: crate::DnsToken) -> Paths {
        let unlimited = Resolver::new(
            rpc.clone(),
            DnsConfig {
                a_record_limit: 0,
                ..config.clone()
            },
            "dc1".into(),
        );
        let resolver = Arc::new(Resolver::with_token(rpc, config, "dc1".into(), token));
        Paths {
            handler: DnsHandler::new(resolver.clone()),
            fast: FastAnswers::new(resolver.token_source()),
            unused: FastAnswers::new(resolver.token_source()),
            unlimited,
        }
    }

    /// The UDP server's answer, and whether the fast path gave it.
    async fn served(&self, query: &[u8]) -> (Option<Vec<u8>>, bool) {
        let mut out = Vec::new();
        if self.fast.answer(query, &mut out) {
            return (Some(out), true);
        }
        let client: SocketAddr = CLIENT.parse().unwrap();
        (
            reference_answer(&self.handler, &self.fast, query, client).await,
            false,
        )
    }

    async fn reference(&self, query: &[u8]) -> Option<Vec<u8>> {
        let client: SocketAddr = CLIENT.parse().unwrap();
        reference_answer(&self.handler, &self.unused, query, client).await
    }

    /// Every answer record the question in `query` may get, framed as in
    /// `sample` (the reference's answer to it): from a TCP-sized answer.
    async fn everything(&self, query: &[u8], sample: &[u8]) -> Vec<Vec<u8>> {
        let Ok(parsed) = Message::from_vec(query) else {
            return Vec::new();
        };
        let Some(q) = parsed.queries.first() else {
            return Vec::new();
        };
        let Ok(all) = self
            .unlimited
            .resolve(q.name(), q.query_type(), Transport::Tcp)
            .await
        else {
            return Vec::new();
        };
        let Some((_, records, _)) = sections(sample) else {
            return Vec::new();
        };
        // The sample's framings (owner, type, class, TTL, length) of a
        // first and a later record, with each address's data.
        let framings: Vec<&[u8]> = records.iter().map(|r| &r[..rdata_start(r)]).collect();
        let mut everything = Vec::new();
        for r in &all.answers {
            let rdata = match &r.data {
                RData::A(a) => a.0.octets().to_vec(),
                RData::AAAA(a) => a.0.octets().to_vec(),
                _ => continue,
            };
            for framing in &framings {
                everything.push([framing, &rdata[..]].concat());
            }
        }
        everything
    }

    /// Sends `query` down both paths and checks they agree; true when the
    /// fast path answered.
    async fn check(&self, query: &[u8]) -> bool {
        for attempt in 0..2 {
            let (served, fast) = self.served(query).await;
            let reference = self.reference(query).await;
            let agree = match (&served, &reference) {
                (None, None) => true,
                (Some(s), Some(r)) if s == r => true,
                // The fast path: the reference's bytes, addresses aside.
                (Some(s), Some(r)) if fast => equivalent(s, r, &self.everything(query, r).await),
                // Both from the reference path, which shuffles too (and
                // how many SRV records fit depends on their order).
                (Some(s), Some(r)) => self.same_but_shuffled(query, s, r).await,
                _ => false,
            };
            if agree {
                return fast;
            }
            // A negative answer's SOA serial is the clock's second: once more.
            assert!(
                attempt == 0,
                "the paths disagree on {query:02x?}:\nserved {served:02x?} (fast: {fast})\nreference {reference:02x?}"
            );
        }
        unreachable!()
    }

    /// Two answers of the reference path to one query: same code, flags
    /// and question, and records all among the full (TCP) answer's.
    async fn same_but_shuffled(&self, query: &[u8], a: &[u8], b: &[u8]) -> bool {
        let (Ok(a), Ok(b), Ok(q)) = (
            Message::from_vec(a),
            Message::from_vec(b),
            Message::from_vec(query),
        ) else {
            return false;
        };
        let Some(question) = q.queries.first() else {
            return false;
        };
        // Every record the question may get: a full answer, asked again
        // while a record is missing (a host name is one picked at random).
        let (mut answers, mut additional) = (Vec::new(), Vec::new());
        let wanted: Vec<_> = [&a.answers, &b.answers, &a.additionals, &b.additionals]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for _ in 0..32 {
            let Ok(all) = self
                .unlimited
                .resolve(question.name(), question.query_type(), Transport::Tcp)
                .await
            else {
                return false;
            };
            answers.extend(all.answers);
            additional.extend(all.additional);
            if wanted.iter().all(|r| {
                answers.contains(r) || additional.contains(r) || r.record_type() == RecordType::OPT
            }) {
                break;
            }
        }
        let among = |records: &[hickory_proto::rr::Record], pool: &[hickory_proto::rr::Record]| {
            records
                .iter()
                .all(|r| pool.contains(r) || r.record_type() == RecordType::OPT)
        };
        a.metadata == b.metadata
            && a.queries == b.queries
            && a.authorities == b.authorities
            && among(&a.answers, &answers)
            && among(&b.answers, &answers)
            && among(&a.additionals, &additional)
            && among(&b.additionals, &additional)
    }
}

/// Where a record's data starts.
fn rdata_start(record: &[u8]) -> usize {
    crate::fast::skip_name(record, 0, usize::MAX).unwrap_or(0) + 10
}

async fn differential(config: DnsConfig, seed: u64, queries: usize) {
    let server = catalog().await;
    let rpc: Arc<dyn ServerRpc> = server.clone();
    let paths = Paths::new(rpc, config);
    let mut rng = StdRng::seed_from_u64(seed);
    let pool: Vec<Vec<u8>> = (0..200).map(|_| random_query(&mut rng)).collect();
    let mut fast_answers = 0;
    for i in 0..queries {
        // Mostly queries asked before (as clients ask), some new ones.
        let query = if rng.random_bool(0.8) {
            pool[rng.random_range(0..pool.len())].clone()
        } else {
            random_query(&mut rng)
        };
        if paths.check(&query).await {
            fast_answers += 1;
        }
        if rng.random_bool(0.1) {
            paths.check(&mutate(&mut rng, &query)).await;
        }
        if i % 2500 == 1000 {
            change_catalog(&server, &paths, i).await;
        }
    }
    eprintln!("{fast_answers} of {queries} queries answered by the fast path");
    assert!(
        fast_answers > queries / 10,
        "the fast path answered only {fast_answers} of {queries} queries"
    );
}

/// Changes `web`'s and `big`'s instances and waits until the resolver's
/// cache sees it, so both paths read the same catalog again.
async fn change_catalog(server: &Server, paths: &Paths, round: usize) {
    let address = format!("10.7.{}.{}", round / 250, round % 250 + 1);
    service(server, "web", &[&address]).await;
    service(server, "big", &["!10.1.0.3"]).await;
    let query = {
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(
            Name::from_ascii("web.service.consul").unwrap(),
            RecordType::A,
        ));
        m.to_vec().unwrap()
    };
    let wanted: std::net::Ipv4Addr = address.parse().unwrap();
    for _ in 0..500 {
        let answer = paths.reference(&query).await.unwrap();
        if answer.ends_with(&wanted.octets()) {
            // The template built before the change must not serve.
            let (served, _) = paths.served(&query).await;
            assert!(served.unwrap().ends_with(&wanted.octets()));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the cache never saw {address}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_random_queries_agree_with_default_settings() {
    differential(DnsConfig::default(), 1, 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_agree_with_limits_and_truncation() {
    let config = DnsConfig {
        enable_truncate: true,
        a_record_limit: 5,
        udp_answer_limit: 2,
        only_passing: true,
        ..DnsConfig::default()
    };
    differential(config, 2, 3_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_dns_token_is_read_with_at_once() {
    let server = catalog().await;
    let token = Arc::new(std::sync::Mutex::new("first".to_string()));
    let source = token.clone();
    let rpc: Arc<dyn ServerRpc> = server.clone();
    let paths = Paths::with_token(
        rpc,
        DnsConfig::default(),
        Arc::new(move || source.lock().unwrap().clone()),
    );
    let mut m = Message::new(9, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(
        Name::from_ascii("big.service.consul").unwrap(),
        RecordType::A,
    ));
    let query = m.to_vec().unwrap();
    assert!(
        !paths.served(&query).await.1,
        "the first answer is the reference's"
    );
    assert!(
        paths.served(&query).await.1,
        "the second is the fast path's"
    );
    *token.lock().unwrap() = "second".into();
    assert!(
        !paths.served(&query).await.1,
        "a template read with another token must not serve"
    );
    assert!(paths.served(&query).await.1);
}

mod arbitrary_bytes {
    use proptest::prelude::*;

    use super::*;

    thread_local! {
        static STATE: (tokio::runtime::Runtime, std::cell::OnceCell<Paths>) = (
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
            std::cell::OnceCell::new(),
        );
    }

    /// Both paths' answers to `bytes` agree, with the fast path warmed by
    /// the valid query they may start from.
    fn agree(valid: &[u8], bytes: &[u8]) {
        STATE.with(|(rt, paths)| {
            let paths = paths.get_or_init(|| {
                rt.block_on(async {
                    let server = catalog().await;
                    Paths::new(server, DnsConfig::default())
                })
            });
            rt.block_on(async {
                paths.check(valid).await;
                paths.check(valid).await;
                paths.check(bytes).await;
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn any_bytes_get_the_same_answer_from_both_paths(
            seed in any::<u64>(),
            keep in 0usize..80,
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            // A valid query's first `keep` bytes, then anything.
            let valid = random_query(&mut StdRng::seed_from_u64(seed));
            let mut bytes = valid[..keep.min(valid.len())].to_vec();
            bytes.extend(tail);
            agree(&valid, &bytes);
        }
    }
}
