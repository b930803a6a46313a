//! Snapshot archives (`legate snapshot save|restore|inspect`,
//! `/v1/snapshot`): a gzipped tar holding `meta.json` (Consul's snapshot
//! metadata shape), `state.bin` (the tables in their stored form,
//! [`crate::stream`], as Raft snapshots hold them) and `SHA256SUMS` over
//! both, laid out as Consul's archives are. Version 1 archives, with the
//! JSON `state.json`, are still read. Reading checks every sum, the
//! version and the size before decoding anything, and never inflates more
//! than [`inflation_limit`] allows.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::SnapshotData;

/// The archive format version this build writes (it reads 1 as well).
pub const ARCHIVE_VERSION: u32 = 2;

/// The state file of any archive may inflate to 1 GiB ...
pub const MAX_STATE_BYTES: u64 = 1 << 30;

/// ... and a larger archive's to this many times its compressed size:
/// real state compresses far less (values are often already compressed),
/// while a decompression bomb inflates about a thousand times.
pub const MAX_INFLATION: u64 = 64;

/// ... but never past this (every server inflates a restore).
pub const MAX_INFLATED_BYTES: u64 = 16 << 30;

/// How far the state file of an archive of `compressed` bytes may inflate.
pub fn inflation_limit(compressed: usize) -> u64 {
    MAX_STATE_BYTES
        .max((compressed as u64).saturating_mul(MAX_INFLATION))
        .min(MAX_INFLATED_BYTES)
}

const META: &str = "meta.json";
const STATE: &str = "state.bin";
const STATE_V1: &str = "state.json";
const SUMS: &str = "SHA256SUMS";

/// `meta.json`: what the snapshot is (Consul's fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SnapshotMeta {
    /// `<term>-<index>-<unix ms>`.
    #[serde(rename = "ID")]
    pub id: String,
    /// Bytes of `state.bin`.
    pub size: u64,
    /// The Raft index the state was taken at.
    pub index: u64,
    /// The Raft term of that index.
    pub term: u64,
    /// The archive format version.
    pub version: u32,
}

/// Why an archive could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Not a gzipped tar, or a damaged one.
    #[error("the snapshot is not a valid archive: {0}")]
    Format(String),
    /// A file is missing or its checksum differs.
    #[error("the snapshot failed verification: {0}")]
    Verification(String),
    /// Written by a newer Legate.
    #[error("the snapshot has version {0}; this Legate reads versions 1 to {ARCHIVE_VERSION}")]
    Version(u32),
    /// Encoding failed.
    #[error("the snapshot could not be encoded: {0}")]
    Encode(String),
}

/// Writes `data`, taken at `index` in `term`, as an archive.
pub fn write_archive(data: &SnapshotData, index: u64, term: u64) -> Result<Vec<u8>, ArchiveError> {
    let state = data
        .to_archive_stream_bytes()
        .map_err(|e| ArchiveError::Encode(e.to_string()))?;
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let meta = SnapshotMeta {
        id: format!("{term}-{index}-{millis}"),
        size: state.len() as u64,
        index,
        term,
        version: ARCHIVE_VERSION,
    };
    let meta = serde_json::to_vec_pretty(&meta).map_err(|e| ArchiveError::Encode(e.to_string()))?;
    let sums = format!(
        "{}  {META}\n{}  {STATE}\n",
        sha256_hex(&meta),
        sha256_hex(&state)
    );
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(encoder);
    for (name, bytes) in [
        (META, &meta[..]),
        (STATE, &state[..]),
        (SUMS, sums.as_bytes()),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_mtime((millis / 1000) as u64);
        header.set_cksum();
        tar.append_data(&mut header, name, bytes)
            .map_err(|e| ArchiveError::Encode(e.to_string()))?;
    }
    let encoder = tar
        .into_inner()
        .map_err(|e| ArchiveError::Encode(e.to_string()))?;
    encoder
        .finish()
        .map_err(|e| ArchiveError::Encode(e.to_string()))
}

/// Reads and verifies an archive. It is read as a stream: entry sizes are
/// checked from the tar headers before anything is inflated, and
/// the state file is decoded while it is inflated and hashed, so a
/// decompression bomb is refused without being inflated and no copy of
/// the inflated state is ever held. Nothing decoded is returned unless
/// every checksum matches.
pub fn read_archive(bytes: &[u8]) -> Result<(SnapshotMeta, SnapshotData), ArchiveError> {
    let format = |e: std::io::Error| ArchiveError::Format(e.to_string());
    // The whole inflated stream is capped too: tar reads some entries
    // (GNU long names, PAX headers) whole before it hands any out.
    let state_limit = inflation_limit(bytes.len());
    let inflated = flate2::read::GzDecoder::new(bytes).take(state_limit + (4 << 20));
    let mut tar = tar::Archive::new(inflated);
    let (mut meta, mut state, mut sums) = (None, None, None);
    for entry in tar.entries().map_err(format)? {
        let entry = entry.map_err(format)?;
        let name = entry.path().map_err(format)?.to_string_lossy().into_owned();
        let limit = if name == STATE || name == STATE_V1 {
            state_limit
        } else {
            1 << 20
        };
        let size = entry.size();
        if size > limit {
            return Err(ArchiveError::Format(format!(
                "{name} is larger than {limit} bytes"
            )));
        }
        match name.as_str() {
            META => meta = Some(small_file(entry, limit)?),
            SUMS => sums = Some(small_file(entry, limit)?),
            STATE | STATE_V1 if state.is_none() => {
                let mut reader = Hashing::new(entry.take(limit));
                let decoded = SnapshotData::read_from(&mut reader);
                // Whatever decoding left (nothing, or all after an error)
                // still counts towards the checksum.
                std::io::copy(&mut reader, &mut std::io::sink()).map_err(format)?;
                let (digest, length) = reader.finish();
                state = Some((name, decoded, digest, length));
            }
            other => {
                return Err(ArchiveError::Format(format!(
                    "unexpected file {other:?} in the archive"
                )))
            }
        }
    }
    let missing = |name: &str| ArchiveError::Verification(format!("{name} is missing"));
    let meta_bytes = meta.ok_or_else(|| missing(META))?;
    let (state_name, decoded, state_digest, state_len) = state.ok_or_else(|| missing(STATE))?;
    let sums = String::from_utf8(sums.ok_or_else(|| missing(SUMS))?)
        .map_err(|_| ArchiveError::Verification(format!("{SUMS} is not text")))?;
    for (name, digest) in [
        (META, sha256_hex(&meta_bytes)),
        (state_name.as_str(), state_digest),
    ] {
        let listed = sums
            .lines()
            .find_map(|line| {
                let (sum, file) = line.split_once("  ")?;
                (file == name).then_some(sum)
            })
            .ok_or_else(|| ArchiveError::Verification(format!("{SUMS} does not list {name}")))?;
        if listed != digest {
            return Err(ArchiveError::Verification(format!(
                "the SHA-256 of {name} does not match {SUMS}"
            )));
        }
    }
    let meta: SnapshotMeta = serde_json::from_slice(&meta_bytes)
        .map_err(|e| ArchiveError::Format(format!("{META}: {e}")))?;
    if !(1..=ARCHIVE_VERSION).contains(&meta.version) {
        return Err(ArchiveError::Version(meta.version));
    }
    if meta.size != state_len {
        return Err(ArchiveError::Verification(format!(
            "{state_name} holds {state_len} bytes, {META} says {}",
            meta.size
        )));
    }
    let mut data = decoded.map_err(|e| ArchiveError::Format(format!("{state_name}: {e}")))?;
    // An archive never carries a staged upload; one in a crafted archive
    // is ignored.
    data.restore_upload = None;
    Ok((meta, data))
}

/// A small archive member, read whole.
fn small_file(entry: impl Read, limit: u64) -> Result<Vec<u8>, ArchiveError> {
    let mut contents = Vec::new();
    entry
        .take(limit)
        .read_to_end(&mut contents)
        .map_err(|e| ArchiveError::Format(e.to_string()))?;
    Ok(contents)
}

/// A reader that hashes (SHA-256) and counts what passes through it.
struct Hashing<R> {
    inner: R,
    digest: ring::digest::Context,
    length: u64,
}

impl<R: Read> Hashing<R> {
    fn new(inner: R) -> Self {
        Hashing {
            inner,
            digest: ring::digest::Context::new(&ring::digest::SHA256),
            length: 0,
        }
    }

    /// The hex SHA-256 and the length of everything read.
    fn finish(self) -> (String, u64) {
        (hex(self.digest.finish().as_ref()), self.length)
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digest.update(&buf[..n]);
        self.length += n as u64;
        Ok(n)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// One line of `snapshot inspect`: a kind of record, how many and how many
/// bytes of `state.bin` they take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSummary {
    /// The kind (`Node`, `KVS`, …, named as Consul's inspect names them).
    pub kind: &'static str,
    /// How many records.
    pub count: usize,
    /// Their encoded size in bytes.
    pub size: usize,
}

impl SnapshotData {
    /// Counts and sizes per kind of record, largest first.
    pub fn summary(&self) -> Vec<RecordSummary> {
        fn line<T: Serialize>(kind: &'static str, rows: &[T]) -> RecordSummary {
            let size = rows
                .iter()
                .map(|r| {
                    legate_types::binary::encode(r)
                        .map(|v| v.len())
                        .unwrap_or(0)
                })
                .sum();
            RecordSummary {
                kind,
                count: rows.len(),
                size,
            }
        }
        let mut lines = vec![
            line("Register", &self.nodes),
            line("Service", &self.services),
            line("Check", &self.checks),
            line("KVS", &self.kv),
            line("Tombstone", &self.kv_tombstones),
            line("Session", &self.sessions),
            line("ConfigEntry", &self.config_entries),
            line("SystemMetadata", &self.system_metadata),
            line("ConnectCA", &self.ca_roots),
        ];
        lines.retain(|l| l.count > 0);
        lines.sort_by(|a, b| b.size.cmp(&a.size).then(a.kind.cmp(b.kind)));
        lines
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::StateStore;

    fn archive_with_kv() -> Vec<u8> {
        let store = StateStore::new();
        store.apply(
            5,
            &crate::Command::Kv(legate_types::KvOp::set("a", b"1".to_vec())),
        );
        write_archive(&store.snapshot_data(), 5, 2).unwrap()
    }

    #[test]
    fn round_trip_keeps_meta_and_rows() {
        let bytes = archive_with_kv();
        let (meta, data) = read_archive(&bytes).unwrap();
        assert_eq!((meta.index, meta.term, meta.version), (5, 2, 2));
        assert!(meta.id.starts_with("2-5-"));
        assert_eq!(data.kv.len(), 1);
        assert_eq!(data.summary()[0].kind, "KVS");
    }

    #[test]
    fn damaged_archives_are_refused_with_reasons() {
        let bytes = archive_with_kv();
        assert!(matches!(
            read_archive(b"not gzip"),
            Err(ArchiveError::Format(_))
        ));
        let truncated = &bytes[..bytes.len() / 2];
        assert!(read_archive(truncated).is_err());
        // Rewrite state.json inside a valid archive: the sum no longer holds.
        let (meta, _) = read_archive(&bytes).unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        for (name, body) in [
            (META, serde_json::to_vec(&meta).unwrap()),
            (STATE, b"{}".to_vec()),
            (
                SUMS,
                format!("{}  {META}\n{}  {STATE}\n", "0".repeat(64), "0".repeat(64)).into_bytes(),
            ),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_cksum();
            tar.append_data(&mut header, name, &body[..]).unwrap();
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar.into_inner().unwrap()).unwrap();
        let forged = gz.finish().unwrap();
        let error = read_archive(&forged).unwrap_err();
        assert!(matches!(error, ArchiveError::Verification(_)), "{error}");
    }

    #[test]
    fn a_bomb_is_refused_from_its_header_before_anything_is_inflated() {
        // A tar header announcing 2 GiB of state.json, followed by a mere
        // 1 KiB: refused from the header alone (reading the body would
        // fail differently, on the short read).
        let mut header = tar::Header::new_gnu();
        header.set_path(STATE).unwrap();
        header.set_size(2 << 30);
        header.set_cksum();
        let mut raw = header.as_bytes().to_vec();
        raw.extend_from_slice(&[b' '; 1024]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        let error = read_archive(&gz.finish().unwrap()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("state.bin is larger than 1073741824 bytes"),
            "{error}"
        );
    }
}
