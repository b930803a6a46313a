//! Hostile snapshot archives: bounded-time property runs over damaged and
//! random archives. Reading never panics, and a damaged archive is either
//! refused or (when the damage missed everything checked, as in gzip's
//! header timestamp) read exactly as the original.

use legate_state::archive::{read_archive, write_archive};
use legate_state::SnapshotData;
use proptest::prelude::*;

fn archive() -> Vec<u8> {
    write_archive(&SnapshotData::default(), 42, 3).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn damaged_archives_are_refused_or_read_unchanged(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        tail in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let original = archive();
        let mut bytes = original.clone();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= value | 1;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        bytes.extend_from_slice(&tail);
        if let Ok((meta, _)) = read_archive(&bytes) {
            let (want, _) = read_archive(&original).unwrap();
            prop_assert_eq!(meta.index, want.index);
            prop_assert_eq!(meta.size, want.size);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = read_archive(&bytes);
        // And the same behind a valid gzip header.
        let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        gz.extend_from_slice(&bytes);
        let _ = read_archive(&gz);
    }
}
