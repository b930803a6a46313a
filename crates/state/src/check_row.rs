//! The stored form of a catalog health check: a [`HealthCheck`] packed for
//! a table with a row per service instance. The node and check ID are the
//! table key's and not repeated; the texts checks repeat (name, notes,
//! type, interval, timeout, and the service name and tags copied from the
//! service) are shared ([`Interner`]); the type-specific definition, empty
//! for checks registered through the catalog, sits behind one pointer.
//! Reads turn a row back into the exact [`HealthCheck`] it was made from;
//! snapshots store that form.

use legate_types::catalog::{HealthCheck, HealthCheckDefinition, HealthStatus};
use legate_types::RaftIndex;

use crate::interned::{Interner, Name};

/// One health check as the catalog table holds it.
#[derive(Debug, Clone)]
pub(crate) struct CheckRow {
    name: Name,
    notes: Name,
    check_type: Name,
    interval: Name,
    timeout: Name,
    service_id: Box<str>,
    service_name: Name,
    service_tags: Box<[Name]>,
    output: Box<str>,
    status: HealthStatus,
    exposed_port: u16,
    raft: RaftIndex,
    definition: Option<Box<HealthCheckDefinition>>,
}

impl CheckRow {
    /// Packs `check` (its node and ID are the table key's), sharing its
    /// texts through `names`.
    pub(crate) fn new(check: HealthCheck, names: &mut Interner) -> CheckRow {
        let HealthCheck {
            node: _,
            check_id: _,
            name,
            status,
            notes,
            output,
            service_id,
            service_name,
            service_tags,
            check_type,
            interval,
            timeout,
            exposed_port,
            definition,
            raft,
        } = check;
        CheckRow {
            name: names.get(&name),
            notes: names.get(&notes),
            check_type: names.get(&check_type),
            interval: names.get(&interval),
            timeout: names.get(&timeout),
            service_id: service_id.into_boxed_str(),
            service_name: names.get(&service_name),
            service_tags: service_tags.iter().map(|tag| names.get(tag)).collect(),
            output: output.into_boxed_str(),
            status,
            exposed_port,
            raft,
            definition: (definition != HealthCheckDefinition::default())
                .then(|| Box::new(definition)),
        }
    }

    /// The check as it was registered, on `node` with the ID `check_id`.
    pub(crate) fn to_check(&self, node: &str, check_id: &str) -> HealthCheck {
        HealthCheck {
            node: node.to_string(),
            check_id: check_id.to_string(),
            name: self.name.to_string(),
            status: self.status,
            notes: self.notes.to_string(),
            output: self.output.to_string(),
            service_id: self.service_id.to_string(),
            service_name: self.service_name.to_string(),
            service_tags: self.service_tags.iter().map(|t| t.to_string()).collect(),
            check_type: self.check_type.to_string(),
            interval: self.interval.to_string(),
            timeout: self.timeout.to_string(),
            exposed_port: self.exposed_port,
            definition: self.definition.as_deref().cloned().unwrap_or_default(),
            raft: self.raft,
        }
    }

    fn shared(&self) -> impl Iterator<Item = &Name> {
        [
            &self.name,
            &self.notes,
            &self.check_type,
            &self.interval,
            &self.timeout,
            &self.service_name,
        ]
        .into_iter()
        .chain(self.service_tags.iter())
    }

    /// Drops a row that leaves the table, and with it the shared texts
    /// only this row held.
    pub(crate) fn release(self, names: &mut Interner) {
        let held: Vec<Name> = self.shared().cloned().collect();
        drop(self);
        names.release_all(held);
    }

    /// Copies the service's name and tags into the check (they share the
    /// service row's texts); false when they were already the same.
    pub(crate) fn describe_service(
        &mut self,
        (name, tags): (&Name, &[Name]),
        names: &mut Interner,
    ) -> bool {
        if self.service_name == *name && *self.service_tags == *tags {
            return false;
        }
        let old: Vec<Name> =
            std::iter::once(std::mem::replace(&mut self.service_name, name.clone()))
                .chain(std::mem::replace(&mut self.service_tags, tags.into()).into_vec())
                .collect();
        names.release_all(old);
        true
    }

    /// The display name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The current status.
    pub(crate) fn status(&self) -> HealthStatus {
        self.status
    }

    /// The service instance the check belongs to (empty: a node check).
    pub(crate) fn service_id(&self) -> &str {
        &self.service_id
    }

    /// The service name copied from the instance.
    pub(crate) fn service_name(&self) -> &str {
        &self.service_name
    }

    /// Raft bookkeeping.
    pub(crate) fn raft(&self) -> RaftIndex {
        self.raft
    }

    /// Records a change at `index`.
    pub(crate) fn modified_at(&mut self, index: u64) {
        self.raft.modify_index = index;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TEXTS: &[&str] = &["", "web", "db", "v1", "passing", "a b", "ünï", "10s"];

    #[test]
    fn a_row_gives_back_the_check_it_was_made_from() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut names = Interner::default();
        let mut kept = Vec::new();
        for _ in 0..20_000 {
            let mut pick = || TEXTS[(next() % TEXTS.len() as u64) as usize].to_string();
            let mut check = HealthCheck {
                node: pick(),
                check_id: pick(),
                name: pick(),
                notes: pick(),
                output: pick(),
                service_id: pick(),
                service_name: pick(),
                check_type: pick(),
                interval: pick(),
                timeout: pick(),
                ..Default::default()
            };
            check.service_tags = (0..next() % 3)
                .map(|_| TEXTS[(next() % 8) as usize].into())
                .collect();
            check.status = [
                HealthStatus::Passing,
                HealthStatus::Warning,
                HealthStatus::Critical,
                HealthStatus::Maintenance,
            ][(next() % 4) as usize];
            check.exposed_port = next() as u16;
            check.raft = RaftIndex {
                create_index: next() % 50,
                modify_index: next() % 50,
            };
            if next() % 3 == 0 {
                check.definition.http = TEXTS[(next() % 8) as usize].into();
                check.definition.interval = Some(Duration::from_millis(next() % 5_000));
            }
            let row = CheckRow::new(check.clone(), &mut names);
            assert_eq!(row.to_check(&check.node, &check.check_id), check);
            assert_eq!(row.name(), check.name);
            assert_eq!(row.status(), check.status);
            assert_eq!(row.service_id(), check.service_id);
            assert_eq!(row.service_name(), check.service_name);
            assert_eq!(row.raft(), check.raft);
            if next() % 2 == 0 {
                kept.push(row);
            } else {
                row.release(&mut names);
            }
        }
        for row in kept {
            row.release(&mut names);
        }
        assert_eq!(names.len(), 0, "every row released what it held");
    }

    #[test]
    fn describing_the_service_shares_its_texts_and_releases_the_old_ones() {
        let mut names = Interner::default();
        let check = HealthCheck {
            service_id: "web-1".into(),
            service_name: "old-name".into(),
            service_tags: vec!["old-tag".into()],
            ..Default::default()
        };
        let mut row = CheckRow::new(check, &mut names);
        let web = names.get("web");
        let tags = vec![names.get("v2")];
        assert!(row.describe_service((&web, &tags), &mut names));
        assert!(!row.describe_service((&web, &tags), &mut names));
        assert!(std::sync::Arc::ptr_eq(&row.service_name, &web));
        let back = row.to_check("n1", "c1");
        assert_eq!(
            (back.service_name.as_str(), back.service_tags),
            ("web", vec!["v2".to_string()])
        );
        // "", "web" and "v2" are left; "old-name" and "old-tag" are gone.
        assert_eq!(names.len(), 3);
    }
}
