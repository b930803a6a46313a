//! Consul's usage counts of service instances (`/v1/operator/usage` and
//! the leader's `consul.state.*` gauges), kept as service rows are stored
//! and removed rather than counted by a walk of every instance: the
//! leader reports them every 10 s, and a walk of 250,000 instances held
//! a runtime worker and the store's read lock for tens of milliseconds.

use legate_types::rpc::ServiceUsage;

use crate::service_row::ServiceRow;

/// The mesh kinds Consul counts instances of, in its order.
const CONNECT_KINDS: [&str; 5] = [
    "connect-native",
    "connect-proxy",
    "ingress-gateway",
    "mesh-gateway",
    "terminating-gateway",
];

/// Instance counts by mesh kind, and of billable instances.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct UsageCounts {
    connect: [u64; CONNECT_KINDS.len()],
    billable: u64,
}

impl UsageCounts {
    /// Counts a row being stored.
    pub(crate) fn add(&mut self, row: &ServiceRow) {
        let (kind, billable) = classify(row);
        if let Some(kind) = kind {
            self.connect[kind] += 1;
        }
        self.billable += u64::from(billable);
    }

    /// Uncounts a row being removed or replaced.
    pub(crate) fn subtract(&mut self, row: &ServiceRow) {
        let (kind, billable) = classify(row);
        if let Some(kind) = kind {
            self.connect[kind] -= 1;
        }
        self.billable -= u64::from(billable);
    }

    /// Writes the counts into `usage`.
    pub(crate) fn fill(&self, usage: &mut ServiceUsage) {
        for (kind, count) in CONNECT_KINDS.iter().zip(self.connect) {
            usage
                .connect_service_instances
                .insert((*kind).into(), count);
        }
        usage.billable_service_instances = self.billable;
    }
}

/// Where a row counts: its mesh kind (a Connect-native service without a
/// kind counts as `connect-native`), and whether it is billable (neither
/// a proxy nor a gateway nor the servers' own `consul` service).
fn classify(row: &ServiceRow) -> (Option<usize>, bool) {
    let kind = if row.is_connect_native() && row.kind().is_empty() {
        "connect-native"
    } else {
        row.kind()
    };
    let billable = row.kind().is_empty() && row.name() != "consul";
    (CONNECT_KINDS.iter().position(|k| *k == kind), billable)
}

#[cfg(test)]
mod tests {
    use legate_types::ServiceConnect;

    use super::*;
    use crate::Tables;

    /// The counts as a walk of every instance finds them.
    fn walked(tables: &Tables) -> UsageCounts {
        let mut counts = UsageCounts::default();
        for row in tables.services.values() {
            counts.add(row);
        }
        counts
    }

    fn service(id: &str, name: &str) -> legate_types::NodeService {
        legate_types::NodeService {
            id: id.into(),
            service: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_counts_follow_every_stored_and_removed_row() {
        let mut tables = Tables::default();
        let proxy = legate_types::NodeService {
            kind: "connect-proxy".into(),
            ..service("web-proxy", "web-proxy")
        };
        let native = legate_types::NodeService {
            connect: Some(ServiceConnect {
                native: true,
                ..Default::default()
            }),
            ..service("api", "api")
        };
        tables.insert_service_row("n1".into(), service("web", "web"));
        tables.insert_service_row("n1".into(), proxy.clone());
        tables.insert_service_row("n1".into(), native);
        tables.insert_service_row("n1".into(), service("consul", "consul"));
        tables.insert_service_row("n2".into(), proxy);
        assert_eq!(tables.service_usage, walked(&tables));
        let (_, usage) = tables.usage();
        assert_eq!(usage.billable_service_instances, 2);
        assert_eq!(usage.connect_service_instances["connect-proxy"], 2);
        assert_eq!(usage.connect_service_instances["connect-native"], 1);
        assert_eq!(usage.connect_service_instances["mesh-gateway"], 0);
        // Replaced in place by a gateway of the same ID.
        let gateway = legate_types::NodeService {
            kind: "mesh-gateway".into(),
            ..service("web", "gateway")
        };
        tables.insert_service_row("n1".into(), gateway);
        assert_eq!(tables.service_usage, walked(&tables));
        assert_eq!(tables.usage().1.billable_service_instances, 1);
        assert!(tables
            .remove_service_row(&("n2".into(), "web-proxy".into()))
            .is_some());
        assert!(tables
            .remove_service_row(&("n1".into(), "api".into()))
            .is_some());
        assert_eq!(tables.service_usage, walked(&tables));
        let (_, usage) = tables.usage();
        assert_eq!(usage.connect_service_instances["connect-proxy"], 1);
        assert_eq!(usage.connect_service_instances["connect-native"], 0);
        assert_eq!(usage.connect_service_instances["mesh-gateway"], 1);
        assert_eq!(usage.service_instances, 3);
    }
}
