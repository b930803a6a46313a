//! What every routed request passes through, as one layer around each
//! route: the refusals before any handler (`http_config`'s gate), the
//! headers Consul puts on every answer, and the `api.http` timer.
//!
//! One hand-written layer rather than three `from_fn` middlewares: each
//! of those boxed its future, and ten thousand blocking queries answered
//! at once each paid for every level on the way out.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;

use crate::route_timer::{route_timer, RouteTimer};
use crate::{util, AppState, PeerAddr};

/// Wraps routes in [`Common`].
#[derive(Clone)]
pub(crate) struct CommonLayer {
    state: AppState,
}

impl CommonLayer {
    pub(crate) fn new(state: AppState) -> CommonLayer {
        CommonLayer { state }
    }
}

impl<S> tower::Layer<S> for CommonLayer {
    type Service = Common<S>;

    fn layer(&self, inner: S) -> Common<S> {
        Common {
            inner,
            state: self.state.clone(),
        }
    }
}

/// One route with the common refusals, headers and timer.
#[derive(Clone)]
pub(crate) struct Common<S> {
    inner: S,
    state: AppState,
}

impl<S> tower::Service<Request> for Common<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone,
{
    type Response = Response;
    type Error = Infallible;
    type Future = CommonFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let timer = request.extensions().get::<MatchedPath>().map(|route| {
            (
                route_timer(request.method(), route.as_str()),
                Instant::now(),
            )
        });
        let (inner, refused) = match refusal(&self.state, &request) {
            Some(response) => (None, Some(response)),
            None => {
                // The ready service answers; a fresh clone stays for the next call.
                let ready = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, ready);
                (Some(inner.call(request)), None)
            }
        };
        CommonFuture {
            inner,
            refused,
            state: self.state.clone(),
            timer,
        }
    }
}

pin_project! {
    /// A route's answer, finished with the common headers and timed.
    pub(crate) struct CommonFuture<F> {
        #[pin]
        inner: Option<F>,
        refused: Option<Response>,
        state: AppState,
        timer: Option<(&'static RouteTimer, Instant)>,
    }
}

impl<F> Future for CommonFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.inner.as_pin_mut() {
            Some(inner) => match ready!(inner.poll(cx)) {
                Ok(response) => response,
                Err(never) => match never {},
            },
            // A refusal polled again after its answer (a contract breach;
            // hyper never does it) answers 500 rather than panicking.
            None => this
                .refused
                .take()
                .unwrap_or_else(|| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        };
        let response = add_common_headers(this.state, response);
        if let Some((timer, started)) = this.timer.take() {
            timer.record_since(started);
        }
        Poll::Ready(Ok(response))
    }
}

/// Refusals before any handler: a path with unprintable characters, and
/// `http_config`'s: a blocked endpoint (`block_endpoints`, by path
/// prefix) and a write from outside `allow_write_http_from`, each
/// Consul's 403.
fn refusal(state: &AppState, request: &Request) -> Option<Response> {
    let config = &state.agent.config().http_config;
    // go-cleanhttp's printable-path check, unless
    // `disable_http_unprintable_char_filter`: a bare 400.
    if !config.allow_unprintable_paths && !util::path_is_printable(request.uri().path()) {
        return Some(StatusCode::BAD_REQUEST.into_response());
    }
    if config.blocks(request.uri().path()) {
        return Some(
            (
                StatusCode::FORBIDDEN,
                "Endpoint is blocked by agent configuration",
            )
                .into_response(),
        );
    }
    let reads = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let peer = request.extensions().get::<PeerAddr>().map(|p| p.0.ip());
    if !reads && !config.allows_write_from(peer) {
        return Some((StatusCode::FORBIDDEN, "Access is restricted").into_response());
    }
    None
}

/// Consul's headers on every answer.
fn add_common_headers(state: &AppState, mut response: Response) -> Response {
    const DEFAULT_ACL_POLICY: HeaderName = HeaderName::from_static("x-consul-default-acl-policy");
    let config = state.agent.config();
    // Consul sends the configured default ACL policy on every response
    // (1.9+), ACLs on or off.
    let policy = if config.acl.default_policy == "deny" {
        "deny"
    } else {
        "allow"
    };
    response
        .headers_mut()
        .insert(DEFAULT_ACL_POLICY, HeaderValue::from_static(policy));
    // `http_config.response_headers`: a header the handler set wins, as
    // in Consul (which sets these before the handler runs).
    for (name, value) in &config.http_config.response_headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().entry(name).or_insert(value);
        }
    }
    response
}
