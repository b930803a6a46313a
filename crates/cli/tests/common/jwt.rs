//! JWTs for login tests: the ES256 signer of `legate_auth` (feature
//! `signer`).

// Not every test binary that includes `common` signs JWTs.
#[allow(unused_imports)]
pub use legate_auth::signer::{now, Signer};
