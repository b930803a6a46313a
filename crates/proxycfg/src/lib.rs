//! proxycfg: one snapshot state machine per local proxy. Each proxy's
//! watchers follow its data sources (CA roots, its leaf certificate, the
//! intentions for its destination, the compiled discovery chain of every
//! upstream and the healthy endpoints of every chain target): its own
//! sources with blocking reads, its upstreams' as [`Subscription`]s polled
//! by the proxy's task; changes are debounced and a complete
//! [`ConnectProxySnapshot`] is published to whoever serves that proxy (the
//! xDS server).
//!
//! proxycfg never touches the state store or RPC: it sees [`DataSources`].
//! Depends on `legate-types` and `legate-chain` only.

pub mod gateway;
mod manager;
pub mod prepared_query;
mod snapshot;
mod subscriptions;

pub use manager::{DataSources, Fetched, Manager, ProxyRegistration, Subscription, DEBOUNCE};
pub use snapshot::{
    ConnectProxySnapshot, Endpoint, EndpointHealth, QueryEndpoint, QueryUpstreamSnapshot,
    SharedUpstream, TargetEndpoints, UpstreamSnapshot,
};
