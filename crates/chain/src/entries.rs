//! Typed views of the routing config entries and their write-time rules.
//! Unknown fields are refused (Consul decodes entries with "error unused"),
//! durations are Go strings, and every error names the field at fault.

use std::collections::BTreeMap;
use std::time::Duration;

use legate_types::config_entry::ConfigEntry;
use legate_types::duration::parse_go_duration;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// A Go duration string, or nanoseconds, as Consul accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GoDuration, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if s.is_empty() => Ok(GoDuration(Duration::ZERO)),
            Value::String(s) => parse_go_duration(&s)
                .map(GoDuration)
                .map_err(serde::de::Error::custom),
            Value::Number(n) => legate_types::duration::from_json_nanos(&n)
                .map(GoDuration)
                .map_err(serde::de::Error::custom),
            other => Err(serde::de::Error::custom(format!(
                "invalid duration {other}"
            ))),
        }
    }
}

/// Mesh gateway mode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct MeshGateway {
    /// `""`, `none`, `local` or `remote`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

/// `service-defaults`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ServiceDefaults {
    /// Namespace (Enterprise; accepted).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise; accepted).
    #[serde(default)]
    pub partition: String,
    /// `tcp`, `http`, `http2` or `grpc`.
    #[serde(default)]
    pub protocol: String,
    /// `""`, `direct` or `transparent`.
    #[serde(default)]
    pub mode: String,
    /// Transparent proxy settings.
    #[serde(default)]
    pub transparent_proxy: Option<Value>,
    /// `""`, `strict` or `permissive`.
    #[serde(default, rename = "MutualTLSMode")]
    pub mutual_tls_mode: String,
    /// Mesh gateway mode.
    #[serde(default)]
    pub mesh_gateway: MeshGateway,
    /// Expose settings.
    #[serde(default)]
    pub expose: Option<Value>,
    /// SNI for services outside the mesh.
    #[serde(default, rename = "ExternalSNI")]
    pub external_sni: String,
    /// Defaults for upstreams.
    #[serde(default)]
    pub upstream_config: Option<Value>,
    /// A destination outside the mesh (terminating gateways).
    #[serde(default)]
    pub destination: Option<Value>,
    /// Inbound connection limit.
    #[serde(default)]
    pub max_inbound_connections: i64,
    /// Local connect timeout in ms.
    #[serde(default)]
    pub local_connect_timeout_ms: i64,
    /// Local request timeout in ms.
    #[serde(default)]
    pub local_request_timeout_ms: i64,
    /// `""` or `exact_balance`.
    #[serde(default)]
    pub balance_inbound_connections: String,
    /// Rate limits.
    #[serde(default)]
    pub rate_limits: Option<Value>,
    /// Envoy extensions.
    #[serde(default)]
    pub envoy_extensions: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// `proxy-defaults`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ProxyDefaults {
    /// Namespace (Enterprise; accepted).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise; accepted).
    #[serde(default)]
    pub partition: String,
    /// Opaque proxy configuration (`protocol` among others).
    #[serde(default)]
    pub config: Map<String, Value>,
    /// `""`, `direct` or `transparent`.
    #[serde(default)]
    pub mode: String,
    /// Transparent proxy settings.
    #[serde(default)]
    pub transparent_proxy: Option<Value>,
    /// `""`, `strict` or `permissive`.
    #[serde(default, rename = "MutualTLSMode")]
    pub mutual_tls_mode: String,
    /// Mesh gateway mode.
    #[serde(default)]
    pub mesh_gateway: MeshGateway,
    /// Expose settings.
    #[serde(default)]
    pub expose: Option<Value>,
    /// Access logs.
    #[serde(default)]
    pub access_logs: Option<Value>,
    /// Failover policy.
    #[serde(default)]
    pub failover_policy: Option<Value>,
    /// Locality-aware routing.
    #[serde(default)]
    pub prioritize_by_locality: Option<Value>,
    /// Envoy extensions.
    #[serde(default)]
    pub envoy_extensions: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// Header add/set/remove instructions.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct HeaderModifiers {
    /// Headers to append.
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    /// Headers to set.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Headers to remove.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// A header matcher of a route.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct HeaderMatch {
    /// Header name.
    #[serde(default)]
    pub name: String,
    /// Match when present.
    #[serde(default)]
    pub present: bool,
    /// Exact value.
    #[serde(default)]
    pub exact: String,
    /// Value prefix.
    #[serde(default)]
    pub prefix: String,
    /// Value suffix.
    #[serde(default)]
    pub suffix: String,
    /// Value substring.
    #[serde(default)]
    pub contains: String,
    /// Value regex.
    #[serde(default)]
    pub regex: String,
    /// Case-insensitive comparison.
    #[serde(default)]
    pub ignore_case: bool,
    /// Negate the match.
    #[serde(default)]
    pub invert: bool,
}

/// A query parameter matcher of a route.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct QueryParamMatch {
    /// Parameter name.
    #[serde(default)]
    pub name: String,
    /// Match when present.
    #[serde(default)]
    pub present: bool,
    /// Exact value.
    #[serde(default)]
    pub exact: String,
    /// Value regex.
    #[serde(default)]
    pub regex: String,
}

/// The HTTP match of a route.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct HttpMatch {
    /// Exact path.
    #[serde(default)]
    pub path_exact: String,
    /// Path prefix.
    #[serde(default)]
    pub path_prefix: String,
    /// Path regex.
    #[serde(default)]
    pub path_regex: String,
    /// Header matchers (all must match).
    #[serde(default)]
    pub header: Vec<HeaderMatch>,
    /// Query parameter matchers (all must match).
    #[serde(default)]
    pub query_param: Vec<QueryParamMatch>,
    /// Allowed methods (any).
    #[serde(default)]
    pub methods: Vec<String>,
    /// Compare paths case-insensitively.
    #[serde(default)]
    pub case_insensitive: bool,
}

/// A route's match.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RouteMatch {
    /// HTTP criteria.
    #[serde(default, rename = "HTTP")]
    pub http: Option<HttpMatch>,
}

/// Where a route sends traffic.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct RouteDestination {
    /// Service (default: the router's).
    #[serde(default)]
    pub service: String,
    /// Subset.
    #[serde(default)]
    pub service_subset: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Rewrite of the matched prefix.
    #[serde(default)]
    pub prefix_rewrite: String,
    /// Request timeout.
    #[serde(default)]
    pub request_timeout: GoDuration,
    /// Idle timeout.
    #[serde(default)]
    pub idle_timeout: GoDuration,
    /// Retries.
    #[serde(default)]
    pub num_retries: i64,
    /// Retry on connect failure.
    #[serde(default)]
    pub retry_on_connect_failure: bool,
    /// Retry conditions.
    #[serde(default)]
    pub retry_on: Vec<String>,
    /// Retry on these status codes.
    #[serde(default)]
    pub retry_on_status_codes: Vec<i64>,
    /// Request header changes.
    #[serde(default)]
    pub request_headers: Option<HeaderModifiers>,
    /// Response header changes.
    #[serde(default)]
    pub response_headers: Option<HeaderModifiers>,
}

/// One route.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Route {
    /// The match (none: everything).
    #[serde(default, rename = "Match")]
    pub route_match: Option<RouteMatch>,
    /// The destination.
    #[serde(default)]
    pub destination: Option<RouteDestination>,
}

/// `service-router`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ServiceRouter {
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Routes, first match wins.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// One split.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Split {
    /// Percentage of traffic (0–100, two decimals).
    #[serde(default)]
    pub weight: f64,
    /// Service (default: the splitter's).
    #[serde(default)]
    pub service: String,
    /// Subset.
    #[serde(default)]
    pub service_subset: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Request header changes.
    #[serde(default)]
    pub request_headers: Option<HeaderModifiers>,
    /// Response header changes.
    #[serde(default)]
    pub response_headers: Option<HeaderModifiers>,
}

/// `service-splitter`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ServiceSplitter {
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Splits.
    #[serde(default)]
    pub splits: Vec<Split>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// A resolver subset.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Subset {
    /// A filter over health rows.
    #[serde(default)]
    pub filter: String,
    /// Only passing instances.
    #[serde(default)]
    pub only_passing: bool,
}

/// A resolver redirect.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Redirect {
    /// Service.
    #[serde(default)]
    pub service: String,
    /// Subset.
    #[serde(default)]
    pub service_subset: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Datacenter.
    #[serde(default)]
    pub datacenter: String,
    /// Peer.
    #[serde(default)]
    pub peer: String,
    /// Sameness group.
    #[serde(default)]
    pub sameness_group: String,
}

/// A failover target.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct FailoverTarget {
    /// Service.
    #[serde(default)]
    pub service: String,
    /// Subset.
    #[serde(default)]
    pub service_subset: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Datacenter.
    #[serde(default)]
    pub datacenter: String,
    /// Peer.
    #[serde(default)]
    pub peer: String,
}

/// Failover for one subset (or `*`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Failover {
    /// Service.
    #[serde(default)]
    pub service: String,
    /// Subset.
    #[serde(default)]
    pub service_subset: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Datacenters, in order.
    #[serde(default)]
    pub datacenters: Vec<String>,
    /// Explicit targets, in order.
    #[serde(default)]
    pub targets: Vec<FailoverTarget>,
    /// Failover policy.
    #[serde(default)]
    pub policy: Option<Value>,
    /// Sameness group.
    #[serde(default)]
    pub sameness_group: String,
}

/// Load balancing settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct LoadBalancer {
    /// Policy name.
    #[serde(default)]
    pub policy: String,
    /// Ring hash settings.
    #[serde(default)]
    pub ring_hash_config: Option<Value>,
    /// Least request settings.
    #[serde(default)]
    pub least_request_config: Option<Value>,
    /// Hash policies (ring_hash and maglev only).
    #[serde(default)]
    pub hash_policies: Vec<Value>,
}

/// `service-resolver`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ServiceResolver {
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Subset used when none is asked for.
    #[serde(default)]
    pub default_subset: String,
    /// Named subsets.
    #[serde(default)]
    pub subsets: BTreeMap<String, Subset>,
    /// Send everything elsewhere.
    #[serde(default)]
    pub redirect: Option<Redirect>,
    /// Failover by subset name or `*`.
    #[serde(default)]
    pub failover: BTreeMap<String, Failover>,
    /// Connect timeout.
    #[serde(default)]
    pub connect_timeout: GoDuration,
    /// Request timeout.
    #[serde(default)]
    pub request_timeout: GoDuration,
    /// Load balancing.
    #[serde(default)]
    pub load_balancer: Option<LoadBalancer>,
    /// Locality-aware routing.
    #[serde(default)]
    pub prioritize_by_locality: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(entry: &ConfigEntry) -> Result<T, String> {
    serde_json::from_value(Value::Object(entry.body.clone())).map_err(|e| {
        let text = e.to_string();
        match text.strip_prefix("unknown field ") {
            Some(rest) => format!(
                "invalid config key {}",
                rest.split(',').next().unwrap_or(rest)
            ),
            None => text,
        }
    })
}

const PROTOCOLS: &[&str] = &["", "tcp", "http", "http2", "grpc"];
const RETRY_ON: &[&str] = &[
    "5xx",
    "gateway-error",
    "reset",
    "connect-failure",
    "envoy-ratelimited",
    "retriable-4xx",
    "refused-stream",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];
pub(crate) const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];
const LB_POLICIES: &[&str] = &[
    "",
    "random",
    "round_robin",
    "least_request",
    "ring_hash",
    "maglev",
];

fn one_of(field: &str, value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        let shown: Vec<&str> = allowed.iter().copied().filter(|a| !a.is_empty()).collect();
        Err(format!(
            "{field} {value:?} is not one of {}",
            shown.join(", ")
        ))
    }
}

fn common_proxy_rules(mode: &str, mtls: &str, mesh_gateway: &MeshGateway) -> Result<(), String> {
    one_of("Mode", mode, &["", "direct", "transparent"])?;
    if !["", "strict", "permissive"].contains(&mtls) {
        return Err(format!(
            "Invalid MutualTLSMode {mtls:?}. Must be one of \"\", \"strict\", or \"permissive\"."
        ));
    }
    one_of(
        "MeshGateway.Mode",
        &mesh_gateway.mode,
        &["", "none", "local", "remote"],
    )
}

fn compile(field: &str, pattern: &str) -> Result<(), String> {
    regex::Regex::new(pattern)
        .map(|_| ())
        .map_err(|e| format!("{field}: invalid regular expression {pattern:?}: {e}"))
}

/// Header matchers of routes and intention permissions: a name, and
/// exactly one way to match. `label` turns `Header[j] ...` into the full
/// message for the caller's position.
pub(crate) fn check_header_matches(
    headers: &[HeaderMatch],
    label: impl Fn(&str) -> String,
) -> Result<(), String> {
    for (j, h) in headers.iter().enumerate() {
        if h.name.is_empty() {
            return Err(label(&format!("Header[{j}] missing required Name field")));
        }
        let set = [
            h.present,
            !h.exact.is_empty(),
            !h.prefix.is_empty(),
            !h.suffix.is_empty(),
            !h.contains.is_empty(),
            !h.regex.is_empty(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if set != 1 {
            return Err(label(&format!(
                "Header[{j}] should only contain one of Present, Exact, Prefix, Suffix, Contains, or Regex"
            )));
        }
        if !h.regex.is_empty() {
            compile(&label(&format!("Header[{j}].Regex")), &h.regex)?;
        }
    }
    Ok(())
}

/// HTTP methods of routes and intention permissions: known, and each once.
pub(crate) fn check_methods(
    methods: &[String],
    label: impl Fn(&str) -> String,
) -> Result<(), String> {
    let mut seen = Vec::new();
    for method in methods {
        let upper = method.to_ascii_uppercase();
        if !METHODS.contains(&upper.as_str()) {
            return Err(label(&format!(
                "Methods contains an invalid method {method:?}"
            )));
        }
        if seen.contains(&upper) {
            return Err(label(&format!("Methods contains {upper:?} more than once")));
        }
        seen.push(upper);
    }
    Ok(())
}

fn validate_router(router: &ServiceRouter) -> Result<(), String> {
    for (i, route) in router.routes.iter().enumerate() {
        let at = |field: &str| format!("Route[{i}] {field}");
        if let Some(http) = route.route_match.as_ref().and_then(|m| m.http.as_ref()) {
            let paths = [&http.path_exact, &http.path_prefix, &http.path_regex]
                .iter()
                .filter(|p| !p.is_empty())
                .count();
            if paths > 1 {
                return Err(at(
                    "should only contain at most one of PathExact, PathPrefix, or PathRegex",
                ));
            }
            if !http.path_exact.is_empty() && !http.path_exact.starts_with('/') {
                return Err(at(&format!(
                    "PathExact doesn't start with '/': {:?}",
                    http.path_exact
                )));
            }
            if !http.path_prefix.is_empty() && !http.path_prefix.starts_with('/') {
                return Err(at(&format!(
                    "PathPrefix doesn't start with '/': {:?}",
                    http.path_prefix
                )));
            }
            if !http.path_regex.is_empty() {
                compile(&at("PathRegex"), &http.path_regex)?;
            }
            check_header_matches(&http.header, |rest| at(rest))?;
            for (j, q) in http.query_param.iter().enumerate() {
                if q.name.is_empty() {
                    return Err(at(&format!("QueryParam[{j}] missing required Name field")));
                }
                let set = [q.present, !q.exact.is_empty(), !q.regex.is_empty()]
                    .iter()
                    .filter(|b| **b)
                    .count();
                if set != 1 {
                    return Err(at(&format!(
                        "QueryParam[{j}] should only contain one of Present, Exact, or Regex"
                    )));
                }
                if !q.regex.is_empty() {
                    compile(&at(&format!("QueryParam[{j}].Regex")), &q.regex)?;
                }
            }
            check_methods(&http.methods, |rest| at(rest))?;
        }
        if let Some(dest) = &route.destination {
            if !dest.prefix_rewrite.is_empty() {
                let http = route.route_match.as_ref().and_then(|m| m.http.as_ref());
                if http.is_none_or(|h| h.path_prefix.is_empty() && h.path_exact.is_empty()) {
                    return Err(at("cannot make use of PrefixRewrite without configuring either PathExact or PathPrefix"));
                }
            }
            if dest.num_retries < 0 {
                return Err(at("NumRetries must not be negative"));
            }
            for condition in &dest.retry_on {
                if !RETRY_ON.contains(&condition.as_str()) {
                    return Err(at(&format!(
                        "RetryOn contains an invalid retry condition: {condition:?}"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn validate_splitter(name: &str, splitter: &ServiceSplitter) -> Result<(), String> {
    if splitter.splits.is_empty() {
        return Err("no splits configured".into());
    }
    let mut total = 0.0;
    let mut seen = Vec::new();
    for (i, split) in splitter.splits.iter().enumerate() {
        if !(0.0..=100.0).contains(&split.weight) {
            return Err(format!(
                "Split[{i}] Weight must be between 0 and 100, got {}",
                split.weight
            ));
        }
        total += (split.weight * 100.0).round();
        let service = if split.service.is_empty() {
            name
        } else {
            split.service.as_str()
        };
        let key = (
            service.to_string(),
            split.service_subset.clone(),
            split.namespace.clone(),
        );
        if seen.contains(&key) {
            return Err(format!(
                "split destination occurs more than once: service={:?}, subset={:?}",
                key.0, key.1
            ));
        }
        seen.push(key);
    }
    if total != 10000.0 {
        return Err(format!(
            "the sum of all split weights must be 100, not {:.6}",
            total / 100.0
        ));
    }
    Ok(())
}

fn is_valid_subset_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn validate_resolver(name: &str, resolver: &ServiceResolver) -> Result<(), String> {
    for (subset_name, subset) in &resolver.subsets {
        if !is_valid_subset_name(subset_name) {
            return Err(format!(
                "Subset {subset_name:?} is invalid: must be 63 characters or fewer, begin or end with lower case alphanumeric characters, and contain lower case alphanumeric characters or '-' in between"
            ));
        }
        if !subset.filter.is_empty() {
            legate_filter::Expr::parse(&subset.filter).map_err(|e| {
                format!("Filter for subset {subset_name:?} is not a valid expression: {e}")
            })?;
        }
    }
    if !resolver.default_subset.is_empty()
        && !resolver.subsets.contains_key(&resolver.default_subset)
    {
        return Err(format!(
            "DefaultSubset {:?} is not a valid subset",
            resolver.default_subset
        ));
    }
    if let Some(redirect) = &resolver.redirect {
        if !resolver.subsets.is_empty() {
            return Err("Redirect and Subsets cannot both be set".into());
        }
        if !resolver.failover.is_empty() {
            return Err("Redirect and Failover cannot both be set".into());
        }
        if !resolver.default_subset.is_empty() {
            return Err("Redirect and DefaultSubset cannot both be set".into());
        }
        let target = if redirect.service.is_empty() {
            name
        } else {
            redirect.service.as_str()
        };
        if target == name
            && redirect.service_subset.is_empty()
            && redirect.datacenter.is_empty()
            && redirect.peer.is_empty()
        {
            return Err("Redirect is a no-op: it points at the resolver's own service".into());
        }
    }
    for (key, failover) in &resolver.failover {
        if key != "*" && !resolver.subsets.contains_key(key) {
            return Err(format!("Bad Failover[{key:?}]: not a valid subset"));
        }
        if failover.service.is_empty()
            && failover.service_subset.is_empty()
            && failover.namespace.is_empty()
            && failover.datacenters.is_empty()
            && failover.targets.is_empty()
            && failover.sameness_group.is_empty()
        {
            return Err(format!(
                "Bad Failover[{key:?}] one of Service, ServiceSubset, Namespace, Targets, SamenessGroup, or Datacenters is required"
            ));
        }
        if !failover.targets.is_empty() {
            for (field, set) in [
                ("Datacenters", !failover.datacenters.is_empty()),
                ("ServiceSubset", !failover.service_subset.is_empty()),
                ("Service", !failover.service.is_empty()),
            ] {
                if set {
                    return Err(format!(
                        "Bad Failover[{key:?}]: Targets cannot be set with {field}"
                    ));
                }
            }
        }
        if failover.datacenters.iter().any(String::is_empty) {
            return Err(format!(
                "Bad Failover[{key:?}].Datacenters: found empty datacenter"
            ));
        }
    }
    if let Some(lb) = &resolver.load_balancer {
        if !LB_POLICIES.contains(&lb.policy.as_str()) {
            return Err(format!(
                "Bad LoadBalancer policy: {:?} is not supported",
                lb.policy
            ));
        }
        if !lb.hash_policies.is_empty() && !matches!(lb.policy.as_str(), "ring_hash" | "maglev") {
            return Err(format!(
                "HashPolicies specified for non-hash-based Policy: {:?}",
                lb.policy
            ));
        }
        if lb.ring_hash_config.is_some() && lb.policy != "ring_hash" {
            return Err(format!(
                "RingHashConfig specified for incompatible load balancing policy {:?}",
                lb.policy
            ));
        }
        if lb.least_request_config.is_some() && lb.policy != "least_request" {
            return Err(format!(
                "LeastRequestConfig specified for incompatible load balancing policy {:?}",
                lb.policy
            ));
        }
    }
    Ok(())
}

/// The routing entries of a cluster, decoded and keyed by service: what
/// both the graph checks and the compiler read.
#[derive(Debug, Default)]
pub struct RoutingEntries {
    /// The `global` proxy-defaults.
    pub proxy_defaults: Option<ProxyDefaults>,
    /// service-defaults by service.
    pub defaults: BTreeMap<String, ServiceDefaults>,
    /// service-router by service.
    pub routers: BTreeMap<String, ServiceRouter>,
    /// service-splitter by service.
    pub splitters: BTreeMap<String, ServiceSplitter>,
    /// service-resolver by service.
    pub resolvers: BTreeMap<String, ServiceResolver>,
}

impl RoutingEntries {
    /// Decodes the routing kinds among `entries` (others are skipped).
    pub fn new(entries: &[ConfigEntry]) -> Result<RoutingEntries, String> {
        let with_label = |e: &ConfigEntry, err: String| format!("{}: {err}", e.label());
        let mut out = RoutingEntries::default();
        for e in entries {
            let name = e.name.clone();
            match e.kind.as_str() {
                "proxy-defaults" => {
                    out.proxy_defaults = Some(decode(e).map_err(|err| with_label(e, err))?)
                }
                "service-defaults" => {
                    out.defaults
                        .insert(name, decode(e).map_err(|err| with_label(e, err))?);
                }
                "service-router" => {
                    out.routers
                        .insert(name, decode(e).map_err(|err| with_label(e, err))?);
                }
                "service-splitter" => {
                    out.splitters
                        .insert(name, decode(e).map_err(|err| with_label(e, err))?);
                }
                "service-resolver" => {
                    out.resolvers
                        .insert(name, decode(e).map_err(|err| with_label(e, err))?);
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// A service's protocol: service-defaults, then proxy-defaults'
    /// `Config.protocol`, then `tcp`.
    pub fn protocol(&self, service: &str) -> String {
        self.defaults
            .get(service)
            .map(|d| d.protocol.to_ascii_lowercase())
            .filter(|p| !p.is_empty())
            .or_else(|| {
                self.proxy_defaults
                    .as_ref()
                    .and_then(|p| p.config.get("protocol"))
                    .and_then(Value::as_str)
                    .map(str::to_ascii_lowercase)
            })
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "tcp".to_string())
    }

    /// A service's mesh gateway mode: service-defaults, then proxy-defaults.
    pub fn mesh_gateway_mode(&self, service: &str) -> String {
        self.defaults
            .get(service)
            .map(|d| d.mesh_gateway.mode.clone())
            .filter(|m| !m.is_empty())
            .or_else(|| {
                self.proxy_defaults
                    .as_ref()
                    .map(|p| p.mesh_gateway.mode.clone())
            })
            .unwrap_or_default()
    }
}

/// Checks one entry's own rules (every kind).
pub fn validate_entry(entry: &ConfigEntry) -> Result<(), String> {
    match entry.kind.as_str() {
        "service-defaults" => {
            if entry.name == "*" {
                return Err(
                    "service-defaults name must be the name of a service, and not a wildcard"
                        .into(),
                );
            }
            let d: ServiceDefaults = decode(entry)?;
            one_of("Protocol", &d.protocol.to_ascii_lowercase(), PROTOCOLS)?;
            common_proxy_rules(&d.mode, &d.mutual_tls_mode, &d.mesh_gateway)?;
            one_of(
                "BalanceInboundConnections",
                &d.balance_inbound_connections,
                &["", "exact_balance"],
            )?;
            for (field, value) in [
                ("MaxInboundConnections", d.max_inbound_connections),
                ("LocalConnectTimeoutMs", d.local_connect_timeout_ms),
                ("LocalRequestTimeoutMs", d.local_request_timeout_ms),
            ] {
                if value < 0 {
                    return Err(format!(
                        "invalid value for {field}: {value} (must not be negative)"
                    ));
                }
            }
            Ok(())
        }
        "proxy-defaults" => {
            let d: ProxyDefaults = decode(entry)?;
            if let Some(protocol) = d.config.get("protocol") {
                let protocol = protocol
                    .as_str()
                    .ok_or("Config.protocol must be a string")?;
                one_of("Config.protocol", &protocol.to_ascii_lowercase(), PROTOCOLS)?;
            }
            common_proxy_rules(&d.mode, &d.mutual_tls_mode, &d.mesh_gateway)
        }
        "service-router" => validate_router(&decode(entry)?),
        "service-splitter" => validate_splitter(&entry.name, &decode(entry)?),
        "service-resolver" => validate_resolver(&entry.name, &decode(entry)?),
        _ => crate::entries_more::validate_other(entry).unwrap_or(Ok(())),
    }
}

#[cfg(test)]
mod tests;
