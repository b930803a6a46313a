//! ACL policies and decisions, pure: the rules language (HCL or JSON, with
//! Consul's validation errors), the merge of a token's policies, and the
//! authorizer that answers "may this token do that" with Consul's
//! precedence (exact name, then longest prefix, then the default policy).
//!
//! Depends on nothing of Legate's but the HCL parser; tokens, storage and
//! enforcement live above it.

pub mod authorizer;
pub mod doors;
pub mod down;
pub mod identities;
pub mod rules;
pub mod templated;

pub use authorizer::{denial, Access, Authorizer, Decision, DefaultPolicy, PolicyAuthorizer};
pub use down::{DownAnswer, DownPolicy};
pub use rules::{parse, Level, Resource, Rule, Rules};
