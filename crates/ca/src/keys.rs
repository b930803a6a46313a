//! Private keys in the formats Consul and openssl write: PKCS#8
//! (`PRIVATE KEY`, EC P-256 or RSA), SEC1 (`EC PRIVATE KEY`, P-256) and
//! PKCS#1 (`RSA PRIVATE KEY`). Everything is rewrapped as PKCS#8, which is
//! what the signing library loads.

use base64::Engine;
use rcgen::KeyPair;

use crate::CaError;

const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_PRIME256V1: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

fn bad(message: impl Into<String>) -> CaError {
    CaError::Config(format!("invalid private key: {}", message.into()))
}

/// Reads one DER element: (tag, content, rest).
fn read_element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), CaError> {
    let (&tag, rest) = input.split_first().ok_or_else(|| bad("truncated DER"))?;
    let (&first, rest) = rest
        .split_first()
        .ok_or_else(|| bad("truncated DER length"))?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad("unsupported DER length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad("truncated DER content"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn write_element(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len < 0x100 {
        out.extend_from_slice(&[0x81, len as u8]);
    } else {
        out.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(content);
    out
}

/// Converts a SEC1 `ECPrivateKey` (P-256) to PKCS#8, dropping the optional
/// curve parameters inside (they move to the algorithm identifier).
pub fn sec1_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, CaError> {
    let (tag, body, _) = read_element(sec1)?;
    if tag != 0x30 {
        return Err(bad("SEC1 key is not a SEQUENCE"));
    }
    let (tag, version, rest) = read_element(body)?;
    if tag != 0x02 || version != [1] {
        return Err(bad("SEC1 key version must be 1"));
    }
    let (tag, private, mut rest) = read_element(rest)?;
    if tag != 0x04 || private.len() != 32 {
        return Err(bad("only P-256 EC keys are supported"));
    }
    let mut public = None;
    while !rest.is_empty() {
        let (tag, content, next) = read_element(rest)?;
        match tag {
            0xa0 => {
                let (t, oid, _) = read_element(content)?;
                if t != 0x06 || write_element(0x06, oid) != OID_PRIME256V1 {
                    return Err(bad("only the P-256 curve is supported"));
                }
            }
            0xa1 => public = Some(content.to_vec()),
            _ => return Err(bad("unexpected field in SEC1 key")),
        }
        rest = next;
    }
    let public = public.ok_or_else(|| bad("SEC1 key without its public key"))?;
    let mut inner = write_element(0x02, &[1]);
    inner.extend(write_element(0x04, private));
    inner.extend(write_element(0xa1, &public));
    let inner = write_element(0x30, &inner);
    let mut algorithm = OID_EC_PUBLIC_KEY.to_vec();
    algorithm.extend_from_slice(OID_PRIME256V1);
    let mut info = write_element(0x02, &[0]);
    info.extend(write_element(0x30, &algorithm));
    info.extend(write_element(0x04, &inner));
    Ok(write_element(0x30, &info))
}

fn decode_pem(pem: &str) -> Result<(String, Vec<u8>), CaError> {
    let begin = pem.find("-----BEGIN ").ok_or_else(|| bad("not PEM"))?;
    let rest = &pem[begin + 11..];
    let label_end = rest.find("-----").ok_or_else(|| bad("not PEM"))?;
    let label = rest[..label_end].to_string();
    let body_start = label_end + 5;
    let end = rest
        .find("-----END ")
        .ok_or_else(|| bad("PEM without END line"))?;
    let b64: String = rest[body_start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = decode_base64(&b64).ok_or_else(|| bad("PEM body is not base64"))?;
    Ok((label, der))
}

fn decode_base64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn encode_pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Loads a private key from PEM (PKCS#8, SEC1 P-256 or PKCS#1 RSA); returns it with
/// its PKCS#8 PEM form.
pub fn load_private_key(pem: &str) -> Result<(KeyPair, String), CaError> {
    let (label, der) = decode_pem(pem)?;
    let pkcs8 = match label.as_str() {
        "PRIVATE KEY" => der,
        "EC PRIVATE KEY" => sec1_to_pkcs8(&der)?,
        "RSA PRIVATE KEY" => {
            use rsa::pkcs1::DecodeRsaPrivateKey;
            use rsa::pkcs8::EncodePrivateKey;
            let key = rsa::RsaPrivateKey::from_pkcs1_der(&der).map_err(|e| bad(e.to_string()))?;
            key.to_pkcs8_der()
                .map_err(|e| bad(e.to_string()))?
                .as_bytes()
                .to_vec()
        }
        other => return Err(bad(format!("unexpected PEM block {other:?}"))),
    };
    let pkcs8_pem = encode_pem("PRIVATE KEY", &pkcs8);
    let key = KeyPair::from_pem(&pkcs8_pem).map_err(|e| bad(e.to_string()))?;
    Ok((key, pkcs8_pem))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn openssl(args: &[&str]) -> String {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn loads_openssl_sec1_and_pkcs8_keys() {
        let sec1 = openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout"]);
        assert!(sec1.contains("BEGIN EC PRIVATE KEY"));
        let (key, pkcs8_pem) = load_private_key(&sec1).unwrap();
        assert!(pkcs8_pem.contains("BEGIN PRIVATE KEY"));
        // openssl agrees that the rewrapped key is the same key.
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pem");
        let b = dir.path().join("b.pem");
        std::fs::write(&a, &sec1).unwrap();
        std::fs::write(&b, &pkcs8_pem).unwrap();
        let pub_a = openssl(&["pkey", "-in", a.to_str().unwrap(), "-pubout"]);
        let pub_b = openssl(&["pkey", "-in", b.to_str().unwrap(), "-pubout"]);
        assert_eq!(pub_a, pub_b);
        assert_eq!(key.public_key_pem(), pub_a);
        let pkcs8 = openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ]);
        assert!(load_private_key(&pkcs8).is_ok());
    }

    #[test]
    fn loads_openssl_rsa_keys_in_both_encodings() {
        let pkcs1 = openssl(&["genrsa", "-traditional", "2048"]);
        assert!(pkcs1.contains("BEGIN RSA PRIVATE KEY"));
        let (key, pkcs8_pem) = load_private_key(&pkcs1).unwrap();
        assert!(pkcs8_pem.contains("BEGIN PRIVATE KEY"));
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pem");
        std::fs::write(&a, &pkcs1).unwrap();
        let pub_a = openssl(&["pkey", "-in", a.to_str().unwrap(), "-pubout"]);
        assert_eq!(key.public_key_pem(), pub_a);
        assert!(load_private_key(&pkcs8_pem).is_ok());
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        assert!(load_private_key("not a key").is_err());
        let p384 = openssl(&["ecparam", "-name", "secp384r1", "-genkey", "-noout"]);
        let err = load_private_key(&p384).unwrap_err();
        assert!(err.to_string().contains("P-256"), "{err}");
        assert!(load_private_key(
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
        )
        .is_err());
        assert_eq!(decode_base64("aGVsbG8="), Some(b"hello".to_vec()));
        assert!(encode_pem("X", b"hello").contains("aGVsbG8="));
    }
}
