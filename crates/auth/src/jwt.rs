//! A bearer token checked as Consul's go-sso library checks a JWT for a
//! `jwt` auth method with static keys or a JWKS: its signature by one of
//! the keys, then its times (missing `exp`/`nbf` made up from the others
//! and the leeways), its issuer and its audience — with the same error
//! texts, since clients and operators read them.

use serde_json::{Map, Value};

use crate::config::JwtConfig;
use crate::keys::{base64url, PublicKey};

/// go-jose's prefix for claim errors.
const JOSE: &str = "go-jose/go-jose/jwt: validation failed";

/// A token split into its parts.
struct Compact<'a> {
    header: Map<String, Value>,
    claims: Map<String, Value>,
    signed: &'a str,
    signature: Vec<u8>,
}

/// Splits and decodes a compact JWS; `why` is go-jose's complaint.
fn split(token: &str) -> Result<Compact<'_>, String> {
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err("go-jose/go-jose: compact JWS format must have three parts".into());
    }
    let object = |part: &str, what: &str| -> Result<Map<String, Value>, String> {
        let bytes = base64url(part).map_err(|e| format!("go-jose/go-jose: {what}: {e}"))?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(format!("go-jose/go-jose: {what} is not a JSON object")),
        }
    };
    let header = object(parts[0], "protected header")?;
    let claims = object(parts[1], "payload")?;
    let signature = base64url(parts[2]).map_err(|e| format!("go-jose/go-jose: signature: {e}"))?;
    let signed = &token[..parts[0].len() + 1 + parts[1].len()];
    Ok(Compact {
        header,
        claims,
        signed,
        signature,
    })
}

impl Compact<'_> {
    fn alg(&self) -> &str {
        self.header
            .get("alg")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn verified_by(&self, key: &PublicKey) -> bool {
        key.verifies(self.alg(), self.signed.as_bytes(), &self.signature)
    }
}

/// Where the keys came from, which decides Consul's error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `JWTValidationPubKeys`.
    Static,
    /// A JWKS (`JWKSURL` or discovery).
    Jwks,
}

/// The token's claims once its signature checks out against `keys`.
pub fn verify_signature(
    token: &str,
    keys: &[PublicKey],
    source: KeySource,
) -> Result<Map<String, Value>, String> {
    if token.is_empty() {
        return Err("missing jwt".into());
    }
    let compact = split(token).map_err(|e| match source {
        KeySource::Static => format!("error parsing token: {e}"),
        KeySource::Jwks => format!("error verifying token: oidc: malformed jwt: {e}"),
    })?;
    // With a JWKS, a token naming a `kid` is checked with that key alone,
    // as go-oidc does (none when the set has no such key); otherwise, and
    // with static keys, every key is tried.
    let kid = compact.header.get("kid").and_then(Value::as_str);
    let candidates: Vec<&PublicKey> = match kid {
        Some(kid) if source == KeySource::Jwks => keys.iter().filter(|k| k.kid == kid).collect(),
        _ => keys.iter().collect(),
    };
    if candidates.iter().any(|k| compact.verified_by(k)) {
        return Ok(compact.claims);
    }
    Err(match source {
        KeySource::Static => "no known key successfully validated the token signature".into(),
        KeySource::Jwks => "error verifying token: failed to verify id token signature".into(),
    })
}

/// The algorithm a token's header names (`None` when it does not parse).
pub fn algorithm(token: &str) -> Option<String> {
    split(token).ok().and_then(|c| {
        c.header
            .get("alg")
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

/// Checks a token verified with an OpenID Connect provider's keys as
/// go-oidc's verifier does for Consul: signed with one of
/// `JWTSupportedAlgs` (RS256 when none), issued by the provider itself
/// (the discovery URL), with an `exp` that has not passed, and — when
/// audiences are bound — for one of them (a token naming audiences is
/// fine without bound ones here). The leeways and `BoundIssuer` are not
/// used on this path, as in Consul.
pub fn validate_oidc_claims(
    alg: &str,
    claims: &Map<String, Value>,
    config: &JwtConfig,
    now: f64,
) -> Result<(), String> {
    let allowed: Vec<&str> = if config.jwt_supported_algs.is_empty() {
        vec!["RS256"]
    } else {
        config
            .jwt_supported_algs
            .iter()
            .map(String::as_str)
            .collect()
    };
    if !allowed.contains(&alg) {
        return Err(format!(
            "error validating signature: oidc: id token signed with unsupported algorithm, expected {allowed:?} got {alg:?}"
        ));
    }
    let issuer = claims
        .get("iss")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if issuer != config.oidc_discovery_url {
        return Err(format!(
            "error validating signature: oidc: id token issued by a different provider, expected {:?} got {issuer:?}",
            config.oidc_discovery_url
        ));
    }
    let Some(exp) = time_claim(claims, "exp") else {
        return Err("error validating signature: oidc: token is missing exp".into());
    };
    if now > exp {
        return Err("error validating signature: oidc: token is expired".into());
    }
    // go-oidc allows five minutes of clock skew before `nbf`.
    if time_claim(claims, "nbf").is_some_and(|nbf| now + 300.0 < nbf) {
        return Err(
            "error validating signature: oidc: current time is before the nbf (not before) time"
                .into(),
        );
    }
    if config.bound_audiences.is_empty() {
        return Ok(());
    }
    validate_audience(claims, &config.bound_audiences)
}

/// A NumericDate claim in seconds.
fn time_claim(claims: &Map<String, Value>, name: &str) -> Option<f64> {
    claims.get(name).and_then(Value::as_f64)
}

/// A leeway in seconds: Consul's default for zero, none for a negative one.
fn leeway(nanos: i64, default_secs: f64) -> f64 {
    match nanos {
        0 => default_secs,
        n if n < 0 => 0.0,
        n => n as f64 / 1e9,
    }
}

/// Checks the claims of a verified token at `now` (seconds since the
/// epoch), as go-sso's `verifyVanillaJWT`: times, issuer, audience.
pub fn validate_claims(
    claims: &Map<String, Value>,
    config: &JwtConfig,
    now: f64,
) -> Result<(), String> {
    let iat = time_claim(claims, "iat");
    let mut exp = time_claim(claims, "exp");
    let mut nbf = time_claim(claims, "nbf");
    if iat.is_none() && exp.is_none() && nbf.is_none() {
        return Err("no issue time, notbefore, or expiration time encoded in token".into());
    }
    if exp.is_none() {
        let latest = iat.unwrap_or(f64::MIN).max(nbf.unwrap_or(f64::MIN));
        exp = Some(latest + leeway(config.expiration_leeway, 150.0));
    }
    if nbf.is_none() {
        nbf = Some(match iat {
            Some(iat) => iat,
            None => exp.unwrap_or_default() - leeway(config.not_before_leeway, 150.0),
        });
    }
    let skew = leeway(config.clock_skew_leeway, 60.0);
    let failed = |why: &str| Err(format!("error validating claims: {JOSE}, {why}"));
    if !config.bound_issuer.is_empty()
        && claims.get("iss").and_then(Value::as_str) != Some(config.bound_issuer.as_str())
    {
        return failed("invalid issuer claim (iss)");
    }
    if nbf.is_some_and(|nbf| now + skew < nbf) {
        return failed("token not valid yet (nbf)");
    }
    if exp.is_some_and(|exp| now - skew > exp) {
        return failed("token is expired (exp)");
    }
    if iat.is_some_and(|iat| now + skew < iat) {
        return Err(
            "error validating claims: go-jose/go-jose/jwt: validation field, token issued in the future (iat)"
                .into(),
        );
    }
    validate_audience(claims, &config.bound_audiences)
}

/// Consul's strict audience check: a bound audience must be among the
/// token's, and a token naming audiences needs bound ones.
fn validate_audience(claims: &Map<String, Value>, bound: &[String]) -> Result<(), String> {
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if bound.is_empty() {
        if audiences.is_empty() {
            return Ok(());
        }
        return Err(
            "error validating claims: audience claim found in JWT but no audiences are bound"
                .into(),
        );
    }
    if audiences.iter().any(|a| bound.iter().any(|b| b == a)) {
        Ok(())
    } else {
        Err("error validating claims: aud claim does not match any bound audience".into())
    }
}
