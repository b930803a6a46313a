//! Verifying a leaf chain the way a TLS peer does: rustls' WebPKI verifier
//! with the CA roots as trust anchors, then the SPIFFE id from the leaf.
//! Data planes use this; tests use it next to `openssl verify`.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::info::{describe_der, pem_certificates};
use crate::{CaError, SpiffeId};

/// Verifies `chain_pem` (leaf first, then any intermediates) against the
/// PEM `roots` at `now`, as the server side of a mutual-TLS handshake
/// would, and returns the leaf's SPIFFE id.
pub fn verify_leaf_at(
    roots: &[&str],
    chain_pem: &str,
    now: std::time::SystemTime,
) -> Result<SpiffeId, CaError> {
    let chain = pem_certificates(chain_pem)?;
    let chain: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
    verify_chain_at(roots, &chain, now)
}

/// [`verify_leaf_at`] for a chain already in DER (leaf first), as a TLS
/// handshake presents it.
pub fn verify_chain_at(
    roots: &[&str],
    chain: &[&[u8]],
    now: std::time::SystemTime,
) -> Result<SpiffeId, CaError> {
    let mut store = RootCertStore::empty();
    for root in roots {
        for der in pem_certificates(root)? {
            store
                .add(CertificateDer::from(der))
                .map_err(|e| CaError::Internal(format!("unusable root: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
        .build()
        .map_err(|e| CaError::Internal(e.to_string()))?;
    let (leaf, rest) = chain
        .split_first()
        .ok_or_else(|| CaError::Internal("empty chain".into()))?;
    let intermediates: Vec<CertificateDer<'static>> = rest
        .iter()
        .map(|d| CertificateDer::from(d.to_vec()))
        .collect();
    let since_epoch = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| CaError::Internal(e.to_string()))?;
    verifier
        .verify_client_cert(
            &CertificateDer::from(leaf.to_vec()),
            &intermediates,
            UnixTime::since_unix_epoch(since_epoch),
        )
        .map_err(|e| CaError::WrongIdentity(format!("certificate does not verify: {e}")))?;
    let info = describe_der(leaf)?;
    let [uri] = info.uris.as_slice() else {
        return Err(CaError::WrongIdentity(format!(
            "certificate must carry exactly one SPIFFE URI SAN, found {}",
            info.uris.len()
        )));
    };
    SpiffeId::parse(uri).map_err(CaError::WrongIdentity)
}

/// [`verify_leaf_at`] now.
pub fn verify_leaf(roots: &[&str], chain_pem: &str) -> Result<SpiffeId, CaError> {
    verify_leaf_at(roots, chain_pem, std::time::SystemTime::now())
}
