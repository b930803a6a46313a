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
#[derive(Debug, Clone, PartialEq)]
pub struct WanServer {
    /// The node name (without the `.<dc>` of its WAN name).
    pub node: String,
    /// Its server-port address (`ip:port`).
    pub rpc_addr: String,
    /// Alive or failed (servers that left are not listed).
    pub status: WanStatus,
    /// Its WAN coordinate, when this server has measured one.
    pub coord: Option<crate::coordinate::Coordinate>,
    /// The features it advertises (`ft_*` tags: `si`, `fs`, ...).
    pub features: std::collections::BTreeSet<String>,
}

/// Every datacenter the WAN pool knows and its servers (this one's
/// included), the local datacenter among them. Datacenters whose every
/// server left are absent: there is no path to them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WanView {
    /// Servers by datacenter, each list sorted by node name.
    pub datacenters: BTreeMap<String, Vec<WanServer>>,
    /// This server's own WAN coordinate.
    pub own: Option<crate::coordinate::Coordinate>,
}

impl WanView {
    /// The features of every server of `datacenter` the pool knows (alive
    /// or failed); empty when it knows none.
    pub fn features_of(&self, datacenter: &str) -> Vec<std::collections::BTreeSet<String>> {
        self.datacenters
            .get(datacenter)
            .map(|servers| servers.iter().map(|s| s.features.clone()).collect())
            .unwrap_or_default()
    }

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

impl WanView {
    /// Datacenters nearest first, as Consul ranks them: `local` at zero,
    /// every other by the median estimated round trip from this server to
    /// its servers (one without a known coordinate counts as infinitely
    /// far), ties by name.
    pub fn by_distance(&self, local: &str) -> Vec<String> {
        let mut ranked: Vec<(std::time::Duration, &String)> = self
            .datacenters
            .iter()
            .map(|(dc, servers)| {
                if dc == local {
                    return (std::time::Duration::ZERO, dc);
                }
                let distances = servers
                    .iter()
                    .map(|s| match (&self.own, &s.coord) {
                        (Some(own), Some(c)) => own.distance_to(c),
                        _ => std::time::Duration::MAX,
                    })
                    .collect();
                let median = crate::coordinate::median(distances);
                (median.unwrap_or(std::time::Duration::MAX), dc)
            })
            .collect();
        ranked.sort();
        ranked.into_iter().map(|(_, dc)| dc.clone()).collect()
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
    fn datacenters_rank_by_the_median_round_trip_to_their_servers() {
        use crate::coordinate::{Coordinate, CoordinateConfig};
        let at = |x: f64| {
            let mut c = Coordinate::new(&CoordinateConfig::default());
            c.vec[0] = x;
            c
        };
        let server = |node: &str, x: Option<f64>| WanServer {
            node: node.into(),
            rpc_addr: format!("{node}:8300"),
            status: WanStatus::Alive,
            coord: x.map(at),
            features: Default::default(),
        };
        let mut view = WanView::default();
        view.datacenters
            .insert("dc1".into(), vec![server("a1", Some(0.0))]);
        // dc2: medians 0.050 (one far outlier does not move it).
        view.datacenters.insert(
            "dc2".into(),
            vec![
                server("b1", Some(0.040)),
                server("b2", Some(0.050)),
                server("b3", Some(0.900)),
            ],
        );
        view.datacenters
            .insert("dc3".into(), vec![server("c1", Some(0.020))]);
        view.datacenters
            .insert("dc0".into(), vec![server("z1", None)]);
        // Without our own coordinate: the local one first, the rest by name.
        assert_eq!(view.by_distance("dc3"), ["dc3", "dc0", "dc1", "dc2"]);
        view.own = Some(at(0.0));
        // The local DC at zero even where another looks nearer.
        assert_eq!(view.by_distance("dc2"), ["dc2", "dc1", "dc3", "dc0"]);
        assert_eq!(view.by_distance("dc1"), ["dc1", "dc3", "dc2", "dc0"]);
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
                    coord: None,
                    features: Default::default(),
                },
                WanServer {
                    node: "b2".into(),
                    rpc_addr: "127.0.0.22:8300".into(),
                    status: WanStatus::Alive,
                    coord: None,
                    features: Default::default(),
                },
            ],
        );
        assert!(view.knows("dc2") && !view.knows("dc3"));
        assert_eq!(view.alive("dc2"), vec!["127.0.0.22:8300".to_string()]);
        assert!(view.alive("dc3").is_empty());
    }
}
