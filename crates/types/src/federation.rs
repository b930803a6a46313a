//! What a server knows of other datacenters: the servers of every
//! datacenter in the WAN pool, as one value the binary publishes on a
//! channel (from WAN gossip) and the router and the catalog read.

use std::collections::BTreeMap;

/// A server's state in the WAN pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WanStatus {
    /// Answering gossip.
    Alive,
    /// Stopped answering (still known: its datacenter keeps a route).
    Failed,
}

/// One server of some datacenter, as the WAN pool knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WanServer {
    /// The node name (without the `.<dc>` of its WAN name).
    pub node: String,
    /// Its server-port address (`ip:port`).
    pub rpc_addr: String,
    /// Alive or failed (servers that left are not listed).
    pub status: WanStatus,
}

/// Every datacenter the WAN pool knows and its servers (this one's
/// included), the local datacenter among them. Datacenters whose every
/// server left are absent: there is no path to them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WanView {
    /// Servers by datacenter, each list sorted by node name.
    pub datacenters: BTreeMap<String, Vec<WanServer>>,
}

impl WanView {
    /// Whether the pool knows `datacenter`.
    pub fn knows(&self, datacenter: &str) -> bool {
        self.datacenters.contains_key(datacenter)
    }

    /// The alive servers of `datacenter` (server-port addresses).
    pub fn alive(&self, datacenter: &str) -> Vec<String> {
        self.datacenters
            .get(datacenter)
            .map(|servers| {
                servers
                    .iter()
                    .filter(|s| s.status == WanStatus::Alive)
                    .map(|s| s.rpc_addr.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The datacenter a WAN member name encodes: `<node>.<dc>` splits at its
/// one dot; anything else is Consul's error.
pub fn split_wan_name(name: &str) -> Result<(&str, &str), String> {
    match name.split('.').collect::<Vec<_>>()[..] {
        [node, dc] if !node.is_empty() && !dc.is_empty() => Ok((node, dc)),
        _ => Err(format!("node name does not encode a datacenter: {name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wan_names_split_at_their_one_dot() {
        assert_eq!(split_wan_name("a1.dc1"), Ok(("a1", "dc1")));
        for bad in ["a.b.dc1", "a1", ".dc1", "a1.", ""] {
            assert_eq!(
                split_wan_name(bad),
                Err(format!("node name does not encode a datacenter: {bad}"))
            );
        }
    }

    #[test]
    fn alive_lists_only_answering_servers() {
        let mut view = WanView::default();
        view.datacenters.insert(
            "dc2".into(),
            vec![
                WanServer {
                    node: "b1".into(),
                    rpc_addr: "127.0.0.21:8300".into(),
                    status: WanStatus::Failed,
                },
                WanServer {
                    node: "b2".into(),
                    rpc_addr: "127.0.0.22:8300".into(),
                    status: WanStatus::Alive,
                },
            ],
        );
        assert!(view.knows("dc2") && !view.knows("dc3"));
        assert_eq!(view.alive("dc2"), vec!["127.0.0.22:8300".to_string()]);
        assert!(view.alive("dc3").is_empty());
    }
}
