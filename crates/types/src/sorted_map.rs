//! A map from names to values kept as one list sorted by name: for the
//! small maps held once per upstream (a chain's targets and nodes, the
//! endpoints per target), where even a one-entry `BTreeMap` allocates a
//! node with room for eleven. Lookups are binary searches; serialized as
//! a map, in name order, as the `BTreeMap` it replaces was.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The map.
#[derive(Clone, PartialEq, Eq)]
pub struct SortedMap<V>(Vec<(String, V)>);

impl<V> Default for SortedMap<V> {
    fn default() -> Self {
        SortedMap(Vec::new())
    }
}

impl<V> SortedMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        SortedMap::default()
    }

    /// An empty map with room for `entries`.
    pub fn with_capacity(entries: usize) -> Self {
        SortedMap(Vec::with_capacity(entries))
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.position(key).ok().map(|at| &self.0[at].1)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets the value of `key`, answering the value it replaced.
    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                self.0.insert(at, (key, value));
                None
            }
        }
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
}

impl<V> FromIterator<(String, V)> for SortedMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(entries: I) -> Self {
        let mut map = SortedMap::new();
        for (key, value) in entries {
            map.insert(key, value);
        }
        map.0.shrink_to_fit();
        map
    }
}

impl<V> From<BTreeMap<String, V>> for SortedMap<V> {
    fn from(map: BTreeMap<String, V>) -> Self {
        // Already in key order.
        SortedMap(map.into_iter().collect())
    }
}

impl<V> IntoIterator for SortedMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Borrowed entries, in key order.
type Entries<'a, V> =
    std::iter::Map<std::slice::Iter<'a, (String, V)>, fn(&'a (String, V)) -> (&'a String, &'a V)>;

impl<'a, V> IntoIterator for &'a SortedMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = Entries<'a, V>;

    fn into_iter(self) -> Self::IntoIter {
        fn split<V>((k, v): &(String, V)) -> (&String, &V) {
            (k, v)
        }
        self.0
            .iter()
            .map(split as fn(&'a (String, V)) -> (&'a String, &'a V))
    }
}

impl<V: fmt::Debug> fmt::Debug for SortedMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for SortedMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for SortedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::<String, V>::deserialize(deserializer).map(SortedMap::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_replaces_and_serializes_as_a_map() {
        let mut map = SortedMap::new();
        assert_eq!(map.insert("b".into(), 1), None);
        assert_eq!(map.insert("a".into(), 2), None);
        assert_eq!(map.insert("c".into(), 3), None);
        assert_eq!(map.insert("b".into(), 4), Some(1));
        assert_eq!(map.len(), 3);
        assert_eq!(map.get("b"), Some(&4));
        assert!(map.get("d").is_none());
        assert!(map.contains_key("a"));
        assert_eq!(map.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(map.values().copied().collect::<Vec<_>>(), [2, 4, 3]);
        let json = serde_json::to_string(&map).unwrap();
        assert_eq!(json, r#"{"a":2,"b":4,"c":3}"#);
        let back: SortedMap<i32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, map);
        let collected: SortedMap<i32> = [("z".to_string(), 1), ("y".to_string(), 2)]
            .into_iter()
            .collect();
        assert_eq!(collected.keys().collect::<Vec<_>>(), ["y", "z"]);
        assert_eq!(format!("{collected:?}"), r#"{"y": 2, "z": 1}"#);
    }
}
