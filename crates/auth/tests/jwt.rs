//! JWTs signed by keys the test makes (EC P-256 and RSA), checked as
//! Consul's `jwt` auth method checks them: signatures by static PEM keys
//! and by a JWKS, every claim failure with Consul's text, and the claims
//! mapped for binding rules.

use base64::Engine;
use legate_auth::jwt::{validate_claims, verify_signature, KeySource};
use legate_auth::{keys, Identity, JwtConfig};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Map, Value};

const NOW: f64 = 1_800_000_000.0;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An EC P-256 signer and its public key in PEM and as a JWK.
struct Ec {
    pair: EcdsaKeyPair,
    pem: String,
}

impl Ec {
    fn new() -> Ec {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &SystemRandom::new(),
        )
        .unwrap();
        Ec {
            pair,
            pem: key.public_key_pem(),
        }
    }

    fn jwk(&self, kid: &str) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": kid,
               "x": b64(&point[1..33]), "y": b64(&point[33..])})
    }

    fn sign(&self, header: Value, claims: &Value) -> String {
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = self
            .pair
            .sign(&SystemRandom::new(), signed.as_bytes())
            .unwrap();
        format!("{signed}.{}", b64(signature.as_ref()))
    }
}

/// An RSA signer (2048 bits) and its JWK.
struct Rsa {
    pair: RsaKeyPair,
    jwk: Value,
}

impl Rsa {
    fn new(kid: &str) -> Rsa {
        use rsa::pkcs8::EncodePrivateKey;
        use rsa::traits::PublicKeyParts;
        let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
        let der = private.to_pkcs8_der().unwrap();
        let pair = RsaKeyPair::from_pkcs8(der.as_bytes()).unwrap();
        let jwk = json!({"kty": "RSA", "kid": kid, "alg": "RS256",
            "n": b64(&private.n().to_bytes_be()), "e": b64(&private.e().to_bytes_be())});
        Rsa { pair, jwk }
    }

    fn sign(&self, kid: &str, claims: &Value) -> String {
        let header = json!({"alg": "RS256", "typ": "JWT", "kid": kid});
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let mut signature = vec![0u8; self.pair.public().modulus_len()];
        self.pair
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signed.as_bytes(),
                &mut signature,
            )
            .unwrap();
        format!("{signed}.{}", b64(&signature))
    }
}

fn config(value: Value) -> JwtConfig {
    JwtConfig::from_config(value.as_object()).unwrap()
}

fn good_claims() -> Value {
    json!({"iss": "https://issuer.test", "aud": ["consul"], "sub": "web-1",
           "iat": NOW - 10.0, "exp": NOW + 300.0,
           "service": "Web", "org": {"team": "payments"}, "groups": ["a", "b", ""]})
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[test]
fn a_static_ec_key_verifies_its_tokens_and_claims_fail_with_consuls_texts() {
    let ec = Ec::new();
    let cfg = config(
        json!({"JWTValidationPubKeys": [ec.pem], "BoundIssuer": "https://issuer.test",
                            "BoundAudiences": ["consul"]}),
    );
    let keys = cfg.validate().unwrap();
    let token = ec.sign(json!({"alg": "ES256"}), &good_claims());
    let claims = verify_signature(&token, &keys, KeySource::Static).unwrap();
    validate_claims(&claims, &cfg, NOW).unwrap();

    // Another key's signature, a tampered payload, garbage.
    let other = Ec::new().sign(json!({"alg": "ES256"}), &good_claims());
    assert_eq!(
        verify_signature(&other, &keys, KeySource::Static).unwrap_err(),
        "no known key successfully validated the token signature"
    );
    let parts: Vec<&str> = token.split('.').collect();
    let tampered = format!("{}.{}.{}", parts[0], b64(br#"{"iss":"x"}"#), parts[2]);
    assert!(verify_signature(&tampered, &keys, KeySource::Static).is_err());
    assert_eq!(
        verify_signature("abc", &keys, KeySource::Static).unwrap_err(),
        "error parsing token: go-jose/go-jose: compact JWS format must have three parts"
    );
    assert_eq!(
        verify_signature("", &keys, KeySource::Static).unwrap_err(),
        "missing jwt"
    );

    let check = |changes: Value| {
        let mut claims = good_claims();
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                claims.as_object_mut().unwrap().remove(k);
            } else {
                claims[k] = v.clone();
            }
        }
        validate_claims(&object(claims), &cfg, NOW).err()
    };
    let jose = "error validating claims: go-jose/go-jose/jwt: validation failed, ";
    assert_eq!(
        check(json!({"iss": "https://other"})),
        Some(format!("{jose}invalid issuer claim (iss)"))
    );
    assert_eq!(
        check(json!({"exp": NOW - 61.0})),
        Some(format!("{jose}token is expired (exp)"))
    );
    assert_eq!(
        check(json!({"exp": NOW - 59.0})),
        None,
        "within the clock skew"
    );
    assert_eq!(
        check(json!({"nbf": NOW + 120.0})),
        Some(format!("{jose}token not valid yet (nbf)"))
    );
    assert_eq!(
        check(json!({"aud": ["other"]})),
        Some("error validating claims: aud claim does not match any bound audience".into())
    );
    assert_eq!(
        check(json!({"iat": null, "exp": null})),
        Some("no issue time, notbefore, or expiration time encoded in token".into())
    );
    // No `exp`: `iat` plus the expiration leeway (150 s by default).
    assert_eq!(check(json!({"exp": null, "iat": NOW - 100.0})), None);
    assert_eq!(
        check(json!({"exp": null, "iat": NOW - 300.0})),
        Some(format!("{jose}token is expired (exp)"))
    );
    // An audience in the token needs bound audiences.
    let unbound = config(json!({"JWTValidationPubKeys": [ec.pem]}));
    assert_eq!(
        validate_claims(&object(good_claims()), &unbound, NOW).unwrap_err(),
        "error validating claims: audience claim found in JWT but no audiences are bound"
    );
}

#[test]
fn a_jwks_verifies_rsa_and_ec_tokens_by_kid() {
    let rsa = Rsa::new("r1");
    let ec = Ec::new();
    let document = json!({"keys": [rsa.jwk, ec.jwk("e1"), {"kty": "oct", "k": "c2VjcmV0"}]});
    let keys = keys::from_jwks(&document).unwrap();
    assert_eq!(keys.len(), 2, "the symmetric key is skipped");
    let token = rsa.sign("r1", &good_claims());
    assert!(verify_signature(&token, &keys, KeySource::Jwks).is_ok());
    let ec_token = ec.sign(json!({"alg": "ES256", "kid": "e1"}), &good_claims());
    assert!(verify_signature(&ec_token, &keys, KeySource::Jwks).is_ok());
    // A key the JWKS does not hold.
    let stranger = Rsa::new("r2").sign("r2", &good_claims());
    assert_eq!(
        verify_signature(&stranger, &keys, KeySource::Jwks).unwrap_err(),
        "error verifying token: failed to verify id token signature"
    );
}

#[test]
fn configs_are_read_and_checked_as_consul_checks_them() {
    let err = |value: Value| match JwtConfig::from_config(value.as_object()) {
        Ok(cfg) => cfg.validate().err().unwrap_or_default(),
        Err(e) => e,
    };
    assert_eq!(
        err(json!({"Foo": 1, "Bar": 2})),
        "error decoding config: 1 error(s) decoding:\n\n* '' has invalid keys: Bar, Foo"
    );
    assert_eq!(
        err(json!({})),
        "exactly one of 'JWTValidationPubKeys', 'JWKSURL', or 'OIDCDiscoveryURL' must be set for type \"jwt\""
    );
    assert_eq!(
        err(json!({"JWKSURL": "https://x", "OIDCDiscoveryURL": "https://y"})),
        "exactly one of 'JWTValidationPubKeys', 'JWKSURL', or 'OIDCDiscoveryURL' must be set for type \"jwt\""
    );
    assert_eq!(
        err(json!({"JWTValidationPubKeys": ["not a key"]})),
        "error parsing public key JWTValidationPubKeys[0]: data does not contain any valid RSA, ECDSA, or ED25519 public keys"
    );
    assert_eq!(
        err(json!({"JWKSURL": "https://x", "JWKSCACert": "junk"})),
        "error checking JWKSCACert: could not parse CA PEM value successfully"
    );
    assert_eq!(
        err(json!({"JWTValidationPubKeys": [Ec::new().pem], "JWKSCACert": "junk"})),
        "'JWKSCACert' should not be set unless 'JWKSURL' is set"
    );
    assert_eq!(
        err(json!({"JWKSURL": "https://x", "JWTSupportedAlgs": ["HS256"]})),
        "Invalid supported algorithm: HS256"
    );
    assert_eq!(
        err(json!({"JWKSURL": "https://x", "ClaimMappings": {"a": "x", "b": "x"}})),
        "ClaimMappings contains multiple mappings for key \"x\""
    );
    assert_eq!(
        err(json!({"JWKSURL": "https://x", "ExpirationLeeway": "soon"})),
        "error decoding config: 1 error(s) decoding:\n\n* cannot parse 'ExpirationLeeway' as int: strconv.ParseInt: parsing \"soon\": invalid syntax"
    );
    // Names without regard to case; leeways in ns or as durations.
    let cfg = config(
        json!({"jwksurl": "https://x", "ExpirationLeeway": "2m", "ClockSkewLeeway": 5_000_000_000i64}),
    );
    assert_eq!(
        (cfg.expiration_leeway, cfg.clock_skew_leeway),
        (120_000_000_000, 5_000_000_000)
    );
}

#[test]
fn claims_map_to_values_and_lists_for_binding_rules() {
    let cfg = config(json!({"JWKSURL": "https://x",
        "ClaimMappings": {"service": "service", "/org/team": "team", "missing": "gone", "iat": "issued"},
        "ListClaimMappings": {"groups": "groups"}}));
    let identity = Identity::from_claims(&object(good_claims()), &cfg).unwrap();
    assert_eq!(identity.values["service"], "Web");
    assert_eq!(identity.values["team"], "payments");
    assert_eq!(
        identity.values["issued"],
        format!("{}", (NOW - 10.0) as i64)
    );
    assert!(!identity.values.contains_key("gone"));
    assert_eq!(
        identity.lists["groups"],
        vec!["a", "b"],
        "empty items dropped"
    );
    assert_eq!(
        identity
            .interpolate("${value.service}-${value.team}")
            .unwrap(),
        "web-payments"
    );
    assert_eq!(identity.interpolate("x-${value.gone}").unwrap(), "x-");
    assert!(identity
        .interpolate("${value.nope}")
        .unwrap_err()
        .contains("unknown variable"));
    let bad = config(json!({"JWKSURL": "https://x", "ClaimMappings": {"org": "org"}}));
    assert_eq!(
        Identity::from_claims(&object(good_claims()), &bad).unwrap_err(),
        "error converting claim 'org' to string from unknown type map[string]interface {}"
    );
}
