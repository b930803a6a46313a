//! Strings the catalog's rows share: service names, tags and metadata keys
//! repeat across thousands of instances, so each distinct text is held
//! once and every row points at it.

use std::collections::HashSet;
use std::sync::Arc;

/// A shared, immutable text held by rows.
pub(crate) type Name = Arc<str>;

/// The distinct texts the rows hold. A text leaves with the last row that
/// holds it ([`Interner::release`]). (A copy of the tables shares the texts,
/// so a text released while a copy lives stays until the interner goes.)
#[derive(Debug, Default, Clone)]
pub(crate) struct Interner {
    names: HashSet<Name>,
}

impl Interner {
    /// The shared copy of `text`, made on first use.
    pub(crate) fn get(&mut self, text: &str) -> Name {
        if let Some(name) = self.names.get(text) {
            return name.clone();
        }
        let name: Name = Arc::from(text);
        self.names.insert(name.clone());
        name
    }

    /// Called with the one copy of `name` a dropped row left: forgets the
    /// text when nothing else holds it.
    pub(crate) fn release(&mut self, name: &Name) {
        // The interner's copy, the caller's, and nothing else.
        if Arc::strong_count(name) == 2 {
            self.names.remove(name);
        }
    }

    /// [`Interner::release`] for every text of a dropped row, `held` being
    /// the row's copies: a text the row held twice counts as one holder.
    pub(crate) fn release_all(&mut self, mut held: Vec<Name>) {
        held.sort_by_key(|name| Arc::as_ptr(name) as *const u8 as usize);
        held.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for name in &held {
            self.release(name);
        }
    }

    /// How many distinct texts are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_text_until_its_last_holder_releases_it() {
        let mut names = Interner::default();
        let a = names.get("web");
        let b = names.get("web");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(names.len(), 1);
        names.release(&a);
        drop(a);
        assert_eq!(names.len(), 1, "b still holds it");
        names.release(&b);
        drop(b);
        assert_eq!(names.len(), 0);
    }
}
