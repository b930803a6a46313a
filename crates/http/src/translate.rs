//! `translate_wan_addrs`: answers about another datacenter carry its
//! nodes' and services' WAN addresses (their `wan` tagged addresses), and
//! the endpoints that translate say so with
//! `X-Consul-Translate-Addresses: true` whenever the setting is on, as
//! Consul's do.

use std::collections::BTreeMap;

use axum::http::HeaderValue;
use axum::response::Response;
use legate_types::{CheckServiceNode, Node, ServiceAddress, ServiceNode};

use crate::AppState;

/// Whether rows read from `datacenter` (empty: this one) are translated.
pub(crate) fn active(st: &AppState, datacenter: &str) -> bool {
    let config = st.agent.config();
    config.dns.translate_wan_addrs && !datacenter.is_empty() && datacenter != config.datacenter
}

/// Marks a response of a translating endpoint.
pub(crate) fn mark(st: &AppState, mut response: Response) -> Response {
    if st.agent.config().dns.translate_wan_addrs {
        response.headers_mut().insert(
            "X-Consul-Translate-Addresses",
            HeaderValue::from_static("true"),
        );
    }
    response
}

fn node_address(address: &mut String, tagged: &BTreeMap<String, String>) {
    if let Some(wan) = tagged.get("wan").filter(|w| !w.is_empty()) {
        *address = wan.clone();
    }
}

fn service_address(address: &mut String, tagged: &BTreeMap<String, ServiceAddress>) {
    // Only a service address that was set is replaced.
    if address.is_empty() {
        return;
    }
    if let Some(wan) = tagged.get("wan").filter(|w| !w.address.is_empty()) {
        *address = wan.address.clone();
    }
}

/// Nodes at their WAN addresses.
pub(crate) fn nodes(rows: &mut [Node]) {
    for node in rows {
        node_address(&mut node.address, &node.tagged_addresses);
    }
}

/// Catalog service rows at their WAN addresses.
pub(crate) fn service_nodes(rows: &mut [ServiceNode]) {
    for row in rows {
        node_address(&mut row.address, &row.tagged_addresses);
        service_address(&mut row.service_address, &row.service_tagged_addresses);
    }
}

/// Health rows at their WAN addresses.
pub(crate) fn check_service_nodes(rows: &mut [CheckServiceNode]) {
    for row in rows {
        node_address(&mut row.node.address, &row.node.tagged_addresses);
        service_address(&mut row.service.address, &row.service.tagged_addresses);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wan_addresses_replace_lan_ones_where_tagged() {
        let mut node = Node {
            address: "10.0.0.1".into(),
            ..Default::default()
        };
        node.tagged_addresses
            .insert("wan".into(), "198.51.100.1".into());
        let mut plain = node.clone();
        plain.tagged_addresses.clear();
        let mut rows = vec![node, plain];
        nodes(&mut rows);
        assert_eq!(rows[0].address, "198.51.100.1");
        assert_eq!(rows[1].address, "10.0.0.1");
        let mut row = ServiceNode {
            address: "10.0.0.1".into(),
            service_address: String::new(),
            ..Default::default()
        };
        row.service_tagged_addresses.insert(
            "wan".into(),
            ServiceAddress {
                address: "198.51.100.9".into(),
                port: 443,
            },
        );
        let mut rows = vec![row.clone()];
        service_nodes(&mut rows);
        assert_eq!(
            rows[0].service_address, "",
            "an unset service address stays unset"
        );
        row.service_address = "10.0.0.5".into();
        let mut rows = vec![row];
        service_nodes(&mut rows);
        assert_eq!(rows[0].service_address, "198.51.100.9");
    }
}
