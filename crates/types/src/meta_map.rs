//! Free-form string metadata (`Meta`, `NodeMeta`) as stored: a map from keys to
//! values, sorted by key like the `BTreeMap` it replaces, with the same
//! JSON (an object, keys in order) and the same methods the code uses.
//!
//! It lives in one vector: a `BTreeMap` allocates a node of eleven slots
//! (over 500 bytes) for the two or three pairs a service carries, and the
//! catalog holds one per service instance and per node.

use std::borrow::Borrow;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// String metadata, sorted by key.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Meta {
    entries: Vec<(String, String)>,
}

impl Meta {
    /// An empty map.
    pub const fn new() -> Meta {
        Meta {
            entries: Vec::new(),
        }
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        String: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// Sets `key` to `value`, returning the value it had.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.find(key.as_str()) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&String>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    /// The value of `key`, to change.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut String>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    /// Whether `key` is set.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        String: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Removes `key`, returning its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<String>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// How many keys are set.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Keeps the pairs `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut String) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    /// The pairs, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The values, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }
}

/// The pairs of a [`Meta`], in key order.
#[derive(Clone)]
pub struct Iter<'a>(std::slice::Iter<'a, (String, String)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a String);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Meta {
    type Item = (&'a String, &'a String);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Meta {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl Meta {
    /// The map of `pairs` in any order, a repeated key keeping its last
    /// value (as a `BTreeMap` built from them would): sorted once, so a
    /// large unsorted input costs `n log n`, not a shift per insert.
    fn from_pairs(mut pairs: Vec<(String, String)>) -> Meta {
        if !pairs.is_sorted_by(|(a, _), (b, _)| a < b) {
            // Stable: among equal keys the later pair stays later.
            pairs.sort_by(|(a, _), (b, _)| a.cmp(b));
            pairs.reverse();
            pairs.dedup_by(|later, earlier| later.0 == earlier.0);
            pairs.reverse();
        }
        pairs.shrink_to_fit();
        Meta { entries: pairs }
    }
}

impl Extend<(String, String)> for Meta {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, pairs: I) {
        let mut all = std::mem::take(&mut self.entries);
        all.extend(pairs);
        *self = Meta::from_pairs(all);
    }
}

impl FromIterator<(String, String)> for Meta {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Meta {
        Meta::from_pairs(pairs.into_iter().collect())
    }
}

impl<const N: usize> From<[(String, String); N]> for Meta {
    fn from(pairs: [(String, String); N]) -> Meta {
        pairs.into_iter().collect()
    }
}

impl From<std::collections::BTreeMap<String, String>> for Meta {
    fn from(map: std::collections::BTreeMap<String, String>) -> Meta {
        Meta {
            entries: map.into_iter().collect(),
        }
    }
}

impl From<Meta> for std::collections::BTreeMap<String, String> {
    fn from(meta: Meta) -> Self {
        meta.entries.into_iter().collect()
    }
}

impl<Q: Ord + ?Sized> std::ops::Index<&Q> for Meta
where
    String: Borrow<Q>,
{
    type Output = String;

    fn index(&self, key: &Q) -> &String {
        self.get(key).expect("no entry found for key")
    }
}

impl fmt::Debug for Meta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Meta, D::Error> {
        struct MetaVisitor;

        impl<'de> Visitor<'de> for MetaVisitor {
            type Value = Meta;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Meta, A::Error> {
                let mut pairs = Vec::with_capacity(access.size_hint().unwrap_or(0).min(64));
                while let Some(pair) = access.next_entry::<String, String>()? {
                    pairs.push(pair);
                }
                // A repeated key keeps its last value, as a BTreeMap did.
                Ok(Meta::from_pairs(pairs))
            }
        }

        deserializer.deserialize_map(MetaVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Random operations agree with a BTreeMap, and so does the JSON.
    #[test]
    fn behaves_like_a_btreemap() {
        let mut meta = Meta::new();
        let mut model = BTreeMap::new();
        let mut seed: u64 = 11;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..10_000 {
            let key = format!("k{}", next() % 30);
            match next() % 4 {
                0 => assert_eq!(meta.remove(key.as_str()), model.remove(&key)),
                _ => {
                    let value = format!("v{}", next() % 5);
                    assert_eq!(
                        meta.insert(key.clone(), value.clone()),
                        model.insert(key, value)
                    );
                }
            }
            assert!(meta.iter().eq(model.iter()));
            assert_eq!(meta.len(), model.len());
        }
        assert_eq!(
            serde_json::to_string(&meta).unwrap(),
            serde_json::to_string(&model).unwrap()
        );
        let json = r#"{"b":"1","a":"2","b":"3"}"#;
        let parsed: Meta = serde_json::from_str(json).unwrap();
        let expected: BTreeMap<String, String> = serde_json::from_str(json).unwrap();
        assert!(parsed.iter().eq(expected.iter()));
        assert!(serde_json::from_str::<Meta>(r#"{"a":1}"#).is_err());
    }

    /// Building from pairs in any order, with repeats, gives the BTreeMap
    /// the same pairs give; a large input in reverse order stays fast.
    #[test]
    fn building_from_pairs_matches_a_btreemap_and_scales() {
        let mut seed: u64 = 5;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let pairs: Vec<(String, String)> = (0..next() % 40)
                .map(|_| (format!("k{}", next() % 15), format!("v{}", next() % 9)))
                .collect();
            let model: BTreeMap<String, String> = pairs.iter().cloned().collect();
            let built: Meta = pairs.iter().cloned().collect();
            assert!(built.iter().eq(model.iter()));
            let mut extended = Meta::from([("k3".to_string(), "old".to_string())]);
            extended.extend(pairs.iter().cloned());
            let mut expected = BTreeMap::from([("k3".to_string(), "old".to_string())]);
            expected.extend(pairs.iter().cloned());
            assert!(extended.iter().eq(expected.iter()));
        }
        let descending: serde_json::Map<String, serde_json::Value> = (0..200_000)
            .rev()
            .map(|i| (format!("key-{i:07}"), serde_json::Value::from("v")))
            .collect();
        // Inserted one by one, each pair shifted the whole vector: this
        // input took minutes (the suite's timeout ends it).
        let meta: Meta = serde_json::from_value(serde_json::Value::Object(descending)).unwrap();
        assert_eq!(meta.len(), 200_000);
        assert!(meta.keys().is_sorted());
    }
}
