//! The address an instance is dialled at, from its own datacenter and
//! from another (Consul's `BestAddress`).

use legate_types::{CheckServiceNode, Node, NodeService, ServiceAddress};

fn instance(
    service_address: &str,
    service_wan: Option<(&str, u16)>,
    node_wan: Option<&str>,
) -> CheckServiceNode {
    let mut node = Node {
        node: "n1".into(),
        address: "10.0.0.1".into(),
        ..Default::default()
    };
    if let Some(wan) = node_wan {
        node.tagged_addresses.insert("wan".into(), wan.into());
    }
    let mut service = NodeService {
        service: "db".into(),
        address: service_address.into(),
        port: 21000,
        ..Default::default()
    };
    if let Some((address, port)) = service_wan {
        service.tagged_addresses.insert(
            "wan".into(),
            ServiceAddress {
                address: address.into(),
                port,
            },
        );
    }
    CheckServiceNode {
        node,
        service,
        checks: Vec::new(),
    }
}

#[test]
fn the_same_datacenter_dials_the_lan_addresses() {
    let both = instance(
        "10.0.0.9",
        Some(("198.51.100.9", 8443)),
        Some("198.51.100.1"),
    );
    assert_eq!(both.best_address(false), ("10.0.0.9".into(), 21000));
    let node_only = instance("", None, Some("198.51.100.1"));
    assert_eq!(node_only.best_address(false), ("10.0.0.1".into(), 21000));
}

#[test]
fn another_datacenter_prefers_wan_addresses_service_first() {
    let both = instance(
        "10.0.0.9",
        Some(("198.51.100.9", 8443)),
        Some("198.51.100.1"),
    );
    assert_eq!(both.best_address(true), ("198.51.100.9".into(), 8443));
    // A tagged address without a port keeps the service's.
    let no_port = instance("10.0.0.9", Some(("198.51.100.9", 0)), None);
    assert_eq!(no_port.best_address(true), ("198.51.100.9".into(), 21000));
    // The service's own address beats the node's WAN address.
    let service_address = instance("10.0.0.9", None, Some("198.51.100.1"));
    assert_eq!(
        service_address.best_address(true),
        ("10.0.0.9".into(), 21000)
    );
    let node_wan = instance("", None, Some("198.51.100.1"));
    assert_eq!(node_wan.best_address(true), ("198.51.100.1".into(), 21000));
    let nothing_tagged = instance("", None, None);
    assert_eq!(
        nothing_tagged.best_address(true),
        ("10.0.0.1".into(), 21000)
    );
}
