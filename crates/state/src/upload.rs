//! A snapshot archive restored in pieces: `RestorePiece` commands stage
//! its bytes in order, `RestoreCommit` takes them whole. The staged bytes
//! are replicated state (part of snapshots), never local.

use legate_types::rpc::SnapshotArchive;

use crate::Tables;

/// The archive staged so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct RestoreUpload {
    pub(crate) id: String,
    pub(crate) bytes: Vec<u8>,
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
                bytes: data.to_vec(),
            });
            return Ok(());
        }
        match &mut self.restore_upload {
            Some(upload) if upload.id == id && upload.bytes.len() as u64 == offset => {
                if upload.bytes.len() + data.len() > SnapshotArchive::MAX_RESTORE_BYTES {
                    self.restore_upload = None;
                    return Err(format!(
                        "snapshot upload {id} is larger than {} bytes",
                        SnapshotArchive::MAX_RESTORE_BYTES
                    ));
                }
                upload.bytes.extend_from_slice(data);
                Ok(())
            }
            _ => Err(format!(
                "snapshot upload {id}: the piece at offset {offset} does not continue it \
                 (another restore started meanwhile?)"
            )),
        }
    }

    /// Takes the staged upload `id` once it holds exactly `length` bytes.
    pub(crate) fn take_restore_upload(&mut self, id: &str, length: u64) -> Result<Vec<u8>, String> {
        match self.restore_upload.take() {
            Some(upload) if upload.id == id && upload.bytes.len() as u64 == length => {
                Ok(upload.bytes)
            }
            other => {
                let held = other.as_ref().map(|u| (u.id.clone(), u.bytes.len()));
                self.restore_upload = other;
                Err(format!(
                    "snapshot upload {id} is not complete ({length} bytes expected, staged: {held:?})"
                ))
            }
        }
    }

    /// The staged upload as snapshots hold it.
    pub(crate) fn restore_upload_row(&self) -> Option<(String, SnapshotArchive)> {
        self.restore_upload
            .as_ref()
            .map(|u| (u.id.clone(), SnapshotArchive(u.bytes.clone())))
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
        assert_eq!(
            (staged.id.as_str(), &staged.bytes[..]),
            ("a", &b"abcde"[..])
        );
        let commit = |id: &str, length| Command::RestoreCommit {
            id: id.into(),
            length,
        };
        assert!(failed(copy.apply(5, &commit("a", 4))), "wrong length");
        assert!(copy.read().restore_upload.is_some(), "kept after a refusal");
        // The right commit takes the bytes, which are not an archive here.
        assert!(failed(copy.apply(6, &commit("a", 5))));
        assert!(copy.read().restore_upload.is_none());
    }
}
