//! `GET /v1/agent/self`: Consul's top-level keys exactly (`Config`,
//! `DebugConfig`, `Coord`, `Member`, `Stats`, `Meta`, `xDS`), `Stats` in
//! Consul's sections (`agent`, `build`, `consul`, `runtime`, `serf_lan`;
//! servers add `raft` and `serf_wan`), Legate's own facts under
//! `DebugConfig.Legate`.

use std::sync::Arc;

use axum::extract::State;
use legate_acl::Access;
use legate_agent::membership::{MemberStatus, Membership};
use legate_types::{Consistency, QueryOptions};
use serde_json::{json, Value};

use crate::agent_acl::check_agent;
use crate::util::{json, ApiResult};
use crate::{AppState, Req};

pub async fn self_info(State(st): State<AppState>, req: Req) -> ApiResult {
    check_agent(&st, &req, Access::Read).await?;
    let agent = &st.agent;
    let config = agent.config();
    let address = config.advertise().to_string();
    let mut meta = serde_json::Map::new();
    for (k, v) in &config.node_meta {
        meta.insert(k.clone(), json!(v));
    }
    meta.insert("consul-network-segment".into(), json!(""));
    let body = json!({
        "Config": {
            "Datacenter": config.datacenter,
            "PrimaryDatacenter": config.primary_datacenter,
            "NodeName": config.node_name,
            "NodeID": agent.node_id(),
            "Revision": "legate",
            "Server": config.server || config.dev,
            "Version": legate_types::CONSUL_API_VERSION,
            "BuildDate": "",
            // Nanoseconds, as Consul's older agents listed it here; HA
            // managers read it to fall back to the shortest TTL allowed.
            "SessionTTLMin": config.limits.session_ttl_min.as_nanos() as u64,
        },
        "DebugConfig": {
            "Datacenter": config.datacenter,
            "NodeName": config.node_name,
            "DevMode": config.dev,
            "ServerMode": config.server || config.dev,
            "DataDir": config.data_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default(),
            "ClientAddrs": [config.client_addr.to_string()],
            "HTTPPort": config.ports.http.map(i64::from).unwrap_or(-1),
            "DNSPort": config.ports.dns.map(i64::from).unwrap_or(-1),
            "GRPCPort": config.ports.grpc.map(i64::from).unwrap_or(-1),
            "GRPCTLSPort": config.ports.grpc_tls.map(i64::from).unwrap_or(-1),
            "ServerPort": config.ports.server.map(i64::from).unwrap_or(-1),
            "ConnectEnabled": config.connect_enabled,
            "ACLsEnabled": config.acl.enabled,
            "SessionTTLMin": legate_types::duration::format_go_duration(config.limits.session_ttl_min),
            // Legate's own facts live here, not at the top level.
            "Legate": {
                "Version": legate_types::LEGATE_VERSION,
                "Address": address,
                "FederationWarnings": agent.federation_warnings(),
            },
        },
        // This agent's LAN coordinate (null until gossip measured one).
        "Coord": agent.membership().and_then(|m| m.coordinate()),
        "Member": member(&st),
        "Stats": stats(&st).await,
        // The node's metadata, with the CE network segment as Consul adds it.
        "Meta": meta,
        "xDS": {
            "SupportedProxies": {"envoy": ["1.35.0", "1.34.0", "1.33.0", "1.32.0"]},
            "Port": config.ports.grpc.map(i64::from).unwrap_or(-1),
            "Ports": {
                "Plaintext": config.ports.grpc.map(i64::from).unwrap_or(-1),
                "TLS": config.ports.grpc_tls.filter(|_| config.grpc_tls.serves_tls()).map(i64::from).unwrap_or(-1),
            },
        },
    });
    Ok(json(&req.params, &body))
}

/// This agent as a LAN member (`-dev`, without gossip).
pub(crate) fn member(st: &AppState) -> Value {
    let config = st.agent.config();
    json!({
        "Name": config.node_name,
        "Addr": config.advertise().to_string(),
        "Port": config.ports.serf_lan.unwrap_or(8301),
        "Tags": {
            "role": if config.server || config.dev { "consul" } else { "node" },
            "dc": config.datacenter,
            "id": st.agent.node_id(),
            "port": config.ports.server.unwrap_or(8300).to_string(),
            "build": format!("{}:legate", legate_types::CONSUL_API_VERSION),
            "vsn": "2", "vsn_min": "2", "vsn_max": "3",
            "expect": config.bootstrap_expect.to_string(),
        },
        "Status": 1,
        "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
        "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
    })
}

/// Gossip pool counts as serf's `Stats` gives them (strings).
fn pool_stats(pool: Option<&Arc<dyn Membership>>) -> Value {
    let members = pool.map(|p| p.members()).unwrap_or_default();
    let count = |status: MemberStatus| {
        members
            .iter()
            .filter(|m| m.status == status)
            .count()
            .to_string()
    };
    let encrypted = pool
        .and_then(|p| p.keyring())
        .is_some_and(|k| !k.keys.is_empty());
    json!({
        "members": members.len().max(1).to_string(),
        "failed": count(MemberStatus::Failed),
        "left": count(MemberStatus::Left),
        "health_score": "0",
        "member_time": "0",
        "event_time": "0",
        "query_time": "0",
        "intent_queue": "0",
        "event_queue": "0",
        "query_queue": "0",
        "encrypted": encrypted.to_string(),
    })
}

/// Go's name for this architecture (`GOARCH`).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// `Stats`: what Consul's agent reports, from this agent and (read with
/// the agent's own token) its servers.
async fn stats(st: &AppState) -> Value {
    let agent = &st.agent;
    let config = agent.config();
    let server = config.server || config.dev;
    let rpc = agent.rpc();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .to_string();
    let acl = if config.acl.enabled {
        "enabled"
    } else {
        "disabled"
    };
    let mut stats = json!({
        "agent": {
            "check_monitors": "0",
            "check_ttls": agent.checks().values().filter(|c| c.check_type == "ttl").count().to_string(),
            "checks": agent.checks().len().to_string(),
            "services": agent.services().len().to_string(),
        },
        "build": {
            "prerelease": "",
            "revision": "legate",
            "version": legate_types::CONSUL_API_VERSION,
            "version_metadata": "",
            "legate_version": legate_types::LEGATE_VERSION,
        },
        "runtime": {
            "os": std::env::consts::OS,
            "arch": go_arch(),
            "version": "rust",
            "max_procs": cpus,
            "goroutines": "0",
            "cpu_count": cpus,
        },
        "serf_lan": pool_stats(agent.membership()),
    });
    let leader_addr = rpc.status_leader().await.unwrap_or_default();
    if !server {
        let known_servers = agent
            .membership()
            .map(|m| {
                m.members()
                    .iter()
                    .filter(|m| m.status == MemberStatus::Alive)
                    .filter(|m| m.tags.get("role").map(String::as_str) == Some("consul"))
                    .count()
            })
            .unwrap_or(0);
        stats["consul"] = json!({
            "server": "false",
            "known_servers": known_servers.to_string(),
            "acl": acl,
        });
        return stats;
    }
    let opts = QueryOptions {
        consistency: Consistency::Stale,
        token: agent.tokens().agent_token(),
        ..Default::default()
    };
    let raft = rpc.raft_configuration(&opts).await.unwrap_or_default();
    let me = raft.servers.iter().find(|s| s.id == agent.node_id());
    // The leader's view of this server: its term and last contact.
    let health = rpc.autopilot_health(&opts).await.unwrap_or_default();
    let seen = health.servers.iter().find(|s| s.id == agent.node_id());
    let leader = me.is_some_and(|s| s.leader);
    let datacenters = rpc
        .catalog_datacenters()
        .await
        .map(|d| d.len())
        .unwrap_or(1);
    let configuration: Vec<String> = raft
        .servers
        .iter()
        .map(|s| {
            let suffrage = if s.voter { "Voter" } else { "Nonvoter" };
            format!("{{Suffrage:{suffrage} ID:{} Address:{}}}", s.id, s.address)
        })
        .collect();
    stats["consul"] = json!({
        "server": "true",
        "leader": leader.to_string(),
        "leader_addr": leader_addr,
        "bootstrap": config.bootstrap.to_string(),
        "known_datacenters": datacenters.to_string(),
        "acl": acl,
    });
    stats["raft"] = json!({
        "state": if leader { "Leader" } else if leader_addr.is_empty() { "Candidate" } else { "Follower" },
        "num_peers": raft.servers.iter().filter(|s| s.voter).count().saturating_sub(1).to_string(),
        "last_log_index": me.map(|s| s.last_index).unwrap_or(0).to_string(),
        "commit_index": raft.index.to_string(),
        "applied_index": raft.index.to_string(),
        "latest_configuration_index": raft.index.to_string(),
        "latest_configuration": format!("[{}]", configuration.join(" ")),
        "term": seen.map(|s| s.last_term).unwrap_or(0).to_string(),
        "last_contact": match seen {
            _ if leader => "0".to_string(),
            Some(s) if s.last_contact != "-" => s.last_contact.clone(),
            _ => "never".to_string(),
        },
        "protocol_version": "3",
        "protocol_version_min": "0",
        "protocol_version_max": "3",
        "snapshot_version_min": "0",
        "snapshot_version_max": "1",
    });
    stats["serf_wan"] = pool_stats(agent.wan_membership());
    stats
}
