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

use legate_types::federation::WanView;
use legate_types::RpcError;
use tokio::sync::watch;

/// How long a server that could not be dialed goes to the back of its
/// datacenter's list.
const FAILED_FOR: Duration = Duration::from_secs(30);

/// Picks servers of other datacenters.
pub struct Router {
    local: String,
    view: watch::Receiver<WanView>,
    failed: Mutex<HashMap<String, Instant>>,
}

impl Router {
    /// A router for a server of `local`, reading the WAN pool's `view`.
    pub fn new(local: impl Into<String>, view: watch::Receiver<WanView>) -> Router {
        Router {
            local: local.into(),
            view,
            failed: Mutex::new(HashMap::new()),
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
        let mut candidates: Vec<String> = view
            .alive(datacenter)
            .into_iter()
            .filter(|a| !tried.contains(a))
            .collect();
        drop(view);
        if candidates.is_empty() {
            return Err(RpcError::DatacenterUnavailable(datacenter.to_string()));
        }
        let now = Instant::now();
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.retain(|_, until| *until > now);
        // Stable order: not recently failed first, then a rotation that
        // differs per caller and attempt.
        let offset = rand::random::<u64>() as usize;
        let n = candidates.len();
        candidates.rotate_left(offset % n);
        candidates.sort_by_key(|a| failed.contains_key(a));
        Ok(candidates.swap_remove(0))
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
