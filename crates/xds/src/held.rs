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

    /// Records many names at their versions in one pass; `sorted` is in
    /// name order without repeats. Inserting one by one would shift the
    /// vector for each name.
    pub(crate) fn merge<'a>(&mut self, sorted: impl IntoIterator<Item = (&'a str, Version)>) {
        let mut old = std::mem::take(&mut self.entries).into_iter().peekable();
        let mut merged = Vec::with_capacity(old.len());
        for (name, version) in sorted {
            while let Some(entry) = old.next_if(|(held, _)| &**held < name) {
                merged.push(entry);
            }
            match old.next_if(|(held, _)| &**held == name) {
                Some((held, _)) => merged.push((held, version)),
                None => merged.push((name.into(), version)),
            }
        }
        merged.extend(old);
        debug_assert!(merged.windows(2).all(|w| w[0].0 < w[1].0));
        self.entries = merged;
    }

    /// Keeps the names `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.entries.retain(|(name, _)| keep(name));
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

    /// Random inserts, merges and removals agree with a BTreeMap of
    /// version texts.
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
            match next() % 6 {
                0 => {
                    held.retain(|n| n != name);
                    model.remove(&name);
                }
                5 => {
                    let batch: BTreeMap<String, u64> = (0..next() % 6)
                        .map(|_| (format!("cluster-{}", next() % 40), next() % 4))
                        .collect();
                    held.merge(batch.iter().map(|(n, h)| (n.as_str(), Version::Ours(*h))));
                    model.extend(batch.iter().map(|(n, h)| (n.clone(), Version::text(*h))));
                }
                1 => {
                    held.merge([(name.as_str(), Version::parse("foreign"))]);
                    model.insert(name.clone(), "foreign".into());
                }
                4 if next() % 50 == 0 => {
                    held.clear();
                    model.clear();
                }
                _ => {
                    held.merge([(name.as_str(), Version::Ours(hash))]);
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
