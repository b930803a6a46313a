//! A snapshot archive restored in pieces: `RestorePiece` commands stage
//! its bytes in order, `RestoreCommit` ends the upload (restoring it when
//! complete, discarding it otherwise). The staged pieces are replicated
//! state, part of Raft snapshots (shared, not copied) but never of
//! archives, and a restore clears them.

use bytes::Bytes;
use legate_types::rpc::SnapshotArchive;

use crate::Tables;

/// The archive staged so far.
#[derive(Debug, Clone, Default)]
pub struct RestoreUpload {
    /// The upload.
    pub id: String,
    /// Its pieces in order.
    pub pieces: Vec<Bytes>,
    /// Their total length.
    pub length: u64,
}

impl Tables {
    /// Stages one piece: offset 0 starts upload `id` afresh; any other
    /// piece must continue the current upload exactly where it ends.
    pub(crate) fn stage_restore_piece(
        &mut self,
        id: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<(), String> {
        if offset == 0 {
            self.restore_upload = Some(RestoreUpload {
                id: id.to_string(),
                pieces: vec![Bytes::copy_from_slice(data)],
                length: data.len() as u64,
            });
            return Ok(());
        }
        match &mut self.restore_upload {
            Some(upload) if upload.id == id && upload.length == offset => {
                let length = upload.length + data.len() as u64;
                if length > SnapshotArchive::MAX_RESTORE_BYTES as u64 {
                    self.restore_upload = None;
                    return Err(format!(
                        "snapshot upload {id} is larger than {} bytes",
                        SnapshotArchive::MAX_RESTORE_BYTES
                    ));
                }
                upload.pieces.push(Bytes::copy_from_slice(data));
                upload.length = length;
                Ok(())
            }
            _ => Err(format!(
                "snapshot upload {id}: the piece at offset {offset} does not continue it \
                 (another restore started meanwhile?)"
            )),
        }
    }

    /// Ends upload `id`: its archive when it holds exactly `length` bytes;
    /// an error otherwise (an upload of that id is discarded either way,
    /// so a restore that failed part way frees what it staged).
    pub(crate) fn take_restore_upload(&mut self, id: &str, length: u64) -> Result<Vec<u8>, String> {
        match self.restore_upload.take() {
            Some(upload) if upload.id == id && upload.length == length => {
                Ok(upload.pieces.concat())
            }
            Some(upload) if upload.id == id => Err(format!(
                "snapshot upload {id} is not complete ({length} bytes expected, {} staged); discarded",
                upload.length
            )),
            other => {
                self.restore_upload = other;
                Err(format!("snapshot upload {id} is not staged"))
            }
        }
    }

    /// The staged upload's length (for the size of the live state).
    pub(crate) fn restore_upload_bytes(&self) -> u64 {
        self.restore_upload.as_ref().map_or(0, |u| u.length)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Command, StateStore};
    use legate_types::rpc::SnapshotArchive;

    fn piece(id: &str, offset: u64, data: &[u8]) -> Command {
        Command::RestorePiece {
            id: id.into(),
            offset,
            data: SnapshotArchive(data.to_vec()),
        }
    }

    #[test]
    fn pieces_must_come_in_order_and_survive_a_snapshot() {
        let store = StateStore::new();
        let failed = |r: crate::CommandResult| matches!(r, crate::CommandResult::Failed(_));
        assert!(!failed(store.apply(1, &piece("a", 0, b"abc"))));
        assert!(failed(store.apply(2, &piece("a", 5, b"x"))), "a gap");
        assert!(
            failed(store.apply(3, &piece("b", 3, b"x"))),
            "another upload"
        );
        assert!(!failed(store.apply(4, &piece("a", 3, b"de"))));
        // A server that installs a snapshot now has the staged bytes.
        let copy = StateStore::new();
        copy.restore(&store.snapshot().unwrap()).unwrap();
        let staged = copy.read().restore_upload.clone().unwrap();
        assert_eq!((staged.id.as_str(), staged.length), ("a", 5));
        assert_eq!(staged.pieces.concat(), b"abcde");
        // ... but an archive never carries it.
        let archive = crate::archive::write_archive(&store.snapshot_data(), 4, 1).unwrap();
        let (_, data) = crate::archive::read_archive(&archive).unwrap();
        assert!(data.restore_upload.is_none());
        let commit = |id: &str, length| Command::RestoreCommit {
            id: id.into(),
            length,
        };
        assert!(failed(copy.apply(5, &commit("other", 5))), "not staged");
        assert!(copy.read().restore_upload.is_some(), "another id keeps it");
        // A wrong length ends the upload too: a failed restore frees it.
        assert!(failed(copy.apply(6, &commit("a", 4))));
        assert!(copy.read().restore_upload.is_none());
        // The right length takes the bytes (not an archive here: refused).
        assert!(!failed(store.apply(7, &commit("a", 5))) || store.read().restore_upload.is_none());
        assert!(store.read().restore_upload.is_none());
    }
}
