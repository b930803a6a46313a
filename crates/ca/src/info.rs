//! What the API reports about a certificate: fingerprint (root ids),
//! subject key id, serial, validity and URI SANs, in Consul's formats.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;

use crate::builtin::internal;
use crate::CaError;

/// Facts about one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// SHA-256 of the DER, colon-separated lowercase hex (Consul's root ID).
    pub fingerprint: String,
    /// Subject common name (empty when none).
    pub common_name: String,
    /// Serial number bytes (big-endian, no leading zero padding).
    pub serial: Vec<u8>,
    /// Subject key identifier, colon-separated hex (empty when absent).
    pub subject_key_id: String,
    /// Validity start.
    pub not_before: OffsetDateTime,
    /// Validity end.
    pub not_after: OffsetDateTime,
    /// URI SANs.
    pub uris: Vec<String>,
}

impl CertInfo {
    /// The serial as a number when it fits (roots report it so).
    pub fn serial_u64(&self) -> u64 {
        let bytes: Vec<u8> = self.serial.iter().rev().take(8).rev().copied().collect();
        bytes.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64)
    }

    /// The serial as colon-separated hex (leaf certificates report it so).
    pub fn serial_hex(&self) -> String {
        colon_hex(&self.serial)
    }
}

/// `aa:bb:cc` lowercase hex, as Consul's `connect.HexString`.
pub fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// RFC 3339 in UTC, as Go's `time.Time` marshals it.
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// Every certificate in a PEM bundle, as DER, in order.
pub fn pem_certificates(pem: &str) -> Result<Vec<Vec<u8>>, CaError> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| CaError::Internal(format!("invalid PEM: {e}")))?;
        if block.label == "CERTIFICATE" {
            out.push(block.contents);
        }
    }
    if out.is_empty() {
        return Err(CaError::Internal("no certificate in PEM".into()));
    }
    Ok(out)
}

/// Describes the first certificate of a PEM bundle.
pub fn describe(pem: &str) -> Result<CertInfo, CaError> {
    let der = pem_certificates(pem)?.remove(0);
    describe_der(&der)
}

/// Describes one DER certificate.
pub fn describe_der(der: &[u8]) -> Result<CertInfo, CaError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(internal)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut subject_key_id = String::new();
    let mut uris = Vec::new();
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(id) => {
                subject_key_id = colon_hex(id.0);
            }
            x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    if let GeneralName::URI(uri) = name {
                        uris.push(uri.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    let time = |t: x509_parser::time::ASN1Time| {
        OffsetDateTime::from_unix_timestamp(t.timestamp()).map_err(internal)
    };
    let serial = cert.tbs_certificate.raw_serial();
    let serial = match serial.iter().position(|b| *b != 0) {
        Some(first) => serial[first..].to_vec(),
        None => vec![0],
    };
    Ok(CertInfo {
        fingerprint: colon_hex(digest.as_ref()),
        common_name,
        serial,
        subject_key_id,
        not_before: time(cert.validity().not_before)?,
        not_after: time(cert.validity().not_after)?,
        uris,
    })
}
