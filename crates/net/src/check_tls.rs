//! The TLS a health check dials with, as Consul's
//! `OutgoingTLSConfigForCheck` builds it: the server's certificate checked
//! against a chosen name (the check's `TLSServerName`, else the agent's
//! `server_name`, else its node name) rather than the URL's host, or not
//! checked at all (`TLSSkipVerify`); trusted roots and this side's
//! certificate as the agent's TLS files give them.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::tls::{provider, roots, with_identity};

/// How the server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerCheck {
    /// Against this name.
    Named(String),
    /// Not at all (`TLSSkipVerify`).
    Skip,
}

/// Checks a chain against fixed roots and a fixed name, whatever host was
/// dialed.
#[derive(Debug)]
struct FixedNameVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: Option<ServerName<'static>>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for FixedNameVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.name {
            Some(name) => self
                .inner
                .verify_server_cert(end_entity, intermediates, name, ocsp, now),
            None => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A check's client configuration: roots from `ca_pem` (else the public
/// web roots), `identity` (certificate and key PEM) presented when
/// given, the server checked as `check` says, offering HTTP/2 and 1.1.
pub fn check_client_config(
    ca_pem: Option<&str>,
    identity: Option<(&str, &str)>,
    check: ServerCheck,
) -> Result<rustls::ClientConfig, String> {
    let store = match ca_pem {
        Some(pem) => roots(pem)?,
        None => Arc::new(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        }),
    };
    let provider = provider();
    let inner = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
        .build()
        .map_err(|e| format!("ca_file: {e}"))?;
    let name = match check {
        ServerCheck::Named(name) => Some(
            ServerName::try_from(name.clone())
                .map_err(|_| format!("{name:?} is not a valid TLS server name"))?,
        ),
        ServerCheck::Skip => None,
    };
    let verifier = Arc::new(FixedNameVerifier {
        inner,
        name,
        algorithms: provider.signature_verification_algorithms,
    });
    let builder = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = with_identity(builder, identity)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
