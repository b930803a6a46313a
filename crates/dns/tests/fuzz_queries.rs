//! Property tests in the role of a fuzzer for the query path: arbitrary
//! names (label soup around our keywords and domains, any record type)
//! and arbitrary bytes decoded as DNS messages go through the resolver
//! against a real in-memory server. Nothing may panic, every answer must
//! encode (within 512 bytes over plain UDP), and a name under our domain
//! always gets an authoritative answer.

use std::sync::Arc;

use hickory_proto::op::{Message, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use legate_dns::{Resolver, Transport};
use proptest::prelude::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[path = "support/fixture.rs"]
mod fixture;

/// The fixture's resolver, on `rt`.
fn resolver(rt: &tokio::runtime::Runtime) -> Arc<Resolver> {
    rt.block_on(fixture::resolver())
}

/// Checks one question: no panic, an answer that encodes.
fn check(
    rt: &tokio::runtime::Runtime,
    resolver: &Resolver,
    name: &Name,
    qtype: RecordType,
    udp: bool,
) {
    let transport = if udp {
        Transport::Udp { max_size: 512 }
    } else {
        Transport::Tcp
    };
    let Ok(answer) = rt.block_on(resolver.resolve(name, qtype, transport)) else {
        return; // not ours: the recursors' business
    };
    assert!(answer.authoritative);
    let mut message = Message::response(1, OpCode::Query);
    message.add_query(Query::query(name.clone(), qtype));
    message.metadata.response_code = answer.code;
    message.add_answers(answer.answers);
    message.add_authorities(answer.authority);
    message.add_additionals(answer.additional);
    let bytes = message.to_vec().expect("every answer encodes");
    if udp {
        assert!(
            bytes.len() <= 512,
            "{} bytes over UDP for {name}",
            bytes.len()
        );
    }
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("service".to_string()),
        Just("node".to_string()),
        Just("connect".to_string()),
        Just("addr".to_string()),
        Just("query".to_string()),
        Just("web".to_string()),
        Just("_web".to_string()),
        Just("_tcp".to_string()),
        Just("v1".to_string()),
        Just("dc1".to_string()),
        Just("n0".to_string()),
        Just("7f000001".to_string()),
        "[a-z0-9_-]{1,12}",
        "[0-9a-f]{32}",
    ]
}

fn domain() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("consul".to_string()),
        Just("alt.example".to_string()),
        Just("in-addr.arpa".to_string()),
        Just("example.com".to_string()),
    ]
}

fn qtype() -> impl Strategy<Value = RecordType> {
    prop_oneof![
        Just(RecordType::A),
        Just(RecordType::AAAA),
        Just(RecordType::SRV),
        Just(RecordType::ANY),
        Just(RecordType::TXT),
        Just(RecordType::SOA),
        Just(RecordType::NS),
        Just(RecordType::PTR),
        Just(RecordType::AXFR),
        any::<u16>().prop_map(RecordType::from),
    ]
}

thread_local! {
    static STATE: (tokio::runtime::Runtime, std::cell::OnceCell<Arc<Resolver>>) =
        (runtime(), std::cell::OnceCell::new());
}

fn with_resolver(f: impl FnOnce(&tokio::runtime::Runtime, &Resolver)) {
    STATE.with(|(rt, cell)| {
        let resolver = cell.get_or_init(|| resolver(rt));
        f(rt, resolver)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_name_under_any_domain_is_answered_without_panicking(
        labels in proptest::collection::vec(label(), 0..6),
        domain in domain(),
        qtype in qtype(),
        udp in any::<bool>(),
    ) {
        let mut text = labels.join(".");
        if !text.is_empty() {
            text.push('.');
        }
        text.push_str(&domain);
        text.push('.');
        if let Ok(name) = Name::from_ascii(&text) {
            with_resolver(|rt, resolver| check(rt, resolver, &name, qtype, udp));
        }
    }

    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(message) = Message::from_vec(&bytes) {
            with_resolver(|rt, resolver| {
                for query in message.queries.iter().take(2) {
                    check(rt, resolver, query.name(), query.query_type(), true);
                }
            });
        }
    }
}
