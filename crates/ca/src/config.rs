//! The CA configuration (`connect { ca_provider, ca_config {} }` and
//! `/v1/connect/ca/configuration`), with Consul's keys, defaults and rules.

use std::time::Duration;

use legate_types::duration::{format_go_duration, parse_go_duration};
use serde_json::{Map, Value};

use crate::CaError;

/// Settings of a CA provider.
#[derive(Debug, Clone, PartialEq)]
pub struct CaConfig {
    /// Provider name (`consul` is the built-in one).
    pub provider: String,
    /// A PEM private key to use instead of generating one.
    pub private_key: Option<String>,
    /// A PEM root certificate matching `private_key`.
    pub root_cert: Option<String>,
    /// Lifetime of leaf certificates (72h; 1h..1y).
    pub leaf_cert_ttl: Duration,
    /// Lifetime of intermediates (8760h).
    pub intermediate_cert_ttl: Duration,
    /// Lifetime of generated roots (87600h).
    pub root_cert_ttl: Duration,
    /// `ec` (default) or `rsa`.
    pub private_key_type: String,
    /// Key size (256 for ec).
    pub private_key_bits: u32,
    /// CSRs signed per second per server (50; 0 switches to the concurrency limit).
    pub csr_max_per_second: f64,
    /// Concurrent CSR signings per server when the rate limit is off (0: unlimited).
    pub csr_max_concurrent: u32,
}

impl Default for CaConfig {
    fn default() -> Self {
        CaConfig {
            provider: "consul".into(),
            private_key: None,
            root_cert: None,
            leaf_cert_ttl: Duration::from_secs(72 * 3600),
            intermediate_cert_ttl: Duration::from_secs(8760 * 3600),
            root_cert_ttl: Duration::from_secs(87600 * 3600),
            private_key_type: "ec".into(),
            private_key_bits: 256,
            csr_max_per_second: 50.0,
            csr_max_concurrent: 0,
        }
    }
}

fn duration(value: &Value, key: &str) -> Result<Duration, CaError> {
    let bad = |why: String| CaError::Config(format!("{key}: {why}"));
    match value {
        Value::String(s) => parse_go_duration(s).map_err(bad),
        Value::Number(n) => legate_types::duration::from_json_nanos(n).map_err(bad),
        other => Err(bad(format!(
            "expected a duration such as \"72h\", got {other}"
        ))),
    }
}

/// A finite number (JSON numbers, or strings holding one). `NaN` and
/// infinities are refused: they cannot be stored as JSON.
fn number(value: &Value, key: &str) -> Result<f64, CaError> {
    let n = match value {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| CaError::Config(format!("{key}: invalid number {n}")))?,
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| CaError::Config(format!("{key}: {s:?} is not a number")))?,
        other => {
            return Err(CaError::Config(format!(
                "{key}: expected a number, got {other}"
            )))
        }
    };
    if !n.is_finite() {
        return Err(CaError::Config(format!(
            "{key}: {value} is not a finite number"
        )));
    }
    Ok(n)
}

/// A whole number from 0 to `u32::MAX` (`PrivateKeyBits`, `CSRMaxConcurrent`).
fn whole_number(value: &Value, key: &str) -> Result<u32, CaError> {
    let n = number(value, key)?;
    if n.fract() != 0.0 || n < 0.0 || n > u32::MAX as f64 {
        return Err(CaError::Config(format!(
            "{key}: expected a whole number from 0 to {}, got {value}",
            u32::MAX
        )));
    }
    Ok(n as u32)
}

fn text(value: &Value, key: &str) -> Result<String, CaError> {
    value
        .as_str()
        .map(String::from)
        .ok_or_else(|| CaError::Config(format!("{key}: expected a string, got {value}")))
}

/// Folds `leaf_cert_ttl`, `LeafCertTTL` and `leafcertttl` to one key.
fn fold(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_')
        .collect::<String>()
        .to_ascii_lowercase()
}

impl CaConfig {
    /// Reads a provider's `Config` map (either key spelling), on top of the
    /// defaults, and validates it.
    pub fn from_map(provider: &str, config: &Map<String, Value>) -> Result<CaConfig, CaError> {
        let mut c = CaConfig {
            provider: if provider.is_empty() {
                "consul".into()
            } else {
                provider.to_string()
            },
            ..CaConfig::default()
        };
        let mut bits_given = false;
        for (key, value) in config {
            match fold(key).as_str() {
                "privatekey" => c.private_key = Some(text(value, key)?).filter(|s| !s.is_empty()),
                "rootcert" => c.root_cert = Some(text(value, key)?).filter(|s| !s.is_empty()),
                "leafcertttl" => c.leaf_cert_ttl = duration(value, key)?,
                "intermediatecertttl" => c.intermediate_cert_ttl = duration(value, key)?,
                "rootcertttl" => c.root_cert_ttl = duration(value, key)?,
                "privatekeytype" => c.private_key_type = text(value, key)?.to_ascii_lowercase(),
                "privatekeybits" => {
                    bits_given = true;
                    c.private_key_bits = whole_number(value, key)?
                }
                "csrmaxpersecond" => c.csr_max_per_second = number(value, key)?,
                "csrmaxconcurrent" => c.csr_max_concurrent = whole_number(value, key)?,
                // Accepted for compatibility; Legate's built-in provider has no use for them.
                "clusterid"
                | "disablecrosssigning"
                | "rotationperiod"
                | "intermediatecertttlbefore" => {}
                _ => return Err(CaError::Config(format!("invalid CA config key {key:?}"))),
            }
        }
        if c.private_key_type == "rsa" && !bits_given {
            c.private_key_bits = 2048;
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks Consul's rules.
    pub fn validate(&self) -> Result<(), CaError> {
        if self.provider != "consul" {
            return Err(CaError::Config(format!(
                "CA provider {:?} is not supported; the built-in provider is \"consul\"",
                self.provider
            )));
        }
        let hour = Duration::from_secs(3600);
        if self.leaf_cert_ttl < hour {
            return Err(CaError::Config(
                "leaf cert TTL must be greater or equal than 1h0m0s".into(),
            ));
        }
        if self.leaf_cert_ttl > 8760 * hour {
            return Err(CaError::Config(
                "leaf cert TTL must be less than 8760h0m0s".into(),
            ));
        }
        if self.intermediate_cert_ttl < self.leaf_cert_ttl * 3 {
            return Err(CaError::Config(format!(
                "Intermediate Cert TTL must be greater or equal than 3 * LeafCertTTL (>={}).",
                format_go_duration(self.leaf_cert_ttl * 3)
            )));
        }
        if self.root_cert_ttl <= self.intermediate_cert_ttl {
            return Err(CaError::Config(format!(
                "root cert TTL is set and is not greater than intermediate cert ttl. root cert ttl: {}, intermediate cert ttl: {}",
                format_go_duration(self.root_cert_ttl),
                format_go_duration(self.intermediate_cert_ttl)
            )));
        }
        match (self.private_key_type.as_str(), self.private_key_bits) {
            ("ec", 256) => {}
            ("ec", 224 | 384 | 521) => {
                return Err(CaError::Config(format!(
                "EC keys of {} bits are valid in Consul but not supported by Legate yet; use 256",
                self.private_key_bits
            )))
            }
            ("ec", bits) => {
                return Err(CaError::Config(format!(
                    "EC key length must be one of (224, 256, 384, 521) bits, not {bits}"
                )))
            }
            ("rsa", 2048 | 4096) => {}
            ("rsa", bits) => {
                return Err(CaError::Config(format!(
                    "RSA key length must be 2048 or 4096 bits, not {bits}"
                )))
            }
            (other, _) => {
                return Err(CaError::Config(format!(
                    "private key type must be either 'ec' or 'rsa', not {other:?}"
                )))
            }
        }
        if self.csr_max_per_second < 0.0 {
            return Err(CaError::Config(
                "csr_max_per_second must not be negative".into(),
            ));
        }
        if self.private_key.is_some() != self.root_cert.is_some() {
            return Err(CaError::Config(
                "PrivateKey and RootCert must be given together".into(),
            ));
        }
        Ok(())
    }

    /// Checks an operator's `PrivateKey` and `RootCert` (parseable, a CA,
    /// the key the certificate's): done on writes, so a bad pair is refused
    /// with a 400 before anything is stored.
    pub fn check_key_material(&self) -> Result<(), CaError> {
        match (&self.private_key, &self.root_cert) {
            (Some(key), Some(cert)) => crate::builtin::root_from_pem(cert, key).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// The `Config` map as `/v1/connect/ca/configuration` shows it.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "LeafCertTTL".into(),
            Value::String(format_go_duration(self.leaf_cert_ttl)),
        );
        m.insert(
            "IntermediateCertTTL".into(),
            Value::String(format_go_duration(self.intermediate_cert_ttl)),
        );
        m.insert(
            "RootCertTTL".into(),
            Value::String(format_go_duration(self.root_cert_ttl)),
        );
        m.insert(
            "PrivateKeyType".into(),
            Value::String(self.private_key_type.clone()),
        );
        m.insert("PrivateKeyBits".into(), Value::from(self.private_key_bits));
        // Whole rates print as integers (`50`, not `50.0`), as Consul shows them.
        let rate = self.csr_max_per_second;
        m.insert(
            "CSRMaxPerSecond".into(),
            if rate.fract() == 0.0 && rate < u32::MAX as f64 {
                Value::from(rate as u64)
            } else {
                serde_json::json!(rate)
            },
        );
        m.insert(
            "CSRMaxConcurrent".into(),
            Value::from(self.csr_max_concurrent),
        );
        if let Some(k) = &self.private_key {
            m.insert("PrivateKey".into(), Value::String(k.clone()));
        }
        if let Some(r) = &self.root_cert {
            m.insert("RootCert".into(), Value::String(r.clone()));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn defaults_and_both_spellings() {
        let c = CaConfig::from_map("", &Map::new()).unwrap();
        assert_eq!(c, CaConfig::default());
        let c = CaConfig::from_map(
            "consul",
            &map(json!({"leaf_cert_ttl": "24h", "CSRMaxPerSecond": 5, "csr_max_concurrent": 2})),
        )
        .unwrap();
        assert_eq!(c.leaf_cert_ttl, Duration::from_secs(24 * 3600));
        assert_eq!(c.csr_max_per_second, 5.0);
        assert_eq!(c.csr_max_concurrent, 2);
        let round = CaConfig::from_map("consul", &c.to_map()).unwrap();
        assert_eq!(round, c);
    }

    #[test]
    fn consul_rules_with_their_messages() {
        for (config, needle) in [
            (
                json!({"LeafCertTTL": "30m"}),
                "greater or equal than 1h0m0s",
            ),
            (json!({"LeafCertTTL": "9000h"}), "less than 8760h0m0s"),
            (
                json!({"LeafCertTTL": "72h", "IntermediateCertTTL": "100h"}),
                "3 * LeafCertTTL (>=216h0m0s)",
            ),
            (
                json!({"RootCertTTL": "100h", "IntermediateCertTTL": "500h"}),
                "not greater than intermediate cert ttl",
            ),
            (json!({"PrivateKeyType": "dsa"}), "either 'ec' or 'rsa'"),
            (
                json!({"PrivateKeyType": "ec", "PrivateKeyBits": 100}),
                "EC key length",
            ),
            (
                json!({"PrivateKeyType": "rsa", "PrivateKeyBits": 1024}),
                "RSA key length must be 2048 or 4096 bits",
            ),
            (
                json!({"PrivateKeyType": "rsa", "PrivateKeyBits": 4097}),
                "RSA key length must be 2048 or 4096 bits",
            ),
            (
                json!({"PrivateKeyType": "rsa", "PrivateKeyBits": 8192}),
                "RSA key length must be 2048 or 4096 bits",
            ),
            (json!({"PrivateKeyBits": 256.9}), "whole number"),
            (json!({"PrivateKeyBits": -256}), "whole number"),
            (json!({"PrivateKeyBits": 1e12}), "whole number"),
            (json!({"CSRMaxConcurrent": 1.5}), "whole number"),
            (json!({"CSRMaxPerSecond": "NaN"}), "not a finite number"),
            (json!({"CSRMaxPerSecond": "inf"}), "not a finite number"),
            (
                json!({"CSRMaxPerSecond": "-Infinity"}),
                "not a finite number",
            ),
            (json!({"CSRMaxPerSecond": null}), "expected a number"),
            (json!({"LeafCertTTL": "soon"}), "LeafCertTTL"),
            (json!({"NoSuchKey": 1}), "invalid CA config key"),
            (
                json!({"PrivateKey": "-----BEGIN PRIVATE KEY-----"}),
                "together",
            ),
        ] {
            let err = CaConfig::from_map("consul", &map(config.clone())).unwrap_err();
            assert!(err.to_string().contains(needle), "{config}: {err}");
        }
        assert!(CaConfig::from_map("vault", &Map::new())
            .unwrap_err()
            .to_string()
            .contains("not supported"));
    }
}
