//! What the WAN-federation-through-gateways tests share: server
//! certificates with node names, and what a server shows.

use std::path::Path;

use serde_json::Value;

use super::datacenters::Server;

/// A GET of `path` on `server` as JSON, when it answers 200.
pub fn json_of(server: &Server, path: &str) -> Option<Value> {
    json_as(server, "", path)
}

/// [`json_of`] with `token` (none when empty).
pub fn json_as(server: &Server, token: &str, path: &str) -> Option<Value> {
    let (status, body) = server.request_as(token, "GET", path, "")?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Runs `legate <args>` in `dir` (certificate commands).
pub fn run_in(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(super::binary())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// `tls cert create -server -dc <dc> -node <node>` in `dir` (beside its
/// CA), the `index`-th of that datacenter as the CLI numbers them; its
/// TLS block.
pub fn server_certificate(dir: &Path, dc: &str, node: &str, index: usize) -> String {
    run_in(
        dir,
        &["tls", "cert", "create", "-server", "-dc", dc, "-node", node],
    );
    let d = dir.display();
    let file = format!("{d}/{dc}-server-consul-{index}");
    format!(
        "tls {{ defaults {{ ca_file = \"{d}/consul-agent-ca.pem\" cert_file = \"{file}.pem\" key_file = \"{file}-key.pem\" verify_outgoing = true }} internal_rpc {{ verify_incoming = true verify_server_hostname = true }} }}"
    )
}

/// One CA in `dir` and the certificate of each of `servers` servers per
/// datacenter; the TLS block of each,
/// by (dc, server).
pub fn certificates(dir: &Path, servers: usize) -> Vec<Vec<String>> {
    run_in(dir, &["tls", "ca", "create"]);
    (0..2)
        .map(|dc| {
            (0..servers)
                .map(|server| {
                    let node = format!("s{}", server + 1);
                    server_certificate(dir, &format!("dc{}", dc + 1), &node, server)
                })
                .collect()
        })
        .collect()
}

/// `members -wan` as `server` sees it: (name, status) of each member.
pub fn wan_members(server: &Server) -> Vec<(String, String)> {
    wan_members_as(server, "")
}

/// [`wan_members`] with `token` (none when empty).
pub fn wan_members_as(server: &Server, token: &str) -> Vec<(String, String)> {
    let Some(members) = json_as(server, token, "/v1/agent/members?wan=1") else {
        return Vec::new();
    };
    let mut all: Vec<(String, String)> = members
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let status = match m["Status"].as_u64() {
                Some(1) => "alive",
                Some(4) => "failed",
                Some(3) => "left",
                _ => "other",
            };
            (
                m["Name"].as_str().unwrap_or("").to_string(),
                status.to_string(),
            )
        })
        .collect();
    all.sort();
    all
}
