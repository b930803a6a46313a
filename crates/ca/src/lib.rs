//! Connect's certificate authority: SPIFFE identities, and the built-in
//! provider that creates roots, signs leaf certificates from CSRs (checking
//! the identity they ask for, and setting validity, key usage and extended
//! key usage itself rather than trusting the CSR), and cross-signs a new
//! root with an old one for rotation.
//!
//! A [`CaProvider`] trait separates the CA manager from the backend; the
//! [`conformance`] suite is what any backend must pass.
//!
//! Depends only on `legate-types`.

pub mod agent_tls;
pub mod builtin;
pub mod config;
pub mod conformance;
pub mod info;
pub mod intermediate;
pub mod keys;
pub mod limits;
pub mod provider;
pub mod spiffe;
pub mod verify;

pub use builtin::{CaError, CaRoot};
pub use config::CaConfig;
pub use limits::{CsrLimiter, RateLimited, RATE_LIMIT_ERROR};
pub use provider::{BuiltinProvider, CaProvider};
pub use spiffe::SpiffeId;
