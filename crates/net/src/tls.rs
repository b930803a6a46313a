//! rustls configurations from PEM text, for every TLS listener and dialer
//! of the agent (the server port, HTTPS, gRPC over TLS, the CLI and the
//! built-in proxy): certificate chains and keys as the agent config names
//! them (`ca_file`, `cert_file`, `key_file`), client certificates required
//! by the CA when asked (`verify_incoming`), and errors that name the file
//! at fault.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The crypto provider every configuration uses (ring).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM text; `what` names it in errors.
pub fn certificates(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no certificate in the PEM"));
    }
    Ok(certs)
}

/// The private key of a PEM text; `what` names it in errors.
pub fn private_key(pem: &str, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("{what}: {e}"))
}

/// A root store of the CA certificates in `ca_pem`.
pub fn roots(ca_pem: &str) -> Result<Arc<rustls::RootCertStore>, String> {
    let mut store = rustls::RootCertStore::empty();
    for cert in certificates(ca_pem, "ca_file")? {
        store
            .add(cert)
            .map_err(|e| format!("ca_file: not a usable CA certificate: {e}"))?;
    }
    Ok(Arc::new(store))
}

/// A listener's identity and whom it admits.
#[derive(Debug, Clone, Default)]
pub struct ServerPem {
    /// Its certificate chain (PEM).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// Ask every client for a certificate signed by this CA (PEM) and
    /// refuse those without one (`verify_incoming`); `None`: no client
    /// certificates.
    pub client_ca_pem: Option<String>,
}

/// A listener's configuration, offering `alpn` protocols.
pub fn server_config(pem: &ServerPem, alpn: &[&[u8]]) -> Result<rustls::ServerConfig, String> {
    let chain = certificates(&pem.cert_pem, "cert_file")?;
    let key = private_key(&pem.key_pem, "key_file")?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &pem.client_ca_pem {
        Some(ca) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider())
                    .build()
                    .map_err(|e| format!("ca_file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("cert_file/key_file: {e}"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A dialer's configuration: servers checked against `ca_pem`, this
/// side's certificate and key presented when given, offering `alpn`.
pub fn client_config(
    ca_pem: &str,
    identity: Option<(&str, &str)>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(ca_pem)?);
    let mut config = with_identity(builder, identity)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Finishes a dialer's configuration, presenting `identity` (certificate
/// and key PEM) when given.
pub(crate) fn with_identity(
    builder: rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    identity: Option<(&str, &str)>,
) -> Result<rustls::ClientConfig, String> {
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert_pem, key_pem)) => builder
            .with_client_auth_cert(
                certificates(cert_pem, "cert_file")?,
                private_key(key_pem, "key_file")?,
            )
            .map_err(|e| format!("cert_file/key_file: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pem_names_the_file() {
        let e = server_config(
            &ServerPem {
                cert_pem: "not a pem".into(),
                key_pem: String::new(),
                client_ca_pem: None,
            },
            &[],
        )
        .unwrap_err();
        assert!(e.starts_with("cert_file: "), "{e}");
        let e = client_config("nothing", None, &[]).unwrap_err();
        assert!(e.starts_with("ca_file: "), "{e}");
    }
}
