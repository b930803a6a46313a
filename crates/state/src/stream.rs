//! The stored form of a copy of the tables (Raft snapshots on disk and
//! between servers, `state.bin` in archives): a versioned stream of
//! records, written and read one record at a time so neither side ever
//! holds an encoded copy of the whole state.
//!
//! Layout: the 8-byte magic `LEGATEST`, the format version (u32,
//! little-endian), then records of `kind (u8) | length (u32 LE) | body`
//! (the body in [`legate_types::binary`]), ended by a record of kind 0
//! whose body is the number of records before it (u64 LE), so a truncated
//! stream is refused. Record kinds are append-only and never reused.
//!
//! Version 0 is the JSON form earlier Legate wrote (a single object,
//! base64 values); it is still read, so a newer server takes a snapshot
//! from an older leader or its own older data dir.

use std::io::{BufRead, Read, Write};

use legate_types::binary;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::SnapshotData;

/// The magic that starts a binary stream.
pub const MAGIC: &[u8; 8] = b"LEGATEST";

/// The stream format version this build writes (it also reads 0, JSON).
pub const STREAM_VERSION: u32 = 1;

/// The largest record a stream may hold (a registration with thousands
/// of upstreams is well under a MiB; a KV value at most 512 KiB).
pub const MAX_RECORD_BYTES: u32 = 64 << 20;

/// Why a stream could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a snapshot stream, or a damaged one.
    #[error("the snapshot is damaged: {0}")]
    Damaged(String),
    /// Written by a newer Legate.
    #[error(
        "the snapshot has format version {0}; this Legate reads versions 0 to {STREAM_VERSION}"
    )]
    Version(u32),
}

/// The kinds of record; numbers are append-only.
mod kind {
    pub const END: u8 = 0;
    pub const NODE: u8 = 1;
    pub const SERVICE: u8 = 2;
    pub const CHECK: u8 = 3;
    pub const KV: u8 = 4;
    pub const TOMBSTONE: u8 = 5;
    pub const SESSION: u8 = 6;
    pub const CONFIG_ENTRY: u8 = 7;
    pub const SYSTEM_METADATA: u8 = 8;
    pub const CA_ROOT: u8 = 9;
    pub const CA_CONFIG: u8 = 10;
    pub const TABLE_INDEX: u8 = 11;
    pub const SERVICE_INDEX: u8 = 12;
    pub const KV_REAPED_INDEX: u8 = 13;
    pub const RESTORE_UPLOAD: u8 = 14;
    pub const COORDINATE: u8 = 15;
    pub const FEDERATION_STATE: u8 = 16;
    pub const ACL_TOKEN: u8 = 17;
    pub const ACL_POLICY: u8 = 18;
    pub const ACL_ROLE: u8 = 19;
    pub const PREPARED_QUERY: u8 = 20;
    pub const ACL_AUTH_METHOD: u8 = 21;
    pub const ACL_BINDING_RULE: u8 = 22;
}

/// Bytes that serialize as a byte string (raw in the binary encoding).
struct BytesView<'a>(&'a [u8]);

impl Serialize for BytesView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        legate_types::binary::bytes_value::serialize(self.0, s)
    }
}

struct RecordWriter<W> {
    out: W,
    body: Vec<u8>,
    records: u64,
    written: u64,
}

impl<W: Write> RecordWriter<W> {
    fn record<T: Serialize + ?Sized>(&mut self, kind: u8, value: &T) -> Result<(), StreamError> {
        self.body.clear();
        binary::encode_into(&mut self.body, value)
            .map_err(|e| StreamError::Damaged(e.to_string()))?;
        let length = u32::try_from(self.body.len())
            .ok()
            .filter(|l| *l <= MAX_RECORD_BYTES)
            .ok_or_else(|| {
                StreamError::Damaged(format!(
                    "a record of {} bytes is larger than {MAX_RECORD_BYTES}",
                    self.body.len()
                ))
            })?;
        self.out.write_all(&[kind])?;
        self.out.write_all(&length.to_le_bytes())?;
        self.out.write_all(&self.body)?;
        self.records += 1;
        self.written += 5 + self.body.len() as u64;
        Ok(())
    }

    fn all<T: Serialize>(&mut self, kind: u8, rows: &[T]) -> Result<(), StreamError> {
        rows.iter().try_for_each(|row| self.record(kind, row))
    }
}

impl SnapshotData {
    /// Writes the copy as a binary stream; returns the bytes written.
    pub fn write_to<W: Write>(&self, out: W) -> Result<u64, StreamError> {
        self.write_stream(out, true)
    }

    /// The stream an archive holds: everything but a staged upload.
    pub fn to_archive_stream_bytes(&self) -> Result<Vec<u8>, StreamError> {
        let mut out = Vec::new();
        self.write_stream(&mut out, false)?;
        Ok(out)
    }

    fn write_stream<W: Write>(&self, out: W, with_upload: bool) -> Result<u64, StreamError> {
        let mut w = RecordWriter {
            out,
            body: Vec::new(),
            records: 0,
            written: 12,
        };
        w.out.write_all(MAGIC)?;
        w.out.write_all(&STREAM_VERSION.to_le_bytes())?;
        w.all(kind::NODE, &self.nodes)?;
        w.all(kind::SERVICE, &self.services)?;
        w.all(kind::CHECK, &self.checks)?;
        w.all(kind::KV, &self.kv)?;
        w.all(kind::TOMBSTONE, &self.kv_tombstones)?;
        w.record(kind::KV_REAPED_INDEX, &self.kv_reaped_index)?;
        w.all(kind::SESSION, &self.sessions)?;
        w.all(kind::CONFIG_ENTRY, &self.config_entries)?;
        w.all(kind::SYSTEM_METADATA, &self.system_metadata)?;
        w.all(kind::CA_ROOT, &self.ca_roots)?;
        if let Some(config) = &self.ca_config {
            w.record(kind::CA_CONFIG, config)?;
        }
        w.all(kind::TABLE_INDEX, &self.table_index)?;
        w.all(kind::SERVICE_INDEX, &self.service_index)?;
        // Written only by servers that all know the kind (coordinates
        // exist once every server advertises the feature).
        w.all(kind::COORDINATE, &self.coordinates)?;
        // Likewise: states exist once every server advertises `fs`.
        w.all(kind::FEDERATION_STATE, &self.federation_states)?;
        // Likewise: ACL rows exist once every server advertises `acl`.
        w.all(kind::ACL_TOKEN, &self.acl_tokens)?;
        w.all(kind::ACL_POLICY, &self.acl_policies)?;
        w.all(kind::ACL_ROLE, &self.acl_roles)?;
        // Likewise: queries exist once every server advertises `pq`.
        w.all(kind::PREPARED_QUERY, &self.prepared_queries)?;
        // Likewise: auth methods and rules exist once every server
        // advertises `am`.
        w.all(kind::ACL_AUTH_METHOD, &self.acl_auth_methods)?;
        w.all(kind::ACL_BINDING_RULE, &self.acl_binding_rules)?;
        if let Some(upload) = self.restore_upload.as_ref().filter(|_| with_upload) {
            // In pieces, as it was logged: one record stays small.
            let mut offset = 0u64;
            for piece in &upload.pieces {
                w.record(
                    kind::RESTORE_UPLOAD,
                    &(&upload.id, offset, BytesView(piece)),
                )?;
                offset += piece.len() as u64;
            }
        }
        w.out.write_all(&[kind::END])?;
        w.out.write_all(&8u32.to_le_bytes())?;
        w.out.write_all(&w.records.to_le_bytes())?;
        w.out.flush()?;
        Ok(w.written + 13)
    }

    /// The binary stream as one buffer (small states and tests).
    pub fn to_stream_bytes(&self) -> Result<Vec<u8>, StreamError> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Reads a stream of either version, one record at a time.
    pub fn read_from<R: Read>(input: R) -> Result<SnapshotData, StreamError> {
        let mut input = std::io::BufReader::with_capacity(1 << 16, input);
        let first = input.fill_buf()?.first().copied();
        match first {
            None => Err(StreamError::Damaged("the snapshot is empty".into())),
            Some(b'{' | b' ' | b'\n' | b'\t' | b'\r') => serde_json::from_reader(input)
                .map_err(|e| StreamError::Damaged(format!("version 0 (JSON): {e}"))),
            Some(_) => read_binary(input),
        }
    }
}

fn read_binary<R: BufRead>(mut input: R) -> Result<SnapshotData, StreamError> {
    let mut header = [0u8; 12];
    input
        .read_exact(&mut header)
        .map_err(|_| StreamError::Damaged("shorter than its header".into()))?;
    if &header[..8] != MAGIC {
        return Err(StreamError::Damaged("not a Legate snapshot".into()));
    }
    let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if version != STREAM_VERSION {
        return Err(StreamError::Version(version));
    }
    let mut data = SnapshotData::default();
    let mut body = Vec::new();
    let mut records = 0u64;
    loop {
        let mut head = [0u8; 5];
        input
            .read_exact(&mut head)
            .map_err(|_| StreamError::Damaged(format!("cut off after {records} records")))?;
        let length = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        if length > MAX_RECORD_BYTES {
            return Err(StreamError::Damaged(format!(
                "record {records} claims {length} bytes, more than {MAX_RECORD_BYTES}"
            )));
        }
        body.clear();
        let read = (&mut input)
            .take(u64::from(length))
            .read_to_end(&mut body)?;
        if read != length as usize {
            return Err(StreamError::Damaged(format!(
                "cut off inside record {records}"
            )));
        }
        let kind = head[0];
        if kind == kind::END {
            let count: [u8; 8] = body
                .as_slice()
                .try_into()
                .map_err(|_| StreamError::Damaged("a malformed end record".into()))?;
            if u64::from_le_bytes(count) != records {
                return Err(StreamError::Damaged(format!(
                    "the end record counts {} records, the stream held {records}",
                    u64::from_le_bytes(count)
                )));
            }
            let mut rest = [0u8; 1];
            if input.read(&mut rest)? != 0 {
                return Err(StreamError::Damaged("bytes after the end record".into()));
            }
            return Ok(data);
        }
        add_record(&mut data, kind, &body, records)?;
        records += 1;
    }
}

fn add_record(
    data: &mut SnapshotData,
    kind: u8,
    body: &[u8],
    position: u64,
) -> Result<(), StreamError> {
    fn row<T: DeserializeOwned>(body: &[u8], position: u64) -> Result<T, StreamError> {
        binary::decode(body).map_err(|e| StreamError::Damaged(format!("record {position}: {e}")))
    }
    match kind {
        kind::NODE => data.nodes.push(row(body, position)?),
        kind::SERVICE => data.services.push(row(body, position)?),
        kind::CHECK => data.checks.push(row(body, position)?),
        kind::KV => data.kv.push(row(body, position)?),
        kind::TOMBSTONE => data.kv_tombstones.push(row(body, position)?),
        kind::KV_REAPED_INDEX => data.kv_reaped_index = row(body, position)?,
        kind::SESSION => data.sessions.push(row(body, position)?),
        kind::CONFIG_ENTRY => data.config_entries.push(row(body, position)?),
        kind::SYSTEM_METADATA => data.system_metadata.push(row(body, position)?),
        kind::CA_ROOT => data.ca_roots.push(row(body, position)?),
        kind::CA_CONFIG => data.ca_config = Some(row(body, position)?),
        kind::TABLE_INDEX => data.table_index.push(row(body, position)?),
        kind::SERVICE_INDEX => data.service_index.push(row(body, position)?),
        kind::COORDINATE => data.coordinates.push(row(body, position)?),
        kind::FEDERATION_STATE => data.federation_states.push(row(body, position)?),
        kind::ACL_TOKEN => data.acl_tokens.push(row(body, position)?),
        kind::ACL_POLICY => data.acl_policies.push(row(body, position)?),
        kind::ACL_ROLE => data.acl_roles.push(row(body, position)?),
        kind::PREPARED_QUERY => data.prepared_queries.push(row(body, position)?),
        kind::ACL_AUTH_METHOD => data.acl_auth_methods.push(row(body, position)?),
        kind::ACL_BINDING_RULE => data.acl_binding_rules.push(row(body, position)?),
        kind::RESTORE_UPLOAD => {
            let (id, offset, piece): (String, u64, legate_types::rpc::SnapshotArchive) =
                row(body, position)?;
            let upload = data
                .restore_upload
                .get_or_insert_with(|| crate::upload::RestoreUpload {
                    id: id.clone(),
                    ..Default::default()
                });
            if upload.id != id || upload.length != offset {
                return Err(StreamError::Damaged(format!(
                    "record {position}: a restore upload piece out of order"
                )));
            }
            upload.length += piece.0.len() as u64;
            upload.pieces.push(piece.0.into());
        }
        other => {
            return Err(StreamError::Damaged(format!(
                "record {position} is of kind {other}, which this Legate does not know \
                 (written by a newer version?)"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, StateStore};
    use legate_types::KvOp;

    fn store_with_rows() -> StateStore {
        let store = StateStore::new();
        store.apply(
            3,
            &Command::Kv(KvOp::set("bytes", vec![0u8, 159, 146, 150, 255])),
        );
        store.apply(4, &Command::Kv(KvOp::set("empty", Vec::new())));
        store
    }

    fn json(data: &SnapshotData) -> serde_json::Value {
        serde_json::to_value(data).unwrap()
    }

    #[test]
    fn values_are_stored_as_raw_bytes_and_read_back_unchanged() {
        let data = store_with_rows().snapshot_data();
        let bytes = data.to_stream_bytes().unwrap();
        assert_eq!(&bytes[..8], MAGIC);
        assert!(bytes
            .windows(7)
            .any(|w| w == [0xc4, 5, 0, 159, 146, 150, 255]));
        assert_eq!(
            json(&SnapshotData::read_from(&bytes[..]).unwrap()),
            json(&data)
        );
    }

    #[test]
    fn the_json_form_of_earlier_versions_is_still_read() {
        let data = store_with_rows().snapshot_data();
        let legacy = serde_json::to_vec(&data).unwrap();
        assert_eq!(
            json(&SnapshotData::read_from(&legacy[..]).unwrap()),
            json(&data)
        );
    }

    #[test]
    fn damaged_streams_are_refused_with_a_reason() {
        let bytes = store_with_rows().snapshot_data().to_stream_bytes().unwrap();
        let error = |input: &[u8]| SnapshotData::read_from(input).unwrap_err().to_string();
        assert!(error(&[]).contains("empty"));
        assert!(error(b"LEGATE").contains("header"));
        assert!(error(b"NOTLEGATE-------").contains("not a Legate snapshot"));
        for cut in [12, 20, bytes.len() - 3] {
            assert!(error(&bytes[..cut]).contains("cut off"), "{cut}");
        }
        let mut newer = bytes.clone();
        newer[8] = 9;
        assert!(error(&newer).contains("format version 9"));
        let mut unknown = bytes.clone();
        unknown[12] = 200;
        assert!(error(&unknown).contains("kind 200"));
        let mut huge = bytes[..12].to_vec();
        huge.extend_from_slice(&[kind::KV, 0xff, 0xff, 0xff, 0xff]);
        assert!(error(&huge).contains("more than"));
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(error(&trailing).contains("after the end"));
        // An end record that counts differently from what came before.
        let mut miscounted = bytes.clone();
        let at = miscounted.len() - 8;
        miscounted[at] ^= 1;
        assert!(error(&miscounted).contains("counts"));
    }
}
