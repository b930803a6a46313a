//! An ES256 signer for the clients of tests and benchmarks (feature
//! `signer`): JWTs signed with a P-256 key the caller holds, and the
//! key's public half in PEM and as a JWK, to configure an auth method
//! with. Never used by the server.

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

/// The DER prefix of a P-256 SubjectPublicKeyInfo, before the point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A fixed key for fixtures that must be written before a test runs.
const FIXTURE_PKCS8: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgI46xSN0c5A4FHa3DvcU1A6qk2U4S4ZDee3lcfHcj1eKhRANCAAQ4wY/fBwGLKs77xqkM4rJ3+kItroS0bAwerNEAzKAh26iqoZ+LCp/z6qOU4HkPPsy1Z46pAqhv0a3wNL/6UygZ";

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An ES256 signer.
pub struct Signer {
    pair: EcdsaKeyPair,
}

impl Signer {
    /// A new key.
    pub fn generate() -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        Signer {
            pair: EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                .unwrap(),
        }
    }

    /// The fixed fixture key.
    pub fn fixture() -> Signer {
        let der = base64::engine::general_purpose::STANDARD
            .decode(FIXTURE_PKCS8)
            .unwrap();
        Signer {
            pair: EcdsaKeyPair::from_pkcs8(
                &ECDSA_P256_SHA256_FIXED_SIGNING,
                &der,
                &SystemRandom::new(),
            )
            .unwrap(),
        }
    }

    /// The public key as a PEM `PUBLIC KEY`.
    pub fn public_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.pair.public_key().as_ref());
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----\n",
            &body[..64],
            &body[64..]
        )
    }

    /// The public key as a JWK with `kid`.
    pub fn jwk(&self, kid: &str) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256",
               "x": b64url(&point[1..33]), "y": b64url(&point[33..])})
    }

    /// A compact JWT of `claims` (header `kid` when given).
    pub fn sign(&self, claims: &Value, kid: Option<&str>) -> String {
        let mut header = json!({"alg": "ES256", "typ": "JWT"});
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        let signed = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), signed.as_bytes())
            .unwrap();
        format!("{signed}.{}", b64url(signature.as_ref()))
    }
}

/// Seconds since the epoch, now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
