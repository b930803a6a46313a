//! The provider boundary: what a CA backend must do for the servers'
//! CA manager. The built-in provider keeps its keys in the replicated
//! state (passed back in on every call); an external one (Vault) would keep
//! them itself and ignore `key_pem`. [`crate::conformance`] is the test
//! suite every provider must pass.

use std::time::Duration;

use crate::builtin::{self, CaRoot};
use crate::{CaConfig, CaError, SpiffeId};

/// A certificate authority backend.
pub trait CaProvider: Send + Sync {
    /// The name users configure (`ca_provider`, `Provider`).
    fn name(&self) -> &'static str;

    /// Creates the root leaves will be signed with, for `trust_domain`:
    /// from the configured `PrivateKey` + `RootCert` when given, otherwise
    /// with a fresh key of the configured type.
    fn generate_root(&self, trust_domain: &str, config: &CaConfig) -> Result<CaRoot, CaError>;

    /// Signs a leaf for exactly `expected` from a PEM CSR, valid for `ttl`.
    fn sign_leaf(
        &self,
        root: &CaRoot,
        csr_pem: &str,
        expected: &SpiffeId,
        ttl: Duration,
    ) -> Result<String, CaError>;

    /// Signs `new`'s certificate with `old`'s key so peers trusting only
    /// `old` accept leaves of `new`; `Ok(None)` when the provider cannot.
    fn cross_sign(&self, old: &CaRoot, new: &CaRoot) -> Result<Option<String>, CaError>;
}

/// Legate's built-in provider (`consul` in configuration, as in Consul).
#[derive(Debug, Default, Clone, Copy)]
pub struct BuiltinProvider;

impl CaProvider for BuiltinProvider {
    fn name(&self) -> &'static str {
        "consul"
    }

    fn generate_root(&self, trust_domain: &str, config: &CaConfig) -> Result<CaRoot, CaError> {
        if let (Some(key), Some(cert)) = (&config.private_key, &config.root_cert) {
            return builtin::root_from_pem(cert, key);
        }
        let key = builtin::generate_key(&config.private_key_type, config.private_key_bits)?;
        builtin::generate_root_with_key(
            trust_domain,
            &builtin::root_common_name(trust_domain),
            config.root_cert_ttl,
            key,
        )
    }

    fn sign_leaf(
        &self,
        root: &CaRoot,
        csr_pem: &str,
        expected: &SpiffeId,
        ttl: Duration,
    ) -> Result<String, CaError> {
        builtin::sign_leaf(root, csr_pem, expected, ttl)
    }

    fn cross_sign(&self, old: &CaRoot, new: &CaRoot) -> Result<Option<String>, CaError> {
        builtin::cross_sign(old, new).map(Some)
    }
}
