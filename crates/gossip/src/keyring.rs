//! Gossip encryption (`encrypt`, `keyring`): every datagram is sealed with
//! AES-GCM under the primary key and opened with any installed key, so
//! keys can be rotated without a flag day. Envelope: a version byte, a
//! 12-byte nonce, then the ciphertext with its 16-byte tag.

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use ring::rand::{SecureRandom, SystemRandom};

/// Bytes the envelope adds to a datagram.
pub const OVERHEAD: usize = 1 + 12 + 16;
const VERSION: u8 = 1;

/// A key as Consul writes it: base64 of 16 or 32 bytes.
#[derive(Clone)]
pub struct Key {
    encoded: String,
    key: std::sync::Arc<LessSafeKey>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// Parses a base64 key (`legate keygen` makes one).
    pub fn parse(encoded: &str) -> Result<Key, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| format!("the key is not valid base64: {e}"))?;
        let algorithm = match bytes.len() {
            16 => &AES_128_GCM,
            32 => &AES_256_GCM,
            n => {
                return Err(format!(
                    "the key must be 16 or 32 bytes (AES-128 or AES-256), not {n}"
                ))
            }
        };
        let unbound = UnboundKey::new(algorithm, &bytes).map_err(|_| "unusable key".to_string())?;
        Ok(Key {
            encoded: encoded.trim().to_string(),
            key: std::sync::Arc::new(LessSafeKey::new(unbound)),
        })
    }

    /// A short fingerprint: the first 8 hex digits of the key's SHA-256
    /// (it reveals nothing of the key).
    pub fn fingerprint(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.encoded.as_bytes());
        digest.as_ref()[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// A new random 32-byte key, base64 encoded.
    pub fn generate() -> String {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .expect("the system random source works");
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// The key as configured.
    pub fn encoded(&self) -> &str {
        &self.encoded
    }
}

/// The installed keys; the first seals.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    keys: Vec<Key>,
    /// `encrypt_verify_incoming = false`: plain-text datagrams are taken
    /// in too (while a cluster moves to encryption).
    accept_plain: bool,
    /// `encrypt_verify_outgoing = false`: datagrams go out unsealed.
    send_plain: bool,
}

impl Keyring {
    /// A keyring of `keys` (the first is primary); empty means plain text.
    pub fn new(keys: Vec<Key>) -> Keyring {
        Keyring {
            keys,
            accept_plain: false,
            send_plain: false,
        }
    }

    /// Consul's `encrypt_verify_incoming` and `encrypt_verify_outgoing`,
    /// both true by default: turning them off lets plain-text members and
    /// encrypted ones talk while encryption is rolled out (or removed).
    pub fn with_verification(mut self, verify_incoming: bool, verify_outgoing: bool) -> Keyring {
        self.accept_plain = !verify_incoming;
        self.send_plain = !verify_outgoing;
        self
    }

    /// Short fingerprints of the installed keys, primary first (the first
    /// 8 hex digits of each key's SHA-256; they reveal nothing of it).
    pub fn fingerprints(&self) -> Vec<String> {
        self.keys.iter().map(Key::fingerprint).collect()
    }

    /// Whether gossip is encrypted.
    pub fn is_enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The installed keys, primary first.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Adds a key (not primary).
    pub fn install(&mut self, key: Key) {
        if !self.keys.iter().any(|k| k.encoded == key.encoded) {
            self.keys.push(key);
        }
    }

    /// Makes an installed key primary.
    pub fn use_key(&mut self, encoded: &str) -> Result<(), String> {
        let at = self
            .keys
            .iter()
            .position(|k| k.encoded == encoded.trim())
            .ok_or("the key is not installed; install it first")?;
        let key = self.keys.remove(at);
        self.keys.insert(0, key);
        Ok(())
    }

    /// Removes a key that is not primary.
    pub fn remove(&mut self, encoded: &str) -> Result<(), String> {
        match self.keys.iter().position(|k| k.encoded == encoded.trim()) {
            Some(0) => Err("the primary key cannot be removed; use another key first".into()),
            Some(at) => {
                self.keys.remove(at);
                Ok(())
            }
            None => Err("the key is not installed".into()),
        }
    }

    /// Seals a datagram (or passes it through without keys).
    pub fn seal(&self, data: &[u8]) -> Vec<u8> {
        let Some(primary) = self.keys.first().filter(|_| !self.send_plain) else {
            return data.to_vec();
        };
        let mut nonce = [0u8; 12];
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system random source works");
        let mut out = Vec::with_capacity(data.len() + OVERHEAD);
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        let mut body = data.to_vec();
        primary
            .key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut body)
            .expect("sealing cannot fail for in-memory data");
        out.extend_from_slice(&body);
        out
    }

    /// Opens a datagram with any installed key; `None` when none opens it
    /// (unless plain text is accepted, when it is taken as it came).
    pub fn open(&self, data: &[u8]) -> Option<Vec<u8>> {
        if self.keys.is_empty() {
            return Some(data.to_vec());
        }
        let opened = self.open_sealed(data);
        if opened.is_none() && self.accept_plain {
            return Some(data.to_vec());
        }
        opened
    }

    fn open_sealed(&self, data: &[u8]) -> Option<Vec<u8>> {
        if data.len() < OVERHEAD || data[0] != VERSION {
            return None;
        }
        let nonce: [u8; 12] = data[1..13].try_into().ok()?;
        self.keys.iter().find_map(|key| {
            let mut body = data[13..].to_vec();
            let plain = key
                .key
                .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut body)
                .ok()?;
            Some(plain.to_vec())
        })
    }
}

/// Saves the keyring (a JSON list of base64 keys, primary first) next to
/// `file` and renames it into place; readable by the owner only.
pub fn save_keyring(file: &std::path::Path, keyring: &Keyring) -> std::io::Result<()> {
    use std::io::Write;
    let keys: Vec<String> = keyring
        .keys()
        .iter()
        .map(|k| format!("\"{}\"", k.encoded()))
        .collect();
    let text = format!("[{}]\n", keys.join(", "));
    let tmp = file.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&tmp)?;
    out.write_all(text.as_bytes())?;
    out.sync_all()?;
    std::fs::rename(&tmp, file)
}

/// Loads a keyring saved by [`save_keyring`] (or written by hand as a JSON
/// list of base64 keys, primary first).
pub fn load_keyring(file: &std::path::Path) -> Result<Keyring, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let inner = text
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or("expected a JSON list of keys")?;
    let keys = inner
        .split(',')
        .map(|k| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty())
        .map(Key::parse)
        .collect::<Result<Vec<Key>, String>>()?;
    Ok(Keyring::new(keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_datagrams_open_with_any_installed_key_only() {
        let a = Key::parse(&Key::generate()).unwrap();
        let b = Key::parse(&Key::generate()).unwrap();
        let sender = Keyring::new(vec![a.clone()]);
        let sealed = sender.seal(b"hello");
        assert_ne!(&sealed[13..], b"hello");
        assert_eq!(
            Keyring::new(vec![b.clone(), a.clone()])
                .open(&sealed)
                .unwrap(),
            b"hello"
        );
        assert!(Keyring::new(vec![b.clone()]).open(&sealed).is_none());
        assert!(Keyring::new(vec![a.clone()]).open(b"plain text").is_none());
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(sender.open(&tampered).is_none());
        assert!(Key::parse("not base64!").is_err());
        assert!(Key::parse("AAAA").unwrap_err().contains("16 or 32 bytes"));
        let mut ring = Keyring::new(vec![a.clone()]);
        ring.install(b.clone());
        assert!(ring.remove(a.encoded()).is_err());
        ring.use_key(b.encoded()).unwrap();
        ring.remove(a.encoded()).unwrap();
        assert_eq!(ring.keys().len(), 1);
    }

    #[test]
    fn turning_verification_off_lets_plain_text_through_each_way() {
        let key = Key::parse(&Key::generate()).unwrap();
        let strict = Keyring::new(vec![key.clone()]);
        let lenient = Keyring::new(vec![key.clone()]).with_verification(false, false);
        assert_eq!(lenient.seal(b"hello"), b"hello");
        assert!(strict.open(b"hello").is_none());
        assert_eq!(lenient.open(b"hello").unwrap(), b"hello");
        // Sealed datagrams still open as sealed ones.
        assert_eq!(lenient.open(&strict.seal(b"sealed")).unwrap(), b"sealed");
        let incoming_only = Keyring::new(vec![key]).with_verification(false, true);
        assert_ne!(incoming_only.seal(b"hello"), b"hello");
        assert_eq!(incoming_only.open(b"plain").unwrap(), b"plain");
    }

    #[test]
    fn saved_keyrings_load_back_in_order_and_stay_private() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("local.keyring");
        let first = Key::parse(&Key::generate()).unwrap();
        let second = Key::parse(&Key::generate()).unwrap();
        save_keyring(&file, &Keyring::new(vec![second.clone(), first.clone()])).unwrap();
        let loaded = load_keyring(&file).unwrap();
        let keys: Vec<&str> = loaded.keys().iter().map(Key::encoded).collect();
        assert_eq!(keys, vec![second.encoded(), first.encoded()]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&file, "not a list").unwrap();
        assert!(load_keyring(&file).is_err());
        std::fs::write(&file, "[\"short\"]").unwrap();
        assert!(load_keyring(&file).is_err());
    }
}
