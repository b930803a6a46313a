//! The ADS gRPC service as tonic serves it, with per-stream memory sized
//! for tens of thousands of mostly idle streams.
//!
//! The service `envoy-types` generates fixes tonic's default codec, which
//! allocates 8 KiB for reading and 8 KiB for writing on every stream, and
//! whose write buffer then keeps the allocation of the largest burst of
//! responses for the stream's life. This service routes the two ADS
//! methods the same way, with the same message limits and no compression,
//! but:
//! - requests are read through a buffer that starts at [`READ_BUFFER`]
//!   bytes (ACKs and subscriptions are small; a request carrying the full
//!   node description grows it once);
//! - each response is encoded into an allocation of exactly its size,
//!   handed to HTTP/2 and freed once written, so an idle stream holds no
//!   response bytes ([`ResponseBody`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{BufMut, Bytes};
use http_body::Frame;
use tonic::body::Body;
use tonic::codec::BufferSettings;
use tonic::codegen::{http, Body as HttpBody, Service, StdError};
use tonic::metadata::GRPC_CONTENT_TYPE;
use tonic::server::NamedService;
use tonic::{Status, Streaming};

use crate::server::Responses;
use crate::AdsServer;

/// Where each stream's request buffer starts (tonic grows it to the
/// largest request the stream has read, and keeps it).
pub const READ_BUFFER: usize = 512;

/// The largest message read or written (an Envoy with many upstreams
/// receives large listener and cluster sets).
pub const MAX_MESSAGE: usize = 64 << 20;

const STREAM_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// The gRPC message header: a compression flag and a big-endian length.
const HEADER_SIZE: usize = 5;

/// The tonic service of an [`AdsServer`].
#[derive(Clone)]
pub struct AdsService {
    server: Arc<AdsServer>,
}

impl AdsService {
    pub(crate) fn new(server: AdsServer) -> AdsService {
        AdsService {
            server: Arc::new(server),
        }
    }
}

impl NamedService for AdsService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<B> Service<http::Request<B>> for AdsService
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let response = match request.uri().path() {
            STREAM_PATH => open(request, |token, inbound| {
                self.server.open_sotw(token, inbound)
            }),
            DELTA_PATH => open(request, |token, inbound| {
                self.server.open_delta(token, inbound)
            }),
            _ => Status::unimplemented("").into_http(),
        };
        Box::pin(std::future::ready(Ok(response)))
    }
}

/// Opens one stream: the request body decoded as `Req`, the session's
/// responses as the response body.
fn open<B, Req, Resp>(
    request: http::Request<B>,
    start: impl FnOnce(String, Streaming<Req>) -> Responses<Resp>,
) -> http::Response<Body>
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    if let Err(status) = uncompressed(request.headers()) {
        return status.into_http();
    }
    let token = request
        .headers()
        .get("x-consul-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let decoder =
        tonic_prost::ProstDecoder::<Req>::new(BufferSettings::new(READ_BUFFER, READ_BUFFER));
    let inbound = Streaming::new_request(decoder, request.into_body(), None, Some(MAX_MESSAGE));
    let body = ResponseBody {
        responses: start(token, inbound),
        ended: false,
    };
    let mut response = http::Response::new(Body::new(body));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, GRPC_CONTENT_TYPE);
    response
}

/// Refuses compressed requests as tonic does when no compression is
/// enabled (Envoy compresses nothing on ADS).
fn uncompressed(headers: &http::HeaderMap) -> Result<(), Status> {
    match headers.get("grpc-encoding") {
        None => Ok(()),
        Some(v) if v.as_bytes() == b"identity" => Ok(()),
        Some(other) => {
            let name = match std::str::from_utf8(other.as_bytes()) {
                Ok(s) => s.to_string(),
                Err(_) => format!("{:?}", other.as_bytes()),
            };
            let mut status = Status::unimplemented(format!(
                "Content is compressed with `{name}` which isn't supported"
            ));
            status.metadata_mut().insert(
                "grpc-accept-encoding",
                tonic::metadata::MetadataValue::from_static("identity"),
            );
            Err(status)
        }
    }
}

/// A stream's responses as gRPC frames, each encoded into its own
/// allocation, then the trailers: the status that ended the stream, or
/// `OK` when the session finished.
pub(crate) struct ResponseBody<R> {
    responses: Responses<R>,
    ended: bool,
}

/// One response framed for gRPC: an allocation of exactly its size.
fn frame<R: prost::Message>(message: &R) -> Result<Bytes, Status> {
    let len = message.encoded_len();
    if len > MAX_MESSAGE {
        return Err(Status::out_of_range(format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: {MAX_MESSAGE} bytes"
        )));
    }
    let mut buf = Vec::with_capacity(HEADER_SIZE + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    message
        .encode(&mut buf)
        .map_err(|e| Status::internal(format!("Error encoding: {e}")))?;
    Ok(Bytes::from(buf))
}

fn trailers(status: &Status) -> Result<Frame<Bytes>, Status> {
    let mut headers = http::HeaderMap::new();
    status.add_header(&mut headers)?;
    Ok(Frame::trailers(headers))
}

impl<R: prost::Message + Send + 'static> HttpBody for ResponseBody<R> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = ready!(self.responses.poll_recv(cx));
        let frame = match next.map(|boxed| *boxed) {
            Some(Ok(message)) => match frame(&message) {
                Ok(bytes) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Err(status) => trailers(&status),
            },
            Some(Err(status)) => trailers(&status),
            None => trailers(&Status::ok("")),
        };
        self.ended = true;
        Poll::Ready(Some(frame))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
    use prost::Message;

    async fn next<R: prost::Message + Send + 'static>(
        body: &mut ResponseBody<R>,
    ) -> Option<Frame<Bytes>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
            .await
            .map(|frame| frame.expect("frames are never errors"))
    }

    fn response(nonce: &str) -> DeltaDiscoveryResponse {
        DeltaDiscoveryResponse {
            nonce: nonce.into(),
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn responses_are_framed_exactly_and_end_with_the_status() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut body = ResponseBody {
            responses: rx,
            ended: false,
        };
        tx.send(Box::new(Ok(response("1")))).await.unwrap();
        tx.send(Box::new(Err(Status::not_found("gone"))))
            .await
            .unwrap();
        let data = next(&mut body).await.unwrap().into_data().unwrap();
        let encoded = response("1").encode_to_vec();
        assert_eq!(data[0], 0, "uncompressed");
        assert_eq!(&data[1..5], &(encoded.len() as u32).to_be_bytes());
        assert_eq!(&data[5..], &encoded[..]);
        let trailers = next(&mut body).await.unwrap().into_trailers().unwrap();
        assert_eq!(trailers["grpc-status"], "5");
        assert_eq!(trailers["grpc-message"], "gone");
        assert!(body.is_end_stream());
        assert!(next(&mut body).await.is_none());
    }

    #[tokio::test]
    async fn a_finished_session_ends_the_stream_with_ok() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Box<Result<DeltaDiscoveryResponse, Status>>>(4);
        let mut body = ResponseBody {
            responses: rx,
            ended: false,
        };
        drop(tx);
        let trailers = next(&mut body).await.unwrap().into_trailers().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        assert!(next(&mut body).await.is_none());
    }

    #[test]
    fn compressed_requests_are_refused_as_tonic_does() {
        let mut headers = http::HeaderMap::new();
        assert!(uncompressed(&headers).is_ok());
        headers.insert("grpc-encoding", "identity".parse().unwrap());
        assert!(uncompressed(&headers).is_ok());
        headers.insert("grpc-encoding", "gzip".parse().unwrap());
        let status = uncompressed(&headers).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unimplemented);
        assert_eq!(
            status.message(),
            "Content is compressed with `gzip` which isn't supported"
        );
    }
}
