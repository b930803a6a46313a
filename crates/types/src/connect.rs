//! Connect CA wire shapes: `/v1/connect/ca/roots`,
//! `/v1/connect/ca/configuration` and `/v1/agent/connect/ca/leaf/:service`.
//!
//! Private keys of roots never appear in these types: the state store keeps
//! them beside the public [`CaRoot`] (see `legate-state`), so an API response
//! cannot leak one by accident.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::RaftIndex;

/// One CA root as `/v1/connect/ca/roots` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct CaRoot {
    /// SHA-256 fingerprint of the certificate, colon-separated hex.
    #[serde(rename = "ID")]
    pub id: String,
    /// Human-readable name (the certificate's common name).
    pub name: String,
    /// The certificate's serial number.
    pub serial_number: u64,
    /// Subject key id of the signing key, colon-separated hex.
    #[serde(rename = "SigningKeyID")]
    pub signing_key_id: String,
    /// Trust domain of a root from another cluster (empty for ours).
    pub external_trust_domain: String,
    /// Validity start (RFC 3339).
    pub not_before: String,
    /// Validity end (RFC 3339).
    pub not_after: String,
    /// PEM certificate.
    pub root_cert: String,
    /// PEM intermediates leaf certificates carry after the leaf, e.g. this
    /// root cross-signed by the previous one.
    pub intermediate_certs: Option<Vec<String>>,
    /// Whether leaves are signed by this root now.
    pub active: bool,
    /// When the root stopped being active (RFC 3339; Go's zero time while active).
    pub rotated_out_at: String,
    /// `ec` or `rsa`.
    pub private_key_type: String,
    /// Key size.
    pub private_key_bits: u32,
    /// Raft indexes.
    #[serde(flatten)]
    pub raft: RaftIndex,
}

/// Go's zero `time.Time` as Consul serializes it.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// `/v1/connect/ca/roots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct IndexedCaRoots {
    /// Id of the root that signs new leaves.
    #[serde(rename = "ActiveRootID")]
    pub active_root_id: String,
    /// `<cluster-id>.consul`.
    pub trust_domain: String,
    /// Every root still trusted, active first.
    pub roots: Vec<CaRoot>,
}

impl IndexedCaRoots {
    /// The active root.
    pub fn active(&self) -> Option<&CaRoot> {
        self.roots.iter().find(|r| r.active)
    }
}

/// `/v1/connect/ca/configuration`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct CaConfiguration {
    /// The cluster id (trust domain `<ClusterID>.consul`).
    #[serde(rename = "ClusterID", default)]
    pub cluster_id: String,
    /// `consul` for the built-in provider.
    #[serde(default)]
    pub provider: String,
    /// The provider's settings (`LeafCertTTL`, `PrivateKey`, ...).
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Rotate even when the old root cannot cross-sign the new one.
    #[serde(default)]
    pub force_without_cross_signing: bool,
    /// Raft indexes.
    #[serde(flatten, default)]
    pub raft: RaftIndex,
}

/// A signed leaf, as `/v1/agent/connect/ca/leaf/:service` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct IssuedCert {
    /// Serial number, colon-separated hex.
    pub serial_number: String,
    /// PEM leaf followed by any intermediates.
    #[serde(rename = "CertPEM")]
    pub cert_pem: String,
    /// PEM private key (filled in by the agent; servers never see it).
    #[serde(rename = "PrivateKeyPEM", default)]
    pub private_key_pem: String,
    /// Service name (empty for agent certificates).
    #[serde(default)]
    pub service: String,
    /// The SPIFFE id in the certificate.
    #[serde(rename = "ServiceURI", default)]
    pub service_uri: String,
    /// Node name for agent certificates.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent: String,
    /// SPIFFE id for agent certificates.
    #[serde(rename = "AgentURI", default, skip_serializing_if = "String::is_empty")]
    pub agent_uri: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Partition.
    #[serde(default)]
    pub partition: String,
    /// Validity start (RFC 3339).
    pub valid_after: String,
    /// Validity end (RFC 3339).
    pub valid_before: String,
    /// Raft indexes (the agent keeps them increasing across renewals).
    #[serde(flatten)]
    pub raft: RaftIndex,
}

/// A CSR for a server to sign (`ConnectCA.Sign`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct CaSignRequest {
    /// PEM CSR carrying exactly one SPIFFE URI SAN.
    #[serde(rename = "CSR")]
    pub csr: String,
    /// The service the caller asks a certificate for; the CSR's SPIFFE id
    /// must name it (empty: the CSR's own id is checked against the
    /// caller's rights only).
    #[serde(default)]
    pub service: String,
}

/// Percent-encodes one path segment of a SPIFFE id: everything but
/// letters, digits and `-._~!$&'()*+,;=:@` is written as `%XX`, so a
/// service named `x y` is `x%20y` (as Go's URL escaping writes Consul's)
/// and a `/` can never add a segment.
pub fn escape_spiffe_segment(segment: &str) -> std::borrow::Cow<'_, str> {
    let keep = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b);
    if segment.bytes().all(keep) {
        return std::borrow::Cow::Borrowed(segment);
    }
    let mut out = String::with_capacity(segment.len() + 8);
    for b in segment.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Decodes a segment [`escape_spiffe_segment`] wrote (or any valid
/// percent-encoding of one).
pub fn unescape_spiffe_segment(segment: &str) -> Result<String, String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{segment:?} has a bad percent-encoding"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{segment:?} does not decode to UTF-8"))
}

/// The SPIFFE id of a service, as a URI.
pub fn spiffe_service_uri(
    trust_domain: &str,
    namespace: &str,
    datacenter: &str,
    service: &str,
) -> String {
    format!(
        "spiffe://{trust_domain}/ns/{}/dc/{}/svc/{}",
        escape_spiffe_segment(namespace),
        escape_spiffe_segment(datacenter),
        escape_spiffe_segment(service)
    )
}

#[cfg(test)]
mod spiffe_segment_tests {
    use super::*;

    #[test]
    fn segments_round_trip_and_never_add_a_segment() {
        for name in ["web", "x y", "a/b", "ünï", "100%", "a:b@c"] {
            let escaped = escape_spiffe_segment(name);
            assert!(
                !escaped.contains('/') && !escaped.contains(' '),
                "{escaped}"
            );
            assert_eq!(unescape_spiffe_segment(&escaped).unwrap(), name);
        }
        assert_eq!(escape_spiffe_segment("x y"), "x%20y");
        assert_eq!(
            spiffe_service_uri("td.consul", "default", "dc1", "x y"),
            "spiffe://td.consul/ns/default/dc/dc1/svc/x%20y"
        );
        assert!(unescape_spiffe_segment("%zz").is_err());
        assert!(unescape_spiffe_segment("%4").is_err());
    }
}
