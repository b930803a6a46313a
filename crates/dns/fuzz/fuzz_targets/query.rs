//! Arbitrary bytes as a DNS request: decoded as hickory's server would, then
//! every question goes through Legate's resolver against an in-memory
//! server with a few services. Nothing may panic and every answer must
//! encode.
#![no_main]

use std::sync::{Arc, OnceLock};

use hickory_proto::op::{Message, OpCode, Query};
use legate_dns::{Resolver, Transport};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/fixture.rs"]
mod fixture;

struct State {
    runtime: tokio::runtime::Runtime,
    resolver: Arc<Resolver>,
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let resolver = runtime.block_on(fixture::resolver());
        State { runtime, resolver }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(request) = Message::from_vec(data) else {
        return;
    };
    let state = state();
    for query in request.queries.iter().take(4) {
        for transport in [Transport::Udp { max_size: 512 }, Transport::Tcp] {
            let Ok(answer) = state
                .runtime
                .block_on(state.resolver.resolve(query.name(), query.query_type(), transport))
            else {
                continue;
            };
            let mut response = Message::response(request.metadata.id, OpCode::Query);
            response.add_query(Query::query(query.name().clone(), query.query_type()));
            response.add_answers(answer.answers);
            response.add_authorities(answer.authority);
            response.add_additionals(answer.additional);
            let bytes = response.to_vec().expect("answers encode");
            if transport != (Transport::Tcp) {
                assert!(bytes.len() <= 512);
            }
        }
    }
});
