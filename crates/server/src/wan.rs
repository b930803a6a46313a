//! What this server knows of other datacenters, from the WAN pool's view
//! (`ServerConfig::wan`).

use crate::Server;

impl Server {
    /// Every datacenter the WAN pool knows, nearest first (by the median
    /// estimated round trip to its servers; by name without coordinates);
    /// only this one without a WAN pool.
    pub(crate) fn known_datacenters(&self) -> Vec<String> {
        let local = &self.config.datacenter;
        let mut all = self.config.wan.borrow().by_distance();
        if !all.contains(local) {
            all.insert(0, local.clone());
        }
        all
    }
}
