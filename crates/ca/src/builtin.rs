//! The built-in provider (`consul` in Consul's configuration): EC P-256
//! roots, leaf signing with identity checks, and cross-signing for rotation.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;

use crate::SpiffeId;

/// Why a CA operation failed; messages are shown to users.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    /// The CSR could not be parsed or its signature is wrong.
    #[error("invalid CSR: {0}")]
    BadCsr(String),
    /// The CSR asks for an identity the caller may not have.
    #[error("{0}")]
    WrongIdentity(String),
    /// The CA configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// A key or certificate could not be used.
    #[error("CA error: {0}")]
    Internal(String),
}

pub(crate) fn internal(e: impl std::fmt::Display) -> CaError {
    CaError::Internal(e.to_string())
}

/// A root (or intermediate) with its private key.
#[derive(Clone, PartialEq, Eq)]
pub struct CaRoot {
    /// PEM certificate.
    pub cert_pem: String,
    /// PEM private key (PKCS#8).
    pub key_pem: String,
    /// Expiry.
    pub not_after: OffsetDateTime,
}

impl std::fmt::Debug for CaRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaRoot")
            .field("not_after", &self.not_after)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

pub(crate) fn random_serial() -> SerialNumber {
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[0] &= 0x7f; // keep it positive
    SerialNumber::from_slice(&bytes)
}

/// Validity starting a minute ago (clock skew) and lasting `ttl`.
pub(crate) fn validity(params: &mut CertificateParams, ttl: Duration) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::seconds(ttl.as_secs() as i64);
}

/// A fresh private key of the configured type: EC P-256, or RSA of
/// `bits` bits (generated with the `rsa` crate, since ring cannot).
pub fn generate_key(key_type: &str, bits: u32) -> Result<KeyPair, CaError> {
    match key_type {
        "ec" if bits == 256 || bits == 0 => KeyPair::generate().map_err(internal),
        "rsa" => {
            use rsa::pkcs8::{EncodePrivateKey, LineEnding};
            let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, bits as usize)
                .map_err(internal)?;
            let pem = key.to_pkcs8_pem(LineEnding::LF).map_err(internal)?;
            KeyPair::from_pem(&pem).map_err(internal)
        }
        other => Err(CaError::Config(format!(
            "unsupported private key type {other} with {bits} bits"
        ))),
    }
}

/// Consul's root names: `pri-<random>.consul.ca.<cluster-id prefix>.consul`.
pub fn root_common_name(trust_domain: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let id: String = (0..8)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    let prefix: String = trust_domain.chars().take(8).collect();
    format!("pri-{id}.consul.ca.{prefix}.consul")
}

/// A positive 63-bit serial: roots report theirs as a JSON number.
pub(crate) fn random_root_serial() -> SerialNumber {
    let mut bytes = rand::random::<u64>().to_be_bytes();
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

/// Creates a new self-signed root for `trust_domain` with an EC P-256 key.
pub fn generate_root(
    trust_domain: &str,
    common_name: &str,
    ttl: Duration,
) -> Result<CaRoot, CaError> {
    generate_root_with_key(
        trust_domain,
        common_name,
        ttl,
        KeyPair::generate().map_err(internal)?,
    )
}

/// Creates a new self-signed root for `trust_domain` with the given key.
pub fn generate_root_with_key(
    trust_domain: &str,
    common_name: &str,
    ttl: Duration,
    key: KeyPair,
) -> Result<CaRoot, CaError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let uri = SpiffeId::Signing {
        trust_domain: trust_domain.to_string(),
    }
    .to_string();
    params.subject_alt_names = vec![SanType::URI(uri.try_into().map_err(internal)?)];
    params.serial_number = Some(random_root_serial());
    validity(&mut params, ttl);
    let not_after = params.not_after;
    let cert = params.self_signed(&key).map_err(internal)?;
    Ok(CaRoot {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after,
    })
}

/// Uses an operator's own root (`PrivateKey` + `RootCert`): the key must
/// be the certificate's, and the certificate a CA.
pub fn root_from_pem(cert_pem: &str, key_pem: &str) -> Result<CaRoot, CaError> {
    let (key, pkcs8_pem) = crate::keys::load_private_key(key_pem)?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| CaError::Config(format!("RootCert is not a PEM certificate: {e}")))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| CaError::Config(format!("RootCert cannot be parsed: {e}")))?;
    if !cert.is_ca() {
        return Err(CaError::Config(
            "RootCert is not a CA certificate (basic constraints CA:TRUE)".into(),
        ));
    }
    if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        return Err(CaError::Config(
            "PrivateKey does not match the public key in RootCert".into(),
        ));
    }
    let not_after = OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp())
        .map_err(internal)?;
    Ok(CaRoot {
        cert_pem: cert_pem.trim().to_string() + "\n",
        key_pem: pkcs8_pem,
        not_after,
    })
}

pub(crate) fn issuer(root: &CaRoot) -> Result<Issuer<'static, KeyPair>, CaError> {
    let key = KeyPair::from_pem(&root.key_pem).map_err(internal)?;
    Issuer::from_ca_cert_pem(&root.cert_pem, key).map_err(internal)
}

pub(crate) fn single_spiffe_uri(
    csr: &CertificateSigningRequestParams,
) -> Result<SpiffeId, CaError> {
    let uris: Vec<String> = csr
        .params
        .subject_alt_names
        .iter()
        .filter_map(|san| match san {
            SanType::URI(uri) => Some(uri.as_str().to_string()),
            _ => None,
        })
        .collect();
    let [uri] = uris.as_slice() else {
        return Err(CaError::WrongIdentity(format!(
            "CSR must contain exactly one SPIFFE URI SAN, found {}",
            uris.len()
        )));
    };
    SpiffeId::parse(uri).map_err(CaError::WrongIdentity)
}

/// The SPIFFE id a PEM CSR asks for (its one URI SAN). The CSR's
/// signature is checked.
pub fn csr_spiffe_id(csr_pem: &str) -> Result<SpiffeId, CaError> {
    let csr = CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| CaError::BadCsr(e.to_string()))?;
    single_spiffe_uri(&csr)
}

/// Signs a leaf for `expected` from a PEM CSR. The CSR must carry exactly
/// one URI SAN, equal to `expected`; everything else in the certificate
/// (validity, key usage, extended key usage, CA flag) is set here.
pub fn sign_leaf(
    root: &CaRoot,
    csr_pem: &str,
    expected: &SpiffeId,
    ttl: Duration,
) -> Result<String, CaError> {
    let csr = CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| CaError::BadCsr(e.to_string()))?;
    let asked = single_spiffe_uri(&csr)?;
    if asked.trust_domain() != expected.trust_domain() {
        return Err(CaError::WrongIdentity(format!(
            "SPIFFE ID in CSR from a different trust domain: {}, we are {}",
            asked.trust_domain(),
            expected.trust_domain()
        )));
    }
    if asked != *expected {
        return Err(CaError::WrongIdentity(format!(
            "SPIFFE ID in CSR ({asked}) does not match the requested identity ({expected})"
        )));
    }
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    let common_name = match expected {
        SpiffeId::Service { service, .. } => service.clone(),
        SpiffeId::Agent { node, .. } => node.clone(),
        other => other.to_string(),
    };
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.subject_alt_names = vec![SanType::URI(
        expected.to_string().try_into().map_err(internal)?,
    )];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyAgreement,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.serial_number = Some(random_serial());
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, ttl);
    // Never past the signer's own expiry (a secondary's intermediate).
    params.not_after = params.not_after.min(root.not_after);
    let cert = params
        .signed_by(&csr.public_key, &issuer(root)?)
        .map_err(internal)?;
    Ok(cert.pem())
}

/// Re-signs `new_root`'s certificate with `old_root`'s key: the resulting
/// intermediate lets a peer that only trusts the old root accept leaves
/// signed by the new one.
pub fn cross_sign(old_root: &CaRoot, new_root: &CaRoot) -> Result<String, CaError> {
    let new_key = KeyPair::from_pem(&new_root.key_pem).map_err(internal)?;
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(new_root.cert_pem.as_bytes()).map_err(internal)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).map_err(internal)?;
    // The same subject (byte for byte: verifiers chain by the encoded
    // name), SANs and key as the new root, issued by the old root.
    let mut params = CertificateParams::default();
    params.distinguished_name = copy_name(cert.subject())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    if let Ok(Some(sans)) = cert.subject_alternative_name() {
        for name in &sans.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::URI(uri) => params
                    .subject_alt_names
                    .push(SanType::URI(uri.to_string().try_into().map_err(internal)?)),
                x509_parser::extensions::GeneralName::DNSName(dns) => {
                    params.subject_alt_names.push(SanType::DnsName(
                        dns.to_string().try_into().map_err(internal)?,
                    ))
                }
                _ => {}
            }
        }
    }
    params.not_before = OffsetDateTime::now_utc() - time::Duration::minutes(1);
    params.not_after = new_root.not_after;
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial());
    let cert = params
        .signed_by(&new_key, &issuer(old_root)?)
        .map_err(internal)?;
    Ok(cert.pem())
}

/// Rebuilds a parsed name with the same attributes and string types.
fn copy_name(name: &x509_parser::x509::X509Name<'_>) -> Result<DistinguishedName, CaError> {
    use x509_parser::der_parser::asn1_rs::Tag;
    let mut dn = DistinguishedName::new();
    for attr in name.iter_attributes() {
        let oid: Vec<u64> = attr
            .attr_type()
            .iter()
            .ok_or_else(|| CaError::Internal("name attribute OID too large".into()))?
            .collect();
        let text = attr.as_str().map_err(internal)?.to_string();
        let value = match attr.attr_value().tag() {
            Tag::PrintableString => {
                rcgen::DnValue::PrintableString(text.try_into().map_err(internal)?)
            }
            Tag::Ia5String => rcgen::DnValue::Ia5String(text.try_into().map_err(internal)?),
            _ => rcgen::DnValue::Utf8String(text),
        };
        dn.push(DnType::from_oid(&oid), value);
    }
    Ok(dn)
}

/// Makes a CSR for `id` with a fresh EC P-256 key: what agents do. Returns
/// (CSR PEM, private key PEM).
pub fn make_csr(id: &SpiffeId) -> Result<(String, String), CaError> {
    let key = KeyPair::generate().map_err(internal)?;
    let mut params = CertificateParams::default();
    params.subject_alt_names = vec![SanType::URI(id.to_string().try_into().map_err(internal)?)];
    let csr = params.serialize_request(&key).map_err(internal)?;
    Ok((csr.pem().map_err(internal)?, key.serialize_pem()))
}

#[cfg(test)]
mod tests;
