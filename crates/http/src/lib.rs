//! Consul's `/v1` HTTP API over axum. Handlers parse requests, call the
//! agent (for agent-local endpoints) or the servers through the agent's
//! [`legate_types::rpc::ServerRpc`] (everything else), and map every error
//! through [`util::ApiError`]. They never touch a state store.

mod acl;
mod agent;
mod agent_acl;
mod catalog;
mod config;
mod connect;
mod coordinates;
mod federation;
mod intentions;
mod kv;
mod metrics;
mod misc;
mod serve;
mod translate;
pub mod util;

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use legate_agent::Agent;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The local agent (and through it, the servers).
    pub agent: Arc<Agent>,
}

/// A request's common parts, passed to handlers.
pub struct Req {
    /// Query parameters.
    pub params: util::Params,
    /// Headers.
    pub headers: HeaderMap,
    /// The client's address (absent for requests not served by `serve`).
    pub peer: Option<std::net::SocketAddr>,
    /// This agent's node name (what `?near=_agent` means).
    pub agent_node: String,
    /// The token a request without one uses (`acl.tokens.default`).
    pub default_token: String,
}

/// The client address of a request, set by the connection that read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub std::net::SocketAddr);

/// Builds the `/v1` router.
pub fn router(state: AppState) -> Router {
    Router::new()
        // agent
        .route("/v1/agent/self", get(agent::self_info))
        .route("/v1/agent/members", get(agent::members))
        .route("/v1/agent/services", get(agent::services))
        .route("/v1/agent/service/register", put(agent::service_register))
        .route(
            "/v1/agent/service/deregister/{id}",
            put(agent::service_deregister),
        )
        .route(
            "/v1/agent/service/maintenance/{id}",
            put(agent::service_maintenance),
        )
        .route("/v1/agent/service/{id}", get(agent::service))
        .route("/v1/agent/maintenance", put(agent::node_maintenance))
        .route("/v1/agent/checks", get(agent::checks))
        .route("/v1/agent/check/register", put(agent::check_register))
        .route(
            "/v1/agent/check/deregister/{id}",
            put(agent::check_deregister),
        )
        .route("/v1/agent/check/pass/{id}", put(agent::check_pass))
        .route("/v1/agent/check/warn/{id}", put(agent::check_warn))
        .route("/v1/agent/check/fail/{id}", put(agent::check_fail))
        .route("/v1/agent/check/update/{id}", put(agent::check_update))
        .route("/v1/agent/health/service/id/{id}", get(agent::health_by_id))
        .route(
            "/v1/agent/health/service/name/{name}",
            get(agent::health_by_name),
        )
        .route("/v1/agent/connect/ca/roots", get(connect::agent_roots))
        .route("/v1/agent/connect/ca/leaf/{service}", get(connect::leaf))
        .route(
            "/v1/agent/connect/authorize",
            post(intentions::authorize).put(intentions::authorize),
        )
        .route(
            "/v1/connect/intentions",
            get(intentions::list).post(intentions::create),
        )
        .route(
            "/v1/connect/intentions/exact",
            get(intentions::get_exact)
                .put(intentions::put_exact)
                .delete(intentions::delete_exact),
        )
        .route("/v1/connect/intentions/match", get(intentions::matches))
        .route("/v1/connect/intentions/check", get(intentions::check))
        .route(
            "/v1/connect/intentions/{id}",
            get(intentions::get_by_id)
                .put(intentions::update_by_id)
                .delete(intentions::delete_by_id),
        )
        .route("/v1/connect/ca/roots", get(connect::roots))
        .route(
            "/v1/connect/ca/configuration",
            get(connect::get_configuration).put(connect::set_configuration),
        )
        .route("/v1/agent/metrics", get(metrics::agent_metrics))
        .route("/v1/agent/reload", put(agent::reload))
        .route("/v1/agent/leave", put(agent::leave))
        .route("/v1/agent/force-leave/{node}", put(agent::force_leave))
        .route("/v1/agent/join/{address}", put(agent::join))
        // catalog
        .route("/v1/catalog/register", put(catalog::register))
        .route("/v1/catalog/deregister", put(catalog::deregister))
        .route("/v1/catalog/datacenters", get(catalog::datacenters))
        .route("/v1/catalog/nodes", get(catalog::nodes))
        .route("/v1/catalog/services", get(catalog::services))
        .route("/v1/catalog/service/{service}", get(catalog::service_nodes))
        .route("/v1/catalog/connect/{service}", get(catalog::connect_nodes))
        .route("/v1/catalog/node/{node}", get(catalog::node))
        .route(
            "/v1/catalog/node-services/{node}",
            get(catalog::node_service_list),
        )
        // health
        .route("/v1/health/node/{node}", get(catalog::health_node))
        .route("/v1/health/checks/{service}", get(catalog::health_checks))
        .route("/v1/health/state/{state}", get(catalog::health_state))
        .route("/v1/health/service/{service}", get(catalog::health_service))
        .route("/v1/health/connect/{service}", get(catalog::health_connect))
        // config entries
        .route("/v1/config", put(config::apply))
        .route("/v1/config/{kind}", get(config::list))
        .route(
            "/v1/config/{kind}/{name}",
            get(config::get).delete(config::delete),
        )
        .route(
            "/v1/discovery-chain/{service}",
            get(config::chain_get).post(config::chain_post),
        )
        // kv and txn
        .route("/v1/kv/", any(kv::kv_root))
        .route("/v1/kv/{*key}", any(kv::kv))
        .route("/v1/txn", put(kv::txn))
        // sessions
        .route("/v1/session/create", put(misc::session_create))
        .route("/v1/session/destroy/{id}", put(misc::session_destroy))
        .route("/v1/session/renew/{id}", put(misc::session_renew))
        .route("/v1/session/info/{id}", get(misc::session_info))
        .route("/v1/session/node/{node}", get(misc::session_node))
        .route("/v1/session/list", get(misc::session_list))
        // status, events, coordinates
        .route("/v1/status/leader", get(misc::status_leader))
        .route("/v1/status/peers", get(misc::status_peers))
        .route(
            "/v1/operator/raft/configuration",
            get(misc::raft_configuration),
        )
        .route("/v1/operator/autopilot/health", get(misc::autopilot_health))
        .route(
            "/v1/operator/autopilot/configuration",
            get(misc::autopilot_config),
        )
        .route(
            "/v1/operator/keyring",
            get(agent::keyring)
                .post(agent::keyring)
                .put(agent::keyring)
                .delete(agent::keyring),
        )
        .route(
            "/v1/operator/raft/peer",
            axum::routing::delete(misc::raft_remove_peer),
        )
        .route(
            "/v1/snapshot",
            get(misc::snapshot_save).put(misc::snapshot_restore).layer(
                axum::extract::DefaultBodyLimit::max(
                    legate_types::rpc::SnapshotArchive::MAX_RESTORE_BYTES + 1,
                ),
            ),
        )
        .route("/v1/event/fire/{name}", put(misc::event_fire))
        .route("/v1/event/list", get(misc::event_list))
        .route("/v1/internal/federation-states", get(federation::list))
        .route(
            "/v1/internal/federation-states/mesh-gateways",
            get(federation::mesh_gateways),
        )
        .route("/v1/internal/federation-state/", get(federation::missing))
        .route("/v1/internal/federation-state/{dc}", get(federation::get))
        .route("/v1/acl/bootstrap", put(acl::bootstrap))
        .route("/v1/acl/token", put(acl::token_create))
        .route("/v1/acl/token/self", get(acl::token_self))
        .route(
            "/v1/acl/token/{id}",
            get(acl::token_read)
                .put(acl::token_update)
                .delete(acl::token_delete),
        )
        .route("/v1/acl/token/{id}/clone", put(acl::token_clone))
        .route("/v1/acl/tokens", get(acl::token_list))
        .route("/v1/acl/policy", put(acl::policy_create))
        .route(
            "/v1/acl/policy/{id}",
            get(acl::policy_read)
                .put(acl::policy_update)
                .delete(acl::policy_delete),
        )
        .route("/v1/acl/policy/name/{*name}", get(acl::policy_read_by_name))
        .route("/v1/acl/policies", get(acl::policy_list))
        .route("/v1/acl/role", put(acl::role_create))
        .route(
            "/v1/acl/role/{id}",
            get(acl::role_read)
                .put(acl::role_update)
                .delete(acl::role_delete),
        )
        .route("/v1/acl/role/name/{*name}", get(acl::role_read_by_name))
        .route("/v1/acl/roles", get(acl::role_list))
        .route("/v1/internal/acl/authorize", post(acl::authorize))
        .route("/v1/agent/token/{kind}", put(acl::set_agent_token))
        .route("/v1/acl/create", any(|| async { acl::legacy("create") }))
        .route("/v1/acl/update", any(|| async { acl::legacy("update") }))
        .route(
            "/v1/acl/destroy/{id}",
            any(|| async { acl::legacy("destroy") }),
        )
        .route("/v1/acl/info/{id}", any(|| async { acl::legacy("info") }))
        .route("/v1/acl/clone/{id}", any(|| async { acl::legacy("clone") }))
        .route("/v1/acl/list", any(|| async { acl::legacy("list") }))
        .route("/v1/coordinate/datacenters", get(coordinates::datacenters))
        .route("/v1/coordinate/nodes", get(coordinates::nodes))
        .route("/v1/coordinate/node/{node}", get(coordinates::node))
        .route("/v1/coordinate/update", put(coordinates::update))
        .fallback(fallback)
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            add_common_headers,
        ))
        .with_state(state)
}

async fn add_common_headers(
    axum::extract::State(st): axum::extract::State<AppState>,
    mut response: Response,
) -> Response {
    // Consul sends the configured default ACL policy on every response
    // (1.9+), ACLs on or off.
    let policy = if st.agent.config().acl.default_policy == "deny" {
        "deny"
    } else {
        "allow"
    };
    response.headers_mut().insert(
        "x-consul-default-acl-policy",
        axum::http::HeaderValue::from_static(policy),
    );
    response
}

async fn fallback(method: Method, uri: axum::http::Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("Invalid URL path: no handler for {method} {}", uri.path()),
    )
        .into_response()
}

/// Serves the API on a bound listener until `shutdown` completes, within
/// the agent's `limits` (connections per client, request-head and idle
/// deadlines).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.agent.config().limits.clone();
    serve::serve(listener, router(state), &limits, shutdown).await
}

impl axum::extract::FromRequestParts<AppState> for Req {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Req, Self::Rejection> {
        Ok(Req {
            params: util::Params::parse(parts.uri.query()),
            headers: parts.headers.clone(),
            peer: parts.extensions.get::<PeerAddr>().map(|p| p.0),
            agent_node: state.agent.config().node_name.clone(),
            default_token: state.agent.tokens().default_token().unwrap_or_default(),
        })
    }
}

impl Req {
    /// Runs a read with this request's query options and answers with its
    /// JSON and the blocking-query headers.
    pub(crate) async fn read<T, Fut>(
        &self,
        call: impl FnOnce(legate_types::QueryOptions) -> Fut,
    ) -> util::ApiResult
    where
        T: serde::Serialize,
        Fut: std::future::Future<Output = Result<legate_types::Queried<T>, legate_types::RpcError>>,
    {
        let opts = self.query_options()?;
        let result = call(opts).await?;
        Ok(util::json_meta(&self.params, &result.meta, &result.value))
    }

    /// This request's token: its own, else the agent's default token.
    pub(crate) fn token(&self) -> String {
        let own = util::token(&self.headers, &self.params);
        if own.is_empty() {
            self.default_token.clone()
        } else {
            own
        }
    }

    /// This request's write options.
    pub(crate) fn write_options(&self) -> legate_types::WriteOptions {
        let mut opts = util::write_options(&self.headers, &self.params);
        opts.token = self.token();
        opts
    }

    /// This request's read options.
    pub(crate) fn query_options(&self) -> Result<legate_types::QueryOptions, util::ApiError> {
        let mut opts = util::query_options(&self.headers, &self.params)?;
        opts.token = self.token();
        // `?near=`: `_agent` is this agent's node; `_ip` the node at the
        // client's address (X-Forwarded-For first, as Consul reads it).
        opts.near = match self.params.get("near") {
            Some("_agent") => self.agent_node.clone(),
            Some(near) => near.to_string(),
            None => String::new(),
        };
        if opts.near == "_ip" {
            opts.source_ip = self
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .map(|v| v.trim().to_string())
                .or_else(|| self.peer.map(|p| p.ip().to_string()))
                .unwrap_or_default();
        }
        Ok(opts)
    }
}
