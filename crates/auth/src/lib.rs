//! Auth methods of type `jwt`, pure: the method's `Config` read and
//! checked with Consul's texts, public keys from PEM or a JWKS document,
//! a bearer token's signature and claims verified as Consul's go-sso
//! library verifies them, and the claims mapped to the values and lists
//! binding rules select on. Fetching a JWKS or discovery document is the
//! caller's business (the server's), so this crate does no I/O.

pub mod claims;
pub mod config;
pub mod jwt;
pub mod keys;
#[cfg(feature = "signer")]
pub mod signer;

pub use claims::Identity;
pub use config::JwtConfig;
pub use keys::PublicKey;
