//! What an incremental (delta) xDS client holds of one resource type:
//! names with the versions it was sent, kept compact because a server has
//! one per type for each of tens of thousands of streams.
//!
//! Versions are the 64-bit content hashes the server gives resources. A
//! version a client reports that is not one of ours (another server's, on
//! reconnect) is kept as unknown and never equals a resource's version,
//! exactly as its text would never equal ours.

/// A resource version: ours, or one a client reported that we did not make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// One of our content hashes.
    Ours(u64),
    /// A version text that is not one of ours.
    Foreign,
}

impl Version {
    /// How the version goes on the wire: 16 lower-case hex digits.
    pub(crate) fn text(hash: u64) -> String {
        format!("{hash:016x}")
    }

    /// Reads a version a client reported.
    pub(crate) fn parse(text: &str) -> Version {
        match u64::from_str_radix(text, 16) {
            Ok(hash) if text.len() == 16 && Version::text(hash) == text => Version::Ours(hash),
            _ => Version::Foreign,
        }
    }
}

/// Names and versions, sorted by name in one allocation.
#[derive(Debug, Default)]
pub(crate) struct Held {
    entries: Vec<(Box<str>, Version)>,
}

impl Held {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    /// Whether the client holds `name` at our version `hash`.
    pub(crate) fn holds(&self, name: &str, hash: u64) -> bool {
        self.find(name)
            .is_ok_and(|i| self.entries[i].1 == Version::Ours(hash))
    }

    /// Records that the client holds `name` at `version`.
    pub(crate) fn insert(&mut self, name: &str, version: Version) {
        match self.find(name) {
            Ok(i) => self.entries[i].1 = version,
            Err(i) => self.entries.insert(i, (name.into(), version)),
        }
    }

    /// Forgets `name`.
    pub(crate) fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.entries.remove(i);
        }
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.entries = Vec::new();
    }

    /// The names held, in order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| &**n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn only_our_canonical_versions_are_ours() {
        assert_eq!(Version::parse("00000000000000ff"), Version::Ours(255));
        assert_eq!(Version::text(255), "00000000000000ff");
        // Upper case, short, long, signed and other texts never match ours.
        for foreign in [
            "00000000000000FF",
            "ff",
            "000000000000000ff",
            "+00000000000000f",
            "",
            "v1",
        ] {
            assert_eq!(Version::parse(foreign), Version::Foreign, "{foreign}");
        }
    }

    /// Random inserts and removals agree with a BTreeMap of version texts.
    #[test]
    fn agrees_with_a_map_of_texts() {
        let mut held = Held::default();
        let mut model: BTreeMap<String, String> = BTreeMap::new();
        let mut seed: u64 = 7;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let name = format!("cluster-{}", next() % 40);
            let hash = next() % 4;
            match next() % 5 {
                0 => {
                    held.remove(&name);
                    model.remove(&name);
                }
                1 => {
                    held.insert(&name, Version::parse("foreign"));
                    model.insert(name.clone(), "foreign".into());
                }
                4 if next() % 50 == 0 => {
                    held.clear();
                    model.clear();
                }
                _ => {
                    held.insert(&name, Version::Ours(hash));
                    model.insert(name.clone(), Version::text(hash));
                }
            }
            let probe = format!("cluster-{}", next() % 40);
            let hash = next() % 4;
            assert_eq!(
                held.holds(&probe, hash),
                model.get(&probe) == Some(&Version::text(hash))
            );
            assert!(held.names().eq(model.keys().map(String::as_str)));
        }
    }
}
