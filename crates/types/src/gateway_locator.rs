//! Which mesh gateways a server dials to reach another datacenter's
//! servers when they federate through gateways (WAN federation via mesh
//! gateways). The locator is a value: [`GatewayLocator::compute`] turns
//! its inputs (the configured primary gateways, the federation states
//! this server holds, its role and the health of its paths) into the
//! gateways to use and the reason, and whoever owns the inputs publishes
//! the result on a channel for the transports to read. Nothing here
//! calls anywhere.
//!
//! Consul's rules, with its bugs fixed:
//! - the primary's gateways are the configured ones **and** the ones the
//!   federation states carry, never one replacing the other (#7339: a
//!   primary whose gateways all moved left its secondaries stranded);
//! - a secondary reaches the primary through its own datacenter's
//!   gateways once it has any; followers always do (#9341), and so does a
//!   leader until [`BYPASS_AFTER_FAILURES`] path failures in a row, when
//!   it dials the primary's gateways itself until a success;
//! - a server that starts from stored federation states uses them at
//!   once, starting in "through local gateways" (#9342);
//! - another secondary is reached through this datacenter's gateways only.

use serde::Serialize;

use crate::federation_state::FederationState;
use crate::meta::WAN_FEDERATION_KEY;
use crate::{CheckServiceNode, HealthStatus};

/// Failures in a row on the path through local gateways after which a
/// leader dials the primary's gateways directly (Consul's 3).
pub const BYPASS_AFTER_FAILURES: u32 = 3;

/// What the locator is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocatorInputs {
    /// This server's datacenter.
    pub datacenter: String,
    /// The primary datacenter.
    pub primary_datacenter: String,
    /// `primary_gateways` as last resolved (`host:port`), sorted.
    pub configured_primary: Vec<String>,
    /// Federation states this server holds (replicated or its own).
    pub states: Vec<FederationState>,
    /// Whether this server leads its datacenter.
    pub leader: bool,
    /// Failures in a row of the path to the primary through this
    /// datacenter's gateways (reset by a success).
    pub local_path_failures: u32,
}

/// The gateways to dial, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct GatewayLocator {
    /// This server's datacenter.
    pub datacenter: String,
    /// The primary datacenter.
    pub primary_datacenter: String,
    /// The primary's usable gateways at their WAN addresses: the
    /// configured ones and those of the primary's federation state.
    pub primary_gateways: Vec<String>,
    /// This datacenter's usable gateways at their LAN addresses.
    pub local_gateways: Vec<String>,
    /// Whether traffic to the primary goes through `local_gateways`.
    pub primary_through_local: bool,
    /// Why the choice is what it is, for people.
    pub reason: String,
    /// Inputs shown with the choice: `primary_gateways` as configured and
    /// last resolved.
    pub configured_primary_gateways: Vec<String>,
    /// Input: whether this server leads its datacenter.
    pub leader: bool,
    /// Input: failures in a row of the path through local gateways.
    pub local_path_failures: u32,
}

impl GatewayLocator {
    /// The locator its inputs give.
    pub fn compute(inputs: &LocatorInputs) -> GatewayLocator {
        let state_of = |dc: &str| inputs.states.iter().find(|s| s.datacenter == dc);
        let mut primary_gateways: Vec<String> = inputs.configured_primary.clone();
        if let Some(state) = state_of(&inputs.primary_datacenter) {
            primary_gateways.extend(usable(&state.mesh_gateways, true));
        }
        primary_gateways.sort();
        primary_gateways.dedup();
        let mut local_gateways: Vec<String> = state_of(&inputs.datacenter)
            .map(|s| usable(&s.mesh_gateways, false))
            .unwrap_or_default();
        local_gateways.sort();
        local_gateways.dedup();
        let is_primary = inputs.datacenter == inputs.primary_datacenter;
        let (primary_through_local, reason) = if is_primary {
            (false, "this is the primary datacenter".to_string())
        } else if local_gateways.is_empty() {
            (
                false,
                "no gateway of this datacenter is usable yet: dialling the primary's gateways"
                    .to_string(),
            )
        } else if !inputs.leader {
            (
                true,
                "a follower always goes through this datacenter's gateways".to_string(),
            )
        } else if inputs.local_path_failures >= BYPASS_AFTER_FAILURES {
            (
                false,
                format!(
                    "{} failures in a row through this datacenter's gateways: dialling the primary's gateways until one succeeds",
                    inputs.local_path_failures
                ),
            )
        } else {
            (
                true,
                "through this datacenter's gateways (the path is healthy)".to_string(),
            )
        };
        GatewayLocator {
            datacenter: inputs.datacenter.clone(),
            primary_datacenter: inputs.primary_datacenter.clone(),
            primary_gateways,
            local_gateways,
            primary_through_local,
            reason,
            configured_primary_gateways: inputs.configured_primary.clone(),
            leader: inputs.leader,
            local_path_failures: inputs.local_path_failures,
        }
    }

    /// The gateways that lead to `datacenter`'s servers, best first; empty
    /// when none is known (or `datacenter` is this one).
    pub fn candidates(&self, datacenter: &str) -> &[String] {
        if datacenter == self.datacenter {
            &[]
        } else if datacenter == self.primary_datacenter && !self.primary_through_local {
            &self.primary_gateways
        } else {
            // Another secondary, or the primary through our own gateways.
            &self.local_gateways
        }
    }
}

/// The addresses of the gateways among `gateways` that may carry server
/// traffic: marked for WAN federation and not critical; at their WAN
/// address (`wan`) or LAN address, as `host:port`.
pub fn usable(gateways: &[CheckServiceNode], wan: bool) -> Vec<String> {
    gateways
        .iter()
        .filter(|g| {
            g.service
                .meta
                .get(WAN_FEDERATION_KEY)
                .is_some_and(|v| v == "1")
        })
        .filter(|g| g.aggregate_status() != HealthStatus::Critical)
        .filter_map(|g| {
            let (address, port) = g.best_address(wan);
            (!address.is_empty() && port != 0).then(|| host_port(&address, port))
        })
        .collect()
}

/// `host:port`, with an IPv6 address in brackets.
fn host_port(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{HealthCheck, Node, NodeService, ServiceAddress};

    fn gateway(
        dc: &str,
        lan: &str,
        wan: &str,
        federating: bool,
        status: HealthStatus,
    ) -> CheckServiceNode {
        let at = |s: &str| {
            let (a, p) = s.rsplit_once(':').unwrap();
            ServiceAddress {
                address: a.into(),
                port: p.parse().unwrap(),
            }
        };
        let mut service = NodeService {
            id: format!("gw-{lan}"),
            service: "mesh-gateway".into(),
            ..Default::default()
        };
        service.address = at(lan).address.clone();
        service.port = at(lan).port;
        service.tagged_addresses.insert("lan".into(), at(lan));
        service.tagged_addresses.insert("wan".into(), at(wan));
        if federating {
            service.meta.insert(WAN_FEDERATION_KEY.into(), "1".into());
        }
        CheckServiceNode {
            node: Node {
                node: format!("node-{lan}"),
                datacenter: dc.into(),
                ..Default::default()
            },
            service,
            checks: vec![HealthCheck {
                status,
                ..Default::default()
            }],
        }
    }

    fn state(dc: &str, gateways: Vec<CheckServiceNode>) -> FederationState {
        FederationState {
            datacenter: dc.into(),
            mesh_gateways: gateways,
            ..Default::default()
        }
    }

    /// dc1's and dc2's states, one usable gateway each.
    fn both_states() -> Vec<FederationState> {
        let one = |dc: &str, lan: &str, wan: &str| {
            state(dc, vec![gateway(dc, lan, wan, true, HealthStatus::Passing)])
        };
        vec![
            one("dc1", "10.1.0.1:4431", "192.0.2.1:4432"),
            one("dc2", "10.2.0.1:4431", "198.51.100.1:4432"),
        ]
    }

    fn secondary(states: Vec<FederationState>) -> LocatorInputs {
        LocatorInputs {
            datacenter: "dc2".into(),
            primary_datacenter: "dc1".into(),
            configured_primary: vec!["10.0.0.1:443".into()],
            states,
            leader: true,
            local_path_failures: 0,
        }
    }

    #[test]
    fn only_federating_gateways_that_are_not_critical_count_at_the_right_address() {
        let gws = vec![
            gateway(
                "dc1",
                "10.1.0.1:4431",
                "192.0.2.1:4432",
                true,
                HealthStatus::Passing,
            ),
            gateway(
                "dc1",
                "10.1.0.2:4431",
                "192.0.2.2:4432",
                false,
                HealthStatus::Passing,
            ),
            gateway(
                "dc1",
                "10.1.0.3:4431",
                "192.0.2.3:4432",
                true,
                HealthStatus::Critical,
            ),
            gateway(
                "dc1",
                "10.1.0.4:4431",
                "192.0.2.4:4432",
                true,
                HealthStatus::Warning,
            ),
        ];
        assert_eq!(usable(&gws, true), vec!["192.0.2.1:4432", "192.0.2.4:4432"]);
        assert_eq!(usable(&gws, false), vec!["10.1.0.1:4431", "10.1.0.4:4431"]);
    }

    #[test]
    fn the_primarys_gateways_are_the_configured_ones_and_the_replicated_ones_7339() {
        // The primary's gateways all moved: the states name the new ones,
        // the configuration still the old one. Both stay candidates, so a
        // secondary whose states are stale still has the configured path,
        // and one whose configuration is stale has the replicated path.
        let inputs = secondary(vec![state(
            "dc1",
            vec![gateway(
                "dc1",
                "10.1.0.9:4431",
                "192.0.2.9:4432",
                true,
                HealthStatus::Passing,
            )],
        )]);
        let locator = GatewayLocator::compute(&inputs);
        assert_eq!(
            locator.candidates("dc1"),
            ["10.0.0.1:443".to_string(), "192.0.2.9:4432".to_string()]
        );
        assert!(!locator.primary_through_local, "{}", locator.reason);
        // Without any state, the configured ones alone.
        let locator = GatewayLocator::compute(&secondary(vec![]));
        assert_eq!(locator.candidates("dc1"), ["10.0.0.1:443".to_string()]);
    }

    #[test]
    fn a_restarted_secondary_uses_its_stored_local_gateways_at_once_9342() {
        // Nothing has been replicated since the start: the stored states
        // alone put the leader on its own gateways from the first dial.
        let inputs = secondary(both_states());
        let locator = GatewayLocator::compute(&inputs);
        assert!(locator.primary_through_local, "{}", locator.reason);
        assert_eq!(locator.candidates("dc1"), ["10.2.0.1:4431".to_string()]);
    }

    #[test]
    fn followers_always_use_local_gateways_and_a_leader_bypasses_them_only_after_failures_9341() {
        let states = both_states();
        let mut inputs = secondary(states);
        inputs.leader = false;
        inputs.local_path_failures = 10;
        let follower = GatewayLocator::compute(&inputs);
        assert!(follower.primary_through_local, "{}", follower.reason);
        inputs.leader = true;
        inputs.local_path_failures = BYPASS_AFTER_FAILURES - 1;
        assert!(GatewayLocator::compute(&inputs).primary_through_local);
        inputs.local_path_failures = BYPASS_AFTER_FAILURES;
        let bypassing = GatewayLocator::compute(&inputs);
        assert!(!bypassing.primary_through_local);
        assert_eq!(
            bypassing.candidates("dc1"),
            ["10.0.0.1:443".to_string(), "192.0.2.1:4432".to_string()]
        );
        assert!(
            bypassing.reason.contains("3 failures"),
            "{}",
            bypassing.reason
        );
    }

    #[test]
    fn other_secondaries_only_through_local_gateways_and_the_primary_dials_directly() {
        let states = vec![
            state(
                "dc1",
                vec![gateway(
                    "dc1",
                    "10.1.0.1:4431",
                    "192.0.2.1:4432",
                    true,
                    HealthStatus::Passing,
                )],
            ),
            state(
                "dc3",
                vec![gateway(
                    "dc3",
                    "10.3.0.1:4431",
                    "203.0.113.1:4432",
                    true,
                    HealthStatus::Passing,
                )],
            ),
        ];
        // A secondary without gateways of its own cannot reach dc3 yet.
        let locator = GatewayLocator::compute(&secondary(states.clone()));
        assert!(locator.candidates("dc3").is_empty());
        assert!(locator.candidates("dc2").is_empty(), "never itself");
        // The primary reaches every secondary through its own gateways.
        let primary = LocatorInputs {
            datacenter: "dc1".into(),
            primary_datacenter: "dc1".into(),
            states,
            leader: true,
            ..Default::default()
        };
        let locator = GatewayLocator::compute(&primary);
        assert_eq!(locator.candidates("dc3"), ["10.1.0.1:4431".to_string()]);
        assert!(!locator.primary_through_local);
    }
}
