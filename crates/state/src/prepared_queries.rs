//! The prepared-query table: queries by ID, with Consul's state-store
//! rules (names unique case-insensitively, never another query's ID, one
//! catch-all template, a bound session must exist) and the lookup order
//! of execute and explain.

use legate_types::prepared_query::PreparedQuery;
use legate_types::RaftIndex;

use crate::{Changes, Table, Tables};

/// How a name or ID found a query.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryMatch {
    /// By its ID.
    Id(PreparedQuery),
    /// By its exact name.
    Name(PreparedQuery),
    /// A template whose name is the longest prefix of the one looked up.
    Prefix(PreparedQuery),
}

impl Tables {
    /// Creates or replaces a query (its ID set by the server) at `index`.
    pub(crate) fn prepared_query_set(
        &mut self,
        index: u64,
        query: &PreparedQuery,
        changes: &mut Changes,
    ) -> Result<(), String> {
        if query.id.is_empty() {
            return Err("Missing query ID".into());
        }
        // IDs are UUIDs the server makes (lower case); they are matched
        // without regard to case, as Consul's UUID index does.
        let query = &PreparedQuery {
            id: query.id.to_ascii_lowercase(),
            ..query.clone()
        };
        let existing = self.prepared_queries.get(&query.id);
        if !query.name.is_empty() {
            let taken = self
                .prepared_queries
                .values()
                .any(|other| other.id != query.id && other.name.eq_ignore_ascii_case(&query.name));
            if taken {
                return Err(format!(
                    "name '{}' aliases an existing query name",
                    query.name
                ));
            }
            if self
                .prepared_queries
                .contains_key(&query.name.to_ascii_lowercase())
            {
                return Err(format!(
                    "name '{}' aliases an existing query id",
                    query.name
                ));
            }
        } else if query.is_template() {
            let catch_all = self
                .prepared_queries
                .values()
                .any(|other| other.id != query.id && other.name.is_empty() && other.is_template());
            if catch_all {
                return Err("a query template with an empty name already exists".into());
            }
        }
        if !query.session.is_empty() && !self.sessions.contains_key(&query.session) {
            return Err(format!("invalid session \"{}\"", query.session));
        }
        let create_index = existing.map(|q| q.raft.create_index).unwrap_or(index);
        let mut stored = query.clone();
        stored.raft = RaftIndex {
            create_index,
            modify_index: index,
        };
        self.prepared_queries.insert(stored.id.clone(), stored);
        self.bump(Table::PreparedQueries, index, changes);
        Ok(())
    }

    /// Removes a query (nothing when it does not exist).
    pub(crate) fn prepared_query_delete(&mut self, index: u64, id: &str, changes: &mut Changes) {
        if self
            .prepared_queries
            .remove(&id.to_ascii_lowercase())
            .is_some()
        {
            self.bump(Table::PreparedQueries, index, changes);
        }
    }

    /// Removes every query bound to `session` (which is going away).
    pub(crate) fn prepared_queries_of_session_delete(
        &mut self,
        index: u64,
        session: &str,
        changes: &mut Changes,
    ) {
        let before = self.prepared_queries.len();
        self.prepared_queries.retain(|_, q| q.session != session);
        if self.prepared_queries.len() != before {
            self.bump(Table::PreparedQueries, index, changes);
        }
    }

    /// Whether any query is stored (the feature then stays on).
    pub fn has_prepared_queries(&self) -> bool {
        !self.prepared_queries.is_empty()
    }

    /// One query by ID, with the table's index.
    pub fn prepared_query(&self, id: &str) -> (u64, Option<PreparedQuery>) {
        (
            self.table_index(Table::PreparedQueries),
            self.prepared_queries.get(&id.to_ascii_lowercase()).cloned(),
        )
    }

    /// Every query, by ID, with the table's index.
    pub fn prepared_queries(&self) -> (u64, Vec<PreparedQuery>) {
        (
            self.table_index(Table::PreparedQueries),
            self.prepared_queries.values().cloned().collect(),
        )
    }

    /// The query `id_or_name` names, in Consul's order: an ID, an exact
    /// name, then the template with the longest name that prefixes it.
    pub fn prepared_query_resolve(&self, id_or_name: &str) -> (u64, Option<QueryMatch>) {
        let index = self.table_index(Table::PreparedQueries);
        if id_or_name.is_empty() {
            return (index, None);
        }
        if let Some(q) = self.prepared_queries.get(&id_or_name.to_ascii_lowercase()) {
            return (index, Some(QueryMatch::Id(q.clone())));
        }
        let lowered = id_or_name.to_ascii_lowercase();
        if let Some(q) = self
            .prepared_queries
            .values()
            .find(|q| !q.name.is_empty() && q.name.to_ascii_lowercase() == lowered)
        {
            return (index, Some(QueryMatch::Name(q.clone())));
        }
        let template = self
            .prepared_queries
            .values()
            .filter(|q| q.is_template() && lowered.starts_with(&q.name.to_ascii_lowercase()))
            .max_by_key(|q| q.name.len());
        (index, template.cloned().map(QueryMatch::Prefix))
    }
}

#[cfg(test)]
mod tests {
    use legate_types::prepared_query::{PreparedQuery, TEMPLATE_NAME_PREFIX_MATCH};
    use legate_types::Session;

    use crate::{Command, CommandResult, QueryMatch, StateStore};

    fn query(id: &str, name: &str, template: bool) -> Command {
        let mut q = PreparedQuery {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        };
        q.service.service = "db".into();
        if template {
            q.template.kind = TEMPLATE_NAME_PREFIX_MATCH.into();
        }
        Command::PreparedQuerySet(Box::new(q))
    }

    fn failed(result: CommandResult) -> String {
        match result {
            CommandResult::Failed(message) => message,
            other => panic!("applied: {other:?}"),
        }
    }

    #[test]
    fn names_are_unique_and_never_another_querys_id() {
        let store = StateStore::new();
        assert_eq!(
            store.apply(1, &query("a", "Geo", false)),
            CommandResult::Done
        );
        assert_eq!(
            failed(store.apply(2, &query("b", "geo", false))),
            "name 'geo' aliases an existing query name"
        );
        assert_eq!(
            failed(store.apply(3, &query("c", "a", false))),
            "name 'a' aliases an existing query id"
        );
        assert_eq!(
            failed(store.apply(3, &query("c", "A", false))),
            "name 'A' aliases an existing query id"
        );
        assert_eq!(store.apply(4, &query("t", "", true)), CommandResult::Done);
        assert_eq!(
            failed(store.apply(5, &query("u", "", true))),
            "a query template with an empty name already exists"
        );
        // Renaming a query in place keeps its create index.
        assert_eq!(
            store.apply(6, &query("a", "GEO", false)),
            CommandResult::Done
        );
        let (index, a) = store.read().prepared_query("a");
        assert_eq!(index, 6);
        let a = a.unwrap();
        assert_eq!((a.raft.create_index, a.raft.modify_index), (1, 6));
    }

    #[test]
    fn lookups_go_id_then_name_then_longest_template_prefix() {
        let store = StateStore::new();
        store.apply(1, &query("id-1", "exact", false));
        store.apply(2, &query("t-short", "geo", true));
        store.apply(3, &query("t-long", "geo-db", true));
        store.apply(4, &query("t-all", "", true));
        let resolve = |name: &str| store.read().prepared_query_resolve(name).1;
        assert!(matches!(resolve("id-1"), Some(QueryMatch::Id(q)) if q.id == "id-1"));
        assert!(matches!(resolve("ID-1"), Some(QueryMatch::Id(q)) if q.id == "id-1"));
        assert!(matches!(resolve("EXACT"), Some(QueryMatch::Name(q)) if q.id == "id-1"));
        assert!(matches!(resolve("geo-db-1"), Some(QueryMatch::Prefix(q)) if q.id == "t-long"));
        assert!(matches!(resolve("geo-web"), Some(QueryMatch::Prefix(q)) if q.id == "t-short"));
        assert!(matches!(resolve("anything"), Some(QueryMatch::Prefix(q)) if q.id == "t-all"));
        assert_eq!(resolve(""), None);
    }

    #[test]
    fn a_bound_query_needs_its_session_and_goes_with_it() {
        let store = StateStore::new();
        let mut bound = PreparedQuery {
            id: "q".into(),
            name: "bound".into(),
            session: "s1".into(),
            ..Default::default()
        };
        bound.service.service = "db".into();
        let set = Command::PreparedQuerySet(Box::new(bound));
        assert_eq!(failed(store.apply(1, &set)), "invalid session \"s1\"");
        let node = legate_types::RegisterRequest {
            node: "n1".into(),
            address: "127.0.0.1".into(),
            ..Default::default()
        };
        store.apply(2, &Command::Register(Box::new(node)));
        store.apply(
            3,
            &Command::SessionCreate(Session {
                id: "s1".into(),
                node: "n1".into(),
                ..Default::default()
            }),
        );
        assert_eq!(store.apply(4, &set), CommandResult::Done);
        // Queries survive a snapshot and restore.
        let copy = StateStore::new();
        copy.restore(&store.snapshot().unwrap()).unwrap();
        assert_eq!(copy.read().prepared_queries().1.len(), 1);
        store.apply(5, &Command::SessionDestroy("s1".into()));
        assert_eq!(store.read().prepared_queries(), (5, vec![]));
    }
}
