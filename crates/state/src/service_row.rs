//! The stored form of a catalog service instance: a [`NodeService`] packed
//! for a table of hundreds of thousands of rows. The service name, tags
//! and metadata keys are shared texts ([`Interner`]); the instance ID is
//! the table key's and not repeated; the fields most instances leave unset
//! (kind, weights other than the default, tagged addresses, socket path,
//! locality, proxy and Connect settings) sit behind one pointer. Reads turn a row back into the exact
//! [`NodeService`] it was made from; snapshots store that form, so the
//! snapshot format does not depend on this one.

use std::collections::BTreeMap;

use legate_types::catalog::{
    ConnectProxyConfig, NodeService, ServiceAddress, ServiceConnect, Weights,
};
use legate_types::locality::Locality;
use legate_types::RaftIndex;

use crate::interned::{Interner, Name};

/// One service instance as the catalog table holds it.
#[derive(Debug, Clone)]
pub(crate) struct ServiceRow {
    name: Name,
    tags: Box<[Name]>,
    address: Box<str>,
    meta: Box<[(Name, Box<str>)]>,
    port: u16,
    enable_tag_override: bool,
    raft: RaftIndex,
    rare: Option<Box<RareFields>>,
}

/// What most instances leave unset.
#[derive(Debug, Clone, Default, PartialEq)]
struct RareFields {
    kind: String,
    weights: Weights,
    tagged_addresses: BTreeMap<String, ServiceAddress>,
    socket_path: String,
    locality: Option<Locality>,
    proxy: Option<Box<ConnectProxyConfig>>,
    connect: Option<ServiceConnect>,
}

impl RareFields {
    fn is_empty(&self) -> bool {
        *self == RareFields::default()
    }
}

impl ServiceRow {
    /// Packs `service` (its ID is the table key's), sharing its texts
    /// through `names`.
    pub(crate) fn new(service: NodeService, names: &mut Interner) -> ServiceRow {
        let NodeService {
            kind,
            id: _,
            service,
            tags,
            address,
            tagged_addresses,
            meta,
            port,
            socket_path,
            weights,
            enable_tag_override,
            locality,
            proxy,
            connect,
            raft,
        } = service;
        let rare = RareFields {
            kind,
            weights,
            tagged_addresses,
            socket_path,
            locality,
            proxy,
            connect,
        };
        ServiceRow {
            name: names.get(&service),
            tags: tags.iter().map(|tag| names.get(tag)).collect(),
            address: address.into_boxed_str(),
            meta: meta
                .into_iter()
                .map(|(key, value)| (names.get(&key), value.into_boxed_str()))
                .collect(),
            port,
            enable_tag_override,
            raft,
            rare: (!rare.is_empty()).then(|| Box::new(rare)),
        }
    }

    /// The instance as it was registered, with its ID `id`.
    pub(crate) fn to_service(&self, id: &str) -> NodeService {
        let rare = self.rare.as_deref();
        NodeService {
            kind: rare.map(|r| r.kind.clone()).unwrap_or_default(),
            id: id.to_string(),
            service: self.name.to_string(),
            tags: self.tags().map(str::to_string).collect(),
            address: self.address.to_string(),
            tagged_addresses: rare.map(|r| r.tagged_addresses.clone()).unwrap_or_default(),
            meta: self
                .meta
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            port: self.port,
            socket_path: rare.map(|r| r.socket_path.clone()).unwrap_or_default(),
            weights: rare.map(|r| r.weights).unwrap_or_default(),
            enable_tag_override: self.enable_tag_override,
            locality: rare.and_then(|r| r.locality.clone()),
            proxy: rare.and_then(|r| r.proxy.clone()),
            connect: rare.and_then(|r| r.connect.clone()),
            raft: self.raft,
        }
    }

    /// Drops a row that leaves the table, and with it the shared texts
    /// only this row held.
    pub(crate) fn release(self, names: &mut Interner) {
        let held: Vec<Name> = std::iter::once(self.name.clone())
            .chain(self.tags.iter().cloned())
            .chain(self.meta.iter().map(|(key, _)| key.clone()))
            .collect();
        drop(self);
        names.release_all(held);
    }

    /// The service name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The tags, in order.
    pub(crate) fn tags(&self) -> impl ExactSizeIterator<Item = &str> {
        self.tags.iter().map(|tag| &**tag)
    }

    /// The shared name and tags, for the checks that repeat them.
    pub(crate) fn shared_name_and_tags(&self) -> (&Name, &[Name]) {
        (&self.name, &self.tags)
    }

    /// `""` for typical services, else `connect-proxy`, `mesh-gateway`, ...
    pub(crate) fn kind(&self) -> &str {
        self.rare.as_deref().map_or("", |r| r.kind.as_str())
    }

    /// True for Connect-native services.
    pub(crate) fn is_connect_native(&self) -> bool {
        self.rare
            .as_deref()
            .and_then(|r| r.connect.as_ref())
            .is_some_and(|c| c.native)
    }

    /// The service this instance serves through the mesh, as
    /// [`NodeService::connect_target`] answers it.
    pub(crate) fn connect_target(&self) -> Option<&str> {
        let rare = self.rare.as_deref()?;
        if rare.kind == "connect-proxy" {
            return rare
                .proxy
                .as_ref()
                .map(|p| p.destination_service_name.as_str());
        }
        self.is_connect_native().then_some(&*self.name)
    }

    /// The service names whose reads include this instance: its own, and
    /// the one it serves through the mesh.
    pub(crate) fn read_by(&self) -> Vec<String> {
        std::iter::once(self.name())
            .chain(self.connect_target())
            .map(str::to_string)
            .collect()
    }

    /// Raft bookkeeping.
    pub(crate) fn raft(&self) -> RaftIndex {
        self.raft
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64: a fixed sequence, so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[(self.next() % from.len() as u64) as usize]
        }

        fn one_in(&mut self, n: u64) -> bool {
            self.next().is_multiple_of(n)
        }
    }

    const TEXTS: &[&str] = &[
        "",
        "web",
        "db",
        "v1",
        "primary",
        "a b",
        "ünï",
        "connect-proxy",
    ];

    fn random_service(rng: &mut Rng) -> NodeService {
        let mut service = NodeService {
            kind: if rng.one_in(3) {
                rng.pick(&["connect-proxy", "mesh-gateway", "x"]).into()
            } else {
                String::new()
            },
            id: rng.pick(TEXTS).into(),
            service: rng.pick(TEXTS).into(),
            tags: (0..rng.next() % 4)
                .map(|_| rng.pick(TEXTS).into())
                .collect(),
            address: rng.pick(TEXTS).into(),
            port: rng.next() as u16,
            weights: Weights {
                passing: (rng.next() % 5) as i64,
                warning: (rng.next() % 5) as i64,
            },
            enable_tag_override: rng.one_in(2),
            raft: RaftIndex {
                create_index: rng.next() % 100,
                modify_index: rng.next() % 100,
            },
            ..Default::default()
        };
        for _ in 0..rng.next() % 4 {
            service
                .meta
                .insert(rng.pick(TEXTS).into(), rng.pick(TEXTS).into());
        }
        if rng.one_in(4) {
            service.tagged_addresses.insert(
                rng.pick(&["lan", "wan"]).into(),
                ServiceAddress {
                    address: rng.pick(TEXTS).into(),
                    port: rng.next() as u16,
                },
            );
        }
        if rng.one_in(4) {
            service.socket_path = rng.pick(TEXTS).into();
        }
        if rng.one_in(4) {
            service.locality = Some(Locality {
                region: rng.pick(TEXTS).into(),
                zone: rng.pick(TEXTS).into(),
            });
        }
        if rng.one_in(3) {
            service.proxy = Some(Box::new(ConnectProxyConfig {
                destination_service_name: rng.pick(TEXTS).into(),
                local_service_port: rng.next() as u16,
                ..Default::default()
            }));
        }
        if rng.one_in(3) {
            service.connect = Some(ServiceConnect {
                native: rng.one_in(2),
                sidecar_service: None,
            });
        }
        service
    }

    #[test]
    fn a_row_gives_back_the_service_it_was_made_from() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut names = Interner::default();
        let mut rows = Vec::new();
        for _ in 0..20_000 {
            let service = random_service(&mut rng);
            let row = ServiceRow::new(service.clone(), &mut names);
            assert_eq!(row.to_service(&service.id), service);
            assert_eq!(row.name(), service.service);
            assert_eq!(row.kind(), service.kind);
            assert_eq!(row.connect_target(), service.connect_target());
            assert_eq!(row.raft(), service.raft);
            assert!(row.tags().eq(service.tags.iter().map(String::as_str)));
            if rng.one_in(2) {
                rows.push(row);
            } else {
                row.release(&mut names);
            }
        }
        for row in rows {
            row.release(&mut names);
        }
        assert_eq!(names.len(), 0, "every row released what it held");
    }

    #[test]
    fn rows_share_their_names_and_keep_rare_fields_out_of_line() {
        let mut names = Interner::default();
        let mut service = NodeService {
            service: "web".into(),
            tags: vec!["v1".into()],
            ..Default::default()
        };
        service.meta.insert("team".into(), "payments".into());
        let a = ServiceRow::new(service.clone(), &mut names);
        let b = ServiceRow::new(service, &mut names);
        assert!(std::sync::Arc::ptr_eq(&a.name, &b.name));
        assert!(std::sync::Arc::ptr_eq(&a.tags[0], &b.tags[0]));
        assert!(std::sync::Arc::ptr_eq(&a.meta[0].0, &b.meta[0].0));
        assert!(a.rare.is_none());
        assert_eq!(names.len(), 3);
    }
}
