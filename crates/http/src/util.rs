//! Shared HTTP plumbing: the one error-to-status mapping, query option
//! parsing, request body decoding, and JSON responses with Consul's
//! `X-Consul-*` headers.

use axum::http::header::{HeaderName, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use legate_agent::AgentError;
use legate_types::duration::parse_go_duration;
use legate_types::keys::canonicalize_keys;
use legate_types::{Consistency, QueryMeta, QueryOptions, RpcError, WriteOptions};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// An error answered with a status code and a plain-text message.
#[derive(Debug)]
pub struct ApiError {
    /// The status.
    pub status: StatusCode,
    /// The message.
    pub message: String,
}

impl ApiError {
    /// A 400.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// A 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// A 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }
}

impl From<RpcError> for ApiError {
    fn from(e: RpcError) -> ApiError {
        let status = match &e {
            RpcError::BadRequest(_) => StatusCode::BAD_REQUEST,
            RpcError::NotFound(_) => StatusCode::NOT_FOUND,
            RpcError::PermissionDenied(_) | RpcError::AclNotFound | RpcError::Forbidden(_) => {
                StatusCode::FORBIDDEN
            }
            RpcError::AclDisabled => StatusCode::UNAUTHORIZED,
            RpcError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RpcError::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            RpcError::NoPathToDatacenter(_)
            | RpcError::DatacenterUnavailable(_)
            | RpcError::NoLeader
            | RpcError::Unreachable(_)
            | RpcError::Indeterminate(_)
            | RpcError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> ApiError {
        let status = match &e {
            AgentError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AgentError::NotFound(_) => StatusCode::NOT_FOUND,
            AgentError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.message).into_response();
        response.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// Result of a handler.
pub type ApiResult = Result<Response, ApiError>;

/// Raw query parameters, in their order; repeated keys keep every value.
/// A list rather than a map: a request carries a handful, a scan of them
/// costs less than hashing a key, and parsing stays linear however many
/// (bounded by the request head's size) a request sends.
#[derive(Debug, Default, Clone)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Parses a query string.
    pub fn parse(query: Option<&str>) -> Params {
        Params {
            pairs: query.map(form_urlencoded_pairs).unwrap_or_default(),
        }
    }

    /// The first value of a key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a key.
    pub fn all(&self, key: &str) -> Vec<String> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Forgets a key (a parameter the agent is configured to ignore).
    pub fn remove(&mut self, key: &str) {
        self.pairs.retain(|(k, _)| k != key);
    }

    /// True when the key is present (with or without a value).
    pub fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == key)
    }

    /// A boolean flag: present with no value, or a true value.
    pub fn flag(&self, key: &str) -> bool {
        match self.get(key) {
            None => false,
            Some(v) => v.is_empty() || parse_go_bool(v) == Some(true),
        }
    }

    /// A boolean parameter that must parse when present (`?passing`,
    /// `?enable`): absent is `None`, empty is `true`, else Go's `ParseBool`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some("") => Ok(Some(true)),
            Some(v) => parse_go_bool(v)
                .map(Some)
                .ok_or_else(|| ApiError::bad_request(format!("Invalid value for ?{key}: {v:?}"))),
        }
    }

    /// An unsigned integer parameter, 400 when malformed.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "Invalid {key} parameter {v:?}: must be a whole number"
                ))
            }),
        }
    }
}

/// Go's `strconv.ParseBool`: 1, t, T, TRUE, true, True and their false twins.
pub fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Whether a raw request path, once percent-decoded, holds only what Go's
/// `unicode.IsPrint` accepts (go-cleanhttp's `PrintablePathCheckHandler`,
/// which Consul puts in front of its API): no control or format
/// characters, no space but U+0020.
pub fn path_is_printable(raw_path: &str) -> bool {
    decode_component(&raw_path.replace('+', "%2B")).chars().all(|c| {
        !(c.is_control()
            || (c.is_whitespace() && c != ' ')
            || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{2064}' | '\u{feff}'))
    })
}

fn decode_component(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) if hex.len() == 2 => {
                        out.push(b);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode_component(k), decode_component(v)),
            None => (decode_component(pair), String::new()),
        })
        .collect()
}

/// The request's token in Consul's precedence: `?token=`, then
/// `X-Consul-Token`, then `Authorization: Bearer` (scheme in any case).
pub fn token(headers: &HeaderMap, params: &Params) -> String {
    if let Some(t) = params.get("token").filter(|t| !t.is_empty()) {
        return t.to_string();
    }
    if let Some(t) = headers
        .get("x-consul-token")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
    {
        return t.to_string();
    }
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let mut words = auth.split_whitespace();
        if words
            .next()
            .is_some_and(|s| s.eq_ignore_ascii_case("bearer"))
        {
            if let Some(t) = words.next() {
                return t.to_string();
            }
        }
    }
    String::new()
}

/// Parses the read options every list/read endpoint accepts.
pub fn query_options(headers: &HeaderMap, params: &Params) -> Result<QueryOptions, ApiError> {
    // `?max_stale=` (Consul's `parseConsistency`): a positive bound makes
    // the read stale within it; it is parsed before the conflicts are
    // checked, so `?consistent&max_stale=5s` conflicts as `?stale` does.
    let max_stale = match params.get("max_stale") {
        None | Some("") => None,
        Some(text) => Some(
            parse_go_duration(text)
                .map_err(|_| ApiError::bad_request(format!("Invalid max_stale value {text:?}")))?,
        ),
    };
    let bounded = max_stale.is_some_and(|d| !d.is_zero());
    let stale = params.has("stale") || bounded;
    let consistent = params.has("consistent");
    if stale && consistent {
        return Err(ApiError::bad_request(
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        ));
    }
    if params.has("cached") && consistent {
        return Err(ApiError::bad_request(
            "Cannot specify ?cached with ?consistent, conflicting semantics.",
        ));
    }
    let max_wait = match params.get("wait") {
        None | Some("") => None,
        Some(w) => Some(
            parse_go_duration(w)
                .map_err(|_| ApiError::bad_request(format!("Invalid wait time {w:?}")))?,
        ),
    };
    let min_index = params
        .u64("index")
        .map_err(|_| {
            ApiError::bad_request(format!(
                "Invalid index {:?}",
                params.get("index").unwrap_or("")
            ))
        })?
        .unwrap_or(0);
    Ok(QueryOptions {
        datacenter: params.get("dc").unwrap_or("").to_string(),
        consistency: if stale {
            Consistency::Stale
        } else if consistent {
            Consistency::Consistent
        } else {
            Consistency::Default
        },
        min_index,
        max_wait,
        token: token(headers, params),
        filter: params.get("filter").unwrap_or("").to_string(),
        near: String::new(),
        source_ip: String::new(),
        max_stale: max_stale.filter(|d| !d.is_zero()),
    })
}

/// Parses the options every write endpoint accepts.
pub fn write_options(headers: &HeaderMap, params: &Params) -> WriteOptions {
    WriteOptions {
        datacenter: params.get("dc").unwrap_or("").to_string(),
        token: token(headers, params),
    }
}

/// Decodes a JSON body into `T`, accepting PascalCase and snake_case keys.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = if body.iter().all(|b| b.is_ascii_whitespace()) {
        serde_json::Value::Object(Default::default())
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?
    };
    serde_json::from_value(canonicalize_keys(value))
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))
}

/// Serializes a value as the response body (`?pretty` indents it).
pub fn json<T: Serialize>(params: &Params, value: &T) -> Response {
    json_with(
        HeaderMap::with_capacity(RESPONSE_HEADERS),
        params.has("pretty"),
        value,
    )
}

/// [`json`] into a header map of the caller's (emptied, with room for
/// [`RESPONSE_HEADERS`]: grown later, a map is rebuilt, and on a wake of
/// thousands of queries the fresh memory page-faulted).
fn json_with<T: Serialize>(headers: HeaderMap, pretty: bool, value: &T) -> Response {
    encoded_with(headers, encode_json(value, pretty).map(bytes::Bytes::from))
}

/// A value as a JSON body: indented and ending in a newline for
/// `?pretty`, compact otherwise.
pub fn encode_json<T: Serialize>(value: &T, pretty: bool) -> serde_json::Result<Vec<u8>> {
    if pretty {
        let mut bytes = serde_json::to_vec_pretty(value)?;
        bytes.push(b'\n');
        Ok(bytes)
    } else {
        serde_json::to_vec(value)
    }
}

/// An encoded JSON body as the answer, in `headers`; an encoding failure
/// as a 500.
fn encoded_with(mut headers: HeaderMap, body: serde_json::Result<bytes::Bytes>) -> Response {
    match body {
        Ok(body) => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            let mut response = Response::new(axum::body::Body::from(body));
            *response.headers_mut() = headers;
            response
        }
        Err(e) => ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("encoding the response failed: {e}"),
        }
        .into_response(),
    }
}

/// What a read that may block keeps of its request to answer with:
/// `?pretty`, and the request's own header map, emptied and sized for the
/// answer's headers. hyper keeps each connection's last answer map to
/// parse its next request into, so answering in the request's map keeps
/// one map per connection: a wake of thousands of blocking queries
/// allocates none (fresh maps there page-faulted, ~1 µs a wake).
pub struct Answer {
    pretty: bool,
    headers: HeaderMap,
}

impl Answer {
    /// From a request's `?pretty` and its headers (emptied here).
    pub fn new(pretty: bool, mut headers: HeaderMap) -> Answer {
        headers.clear();
        headers.reserve(RESPONSE_HEADERS);
        Answer { pretty, headers }
    }

    /// Whether the answer is to be indented (`?pretty`).
    pub fn pretty(&self) -> bool {
        self.pretty
    }

    /// The value as JSON with the blocking-query headers.
    pub fn json_meta<T: Serialize>(self, meta: &QueryMeta, value: &T) -> Response {
        with_meta(json_with(self.headers, self.pretty, value), meta)
    }

    /// A JSON body encoded beforehand (`encode_json`) with the
    /// blocking-query headers.
    pub fn encoded_meta(
        self,
        meta: &QueryMeta,
        body: serde_json::Result<bytes::Bytes>,
    ) -> Response {
        with_meta(encoded_with(self.headers, body), meta)
    }

    /// An empty answer with `status` and the blocking-query headers.
    pub fn status_meta(self, status: StatusCode, meta: &QueryMeta) -> Response {
        let mut response = status.into_response();
        *response.headers_mut() = self.headers;
        with_meta(response, meta)
    }

    /// A value as its own bytes (`/v1/kv/<key>?raw`), as text that is
    /// not to be sniffed, with the blocking-query headers.
    pub fn raw(mut self, value: bytes::Bytes, meta: &QueryMeta) -> Response {
        self.headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        self.headers.insert(
            HeaderName::from_static("x-content-type-options"),
            HeaderValue::from_static("nosniff"),
        );
        let mut response = Response::new(axum::body::Body::from(value));
        *response.headers_mut() = self.headers;
        with_meta(response, meta)
    }

    /// A list as JSON, or a 404 with the blocking-query headers when it is
    /// empty (how `/v1/kv` answers a prefix with no keys).
    pub fn list_or_404<T: Serialize>(self, meta: &QueryMeta, rows: &[T]) -> Response {
        if rows.is_empty() {
            self.status_meta(StatusCode::NOT_FOUND, meta)
        } else {
            self.json_meta(meta, &rows)
        }
    }
}

/// How many headers a JSON answer ends up with: its content type and
/// length, the blocking-query headers and the agent's common ones.
const RESPONSE_HEADERS: usize = 12;

const X_CONSUL_INDEX: HeaderName = HeaderName::from_static("x-consul-index");
const X_CONSUL_KNOWN_LEADER: HeaderName = HeaderName::from_static("x-consul-knownleader");
const X_CONSUL_LAST_CONTACT: HeaderName = HeaderName::from_static("x-consul-lastcontact");
const X_CONSUL_EFFECTIVE_CONSISTENCY: HeaderName =
    HeaderName::from_static("x-consul-effective-consistency");
const X_CONSUL_RESULTS_FILTERED_BY_ACLS: HeaderName =
    HeaderName::from_static("x-consul-results-filtered-by-acls");

/// Adds the blocking-query headers to a response.
pub fn with_meta(mut response: Response, meta: &QueryMeta) -> Response {
    let headers = response.headers_mut();
    // `reserve` counts from the headers already there.
    headers.reserve(RESPONSE_HEADERS.saturating_sub(headers.len()));
    headers.insert(X_CONSUL_INDEX, HeaderValue::from(meta.index.max(1)));
    headers.insert(
        X_CONSUL_KNOWN_LEADER,
        HeaderValue::from_static(if meta.known_leader { "true" } else { "false" }),
    );
    headers.insert(
        X_CONSUL_LAST_CONTACT,
        HeaderValue::from(meta.last_contact.as_millis() as u64),
    );
    headers.insert(
        X_CONSUL_EFFECTIVE_CONSISTENCY,
        HeaderValue::from_static(meta.consistency.header_value()),
    );
    if meta.results_filtered_by_acls {
        headers.insert(
            X_CONSUL_RESULTS_FILTERED_BY_ACLS,
            HeaderValue::from_static("true"),
        );
    }
    response
}

/// JSON body plus blocking-query headers.
pub fn json_meta<T: Serialize>(params: &Params, meta: &QueryMeta, value: &T) -> Response {
    with_meta(json(params, value), meta)
}

/// A request method as a `'static` name, for metric labels (`OTHER` for
/// extension methods, which would otherwise make labels unbounded).
pub fn static_method(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_decode() {
        let p = Params::parse(Some(
            "filter=Service%20%3D%3D%20web&tag=a&tag=b&stale&wait=5s&x=a+b",
        ));
        assert_eq!(p.get("filter"), Some("Service == web"));
        assert_eq!(p.all("tag"), vec!["a", "b"]);
        assert!(p.has("stale"));
        assert!(p.flag("stale"));
        assert_eq!(p.get("x"), Some("a b"));
        let p = Params::parse(Some("k=%zz&j=100%"));
        assert_eq!(p.get("k"), Some("%zz"));
        assert_eq!(p.get("j"), Some("100%"));
    }

    #[test]
    fn an_answer_in_the_request_map_carries_none_of_the_request_headers() {
        let mut request = HeaderMap::new();
        request.insert("host", HeaderValue::from_static("agent:8500"));
        request.insert("x-consul-token", HeaderValue::from_static("secret"));
        let meta = QueryMeta {
            index: 7,
            ..Default::default()
        };
        let response = Answer::new(false, request).json_meta(&meta, &vec![1, 2]);
        let headers = response.headers();
        assert!(headers.get("host").is_none() && headers.get("x-consul-token").is_none());
        assert_eq!(headers[CONTENT_TYPE], "application/json");
        assert_eq!(headers[X_CONSUL_INDEX], "7");
        assert!(headers.capacity() >= RESPONSE_HEADERS);
        let mut request = HeaderMap::new();
        request.insert("host", HeaderValue::from_static("agent:8500"));
        let raw = Answer::new(false, request).raw(bytes::Bytes::from_static(b"v"), &meta);
        let headers = raw.headers();
        assert!(headers.get("host").is_none());
        assert_eq!(headers[CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers[X_CONSUL_INDEX], "7");
        let empty = Answer::new(true, HeaderMap::new()).list_or_404(&meta, &Vec::<u8>::new());
        assert_eq!(empty.status(), StatusCode::NOT_FOUND);
        assert_eq!(empty.headers()[X_CONSUL_INDEX], "7");
    }

    #[test]
    fn a_repeated_key_keeps_its_first_value_first_and_goes_whole() {
        let mut p = Params::parse(Some("tag=b&dc=x&tag=a&&tag="));
        assert_eq!(p.get("tag"), Some("b"));
        assert_eq!(p.all("tag"), vec!["b", "a", ""]);
        assert!(p.all("none").is_empty());
        p.remove("tag");
        assert!(!p.has("tag"));
        assert_eq!(p.get("dc"), Some("x"));
        assert!(!Params::parse(None).has("dc"));
    }

    #[test]
    fn conflicting_consistency_is_refused() {
        let p = Params::parse(Some("stale&consistent"));
        assert!(query_options(&HeaderMap::new(), &p).is_err());
        let p = Params::parse(Some("wait=forever"));
        assert!(query_options(&HeaderMap::new(), &p).is_err());
        let p = Params::parse(Some("index=abc"));
        assert!(query_options(&HeaderMap::new(), &p).is_err());
    }
}
