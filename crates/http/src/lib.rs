//! Consul's `/v1` HTTP API over axum. Handlers parse requests, call the
//! agent (for agent-local endpoints) or the servers through the agent's
//! [`legate_types::rpc::ServerRpc`] (everything else), and map every error
//! through [`util::ApiError`]. They never touch a state store.

mod acl;
mod acl_auth;
mod acl_templated;
mod agent;
mod agent_acl;
mod agent_self;
mod cached;
mod catalog;
mod central_config;
mod common;
mod config;
mod connect;
mod coordinates;
mod federation;
mod gateway_services;
mod host;
mod intentions;
mod kv;
mod kv_answer;
mod metrics;
mod misc;
mod monitor;
mod prepared_query;
mod route_timer;
mod serve;
mod translate;
mod ui_gateway;
mod ui_internal;
mod ui_metrics_proxy;
mod ui_proxy;
mod ui_serve;
mod ui_topology;
mod ui_traffic;
pub mod util;

use std::sync::Arc;

use axum::handler::Handler;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post, put, MethodRouter};
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
    /// `default_query_time` and `max_query_time`.
    pub query_times: (std::time::Duration, std::time::Duration),
    /// `discovery_max_stale`.
    pub discovery_max_stale: Option<std::time::Duration>,
}

/// The client address of a request, set by the connection that read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub std::net::SocketAddr);

/// A router being built, with the list of what it routes.
#[derive(Default)]
struct Routes {
    router: Router<AppState>,
    listed: Vec<(&'static str, &'static str)>,
}

impl Routes {
    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        route: MethodRouter<AppState>,
    ) -> Routes {
        self.router = self.router.route(path, route);
        self.listed.push((method, path));
        self
    }

    fn get<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("GET", path, get(handler))
    }

    fn put<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("PUT", path, put(handler))
    }

    fn post<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("POST", path, post(handler))
    }

    fn delete<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("DELETE", path, delete(handler))
    }

    /// A route whose handler answers every method (and refuses the ones
    /// it does not know with Consul's text).
    fn any<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("ANY", path, any(handler))
    }
}

/// The `/v1` routes, each registered with its method so that the list can
/// be walked (see [`route_list`]).
fn routes() -> Routes {
    Routes::default()
        .get("/v1/agent/self", agent_self::self_info)
        .get("/v1/agent/members", agent::members)
        .get("/v1/agent/services", agent::services)
        .put("/v1/agent/service/register", agent::service_register)
        .put(
            "/v1/agent/service/deregister/{id}",
            agent::service_deregister,
        )
        .put(
            "/v1/agent/service/maintenance/{id}",
            agent::service_maintenance,
        )
        .get("/v1/agent/service/{id}", agent::service)
        .put("/v1/agent/maintenance", agent::node_maintenance)
        .get("/v1/agent/checks", agent::checks)
        .put("/v1/agent/check/register", agent::check_register)
        .put("/v1/agent/check/deregister/{id}", agent::check_deregister)
        .put("/v1/agent/check/pass/{id}", agent::check_pass)
        .put("/v1/agent/check/warn/{id}", agent::check_warn)
        .put("/v1/agent/check/fail/{id}", agent::check_fail)
        .put("/v1/agent/check/update/{id}", agent::check_update)
        .get("/v1/agent/health/service/id/{id}", agent::health_by_id)
        .get(
            "/v1/agent/health/service/name/{name}",
            agent::health_by_name,
        )
        .get("/v1/agent/connect/ca/roots", connect::agent_roots)
        .get("/v1/agent/connect/ca/leaf/{service}", connect::leaf)
        .post("/v1/agent/connect/authorize", intentions::authorize)
        .put("/v1/agent/connect/authorize", intentions::authorize)
        .get("/v1/connect/intentions", intentions::list)
        .post("/v1/connect/intentions", intentions::create)
        .get("/v1/connect/intentions/exact", intentions::get_exact)
        .put("/v1/connect/intentions/exact", intentions::put_exact)
        .delete("/v1/connect/intentions/exact", intentions::delete_exact)
        .get("/v1/connect/intentions/match", intentions::matches)
        .get("/v1/connect/intentions/check", intentions::check)
        .get("/v1/connect/intentions/{id}", intentions::get_by_id)
        .put("/v1/connect/intentions/{id}", intentions::update_by_id)
        .delete("/v1/connect/intentions/{id}", intentions::delete_by_id)
        .get("/v1/connect/ca/roots", connect::roots)
        .get("/v1/connect/ca/configuration", connect::get_configuration)
        .put("/v1/connect/ca/configuration", connect::set_configuration)
        .get("/v1/agent/metrics", metrics::agent_metrics)
        .get("/v1/agent/metrics/stream", metrics::agent_metrics_stream)
        .get("/v1/agent/monitor", monitor::monitor)
        .get("/v1/agent/host", host::agent_host)
        .get("/v1/agent/version", host::agent_version)
        .put("/v1/agent/reload", agent::reload)
        .put("/v1/agent/leave", agent::leave)
        .put("/v1/agent/force-leave/{node}", agent::force_leave)
        .put("/v1/agent/join/{address}", agent::join)
        .put("/v1/catalog/register", catalog::register)
        .put("/v1/catalog/deregister", catalog::deregister)
        .get("/v1/catalog/datacenters", catalog::datacenters)
        .get("/v1/catalog/nodes", catalog::nodes)
        .get("/v1/catalog/services", catalog::services)
        .get("/v1/catalog/service/{service}", catalog::service_nodes)
        .get("/v1/catalog/connect/{service}", catalog::connect_nodes)
        .get(
            "/v1/catalog/gateway-services/{gateway}",
            gateway_services::gateway_services,
        )
        .get("/v1/catalog/node/{node}", catalog::node)
        .get(
            "/v1/catalog/node-services/{node}",
            catalog::node_service_list,
        )
        .get("/v1/health/node/{node}", catalog::health_node)
        .get("/v1/health/checks/{service}", catalog::health_checks)
        .get("/v1/health/state/{state}", catalog::health_state)
        .get("/v1/health/service/{service}", catalog::health_service)
        .get("/v1/health/connect/{service}", catalog::health_connect)
        .get(
            "/v1/health/ingress/{service}",
            gateway_services::health_ingress,
        )
        .put("/v1/config", config::apply)
        .get("/v1/config/{kind}", config::list)
        .get("/v1/config/{kind}/{name}", config::get)
        .delete("/v1/config/{kind}/{name}", config::delete)
        .get("/v1/discovery-chain/{service}", config::chain_get)
        .post("/v1/discovery-chain/{service}", config::chain_post)
        .any("/v1/kv/", kv::kv_root)
        .any("/v1/kv/{*key}", kv::kv)
        .put("/v1/txn", kv::txn)
        .get("/v1/query", prepared_query::list)
        .post("/v1/query", prepared_query::create)
        .get("/v1/query/{id}", prepared_query::get)
        .put("/v1/query/{id}", prepared_query::update)
        .delete("/v1/query/{id}", prepared_query::delete)
        .get("/v1/query/{id}/execute", prepared_query::execute)
        .get("/v1/query/{id}/explain", prepared_query::explain)
        .put("/v1/session/create", misc::session_create)
        .put("/v1/session/destroy/{id}", misc::session_destroy)
        .put("/v1/session/renew/{id}", misc::session_renew)
        .get("/v1/session/info/{id}", misc::session_info)
        .get("/v1/session/node/{node}", misc::session_node)
        .get("/v1/session/list", misc::session_list)
        .get("/v1/status/leader", misc::status_leader)
        .get("/v1/status/peers", misc::status_peers)
        .get("/v1/operator/raft/configuration", misc::raft_configuration)
        .get("/v1/operator/autopilot/health", misc::autopilot_health)
        .get("/v1/operator/autopilot/state", misc::autopilot_state)
        .get("/v1/operator/usage", misc::operator_usage)
        .get(
            "/v1/operator/autopilot/configuration",
            misc::autopilot_config,
        )
        .put(
            "/v1/operator/autopilot/configuration",
            misc::autopilot_set_config,
        )
        .get("/v1/operator/keyring", agent::keyring)
        .post("/v1/operator/keyring", agent::keyring)
        .put("/v1/operator/keyring", agent::keyring)
        .delete("/v1/operator/keyring", agent::keyring)
        .delete("/v1/operator/raft/peer", misc::raft_remove_peer)
        .post(
            "/v1/operator/raft/transfer-leader",
            misc::raft_transfer_leader,
        )
        .get("/v1/snapshot", misc::snapshot_save)
        .add(
            "PUT",
            "/v1/snapshot",
            put(misc::snapshot_restore).layer(axum::extract::DefaultBodyLimit::max(
                legate_types::rpc::SnapshotArchive::MAX_RESTORE_BYTES + 1,
            )),
        )
        .put("/v1/event/fire/{name}", misc::event_fire)
        .get("/v1/event/list", misc::event_list)
        .get("/v1/internal/federation-states", federation::list)
        .get(
            "/v1/internal/federation-states/mesh-gateways",
            federation::mesh_gateways,
        )
        .get("/v1/internal/federation-state/", federation::missing)
        .get("/v1/internal/federation-state/{dc}", federation::get)
        .get("/v1/internal/gateway-locator", federation::gateway_locator)
        .get("/v1/internal/ui/services", ui_internal::services)
        .get("/v1/internal/ui/nodes", ui_internal::nodes)
        .get("/v1/internal/ui/node/", ui_internal::node_missing)
        .get("/v1/internal/ui/node/{node}", ui_internal::node)
        .get(
            "/v1/internal/ui/service-topology/",
            ui_topology::missing_name,
        )
        .get(
            "/v1/internal/ui/service-topology/{service}",
            ui_topology::service_topology,
        )
        .get(
            "/v1/internal/ui/gateway-intentions/",
            ui_gateway::intentions_missing_name,
        )
        .get(
            "/v1/internal/ui/gateway-intentions/{gateway}",
            ui_gateway::gateway_intentions,
        )
        .get(
            "/v1/internal/ui/gateway-services-nodes/",
            ui_gateway::missing_name,
        )
        .get(
            "/v1/internal/ui/gateway-services-nodes/{gateway}",
            ui_gateway::gateway_services_nodes,
        )
        .get(
            "/v1/internal/ui/catalog-overview",
            ui_internal::catalog_overview,
        )
        .get(
            "/v1/internal/ui/metrics-proxy/",
            ui_metrics_proxy::metrics_proxy,
        )
        .get(
            "/v1/internal/ui/metrics-proxy/{*path}",
            ui_metrics_proxy::metrics_proxy,
        )
        .get("/v1/internal/ui/proxy/{id}", ui_proxy::proxy_status)
        .get(
            "/v1/internal/ui/traffic/{service}",
            ui_traffic::service_traffic,
        )
        .put("/v1/acl/bootstrap", acl::bootstrap)
        .get("/v1/acl/replication", acl::replication)
        .put("/v1/acl/token", acl::token_create)
        .get("/v1/acl/token/self", acl::token_self)
        .get("/v1/acl/token/{id}", acl::token_read)
        .put("/v1/acl/token/{id}", acl::token_update)
        .delete("/v1/acl/token/{id}", acl::token_delete)
        .put("/v1/acl/token/{id}/clone", acl::token_clone)
        .get("/v1/acl/tokens", acl::token_list)
        .put("/v1/acl/policy", acl::policy_create)
        .get("/v1/acl/policy/{id}", acl::policy_read)
        .put("/v1/acl/policy/{id}", acl::policy_update)
        .delete("/v1/acl/policy/{id}", acl::policy_delete)
        .get("/v1/acl/policy/name/{*name}", acl::policy_read_by_name)
        .get("/v1/acl/policies", acl::policy_list)
        .put("/v1/acl/role", acl::role_create)
        .get("/v1/acl/role/{id}", acl::role_read)
        .put("/v1/acl/role/{id}", acl::role_update)
        .delete("/v1/acl/role/{id}", acl::role_delete)
        .get("/v1/acl/role/name/{*name}", acl::role_read_by_name)
        .get("/v1/acl/roles", acl::role_list)
        .put("/v1/acl/auth-method", acl_auth::method_create)
        .get("/v1/acl/auth-method/{name}", acl_auth::method_read)
        .put("/v1/acl/auth-method/{name}", acl_auth::method_update)
        .delete("/v1/acl/auth-method/{name}", acl_auth::method_delete)
        .get("/v1/acl/auth-methods", acl_auth::method_list)
        .put("/v1/acl/binding-rule", acl_auth::rule_create)
        .get("/v1/acl/binding-rule/{id}", acl_auth::rule_read)
        .put("/v1/acl/binding-rule/{id}", acl_auth::rule_update)
        .delete("/v1/acl/binding-rule/{id}", acl_auth::rule_delete)
        .get("/v1/acl/binding-rules", acl_auth::rule_list)
        .post("/v1/acl/login", acl_auth::login)
        .post("/v1/acl/logout", acl_auth::logout)
        .get("/v1/acl/templated-policies", acl_templated::list)
        .get("/v1/acl/templated-policy/name/{*name}", acl_templated::read)
        .post(
            "/v1/acl/templated-policy/preview/{*name}",
            acl_templated::preview,
        )
        .post("/v1/internal/acl/authorize", acl::authorize)
        .put("/v1/agent/token/{kind}", acl::set_agent_token)
        .any("/v1/acl/create", || async { acl::legacy("create") })
        .any("/v1/acl/update", || async { acl::legacy("update") })
        .any("/v1/acl/destroy/{id}", || async { acl::legacy("destroy") })
        .any("/v1/acl/info/{id}", || async { acl::legacy("info") })
        .any("/v1/acl/clone/{id}", || async { acl::legacy("clone") })
        .any("/v1/acl/list", || async { acl::legacy("list") })
        .get("/v1/coordinate/datacenters", coordinates::datacenters)
        .get("/v1/coordinate/nodes", coordinates::nodes)
        .get("/v1/coordinate/node/{node}", coordinates::node)
        .put("/v1/coordinate/update", coordinates::update)
}

/// Every registered route as `(method, path)`, `ANY` for a route that
/// answers every method itself: what the permission table
/// ([`legate_acl::doors::HTTP`]) must cover.
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    routes().listed
}

/// The `/v1` API as one service: the routes, after the rewrites that
/// must come before routing.
pub type ApiService =
    tower::util::MapRequest<Router, fn(axum::extract::Request) -> axum::extract::Request>;

/// Builds the `/v1` API.
pub fn router(state: AppState) -> ApiService {
    tower::util::MapRequest::new(
        routed(state),
        prepared_query::encode_slashed_query_names as fn(_) -> _,
    )
}

/// The routes with their middleware and state.
fn routed(state: AppState) -> Router {
    routes()
        .router
        .fallback(fallback)
        .layer(common::CommonLayer::new(state.clone()))
        .with_state(state)
}

/// What no route answers, as Consul's index handler does: `/` redirects
/// to the UI (301) or says it is disabled (200, so a health check pointed
/// at the agent passes); any other path is a 404 with Consul's hint.
async fn fallback(
    axum::extract::State(st): axum::extract::State<AppState>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path();
    let config = st.agent.config();
    if path == "/" && !(config.ui.serves() && config.ui.content_path == "/") {
        if config.ui.serves() {
            return (
                StatusCode::MOVED_PERMANENTLY,
                [(axum::http::header::LOCATION, config.ui.content_path.clone())],
            )
                .into_response();
        }
        return "Consul Agent: UI disabled. To enable, set ui_config.enabled=true in the agent configuration and restart."
            .into_response();
    }
    if matches!(method, Method::GET | Method::HEAD) && !path.starts_with("/v1/") {
        let gzip = headers
            .get_all(axum::http::header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(ui_serve::accepts_gzip);
        if let Some(response) = ui_serve::answer(&st, path, gzip).await {
            return response;
        }
    }
    let hint = if path.contains("/v1/") {
        "Invalid URL path: not a recognized HTTP API endpoint\n"
    } else {
        "Invalid URL path: if attempting to use the HTTP API, ensure the path starts with '/v1/'\n"
    };
    (StatusCode::NOT_FOUND, hint).into_response()
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
    serve::serve(listener, router(state), &limits, None, shutdown).await
}

/// [`serve`] on a unix socket (`addresses.http = "unix://<path>"`).
pub async fn serve_unix(
    listener: tokio::net::UnixListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.agent.config().limits.clone();
    serve::serve_unix(listener, router(state), &limits, shutdown).await
}

/// [`serve`] over TLS (the HTTPS port): `config` is the listener's rustls
/// configuration; HTTP/2 is offered by ALPN beside HTTP/1.1.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    state: AppState,
    mut config: rustls::ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.agent.config().limits.clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    serve::serve(listener, router(state), &limits, Some(acceptor), shutdown).await
}

/// Consul CE's refusal of Enterprise namespaces and partitions, for a
/// request naming one other than `default` (in `?ns=`, `?partition=` or
/// their headers).
fn enterprise_scope(params: &util::Params, headers: &HeaderMap) -> Result<(), util::ApiError> {
    let named = |value: Option<&str>| {
        value.is_some_and(|v| !v.is_empty() && !v.eq_ignore_ascii_case("default"))
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let refusal = if named(header("x-consul-namespace")) {
        "Invalid header: \"X-Consul-Namespace\" - Namespaces are a Consul Enterprise feature"
    } else if named(params.get("ns")) {
        "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature"
    } else if named(header("x-consul-partition")) {
        "Invalid header: \"X-Consul-Partition\" - Partitions are a Consul Enterprise feature"
    } else if named(params.get("partition")) {
        "Invalid query parameter: \"partition\" - Partitions are a Consul Enterprise feature"
    } else {
        return Ok(());
    };
    Err(util::ApiError::bad_request(refusal))
}

impl axum::extract::FromRequestParts<AppState> for Req {
    type Rejection = util::ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Req, Self::Rejection> {
        let mut params = util::Params::parse(parts.uri.query());
        enterprise_scope(&params, &parts.headers)?;
        // `http_config.use_cache = false`: `?cached` is as if absent.
        if !state.agent.config().http_config.use_cache {
            params.remove("cached");
        }
        Ok(Req {
            params,
            // Taken, not copied: no extractor after this one reads the
            // headers, and a blocking read answers with this map (see
            // `Req::into_answer`).
            headers: std::mem::take(&mut parts.headers),
            peer: parts.extensions.get::<PeerAddr>().map(|p| p.0),
            agent_node: state.agent.config().node_name.clone(),
            default_token: state.agent.tokens().default_token().unwrap_or_default(),
            query_times: (
                state.agent.config().http_config.default_query_time,
                state.agent.config().http_config.max_query_time,
            ),
            // Consul bounds only the discovery reads: catalog and health.
            discovery_max_stale: state.agent.config().http_config.discovery_max_stale.filter(
                |_| {
                    let path = parts.uri.path();
                    path.starts_with("/v1/catalog") || path.starts_with("/v1/health")
                },
            ),
        })
    }
}

impl Req {
    /// Runs a read with this request's query options and answers with its
    /// JSON and the blocking-query headers.
    pub(crate) async fn read<T, Fut>(
        self,
        call: impl FnOnce(legate_types::QueryOptions) -> Fut,
    ) -> util::ApiResult
    where
        T: serde::Serialize,
        Fut: std::future::Future<Output = Result<legate_types::Queried<T>, legate_types::RpcError>>,
    {
        let opts = self.query_options()?;
        let answer = self.into_answer();
        let result = call(opts).await?;
        Ok(answer.json_meta(&result.meta, &result.value))
    }

    /// What a read that may block keeps of its request to answer with
    /// (see [`util::Answer`]); the rest is let go before the read waits,
    /// so a wake of thousands of blocking queries frees no requests.
    pub(crate) fn into_answer(self) -> util::Answer {
        util::Answer::new(self.params.has("pretty"), self.headers)
    }

    /// `?peer=<name>`: no cluster peers exist in Legate, so a read about
    /// one answers Consul's empty form (`[]`, `{}`, `null`), never this
    /// cluster's rows.
    /// A blocking read (`?index=` at or past 1) waits out its wait first,
    /// since nothing about the peer ever changes.
    pub(crate) async fn peer_empty(&self, empty: serde_json::Value) -> Option<util::ApiResult> {
        self.params.get("peer").filter(|p| !p.is_empty())?;
        let opts = match self.query_options() {
            Ok(opts) => opts,
            Err(e) => return Some(Err(e)),
        };
        if opts.min_index >= 1 {
            tokio::time::sleep(opts.effective_wait()).await;
        }
        let meta = legate_types::QueryMeta {
            index: 1,
            known_leader: true,
            ..Default::default()
        };
        Some(Ok(util::json_meta(&self.params, &meta, &empty)))
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
        // `default_query_time` / `max_query_time`, as Consul applies them.
        let (default, max) = self.query_times;
        opts.max_wait = Some(match opts.max_wait {
            Some(w) if !w.is_zero() => w.min(max),
            _ => default,
        });
        // `?near=`: `_agent` is this agent's node; `_ip` the node at the
        // client's address (X-Forwarded-For first, as Consul reads it).
        opts.near = match self.params.get("near") {
            Some("_agent") => self.agent_node.clone(),
            Some(near) => near.to_string(),
            None => String::new(),
        };
        if opts.near == "_ip" {
            opts.source_ip = self.client_ip();
        }
        // `discovery_max_stale`: a read that names no consistency (nor
        // `?leader`) is a stale read within that bound, as Consul's
        // `parseConsistency` makes it.
        let named = ["stale", "consistent", "leader", "cached"]
            .iter()
            .any(|p| self.params.has(p))
            || opts.max_stale.is_some();
        if let (false, Some(max_stale)) = (named, self.discovery_max_stale) {
            opts.consistency = legate_types::Consistency::Stale;
            opts.max_stale = Some(max_stale);
        }
        Ok(opts)
    }

    /// The client's address as Consul reads it for `_ip`: the first
    /// `X-Forwarded-For` entry, else the connection's peer.
    pub(crate) fn client_ip(&self) -> String {
        self.headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(|v| v.trim().to_string())
            .or_else(|| self.peer.map(|p| p.ip().to_string()))
            .unwrap_or_default()
    }
}
