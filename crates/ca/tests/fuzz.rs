//! Hostile CA configurations: bounded-time property runs over random
//! `Config` maps. Decoding never panics; whatever is accepted is stored in
//! a form that decodes again to the same settings (a stored configuration
//! that cannot be read back bricked the CA once); and the CSR limiter
//! built from any accepted rate answers without panicking.

use legate_ca::config::CaConfig;
use legate_ca::limits::CsrLimiter;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const KEYS: &[&str] = &[
    "LeafCertTTL",
    "leaf_cert_ttl",
    "IntermediateCertTTL",
    "RootCertTTL",
    "PrivateKeyType",
    "PrivateKeyBits",
    "CSRMaxPerSecond",
    "csr_max_per_second",
    "CSRMaxConcurrent",
    "PrivateKey",
    "RootCert",
    "ClusterID",
    "Bogus",
];

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(vec![
            1e-30, 0.5, 50.0, 1e300, -1.0, 256.9, 2048.0, 4096.0, 8192.0, 0.0
        ])
        .prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "",
            "NaN",
            "inf",
            "-inf",
            "Infinity",
            "1e-30",
            "72h",
            "1h",
            "8760h",
            "87600h",
            "30m",
            "-1h",
            "ec",
            "rsa",
            "dsa",
            "256",
            "garbage",
            "-----BEGIN PRIVATE KEY-----",
            "99999999999999999999h",
        ])
        .prop_map(|s| Value::String(s.to_string())),
        Just(json!([1, 2])),
        Just(json!({"a": 1})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn accepted_configurations_are_stored_in_a_form_that_reads_back(
        pairs in prop::collection::vec((prop::sample::select(KEYS), value()), 0..6),
        provider in prop::sample::select(vec!["", "consul", "vault"]),
    ) {
        let map: Map<String, Value> =
            pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let Ok(config) = CaConfig::from_map(provider, &map) else { return Ok(()) };
        let stored = config.to_map();
        // The stored form is JSON that survives a trip through Raft's
        // encoding and decodes to the same settings.
        let through_json: Map<String, Value> =
            serde_json::from_str(&serde_json::to_string(&stored).unwrap()).unwrap();
        let again = CaConfig::from_map(&config.provider, &through_json);
        prop_assert_eq!(again.as_ref().ok(), Some(&config), "{:?} from {:?}", again, stored);
        // The limiter built from it answers.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let limiter = CsrLimiter::new(config.csr_max_per_second, config.csr_max_concurrent);
            let _first = limiter.acquire().await;
            let _second = limiter.acquire().await;
        });
    }
}
