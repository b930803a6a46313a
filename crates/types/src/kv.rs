//! Key/value store shapes.

use serde::{Deserialize, Serialize};

/// Largest value a KV entry may hold (Consul's `kv_max_value_size` default).
pub const KV_MAX_VALUE_SIZE: usize = 512 * 1024;

/// One key in the KV store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct KvEntry {
    /// How many times a lock on the key was acquired.
    #[serde(default)]
    pub lock_index: u64,
    /// The key.
    pub key: String,
    /// Opaque client flags.
    #[serde(default)]
    pub flags: u64,
    /// The value; base64 on the wire, `null` when empty.
    #[serde(default, with = "crate::binary::bytes_value")]
    pub value: bytes::Bytes,
    /// Session holding the lock, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// Index of the write that created the key.
    #[serde(default)]
    pub create_index: u64,
    /// Index of the write that last modified the key.
    #[serde(default)]
    pub modify_index: u64,
}

/// A KV verb, as in `/v1/txn`'s `KV.Verb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvVerb {
    /// Set the value.
    #[serde(rename = "set")]
    Set,
    /// Set if `ModifyIndex` matches (0: only if absent).
    #[serde(rename = "cas")]
    Cas,
    /// Set and acquire a lock with `Session`.
    #[serde(rename = "lock")]
    Lock,
    /// Set and release the lock held by `Session`.
    #[serde(rename = "unlock")]
    Unlock,
    /// Read a key.
    #[serde(rename = "get")]
    Get,
    /// Read a prefix.
    #[serde(rename = "get-tree")]
    GetTree,
    /// Fail unless `ModifyIndex` matches.
    #[serde(rename = "check-index")]
    CheckIndex,
    /// Fail unless the key is locked by `Session`.
    #[serde(rename = "check-session")]
    CheckSession,
    /// Fail if the key exists.
    #[serde(rename = "check-not-exists")]
    CheckNotExists,
    /// Delete a key.
    #[serde(rename = "delete")]
    Delete,
    /// Delete a prefix.
    #[serde(rename = "delete-tree")]
    DeleteTree,
    /// Delete if `ModifyIndex` matches.
    #[serde(rename = "delete-cas")]
    DeleteCas,
    /// Read a key, or the operation's own entry without a value when the
    /// key does not exist (transactions only; logged only in the newer
    /// transaction command, which older servers never receive).
    #[serde(rename = "get-or-empty")]
    GetOrEmpty,
}

impl KvVerb {
    /// True for verbs that only read.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            KvVerb::Get
                | KvVerb::GetOrEmpty
                | KvVerb::GetTree
                | KvVerb::CheckIndex
                | KvVerb::CheckSession
                | KvVerb::CheckNotExists
        )
    }
}

/// One KV operation: the body of a KV write or one `/v1/txn` element.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KvOp {
    /// What to do.
    pub verb: KvVerb,
    /// The key (or prefix).
    #[serde(default)]
    pub key: String,
    /// The value for set-like verbs.
    #[serde(default, with = "crate::binary::bytes_value")]
    pub value: bytes::Bytes,
    /// Flags for set-like verbs.
    #[serde(default)]
    pub flags: u64,
    /// The expected modify index for CAS verbs.
    #[serde(default)]
    pub index: u64,
    /// The session for lock verbs.
    #[serde(default)]
    pub session: String,
}

impl KvOp {
    /// A `set` of `key` to `value`.
    pub fn set(key: impl Into<String>, value: impl Into<bytes::Bytes>) -> KvOp {
        KvOp {
            verb: KvVerb::Set,
            key: key.into(),
            value: value.into(),
            flags: 0,
            index: 0,
            session: String::new(),
        }
    }
}
