//! The DNS interface: Consul's names (`web.service.consul`,
//! `node1.node.consul`, `web.connect.consul`, RFC 2782 SRV names, `.addr`,
//! reverse lookups) answered over UDP and TCP from the catalog as the
//! agent's servers see it, with Consul's health filtering, TTLs, answer
//! limits and truncation, and recursors for everything else.
//!
//! Depends on `legate-types` and `legate-agent` (for the agent's RPC client
//! and configuration); hickory stays inside this crate.

#[cfg(test)]
mod differential;
mod fast;
pub mod names;
mod recursor;
mod resolve;
mod tcp;
mod udp;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Record};
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

pub use resolve::{Answer, DnsToken, NotOurs, Resolver, Transport, CACHE_IDLE_TTL};

/// The request handler hickory's server calls for every query.
pub struct DnsHandler {
    resolver: Arc<Resolver>,
}

impl DnsHandler {
    /// A handler answering through `resolver`.
    pub fn new(resolver: Arc<Resolver>) -> DnsHandler {
        DnsHandler { resolver }
    }
}

/// Sends a response with the given code and sections.
async fn reply<R: ResponseHandler>(
    request: &Request,
    mut response_handle: R,
    metadata: Metadata,
    answer: (&[Record], &[Record], &[Record]),
) -> ResponseInfo {
    let mut builder = MessageResponseBuilder::from_message_request(request);
    // Echo EDNS so the client's buffer size governs the UDP answer size.
    let edns = request.edns.as_ref().map(|req| {
        let mut e = Edns::new();
        e.set_max_payload(req.max_payload().max(512));
        e.set_version(0);
        e
    });
    if let Some(e) = &edns {
        builder.edns(e);
    }
    let response = builder.build(metadata, answer.0, answer.1, [], answer.2);
    match response_handle.send_response(response).await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "failed to send a DNS response");
            let mut failed = metadata;
            failed.response_code = ResponseCode::ServFail;
            ResponseInfo::from(hickory_proto::op::Header {
                metadata: failed,
                counts: Default::default(),
            })
        }
    }
}

/// Sends a response with only a response code.
async fn reply_code<R: ResponseHandler>(
    request: &Request,
    response_handle: R,
    mut metadata: Metadata,
    code: ResponseCode,
) -> ResponseInfo {
    metadata.response_code = code;
    reply(request, response_handle, metadata, (&[], &[], &[])).await
}

#[async_trait::async_trait]
impl RequestHandler for DnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        self.respond(request, response_handle).await.0
    }
}

impl DnsHandler {
    /// Answers `request` through `response_handle`; says too when the
    /// answer may be copied by the UDP fast path.
    async fn respond<R: ResponseHandler>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> (ResponseInfo, Option<fast::Pool>) {
        let config = self.resolver.config();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.recursion_available = !config.recursors.is_empty();
        if request.metadata.op_code != OpCode::Query {
            let info = reply_code(request, response_handle, metadata, ResponseCode::NotImp).await;
            return (info, None);
        }
        let [query] = request.queries.queries() else {
            let info = reply_code(request, response_handle, metadata, ResponseCode::FormErr).await;
            return (info, None);
        };
        if !matches!(query.query_class(), DNSClass::IN | DNSClass::ANY) {
            let info = reply_code(request, response_handle, metadata, ResponseCode::Refused).await;
            return (info, None);
        }
        // Consul's timers: `dns.ptr_query` for reverse lookups, else
        // `dns.domain_query`, from here to the answer written.
        let _timer = legate_telemetry::MeasureSince::start(
            if query.query_type() == hickory_proto::rr::RecordType::PTR {
                "dns.ptr_query"
            } else {
                "dns.domain_query"
            },
        );
        let udp = request.protocol() == Protocol::Udp;
        let qname = query.name().clone().into();
        let transport = if udp {
            Transport::Udp {
                max_size: request.max_payload(),
            }
        } else {
            Transport::Tcp
        };
        let info = match self
            .resolver
            .resolve_for(
                &qname,
                query.query_type(),
                transport,
                Some(request.src().ip()),
            )
            .await
        {
            Ok(answer) => {
                metadata.response_code = answer.code;
                metadata.authoritative = answer.authoritative;
                metadata.truncation = answer.truncated;
                let info = reply(
                    request,
                    response_handle,
                    metadata,
                    (&answer.answers, &answer.authority, &answer.additional),
                )
                .await;
                return (info, answer.pool);
            }
            Err(NotOurs) if !config.recursors.is_empty() => {
                match recursor::forward(config, request.as_slice(), !udp).await {
                    Some(message) => {
                        metadata.response_code = message.metadata.response_code;
                        metadata.authoritative = false;
                        metadata.truncation = message.metadata.truncation;
                        reply(
                            request,
                            response_handle,
                            metadata,
                            (&message.answers, &message.authorities, &message.additionals),
                        )
                        .await
                    }
                    None => {
                        reply_code(request, response_handle, metadata, ResponseCode::ServFail).await
                    }
                }
            }
            // Not ours and nobody to ask.
            Err(NotOurs) => {
                reply_code(request, response_handle, metadata, ResponseCode::Refused).await
            }
        };
        (info, None)
    }
}

/// A running DNS server; dropping it does not stop it, [`DnsServer::stop`] does.
pub struct DnsServer {
    udp: udp::UdpServer,
    tcp: tcp::TcpServer,
    /// The bound UDP address (TCP listens on the same).
    pub address: SocketAddr,
}

impl DnsServer {
    /// Binds UDP and TCP on `address` and serves `resolver`; one client
    /// address may hold at most `max_tcp_per_client` TCP connections (0:
    /// no cap).
    pub async fn start(
        address: SocketAddr,
        resolver: Arc<Resolver>,
        max_tcp_per_client: usize,
    ) -> std::io::Result<DnsServer> {
        let sockets = udp::bind(address)?;
        let address = sockets[0].local_addr()?;
        let listener = legate_net::bind_tcp(address)?;
        let fast = Arc::new(fast::FastAnswers::new(resolver.token_source()));
        let udp =
            udp::UdpServer::start(sockets, Arc::new(DnsHandler::new(resolver.clone())), fast)?;
        let tcp = tcp::TcpServer::start(
            legate_net::Acceptor::new(listener, max_tcp_per_client, "DNS/TCP"),
            DnsHandler::new(resolver),
        );
        Ok(DnsServer { udp, tcp, address })
    }

    /// Stops serving.
    pub async fn stop(self) {
        self.tcp.stop().await;
        self.udp.stop().await;
    }
}
