//! Envoy's v3 bootstrap for a Legate sidecar, as `legate connect envoy`
//! writes it: admin, node (id = proxy service id, cluster = service name),
//! a `local_agent` static cluster speaking HTTP/2 to the agent's gRPC
//! port, and ADS over delta gRPC carrying `x-consul-token`. No deprecated
//! fields: HTTP/2 is set through `typed_extension_protocol_options`, and
//! the admin log through `access_log`.

use serde_json::{json, Value};

/// What the bootstrap needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapParams {
    /// The proxy's service id (Envoy node id).
    pub proxy_id: String,
    /// The proxy's service name (Envoy node cluster).
    pub cluster: String,
    /// Admin listener IP.
    pub admin_address: String,
    /// Admin listener port.
    pub admin_port: u16,
    /// Where the admin access log goes.
    pub admin_access_log_path: String,
    /// The agent's gRPC IP.
    pub agent_address: String,
    /// The agent's gRPC port.
    pub agent_port: u16,
    /// ACL token sent as `x-consul-token`.
    pub token: String,
    /// `envoy_prometheus_bind_addr` (`ip:port`), when set.
    pub prometheus_bind_addr: Option<(String, u16)>,
    /// `envoy_extra_static_clusters_json`, parsed.
    pub extra_clusters: Vec<Value>,
    /// `envoy_extra_static_listeners_json`, parsed.
    pub extra_listeners: Vec<Value>,
    /// The CA (PEM) to check the agent's gRPC TLS port with: the ADS
    /// cluster speaks TLS when set.
    pub agent_ca_pem: Option<String>,
}

/// Parses an `envoy_extra_static_*_json` value: one JSON object, or several
/// separated by commas, each checked strictly as an Envoy `type_name`.
pub fn parse_extra(key: &str, text: &str, type_url: &str) -> Result<Vec<Value>, String> {
    let list: Vec<Value> = serde_json::from_str(&format!("[{text}]"))
        .map_err(|e| format!("{key}: invalid JSON: {e}"))?;
    for item in &list {
        crate::json::json_to_any(type_url, item).map_err(|e| format!("{key}: {e}"))?;
    }
    Ok(list)
}

fn socket(address: &str, port: u16) -> Value {
    json!({"socket_address": {"address": address, "port_value": port}})
}

/// The bootstrap as proto3 JSON.
pub fn bootstrap(p: &BootstrapParams) -> Value {
    let mut clusters = vec![json!({
        "name": "local_agent",
        "connect_timeout": "1s",
        "type": "STATIC",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}}
            }
        },
        "load_assignment": {
            "cluster_name": "local_agent",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket(&p.agent_address, p.agent_port)}}]}]
        }
    })];
    if let Some(ca) = &p.agent_ca_pem {
        // Consul's TLS ADS cluster: the agent's certificate checked against the CA.
        clusters[0]["transport_socket"] = json!({
            "name": "tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"validation_context": {"trusted_ca": {"inline_string": ca}}}
            }
        });
    }
    clusters.extend(p.extra_clusters.iter().cloned());
    let mut listeners: Vec<Value> = p.extra_listeners.clone();
    if let Some((address, port)) = &p.prometheus_bind_addr {
        clusters.push(json!({
            "name": "self_admin",
            "connect_timeout": "5s",
            "type": "STATIC",
            "load_assignment": {
                "cluster_name": "self_admin",
                "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket(&p.admin_address, p.admin_port)}}]}]
            }
        }));
        listeners.push(json!({
            "name": format!("envoy_prometheus_metrics_listener:{address}:{port}"),
            "address": socket(address, *port),
            "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "envoy_prometheus_metrics",
                    "codec_type": "HTTP1",
                    "route_config": {
                        "name": "self_admin_route",
                        "virtual_hosts": [{
                            "name": "self_admin",
                            "domains": ["*"],
                            "routes": [
                                {"match": {"path": "/metrics"}, "route": {"cluster": "self_admin", "prefix_rewrite": "/stats/prometheus"}},
                                {"match": {"prefix": "/"}, "direct_response": {"status": 404}}
                            ]
                        }]
                    },
                    "http_filters": [{
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
                    }]
                }
            }]}]
        }));
    }
    json!({
        "admin": {
            "access_log": [{
                "name": "envoy.access_loggers.file",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                    "path": p.admin_access_log_path
                }
            }],
            "address": socket(&p.admin_address, p.admin_port)
        },
        "node": {
            "cluster": p.cluster,
            "id": p.proxy_id,
            "metadata": {"namespace": "default", "partition": "default"}
        },
        "layered_runtime": {
            "layers": [{"name": "base", "static_layer": {"re2.max_program_size.error_level": 1048576}}]
        },
        "static_resources": {"clusters": clusters, "listeners": listeners},
        "stats_config": {"stats_tags": [{"tag_name": "local_cluster", "fixed_value": p.cluster}]},
        "dynamic_resources": {
            "lds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"},
            "cds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"},
            "ads_config": {
                "api_type": "DELTA_GRPC",
                "transport_api_version": "V3",
                "grpc_services": [{
                    "initial_metadata": [{"key": "x-consul-token", "value": p.token}],
                    "envoy_grpc": {"cluster_name": "local_agent"}
                }]
            }
        }
    })
}
