//! Typed views and write-time rules of the non-routing kinds:
//! `service-intentions`, `ingress-gateway`, `terminating-gateway`, `mesh`
//! and `exported-services`. Messages follow Consul's (CE) wording.

use std::collections::{BTreeMap, BTreeSet};

use legate_types::config_entry::ConfigEntry;
use serde::Deserialize;
use serde_json::Value;

use crate::entries::{check_header_matches, check_methods, decode, HeaderMatch, HeaderModifiers};

/// An L7 permission's HTTP match.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct PermissionHttp {
    /// Exact path.
    #[serde(default)]
    pub path_exact: String,
    /// Path prefix.
    #[serde(default)]
    pub path_prefix: String,
    /// Path regex.
    #[serde(default)]
    pub path_regex: String,
    /// Header matchers.
    #[serde(default)]
    pub header: Vec<HeaderMatch>,
    /// Methods.
    #[serde(default)]
    pub methods: Vec<String>,
}

/// An L7 permission.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Permission {
    /// `allow` or `deny`.
    #[serde(default)]
    pub action: String,
    /// HTTP match.
    #[serde(default, rename = "HTTP")]
    pub http: Option<PermissionHttp>,
    /// JWT requirements.
    #[serde(default, rename = "JWT")]
    pub jwt: Option<Value>,
}

/// One intention source.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct IntentionSource {
    /// Source service (`*` for any).
    #[serde(default)]
    pub name: String,
    /// Source peer.
    #[serde(default)]
    pub peer: String,
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Sameness group (Enterprise).
    #[serde(default)]
    pub sameness_group: String,
    /// `allow` or `deny` (L4).
    #[serde(default)]
    pub action: String,
    /// L7 permissions.
    #[serde(default)]
    pub permissions: Vec<Permission>,
    /// Computed on read; ignored on write.
    #[serde(default)]
    pub precedence: i64,
    /// `consul`.
    #[serde(default, rename = "Type")]
    pub source_type: String,
    /// Free text (≤ 512 characters).
    #[serde(default)]
    pub description: String,
    /// The legacy intention id (set by the legacy API only).
    #[serde(default, rename = "LegacyID")]
    pub legacy_id: String,
    /// Legacy metadata (legacy API only).
    #[serde(default)]
    pub legacy_meta: BTreeMap<String, String>,
    /// Legacy creation time (legacy API only).
    #[serde(default)]
    pub legacy_create_time: Option<String>,
    /// Legacy update time (legacy API only).
    #[serde(default)]
    pub legacy_update_time: Option<String>,
}

/// `service-intentions`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ServiceIntentions {
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Sources.
    #[serde(default)]
    pub sources: Vec<IntentionSource>,
    /// JWT providers.
    #[serde(default, rename = "JWT")]
    pub jwt: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

fn wildcard_rule(field: &str, value: &str) -> Result<(), String> {
    if value.contains('*') && value != "*" {
        return Err(format!(
            "{field}: wildcard character '*' cannot be used with partial values"
        ));
    }
    Ok(())
}

/// The most sources one `service-intentions` entry may have (every proxy
/// of the destination holds them all).
pub const MAX_INTENTION_SOURCES: usize = 10_000;

fn validate_intentions(name: &str, e: &ServiceIntentions) -> Result<(), String> {
    validate_intentions_as(name, e, false)
}

/// Validates a `service-intentions` entry; `legacy_write` is set for
/// writes through the legacy (ID-based) intentions API, whose sources all
/// carry a legacy id and timestamps and whose entry has no `Meta`.
pub fn validate_intentions_entry(entry: &ConfigEntry, legacy_write: bool) -> Result<(), String> {
    let e: ServiceIntentions = decode(entry)?;
    validate_intentions_as(&entry.name, &e, legacy_write)
}

fn validate_intentions_as(
    name: &str,
    e: &ServiceIntentions,
    legacy_write: bool,
) -> Result<(), String> {
    wildcard_rule("Name", name)?;
    if legacy_write && !e.meta.is_empty() {
        return Err("Meta must be omitted for legacy intention writes".into());
    }
    if e.sources.is_empty() {
        return Err("At least one source is required".into());
    }
    if e.sources.len() > MAX_INTENTION_SOURCES {
        return Err(format!(
            "Sources: {} sources is more than the {MAX_INTENTION_SOURCES} one entry may have",
            e.sources.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, s) in e.sources.iter().enumerate() {
        let at = format!("Sources[{i}]");
        if s.name.is_empty() {
            return Err(format!("{at}.Name is required"));
        }
        wildcard_rule(&format!("{at}.Name"), &s.name)?;
        if s.peer.contains('*') {
            return Err(format!("{at}.Peer: cannot use wildcard '*' in peer"));
        }
        if !s.peer.is_empty() && !s.partition.is_empty() {
            return Err(format!(
                "{at}.Peer: cannot set Peer and Partition at the same time."
            ));
        }
        if s.description.chars().count() > 512 {
            return Err(format!("{at}.Description exceeds maximum length 512"));
        }
        if legacy_write {
            if s.legacy_id.is_empty() {
                return Err(format!("{at}.LegacyID must be set"));
            }
            if s.legacy_create_time.is_none() || s.legacy_update_time.is_none() {
                return Err(format!(
                    "{at}.LegacyCreateTime and LegacyUpdateTime must be set"
                ));
            }
            if !s.permissions.is_empty() {
                return Err("Permissions must not be set when using the legacy APIs".into());
            }
        } else {
            if !s.legacy_meta.is_empty() {
                return Err(format!("{at}.LegacyMeta must be omitted"));
            }
            if !s.legacy_id.is_empty() {
                return Err(format!("{at}.LegacyID must be omitted"));
            }
        }
        if s.permissions.is_empty() {
            if s.action != "allow" && s.action != "deny" {
                return Err(format!("{at}.Action must be set to 'allow' or 'deny'"));
            }
        } else {
            if !s.action.is_empty() {
                return Err(format!(
                    "{at}.Action must be omitted if Permissions are specified"
                ));
            }
            if name == "*" {
                return Err(format!("{at}.Permissions cannot be specified on intentions with wildcarded destinations"));
            }
        }
        if !s.source_type.is_empty() && s.source_type != "consul" {
            return Err(format!("{at}.Type must be set to 'consul'"));
        }
        for (j, p) in s.permissions.iter().enumerate() {
            let pat = format!("{at}.Permissions[{j}]");
            if p.action != "allow" && p.action != "deny" {
                return Err(format!("{pat}.Action must be set to 'allow' or 'deny'"));
            }
            let Some(http) = &p.http else {
                return Err(format!("{pat}.HTTP is required"));
            };
            let hat = format!("{pat}.HTTP");
            if !http.path_exact.is_empty() && !http.path_exact.starts_with('/') {
                return Err(format!(
                    "{hat}.PathExact doesn't start with '/': {:?}",
                    http.path_exact
                ));
            }
            if !http.path_prefix.is_empty() && !http.path_prefix.starts_with('/') {
                return Err(format!(
                    "{hat}.PathPrefix doesn't start with '/': {:?}",
                    http.path_prefix
                ));
            }
            let paths = [&http.path_exact, &http.path_prefix, &http.path_regex]
                .iter()
                .filter(|p| !p.is_empty())
                .count();
            if paths > 1 {
                return Err(format!(
                    "{hat} should only contain at most one of PathExact, PathPrefix, or PathRegex"
                ));
            }
            check_header_matches(&http.header, |rest| format!("{hat}.{rest}"))?;
            check_methods(&http.methods, |rest| format!("{hat}.{rest}"))?;
            if paths == 0 && http.header.is_empty() && http.methods.is_empty() {
                return Err(format!("{hat} should not be empty"));
            }
        }
        let key = (s.name.clone(), s.peer.clone(), s.sameness_group.clone());
        if !seen.insert(key) {
            return Err(if s.peer.is_empty() {
                format!("{at} defines {:?} more than once", s.name)
            } else {
                format!(
                    "{at} defines peer({:?}) {:?} more than once",
                    s.peer, s.name
                )
            });
        }
    }
    Ok(())
}

/// Gateway TLS settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct GatewayTls {
    /// TLS on.
    #[serde(default)]
    pub enabled: bool,
    /// SDS certificate source.
    #[serde(default, rename = "SDS")]
    pub sds: Option<Value>,
    /// Minimum TLS version.
    #[serde(default, rename = "TLSMinVersion")]
    pub tls_min_version: String,
    /// Maximum TLS version.
    #[serde(default, rename = "TLSMaxVersion")]
    pub tls_max_version: String,
    /// Cipher suites.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
}

/// A service behind an ingress listener.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct IngressService {
    /// Service (`*`: all, http only).
    #[serde(default)]
    pub name: String,
    /// Host names.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Per-service TLS.
    #[serde(default, rename = "TLS")]
    pub tls: Option<Value>,
    /// Request header changes.
    #[serde(default)]
    pub request_headers: Option<HeaderModifiers>,
    /// Response header changes.
    #[serde(default)]
    pub response_headers: Option<HeaderModifiers>,
    /// Connection limit.
    #[serde(default)]
    pub max_connections: u32,
    /// Pending request limit.
    #[serde(default)]
    pub max_pending_requests: u32,
    /// Concurrent request limit.
    #[serde(default)]
    pub max_concurrent_requests: u32,
    /// Passive health check.
    #[serde(default)]
    pub passive_health_check: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// An ingress listener.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct IngressListener {
    /// Port.
    #[serde(default)]
    pub port: u16,
    /// Protocol (default tcp).
    #[serde(default)]
    pub protocol: String,
    /// Listener TLS.
    #[serde(default, rename = "TLS")]
    pub tls: Option<GatewayTls>,
    /// Services.
    #[serde(default)]
    pub services: Vec<IngressService>,
}

/// `ingress-gateway`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct IngressGateway {
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Gateway TLS.
    #[serde(default, rename = "TLS")]
    pub tls: GatewayTls,
    /// Listeners.
    #[serde(default)]
    pub listeners: Vec<IngressListener>,
    /// Defaults for services.
    #[serde(default)]
    pub defaults: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

const TLS_VERSIONS: &[&str] = &["", "TLS_AUTO", "TLSv1_0", "TLSv1_1", "TLSv1_2", "TLSv1_3"];

fn validate_tls(tls: &GatewayTls) -> Result<(), String> {
    for v in [&tls.tls_min_version, &tls.tls_max_version] {
        if !TLS_VERSIONS.contains(&v.as_str()) {
            return Err(format!("{v} is not a valid TLS version; use one of TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3"));
        }
    }
    let rank = |v: &str| TLS_VERSIONS.iter().position(|x| *x == v).unwrap_or(0);
    if !tls.tls_min_version.is_empty()
        && !tls.tls_max_version.is_empty()
        && rank(&tls.tls_max_version) < rank(&tls.tls_min_version)
    {
        return Err(format!(
            "configuring max version {} less than the configured min version {} is invalid",
            tls.tls_max_version, tls.tls_min_version
        ));
    }
    if !tls.cipher_suites.is_empty() && tls.tls_min_version == "TLSv1_3" {
        return Err("configuring CipherSuites is only applicable to connections negotiated with TLS 1.2 or earlier, TLSMinVersion is set to TLSv1_3".into());
    }
    Ok(())
}

fn valid_host(host: &str) -> Result<(), String> {
    if host == "*" {
        return Ok(());
    }
    let labels: Vec<&str> = host.split('.').collect();
    for (i, label) in labels.iter().enumerate() {
        if *label == "*" {
            if i != 0 {
                return Err(format!("Host {host:?} is not valid, a wildcard specifier is only allowed as the leftmost label"));
            }
            continue;
        }
        let ok = !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!("Host {host:?} must be a valid DNS hostname"));
        }
    }
    Ok(())
}

fn validate_ingress(e: &IngressGateway) -> Result<(), String> {
    validate_tls(&e.tls)?;
    let mut ports = BTreeSet::new();
    for l in &e.listeners {
        let port = l.port;
        if !ports.insert(port) {
            return Err(format!("port {port} declared on two listeners"));
        }
        let protocol = if l.protocol.is_empty() {
            "tcp".to_string()
        } else {
            l.protocol.to_ascii_lowercase()
        };
        let l7 = matches!(protocol.as_str(), "http" | "http2" | "grpc");
        if !l7 && protocol != "tcp" {
            return Err(format!("protocol must be 'tcp', 'http', 'http2', or 'grpc'. '{protocol}' is an unsupported protocol"));
        }
        if l.services.is_empty() {
            return Err(format!("No service declared for listener with port {port}"));
        }
        if !l7 && l.services.len() > 1 {
            return Err(format!(
                "Multiple services per listener are only supported for L7 protocols, 'http', 'grpc' and 'http2' (listener on port {port})"
            ));
        }
        if let Some(tls) = &l.tls {
            validate_tls(tls)?;
        }
        let mut names = BTreeSet::new();
        let mut hosts = BTreeSet::new();
        for s in &l.services {
            if !l7 && (s.request_headers.is_some() || s.response_headers.is_some()) {
                let which = if s.request_headers.is_some() {
                    "request"
                } else {
                    "response"
                };
                return Err(format!(
                    "{which} headers only valid for http, http2 and grpc protocols (service {:?} on listener on port {port})",
                    s.name
                ));
            }
            let has_hosts = s.hosts.as_ref().is_some_and(|h| !h.is_empty());
            if !l7 {
                if s.name == "*" {
                    return Err(format!("Wildcard service name is only valid for protocol = 'http' (listener on port {port})"));
                }
                if has_hosts {
                    return Err(format!("Associating hosts to a service is not supported for the tcp protocol (listener on port {port})"));
                }
            }
            if s.name.is_empty() {
                return Err(format!(
                    "Service name cannot be blank (listener on port {port})"
                ));
            }
            if s.name == "*" && has_hosts {
                return Err(format!("Associating hosts to a wildcard service is not supported (listener on port {port})"));
            }
            if !names.insert(s.name.clone()) {
                return Err(format!(
                    "Service {} cannot be added multiple times (listener on port {port})",
                    s.name
                ));
            }
            for host in s.hosts.iter().flatten() {
                if !hosts.insert(host.clone()) {
                    return Err(format!(
                        "Hosts must be unique within a specific listener (listener on port {port})"
                    ));
                }
                if host == "*" && e.tls.enabled {
                    return Err("Host '*' is not allowed when TLS is enabled, all hosts must be valid DNS records to add as a DNSSAN".into());
                }
                valid_host(host)?;
            }
        }
    }
    Ok(())
}

/// A service linked to a terminating gateway.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct LinkedService {
    /// Service (`*`: all).
    #[serde(default)]
    pub name: String,
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// CA bundle for TLS origination.
    #[serde(default, rename = "CAFile")]
    pub ca_file: String,
    /// Client certificate.
    #[serde(default)]
    pub cert_file: String,
    /// Client key.
    #[serde(default)]
    pub key_file: String,
    /// SNI to present.
    #[serde(default, rename = "SNI")]
    pub sni: String,
    /// Keep the Host header.
    #[serde(default)]
    pub disable_auto_host_rewrite: bool,
}

/// `terminating-gateway`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct TerminatingGateway {
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Linked services.
    #[serde(default)]
    pub services: Vec<LinkedService>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

fn validate_terminating(e: &TerminatingGateway) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for s in &e.services {
        if s.name.is_empty() {
            return Err("Service name cannot be blank.".into());
        }
        if s.namespace == "*" {
            return Err(
                "Wildcard namespace is not supported for terminating gateway services".into(),
            );
        }
        if !seen.insert(s.name.clone()) {
            return Err(format!(
                "Service {:?} was specified more than once within a namespace",
                s.name
            ));
        }
        let tls_parts = [
            !s.ca_file.is_empty(),
            !s.cert_file.is_empty(),
            !s.key_file.is_empty(),
        ];
        if (!s.cert_file.is_empty() || !s.key_file.is_empty()) && !tls_parts.iter().all(|b| *b) {
            return Err(format!(
                "Service {:?} must have a CertFile, CAFile, and KeyFile specified for TLS origination",
                s.name
            ));
        }
    }
    Ok(())
}

/// `mesh`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Mesh {
    /// Namespace (Enterprise).
    #[serde(default)]
    pub namespace: String,
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Transparent proxy settings.
    #[serde(default)]
    pub transparent_proxy: Option<Value>,
    /// Allow permissive mTLS.
    #[serde(default, rename = "AllowEnablingPermissiveMutualTLS")]
    pub allow_enabling_permissive_mutual_tls: bool,
    /// Validate clusters.
    #[serde(default)]
    pub validate_clusters: bool,
    /// TLS settings.
    #[serde(default, rename = "TLS")]
    pub tls: Option<MeshTls>,
    /// HTTP settings.
    #[serde(default, rename = "HTTP")]
    pub http: Option<Value>,
    /// Peering settings.
    #[serde(default)]
    pub peering: Option<Value>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// Mesh-wide TLS settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct MeshTls {
    /// Inbound.
    #[serde(default)]
    pub incoming: Option<GatewayTls>,
    /// Outbound.
    #[serde(default)]
    pub outgoing: Option<GatewayTls>,
}

fn validate_mesh(e: &Mesh) -> Result<(), String> {
    if let Some(tls) = &e.tls {
        if let Some(t) = &tls.incoming {
            validate_tls(t).map_err(|err| format!("error in incoming TLS configuration: {err}"))?;
        }
        if let Some(t) = &tls.outgoing {
            validate_tls(t).map_err(|err| format!("error in outgoing TLS configuration: {err}"))?;
        }
    }
    if let Some(normalization) = e
        .http
        .as_ref()
        .and_then(|h| h.pointer("/Incoming/RequestNormalization"))
    {
        let check = |field: &str, allowed: &[&str]| -> Result<(), String> {
            match normalization.get(field).and_then(Value::as_str) {
                None | Some("") => Ok(()),
                Some(v) if allowed.contains(&v) => Ok(()),
                Some(v) => Err(format!(
                    "error in HTTP incoming request normalization configuration: no matching {field} value found for {v}, please specify one of [{}]",
                    allowed.join(", ")
                )),
            }
        };
        check(
            "PathWithEscapedSlashesAction",
            &[
                "IMPLEMENTATION_SPECIFIC_DEFAULT",
                "KEEP_UNCHANGED",
                "REJECT_REQUEST",
                "UNESCAPE_AND_REDIRECT",
                "UNESCAPE_AND_FORWARD",
            ],
        )?;
        check(
            "HeadersWithUnderscoresAction",
            &["ALLOW", "REJECT_REQUEST", "DROP_HEADER"],
        )?;
    }
    Ok(())
}

/// A consumer of an exported service.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Consumer {
    /// Partition (Enterprise).
    #[serde(default)]
    pub partition: String,
    /// Peer.
    #[serde(default, alias = "PeerName")]
    pub peer: String,
    /// Sameness group (Enterprise).
    #[serde(default)]
    pub sameness_group: String,
}

/// One exported service.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ExportedService {
    /// Service (`*`: all).
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Consumers.
    #[serde(default)]
    pub consumers: Vec<Consumer>,
}

/// `exported-services`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ExportedServices {
    /// Services.
    #[serde(default)]
    pub services: Vec<ExportedService>,
    /// Metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

fn validate_exported(e: &ExportedServices) -> Result<(), String> {
    for (i, s) in e.services.iter().enumerate() {
        for (j, c) in s.consumers.iter().enumerate() {
            if !c.partition.is_empty() && c.partition != "default" {
                return Err(format!(
                    "Services[{i}].Consumers[{j}]: partitions are an enterprise-only feature"
                ));
            }
            if !c.sameness_group.is_empty() {
                return Err(format!(
                    "Services[{i}].Consumers[{j}]: sameness-groups are an enterprise-only feature"
                ));
            }
        }
        if s.name.is_empty() {
            return Err(format!("Services[{i}]: service name cannot be empty"));
        }
        if s.namespace == "*" && s.name != "*" {
            return Err(format!(
                "Services[{i}]: service name must be wildcard if namespace is wildcard"
            ));
        }
        if s.consumers.is_empty() {
            return Err(format!("Services[{i}]: must have at least one consumer"));
        }
        for (j, c) in s.consumers.iter().enumerate() {
            let set = [
                !c.peer.is_empty(),
                !c.partition.is_empty(),
                !c.sameness_group.is_empty(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if set > 1 {
                return Err(format!("Services[{i}].Consumers[{j}]: must define at most one of Peer, Partition, or SamenessGroup"));
            }
            if c.partition == "*" {
                return Err(format!("Services[{i}].Consumers[{j}]: exporting to all partitions (wildcard) is not supported"));
            }
            if c.peer == "*" {
                return Err(format!("Services[{i}].Consumers[{j}]: exporting to all peers (wildcard) is not supported"));
            }
        }
    }
    Ok(())
}

/// Checks the rules of the non-routing kinds; `None` for other kinds.
pub(crate) fn validate_other(entry: &ConfigEntry) -> Option<Result<(), String>> {
    Some(match entry.kind.as_str() {
        "service-intentions" => decode(entry).and_then(|e| validate_intentions(&entry.name, &e)),
        "ingress-gateway" => decode(entry).and_then(|e| validate_ingress(&e)),
        "terminating-gateway" => decode(entry).and_then(|e| validate_terminating(&e)),
        "mesh" => decode(entry).and_then(|e| validate_mesh(&e)),
        "exported-services" => decode(entry).and_then(|e| validate_exported(&e)),
        _ => return None,
    })
}
