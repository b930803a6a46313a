//! Consul's rules for node and service metadata (`structs.validateMetadata`):
//! at most 64 pairs, keys of letters, digits, `-` and `_` up to 128
//! characters, values up to 512 characters, and the `consul-` prefix kept
//! for Consul's own keys. The texts are Consul's.

use crate::catalog::Meta;

/// Most key/value pairs in one map.
pub const MAX_PAIRS: usize = 64;
/// Longest key, in characters.
pub const MAX_KEY_LENGTH: usize = 128;
/// Longest value, in characters.
pub const MAX_VALUE_LENGTH: usize = 512;
/// The prefix reserved for Consul's (and Legate's) own keys.
pub const RESERVED_PREFIX: &str = "consul-";

/// Checks `meta`; `allow_reserved` lets `consul-` keys through (the
/// agent's own node metadata).
pub fn validate(meta: &Meta, allow_reserved: bool) -> Result<(), String> {
    validate_allowing(meta, allow_reserved, &[])
}

/// The meta key that makes a mesh gateway carry the servers' traffic:
/// the one `consul-` key a service (a mesh gateway) may carry.
pub const WAN_FEDERATION_KEY: &str = "consul-wan-federation";

/// Checks a service's `meta` as Consul does for its `kind`: a mesh
/// gateway may carry [`WAN_FEDERATION_KEY`].
pub fn validate_service(kind: &str, meta: &Meta) -> Result<(), String> {
    let allowed: &[&str] = if kind == "mesh-gateway" {
        &[WAN_FEDERATION_KEY]
    } else {
        &[]
    };
    validate_allowing(meta, false, allowed)
}

fn validate_allowing(meta: &Meta, allow_reserved: bool, allowed: &[&str]) -> Result<(), String> {
    if meta.len() > MAX_PAIRS {
        // Consul says "Node" whichever map it checks.
        return Err(format!(
            "Node metadata cannot contain more than {MAX_PAIRS} key/value pairs"
        ));
    }
    for (key, value) in meta {
        check_pair(
            key,
            value,
            allow_reserved || allowed.contains(&key.as_str()),
        )
        .map_err(|why| format!("Couldn't load metadata pair ('{key}', '{value}'): {why}"))?;
    }
    Ok(())
}

fn check_pair(key: &str, value: &str, allow_reserved: bool) -> Result<(), String> {
    if key.is_empty() {
        return Err("Key cannot be blank".into());
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err("Key contains invalid characters".into());
    }
    if key.chars().count() > MAX_KEY_LENGTH {
        return Err(format!(
            "Key is too long (limit: {MAX_KEY_LENGTH} characters)"
        ));
    }
    if !allow_reserved && key.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "Key prefix '{RESERVED_PREFIX}' is reserved for internal use"
        ));
    }
    if value.chars().count() > MAX_VALUE_LENGTH {
        return Err(format!(
            "Value is too long (limit: {MAX_VALUE_LENGTH} characters)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> Meta {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn consuls_rules_and_texts() {
        assert!(validate(&meta(&[("version", "1.2"), ("team_a-b", "")]), false).is_ok());
        let many: Meta = (0..65).map(|i| (format!("k{i}"), String::new())).collect();
        assert_eq!(
            validate(&many, false).unwrap_err(),
            "Node metadata cannot contain more than 64 key/value pairs"
        );
        let sixty_four: Meta = (0..64).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(validate(&sixty_four, false).is_ok());
        for (key, value, why) in [
            ("", "v", "Key cannot be blank"),
            ("a b", "v", "Key contains invalid characters"),
            ("a.b", "v", "Key contains invalid characters"),
            (
                &"k".repeat(129),
                "v",
                "Key is too long (limit: 128 characters)",
            ),
            (
                "consul-x",
                "v",
                "Key prefix 'consul-' is reserved for internal use",
            ),
            (
                "k",
                &"v".repeat(513),
                "Value is too long (limit: 512 characters)",
            ),
        ] {
            let err = validate(&meta(&[(key, value)]), false).unwrap_err();
            assert_eq!(
                err,
                format!("Couldn't load metadata pair ('{key}', '{value}'): {why}")
            );
        }
        assert!(validate(&meta(&[(&"k".repeat(128), &"v".repeat(512))]), false).is_ok());
        assert!(validate(&meta(&[("consul-network-segment", "")]), true).is_ok());
    }
}
