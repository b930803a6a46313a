//! What this server knows of other datacenters, from the WAN pool's view
//! (`ServerConfig::wan`).

use crate::Server;

impl Server {
    /// Every datacenter the WAN pool knows, this one first, the others
    /// by name (only this one without a WAN pool).
    pub(crate) fn known_datacenters(&self) -> Vec<String> {
        let local = &self.config.datacenter;
        let mut all = vec![local.clone()];
        all.extend(
            self.config
                .wan
                .borrow()
                .datacenters
                .keys()
                .filter(|dc| *dc != local)
                .cloned(),
        );
        all
    }
}
