//! The JSON answer to a read of one key (`[entry]`), encoded once per
//! entry and worker thread: the thousands of blocking reads of one key
//! that a write wakes get the bytes the first of them encoded on their
//! thread, rather than each encoding (and base64-ing) the same entry.
//! The whole entry and `?pretty` are compared before an answer is
//! shared, so a different entry never gets another's bytes.

use std::cell::RefCell;

use bytes::Bytes;
use legate_types::KvEntry;

use crate::util::encode_json;

/// The largest value whose answer a thread keeps: the kept entry holds
/// the value (shared with the store, so kept alive past its overwrite)
/// and its encoding, and a larger value is cheaper to encode again than
/// to hold per thread.
const KEPT_VALUE_MAX: usize = 4096;

/// An encoded entry and the `?pretty` it was encoded for.
struct Kept {
    entry: KvEntry,
    pretty: bool,
    body: Bytes,
}

thread_local! {
    /// The last single-key answer this thread encoded.
    static LAST: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// `[entry]` as the JSON body of a single-key read.
pub(crate) fn entry_body(entry: KvEntry, pretty: bool) -> serde_json::Result<Bytes> {
    if entry.value.len() > KEPT_VALUE_MAX {
        return encode_json(&[entry], pretty).map(Bytes::from);
    }
    LAST.with_borrow_mut(|last| {
        if let Some(kept) = last {
            if kept.pretty == pretty && kept.entry == entry {
                return Ok(kept.body.clone());
            }
        }
        let body = Bytes::from(encode_json(&[&entry], pretty)?);
        *last = Some(Kept {
            entry,
            pretty,
            body: body.clone(),
        });
        Ok(body)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(modify_index: u64, value: &'static [u8]) -> KvEntry {
        KvEntry {
            key: "watched".into(),
            value: Bytes::from_static(value),
            create_index: 3,
            modify_index,
            ..Default::default()
        }
    }

    fn direct(entry: &KvEntry, pretty: bool) -> Bytes {
        Bytes::from(encode_json(&[entry], pretty).unwrap())
    }

    #[test]
    fn the_same_entry_shares_one_encoding() {
        let first = entry_body(entry(7, b"v1"), false).unwrap();
        let second = entry_body(entry(7, b"v1"), false).unwrap();
        assert_eq!(first, direct(&entry(7, b"v1"), false));
        assert_eq!(first.as_ptr(), second.as_ptr(), "encoded once");
    }

    #[test]
    fn any_difference_in_the_entry_or_pretty_encodes_anew() {
        let base = entry(7, b"v1");
        assert_eq!(
            entry_body(base.clone(), false).unwrap(),
            direct(&base, false)
        );
        let mut variants = vec![
            entry(8, b"v1"),
            entry(7, b"v2"),
            KvEntry {
                flags: 42,
                ..base.clone()
            },
            KvEntry {
                lock_index: 1,
                session: "b6e0ab55-7c23-4d49-a3d8-a2b0c7a1b2c3".into(),
                ..base.clone()
            },
            KvEntry {
                key: "watched2".into(),
                ..base.clone()
            },
        ];
        for variant in variants.drain(..) {
            // Each after the base, so a stale answer would be the base's.
            assert_eq!(
                entry_body(base.clone(), false).unwrap(),
                direct(&base, false)
            );
            assert_eq!(
                entry_body(variant.clone(), false).unwrap(),
                direct(&variant, false),
                "{variant:?}"
            );
        }
        assert_eq!(
            entry_body(base.clone(), false).unwrap(),
            direct(&base, false)
        );
        let pretty = entry_body(base.clone(), true).unwrap();
        assert_eq!(pretty, direct(&base, true));
        assert!(pretty.ends_with(b"\n"));
    }

    #[test]
    fn a_large_value_is_encoded_whole_and_not_kept() {
        static LARGE: [u8; KEPT_VALUE_MAX + 1] = [b'x'; KEPT_VALUE_MAX + 1];
        let large = entry(9, &LARGE);
        let first = entry_body(large.clone(), false).unwrap();
        assert_eq!(first, direct(&large, false));
        let second = entry_body(large, false).unwrap();
        assert_ne!(first.as_ptr(), second.as_ptr());
    }
}
