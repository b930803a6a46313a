//! `?cached`: which requests ask for the agent's cache, and the headers
//! its answers carry (`X-Cache: HIT|MISS`, and `Age` on a hit, in whole
//! seconds as Consul's `%.0f`).

use axum::http::HeaderValue;
use axum::response::Response;
use legate_agent::cached_reads::CacheStatus;
use legate_agent::query_cache::CacheControl;

use crate::util::ApiError;
use crate::Req;

impl Req {
    /// Whether the request asks for the agent's cache (`?cached`).
    pub(crate) fn cached(&self) -> bool {
        self.params.has("cached")
    }

    /// The request's `Cache-Control` (a malformed one is Consul's 400).
    pub(crate) fn cache_control(&self) -> Result<CacheControl, ApiError> {
        match self.headers.get("cache-control") {
            None => Ok(CacheControl::default()),
            Some(value) => CacheControl::parse(value.to_str().unwrap_or("\u{0}"))
                .map_err(ApiError::bad_request),
        }
    }
}

/// Adds a cached answer's `X-Cache` and `Age` headers.
pub(crate) fn with_cache_status(mut response: Response, status: Option<CacheStatus>) -> Response {
    let Some(status) = status else {
        return response;
    };
    let headers = response.headers_mut();
    headers.insert(
        "x-cache",
        HeaderValue::from_static(if status.hit { "HIT" } else { "MISS" }),
    );
    if status.hit {
        let age = status.age.as_secs_f64().round() as u64;
        headers.insert("age", HeaderValue::from(age));
    }
    response
}
