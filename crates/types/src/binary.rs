//! The binary encoding of what servers store: Raft log entries and
//! snapshot records. It is MessagePack with named fields (so a field
//! added with `#[serde(default)]` still reads old data), where byte
//! strings — KV values, snapshot archives — are raw bytes instead of the
//! base64 the HTTP API shows. Whoever stores an encoded value puts a
//! format version in front of it; this module only encodes.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Why a value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum BinaryError {
    /// Encoding failed (a map with non-string keys, an I/O error, ...).
    #[error("encoding: {0}")]
    Encode(String),
    /// The bytes are not a valid encoding of the expected type.
    #[error("decoding: {0}")]
    Decode(String),
}

/// Encodes `value`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, BinaryError> {
    let mut out = Vec::new();
    encode_into(&mut out, value)?;
    Ok(out)
}

/// Encodes `value` into `out`.
pub fn encode_into<W: std::io::Write, T: Serialize + ?Sized>(
    out: &mut W,
    value: &T,
) -> Result<(), BinaryError> {
    let mut serializer = rmp_serde::Serializer::new(out).with_struct_map();
    value
        .serialize(&mut serializer)
        .map_err(|e| BinaryError::Encode(e.to_string()))
}

/// Decodes one value from `bytes`; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BinaryError> {
    let mut deserializer = rmp_serde::Deserializer::new(bytes);
    let value =
        T::deserialize(&mut deserializer).map_err(|e| BinaryError::Decode(e.to_string()))?;
    let rest = deserializer.into_inner();
    if !rest.is_empty() {
        return Err(BinaryError::Decode(format!(
            "{} bytes after the value",
            rest.len()
        )));
    }
    Ok(value)
}

/// Serde helpers for byte strings: base64 text (`null` when empty) in
/// human-readable formats such as the HTTP API's JSON, raw bytes in the
/// binary encoding. Decoding takes text or bytes whatever the format says
/// of itself (serde's buffering for `flatten` and tagged enums reports
/// every format as human-readable); a list of numbers only in the binary
/// encoding, so JSON takes exactly what Consul's `[]byte` fields take.
pub mod bytes_value {
    use base64::Engine;
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    /// Serializes `value`.
    pub fn serialize<S: Serializer>(value: &[u8], s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            s.serialize_bytes(value)
        } else if value.is_empty() {
            s.serialize_none()
        } else {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(value))
        }
    }

    /// Deserializes a value written by [`serialize`] in either form.
    pub fn deserialize<'de, D: Deserializer<'de>, B: From<Vec<u8>>>(d: D) -> Result<B, D::Error> {
        let visitor = BytesVisitor {
            numbers: !d.is_human_readable(),
        };
        d.deserialize_any(visitor).map(B::from)
    }

    struct BytesVisitor {
        /// Whether a sequence of numbers is taken too.
        numbers: bool,
    }

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("base64 text, bytes or null")
        }

        fn visit_str<E: Error>(self, text: &str) -> Result<Vec<u8>, E> {
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|e| E::custom(format!("Value is not valid base64: {e}")))
        }

        fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(bytes)
        }

        fn visit_none<E: Error>(self) -> Result<Vec<u8>, E> {
            Ok(Vec::new())
        }

        fn visit_unit<E: Error>(self) -> Result<Vec<u8>, E> {
            Ok(Vec::new())
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            if !self.numbers {
                return Err(A::Error::invalid_type(
                    serde::de::Unexpected::Seq,
                    &"base64 text or null",
                ));
            }
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(byte) = seq.next_element::<u8>()? {
                bytes.push(byte);
            }
            Ok(bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        #[serde(with = "bytes_value")]
        value: Vec<u8>,
        #[serde(default)]
        added_later: u64,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Outer {
        name: String,
        #[serde(flatten)]
        row: Row,
    }

    #[test]
    fn bytes_are_raw_in_binary_and_base64_in_json() {
        let row = Row {
            value: vec![0, 1, 2, 255],
            added_later: 0,
        };
        let binary = encode(&row).unwrap();
        // The four bytes appear as they are, after a bin8 header.
        assert!(binary.windows(6).any(|w| w == [0xc4, 4, 0, 1, 2, 255]));
        assert_eq!(decode::<Row>(&binary).unwrap(), row);
        let json = serde_json::to_string(&row).unwrap();
        assert!(json.contains("\"AAEC/w==\""), "{json}");
        assert_eq!(serde_json::from_str::<Row>(&json).unwrap(), row);
    }

    #[test]
    fn flattened_bytes_survive_serdes_buffering() {
        let outer = Outer {
            name: "a".into(),
            row: Row {
                value: b"hello".to_vec(),
                added_later: 7,
            },
        };
        assert_eq!(decode::<Outer>(&encode(&outer).unwrap()).unwrap(), outer);
    }

    #[test]
    fn a_field_added_with_a_default_reads_old_data() {
        #[derive(Serialize)]
        struct OldRow {
            #[serde(with = "bytes_value")]
            value: Vec<u8>,
        }
        let old = encode(&OldRow { value: vec![9] }).unwrap();
        let row: Row = decode(&old).unwrap();
        assert_eq!((row.value, row.added_later), (vec![9], 0));
    }

    #[test]
    fn json_takes_only_text_or_null() {
        assert!(serde_json::from_str::<Row>(r#"{"value":[1,2]}"#).is_err());
        let empty: Row = serde_json::from_str(r#"{"value":null}"#).unwrap();
        assert!(empty.value.is_empty());
    }

    #[test]
    fn garbage_and_trailing_bytes_are_errors() {
        assert!(decode::<Row>(&[0xc1]).is_err());
        let mut bytes = encode(&Row {
            value: vec![1],
            added_later: 0,
        })
        .unwrap();
        bytes.push(0);
        assert!(decode::<Row>(&bytes)
            .unwrap_err()
            .to_string()
            .contains("1 bytes after"));
    }
}
