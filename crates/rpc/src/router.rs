//! Routes to other datacenters: which server of a datacenter a call
//! forwarded there goes to, from the WAN pool's view (a value on a
//! channel). Alive servers are tried first, one that just failed a dial
//! goes to the back for a while (Consul's rotation of a failed server),
//! and the errors are Consul's: a datacenter the pool does not know has
//! `No path to datacenter`; a known one with no server to reach answers
//! `Remote DC has no server currently reachable`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use legate_types::federation::{WanStatus, WanView};
use legate_types::gateway_locator::GatewayLocator;
use legate_types::RpcError;
use tokio::sync::watch;

use crate::pool::Dial;

/// How long a server that could not be dialed goes to the back of its
/// datacenter's list.
const FAILED_FOR: Duration = Duration::from_secs(30);

/// Picks servers of other datacenters.
pub struct Router {
    local: String,
    view: watch::Receiver<WanView>,
    failed: Mutex<HashMap<String, Instant>>,
    gateways: Option<watch::Receiver<GatewayLocator>>,
}

/// How a call reaches a server of another datacenter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The datacenter.
    pub datacenter: String,
    /// The server's RPC address, or `server.<dc>` for any server reached
    /// through a gateway (what `tried` lists).
    pub server: String,
    /// Through a gateway: the server's node name (`None`: any server).
    pub node: Option<String>,
    /// The mesh gateway to dial (WAN federation through mesh gateways).
    pub gateway: Option<String>,
}

impl Route {
    /// The pool's dial for this route.
    pub fn dial(&self) -> Dial<'_> {
        Dial {
            address: &self.server,
            datacenter: Some(&self.datacenter),
            gateway: self.gateway.as_deref(),
            node: self.node.as_deref(),
        }
    }
}

impl Router {
    /// A router for a server of `local`, reading the WAN pool's `view`.
    pub fn new(local: impl Into<String>, view: watch::Receiver<WanView>) -> Router {
        Router {
            local: local.into(),
            view,
            failed: Mutex::new(HashMap::new()),
            gateways: None,
        }
    }

    /// Reaches other datacenters' servers through the mesh gateways the
    /// `locator` names (WAN federation through mesh gateways).
    pub fn through_gateways(mut self, locator: watch::Receiver<GatewayLocator>) -> Router {
        self.gateways = Some(locator);
        self
    }

    /// How the next call to `datacenter` goes, not to a server in
    /// `tried`: straight to a server [`Router::pick`] picks, or through a
    /// gateway — to such a server by its node name, or to any server of
    /// the primary before the WAN pool knows one.
    pub fn route(&self, datacenter: &str, tried: &[String]) -> Result<Route, RpcError> {
        let Some(locator) = &self.gateways else {
            return Ok(Route {
                datacenter: datacenter.to_string(),
                server: self.pick(datacenter, tried)?,
                node: None,
                gateway: None,
            });
        };
        let (gateways, primary) = {
            let locator = locator.borrow();
            (
                locator.candidates(datacenter).to_vec(),
                locator.primary_datacenter.clone(),
            )
        };
        let (alive, knows) = {
            let view = self.view.borrow();
            let alive: Vec<(String, String)> = view
                .datacenters
                .get(datacenter)
                .into_iter()
                .flatten()
                .filter(|s| s.status == WanStatus::Alive && !tried.contains(&s.rpc_addr))
                .map(|s| (s.node.clone(), s.rpc_addr.clone()))
                .collect();
            (alive, view.knows(datacenter))
        };
        if !knows && datacenter != primary {
            return Err(RpcError::NoPathToDatacenter(datacenter.to_string()));
        }
        let any = format!("server.{datacenter}");
        let (node, server) = match self.least_failed(alive, |(_, addr)| addr.clone()) {
            Some((node, addr)) => (Some(node), addr),
            // The primary before the WAN pool knows its servers.
            None if !knows && !tried.contains(&any) => (None, any),
            None if !knows => return Err(RpcError::NoPathToDatacenter(datacenter.to_string())),
            None => return Err(RpcError::DatacenterUnavailable(datacenter.to_string())),
        };
        let gateway = self.least_failed(gateways, Clone::clone).ok_or_else(|| {
            if knows {
                RpcError::DatacenterUnavailable(datacenter.to_string())
            } else {
                RpcError::NoPathToDatacenter(datacenter.to_string())
            }
        })?;
        Ok(Route {
            datacenter: datacenter.to_string(),
            server,
            node,
            gateway: Some(gateway),
        })
    }

    /// One of `items` at random, those whose key failed lately last.
    fn least_failed<T>(&self, mut items: Vec<T>, key: impl Fn(&T) -> String) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        let now = Instant::now();
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.retain(|_, until| *until > now);
        let n = items.len();
        items.rotate_left(rand::random::<u64>() as usize % n);
        items.sort_by_key(|item| failed.contains_key(&key(item)));
        Some(items.swap_remove(0))
    }

    /// Records that `route` failed: its server and its gateway go to the
    /// back for a while.
    pub fn failed_route(&self, route: &Route) {
        self.failed(&route.server);
        if let Some(gateway) = &route.gateway {
            self.failed(gateway);
        }
    }

    /// This server's datacenter.
    pub fn local(&self) -> &str {
        &self.local
    }

    /// Whether a call for `datacenter` leaves this one (an empty name is
    /// the local datacenter).
    pub fn is_remote(&self, datacenter: &str) -> bool {
        !datacenter.is_empty() && datacenter != self.local
    }

    /// The next server of `datacenter` to call, not one in `tried`: an
    /// alive server that did not just fail, picked at random (so callers
    /// spread over the datacenter's servers).
    pub fn pick(&self, datacenter: &str, tried: &[String]) -> Result<String, RpcError> {
        let view = self.view.borrow();
        if !view.knows(datacenter) {
            return Err(RpcError::NoPathToDatacenter(datacenter.to_string()));
        }
        let candidates: Vec<String> = view
            .alive(datacenter)
            .into_iter()
            .filter(|a| !tried.contains(a))
            .collect();
        drop(view);
        // Not recently failed first, then a rotation that differs per
        // caller and attempt.
        self.least_failed(candidates, Clone::clone)
            .ok_or_else(|| RpcError::DatacenterUnavailable(datacenter.to_string()))
    }

    /// Records that `address` could not be reached: it goes to the back
    /// of its datacenter's list for a while.
    pub fn failed(&self, address: &str) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(address.to_string(), Instant::now() + FAILED_FOR);
    }

    /// Every datacenter known, the local one included.
    pub fn datacenters(&self) -> Vec<String> {
        let mut all: Vec<String> = self.view.borrow().datacenters.keys().cloned().collect();
        if !all.contains(&self.local) {
            all.push(self.local.clone());
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_types::federation::{WanServer, WanStatus};

    fn view() -> WanView {
        let server = |node: &str, addr: &str, status| WanServer {
            node: node.into(),
            rpc_addr: addr.into(),
            status,
            coord: None,
            features: Default::default(),
        };
        let mut view = WanView::default();
        view.datacenters.insert(
            "dc2".into(),
            vec![
                server("b1", "10.0.0.1:8300", WanStatus::Alive),
                server("b2", "10.0.0.2:8300", WanStatus::Alive),
                server("b3", "10.0.0.3:8300", WanStatus::Failed),
            ],
        );
        view.datacenters.insert(
            "dc3".into(),
            vec![server("c1", "10.0.1.1:8300", WanStatus::Failed)],
        );
        view
    }

    #[test]
    fn unknown_and_unreachable_datacenters_have_consuls_errors() {
        let (_tx, rx) = watch::channel(view());
        let router = Router::new("dc1", rx);
        let unknown = router.pick("dc9", &[]).unwrap_err();
        assert_eq!(unknown.to_string(), "No path to datacenter");
        let down = router.pick("dc3", &[]).unwrap_err();
        assert_eq!(
            down.to_string(),
            "Remote DC has no server currently reachable"
        );
        // Every alive server tried: unreachable too.
        let tried = vec!["10.0.0.1:8300".to_string(), "10.0.0.2:8300".to_string()];
        assert!(matches!(
            router.pick("dc2", &tried),
            Err(RpcError::DatacenterUnavailable(_))
        ));
    }

    #[test]
    fn failed_servers_are_never_picked_and_a_failed_dial_goes_last() {
        let (_tx, rx) = watch::channel(view());
        let router = Router::new("dc1", rx);
        for _ in 0..50 {
            let picked = router.pick("dc2", &[]).unwrap();
            assert_ne!(picked, "10.0.0.3:8300");
        }
        router.failed("10.0.0.1:8300");
        for _ in 0..50 {
            assert_eq!(router.pick("dc2", &[]).unwrap(), "10.0.0.2:8300");
        }
        // The one left is still used when it is all there is.
        let tried = vec!["10.0.0.2:8300".to_string()];
        assert_eq!(router.pick("dc2", &tried).unwrap(), "10.0.0.1:8300");
    }

    fn locator(primary_gateways: &[&str], local: &[&str], through_local: bool) -> GatewayLocator {
        GatewayLocator {
            datacenter: "dc1".into(),
            primary_datacenter: "dc0".into(),
            primary_gateways: primary_gateways.iter().map(|g| g.to_string()).collect(),
            local_gateways: local.iter().map(|g| g.to_string()).collect(),
            primary_through_local: through_local,
            ..Default::default()
        }
    }

    #[test]
    fn through_gateways_a_known_server_is_named_and_the_primary_reached_before_it_is_known() {
        let (_tx, rx) = watch::channel(view());
        let (gw_tx, gw_rx) = watch::channel(locator(&["192.0.2.1:443"], &[], false));
        let router = Router::new("dc1", rx).through_gateways(gw_rx);
        // dc2 is another secondary: only this datacenter's gateways lead there.
        assert!(matches!(
            router.route("dc2", &[]),
            Err(RpcError::DatacenterUnavailable(_))
        ));
        gw_tx.send_replace(locator(&["192.0.2.1:443"], &["10.1.0.1:443"], true));
        let route = router.route("dc2", &[]).unwrap();
        assert_eq!(route.gateway.as_deref(), Some("10.1.0.1:443"));
        assert!(
            ["b1", "b2"].contains(&route.node.as_deref().unwrap()),
            "{route:?}"
        );
        assert_eq!(
            route.dial().pool_key(),
            format!("10.1.0.1:443/{}.server.dc2", route.node.unwrap())
        );
        // The primary is unknown to the WAN pool yet: any of its servers,
        // through its gateways (the leader's path before local ones exist).
        gw_tx.send_replace(locator(&["192.0.2.1:443"], &[], false));
        let route = router.route("dc0", &[]).unwrap();
        assert_eq!(
            (
                route.server.as_str(),
                route.node.as_deref(),
                route.gateway.as_deref()
            ),
            ("server.dc0", None, Some("192.0.2.1:443"))
        );
        assert!(matches!(
            router.route("dc0", &["server.dc0".to_string()]),
            Err(RpcError::NoPathToDatacenter(_))
        ));
        // A datacenter nobody knows has no path.
        assert!(matches!(
            router.route("dc9", &[]),
            Err(RpcError::NoPathToDatacenter(_))
        ));
        // A failed gateway goes last.
        gw_tx.send_replace(locator(&["192.0.2.1:443", "192.0.2.2:443"], &[], false));
        let first = router.route("dc0", &[]).unwrap();
        router.failed_route(&first);
        for _ in 0..20 {
            let next = router.route("dc0", &[]).unwrap();
            assert_ne!(next.gateway, first.gateway);
        }
    }

    #[test]
    fn a_changed_view_is_seen_at_once() {
        let (tx, rx) = watch::channel(WanView::default());
        let router = Router::new("dc1", rx);
        assert_eq!(router.datacenters(), vec!["dc1".to_string()]);
        assert!(router.pick("dc2", &[]).is_err());
        tx.send_replace(view());
        assert!(router.pick("dc2", &[]).is_ok());
        assert_eq!(router.datacenters(), vec!["dc2", "dc3", "dc1"]);
        assert!(router.is_remote("dc2") && !router.is_remote("dc1") && !router.is_remote(""));
    }
}
