//! A `jwt` auth method's `Config`, read as Consul reads it (names without
//! regard to case, unknown names refused in mapstructure's words) and
//! checked with its texts. Leeways are numbers of nanoseconds, as Consul
//! takes them over the API; Legate also takes Go duration strings
//! (`"150s"`), which Consul refuses.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::keys::{from_pem, PublicKey, SUPPORTED_ALGORITHMS};

/// The algorithms Consul accepts in `JWTSupportedAlgs`.
const CONSUL_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA",
];

/// The configuration of a `jwt` auth method.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JwtConfig {
    /// PEM public keys (or certificates) that may sign tokens.
    pub jwt_validation_pub_keys: Vec<String>,
    /// Where a JWKS document is fetched.
    pub jwks_url: String,
    /// The CA (PEM) the JWKS URL's certificate must chain to.
    pub jwks_ca_cert: String,
    /// An OpenID Connect issuer whose discovery document names the JWKS.
    pub oidc_discovery_url: String,
    /// The CA (PEM) of the discovery URL.
    pub oidc_discovery_ca_cert: String,
    /// The `iss` a token must have (any when empty).
    pub bound_issuer: String,
    /// One of these must be among the token's `aud`.
    pub bound_audiences: Vec<String>,
    /// Claim (name or JSON pointer) → selectable `value.<name>`.
    pub claim_mappings: BTreeMap<String, String>,
    /// Claim → selectable `list.<name>`.
    pub list_claim_mappings: BTreeMap<String, String>,
    /// Algorithms allowed for OIDC discovery.
    pub jwt_supported_algs: Vec<String>,
    /// Added to `iat`/`nbf` when a token has no `exp` (ns; 0: 150 s).
    pub expiration_leeway: i64,
    /// Taken from `exp` when a token has no `nbf` or `iat` (ns; 0: 150 s).
    pub not_before_leeway: i64,
    /// Allowed clock difference (ns; 0: 60 s).
    pub clock_skew_leeway: i64,
}

/// The names a `jwt` config may have, in Consul's spelling.
const KEYS: &[&str] = &[
    "JWTValidationPubKeys",
    "JWKSURL",
    "JWKSCACert",
    "OIDCDiscoveryURL",
    "OIDCDiscoveryCACert",
    "BoundIssuer",
    "BoundAudiences",
    "ClaimMappings",
    "ListClaimMappings",
    "JWTSupportedAlgs",
    "ExpirationLeeway",
    "NotBeforeLeeway",
    "ClockSkewLeeway",
];

/// mapstructure's report of decoding problems.
fn decoding(problems: &[String]) -> String {
    let list: Vec<String> = problems.iter().map(|p| format!("* {p}")).collect();
    format!(
        "error decoding config: {} error(s) decoding:\n\n{}",
        problems.len(),
        list.join("\n")
    )
}

fn text(value: &Value, key: &str) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Ok(String::new()),
        _ => Err(format!(
            "'{key}' expected type 'string', got unconvertible type '{}'",
            kind(value)
        )),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Null => "<nil>",
    }
}

fn texts(value: &Value, key: &str) -> Result<Vec<String>, String> {
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| text(v, &format!("{key}[{i}]")))
            .collect(),
        Value::Null => Ok(Vec::new()),
        // mapstructure's weak decoding makes a lone value a list of one.
        other => Ok(vec![text(other, key)?]),
    }
}

fn mapping(value: &Value, key: &str) -> Result<BTreeMap<String, String>, String> {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), text(v, &format!("{key}[{k}]"))?)))
            .collect(),
        Value::Null => Ok(BTreeMap::new()),
        other => Err(format!("'{key}' expected a map, got '{}'", kind(other))),
    }
}

fn nanos(value: &Value, key: &str) -> Result<i64, String> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .ok_or_else(|| format!("cannot parse '{key}' as int")),
        Value::String(s) => s
            .parse::<i64>()
            .ok()
            .or_else(|| parse_duration_ns(s))
            .ok_or_else(|| {
                format!(
                    "cannot parse '{key}' as int: strconv.ParseInt: parsing {s:?}: invalid syntax"
                )
            }),
        Value::Null => Ok(0),
        other => Err(format!(
            "'{key}' expected type 'time.Duration', got unconvertible type '{}'",
            kind(other)
        )),
    }
}

/// A Go duration (`"150s"`, `"1m30s"`, `"-1s"`) in nanoseconds.
fn parse_duration_ns(text: &str) -> Option<i64> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut total = 0f64;
    let mut rest = body;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    Some(if negative { -total } else { total } as i64)
}

impl JwtConfig {
    /// Reads an auth method's `Config` (`None`: an empty one).
    pub fn from_config(config: Option<&Map<String, Value>>) -> Result<JwtConfig, String> {
        let empty = Map::new();
        let config = config.unwrap_or(&empty);
        let mut unknown: Vec<&str> = config
            .keys()
            .filter(|k| !KEYS.iter().any(|known| known.eq_ignore_ascii_case(k)))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            unknown.sort();
            return Err(decoding(&[format!(
                "'' has invalid keys: {}",
                unknown.join(", ")
            )]));
        }
        let get = |name: &str| {
            config
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
                .unwrap_or(&Value::Null)
        };
        let mut problems = Vec::new();
        let mut keep = |r: Result<(), String>| {
            if let Err(e) = r {
                problems.push(e);
            }
        };
        let mut out = JwtConfig::default();
        keep(
            texts(get("JWTValidationPubKeys"), "JWTValidationPubKeys")
                .map(|v| out.jwt_validation_pub_keys = v),
        );
        keep(text(get("JWKSURL"), "JWKSURL").map(|v| out.jwks_url = v));
        keep(text(get("JWKSCACert"), "JWKSCACert").map(|v| out.jwks_ca_cert = v));
        keep(text(get("OIDCDiscoveryURL"), "OIDCDiscoveryURL").map(|v| out.oidc_discovery_url = v));
        keep(
            text(get("OIDCDiscoveryCACert"), "OIDCDiscoveryCACert")
                .map(|v| out.oidc_discovery_ca_cert = v),
        );
        keep(text(get("BoundIssuer"), "BoundIssuer").map(|v| out.bound_issuer = v));
        keep(texts(get("BoundAudiences"), "BoundAudiences").map(|v| out.bound_audiences = v));
        keep(mapping(get("ClaimMappings"), "ClaimMappings").map(|v| out.claim_mappings = v));
        keep(
            mapping(get("ListClaimMappings"), "ListClaimMappings")
                .map(|v| out.list_claim_mappings = v),
        );
        keep(
            texts(get("JWTSupportedAlgs"), "JWTSupportedAlgs").map(|v| out.jwt_supported_algs = v),
        );
        keep(nanos(get("ExpirationLeeway"), "ExpirationLeeway").map(|v| out.expiration_leeway = v));
        keep(nanos(get("NotBeforeLeeway"), "NotBeforeLeeway").map(|v| out.not_before_leeway = v));
        keep(nanos(get("ClockSkewLeeway"), "ClockSkewLeeway").map(|v| out.clock_skew_leeway = v));
        if !problems.is_empty() {
            return Err(decoding(&problems));
        }
        Ok(out)
    }

    /// Consul's checks that need no network (the JWKS and discovery URLs
    /// are fetched by the caller); the static keys when the method has
    /// them.
    pub fn validate(&self) -> Result<Vec<PublicKey>, String> {
        let sources = [
            !self.jwt_validation_pub_keys.is_empty(),
            !self.jwks_url.is_empty(),
            !self.oidc_discovery_url.is_empty(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err("exactly one of 'JWTValidationPubKeys', 'JWKSURL', or 'OIDCDiscoveryURL' must be set for type \"jwt\"".into());
        }
        if !self.jwks_url.is_empty() {
            check_ca(&self.jwks_ca_cert, "JWKSCACert")?;
        } else if !self.jwks_ca_cert.is_empty() {
            return Err("'JWKSCACert' should not be set unless 'JWKSURL' is set".into());
        }
        let mut keys = Vec::new();
        for (i, pem) in self.jwt_validation_pub_keys.iter().enumerate() {
            keys.extend(
                from_pem(pem).map_err(|e| {
                    format!("error parsing public key JWTValidationPubKeys[{i}]: {e}")
                })?,
            );
        }
        if !self.oidc_discovery_url.is_empty() {
            check_ca(&self.oidc_discovery_ca_cert, "OIDCDiscoveryCACert")?;
        } else if !self.oidc_discovery_ca_cert.is_empty() {
            return Err(
                "'OIDCDiscoveryCACert' should not be set unless 'OIDCDiscoveryURL' is set".into(),
            );
        }
        for alg in &self.jwt_supported_algs {
            if !CONSUL_ALGORITHMS.contains(&alg.as_str()) {
                return Err(format!("Invalid supported algorithm: {alg}"));
            }
            if !SUPPORTED_ALGORITHMS.contains(&alg.as_str()) {
                return Err(format!("Unsupported algorithm in Legate: {alg}"));
            }
        }
        for (what, map) in [
            ("ClaimMappings", &self.claim_mappings),
            ("ListClaimMappings", &self.list_claim_mappings),
        ] {
            let mut seen = std::collections::BTreeSet::new();
            for target in map.values() {
                if !seen.insert(target) {
                    return Err(format!(
                        "{what} contains multiple mappings for key {target:?}"
                    ));
                }
            }
        }
        Ok(keys)
    }
}

/// A CA PEM, when given, must hold a certificate.
fn check_ca(pem: &str, what: &str) -> Result<(), String> {
    if pem.is_empty() {
        return Ok(());
    }
    let has_cert = x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .filter_map(Result::ok)
        .any(|block| block.label == "CERTIFICATE" && block.parse_x509().is_ok());
    if has_cert {
        Ok(())
    } else {
        Err(format!(
            "error checking {what}: could not parse CA PEM value successfully"
        ))
    }
}
