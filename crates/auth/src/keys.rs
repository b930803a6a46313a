//! Public keys that verify JWT signatures: from PEM (`PUBLIC KEY`,
//! `RSA PUBLIC KEY` or a `CERTIFICATE`'s key, as Consul's
//! `JWTValidationPubKeys`) or from a JWKS document (`RSA`, `EC` and `OKP`
//! keys), and the JWS algorithms each can check.

use base64::Engine;
use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use serde_json::Value;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::SubjectPublicKeyInfo;

/// The OID of an elliptic-curve key's P-256 curve.
const P256: &str = "1.2.840.10045.3.1.7";
/// The OID of the P-384 curve.
const P384: &str = "1.3.132.0.34";
/// The OID of Ed25519 keys.
const ED25519: &str = "1.3.101.112";

/// A key able to verify signatures, with the `kid` a JWKS gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The JWKS `kid` (empty for PEM keys).
    pub kid: String,
    kind: KeyKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyKind {
    /// An RSA key: modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// A P-256 (`true`) or P-384 key: the uncompressed point.
    Ec { p256: bool, point: Vec<u8> },
    /// An Ed25519 key.
    Ed25519(Vec<u8>),
}

/// Consul's error for a PEM that holds no key it can use.
fn no_keys() -> String {
    "data does not contain any valid RSA, ECDSA, or ED25519 public keys".into()
}

fn from_spki(spki: &SubjectPublicKeyInfo<'_>) -> Result<KeyKind, String> {
    let oid = spki.algorithm.algorithm.to_id_string();
    if oid == ED25519 {
        return Ok(KeyKind::Ed25519(spki.subject_public_key.data.to_vec()));
    }
    match spki.parsed().map_err(|_| no_keys())? {
        x509_parser::public_key::PublicKey::RSA(rsa) => Ok(KeyKind::Rsa {
            n: rsa.modulus.to_vec(),
            e: rsa.exponent.to_vec(),
        }),
        x509_parser::public_key::PublicKey::EC(point) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|o| o.to_id_string())
                .unwrap_or_default();
            match curve.as_str() {
                P256 | P384 => Ok(KeyKind::Ec {
                    p256: curve == P256,
                    point: point.data().to_vec(),
                }),
                _ => Err(format!("unsupported elliptic curve {curve}")),
            }
        }
        _ => Err(no_keys()),
    }
}

/// The keys of a PEM text (one or more blocks); Consul's error when it
/// holds none.
pub fn from_pem(text: &str) -> Result<Vec<PublicKey>, String> {
    let mut keys = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(text.as_bytes()) {
        let block = block.map_err(|_| no_keys())?;
        let kind = match block.label.as_str() {
            "PUBLIC KEY" => {
                let (_, spki) =
                    SubjectPublicKeyInfo::from_der(&block.contents).map_err(|_| no_keys())?;
                from_spki(&spki)?
            }
            "CERTIFICATE" => {
                let (_, cert) =
                    X509Certificate::from_der(&block.contents).map_err(|e| e.to_string())?;
                from_spki(cert.public_key())?
            }
            "RSA PUBLIC KEY" => {
                let (_, rsa) = x509_parser::public_key::RSAPublicKey::from_der(&block.contents)
                    .map_err(|_| no_keys())?;
                KeyKind::Rsa {
                    n: rsa.modulus.to_vec(),
                    e: rsa.exponent.to_vec(),
                }
            }
            _ => continue,
        };
        keys.push(PublicKey {
            kid: String::new(),
            kind,
        });
    }
    if keys.is_empty() {
        return Err(no_keys());
    }
    Ok(keys)
}

/// Base64url without padding, as JWKS and JWS use it.
pub(crate) fn base64url(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|e| e.to_string())
}

/// The usable keys of a JWKS document (`{"keys": [...]}`); keys of other
/// types or curves are skipped, as go-jose skips them.
pub fn from_jwks(document: &Value) -> Result<Vec<PublicKey>, String> {
    let keys = document
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("oidc: failed to decode keys: no \"keys\" array")?;
    let field = |key: &Value, name: &str| -> Option<Vec<u8>> {
        key.get(name)
            .and_then(Value::as_str)
            .and_then(|v| base64url(v).ok())
    };
    let mut out = Vec::new();
    for key in keys {
        let kid = key
            .get("kid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let kind = match key.get("kty").and_then(Value::as_str) {
            Some("RSA") => match (field(key, "n"), field(key, "e")) {
                (Some(n), Some(e)) => KeyKind::Rsa { n, e },
                _ => continue,
            },
            Some("EC") => {
                let p256 = match key.get("crv").and_then(Value::as_str) {
                    Some("P-256") => true,
                    Some("P-384") => false,
                    _ => continue,
                };
                match (field(key, "x"), field(key, "y")) {
                    (Some(x), Some(y)) => {
                        let mut point = vec![4u8];
                        point.extend(x);
                        point.extend(y);
                        KeyKind::Ec { p256, point }
                    }
                    _ => continue,
                }
            }
            Some("OKP") if key.get("crv").and_then(Value::as_str) == Some("Ed25519") => {
                match field(key, "x") {
                    Some(x) => KeyKind::Ed25519(x),
                    None => continue,
                }
            }
            _ => continue,
        };
        out.push(PublicKey { kid, kind });
    }
    Ok(out)
}

/// The JWS algorithms Legate can verify (ES512 needs P-521, which the
/// crypto library lacks).
pub const SUPPORTED_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

impl PublicKey {
    /// Whether this key, with the JWS algorithm `alg`, signed `message`
    /// as `signature`; a key of another type than `alg` names never does.
    pub fn verifies(&self, alg: &str, message: &[u8], signature: &[u8]) -> bool {
        match &self.kind {
            KeyKind::Rsa { n, e } => {
                let params = match alg {
                    "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                    "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                    "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                    "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                    "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                    "PS512" => &signature::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                let strip = |b: &[u8]| {
                    let skip = b.iter().take_while(|x| **x == 0).count();
                    b[skip..].to_vec()
                };
                signature::RsaPublicKeyComponents {
                    n: strip(n),
                    e: strip(e),
                }
                .verify(params, message, signature)
                .is_ok()
            }
            KeyKind::Ec { p256, point } => {
                let algorithm: &dyn VerificationAlgorithm = match (alg, p256) {
                    ("ES256", true) => &signature::ECDSA_P256_SHA256_FIXED,
                    ("ES384", false) => &signature::ECDSA_P384_SHA384_FIXED,
                    _ => return false,
                };
                UnparsedPublicKey::new(algorithm, point)
                    .verify(message, signature)
                    .is_ok()
            }
            KeyKind::Ed25519(key) => {
                alg == "EdDSA"
                    && UnparsedPublicKey::new(&signature::ED25519, key)
                        .verify(message, signature)
                        .is_ok()
            }
        }
    }
}
