//! The ACL caches' bounds are configurable (`acl.token_cache_size`,
//! `acl.policy_cache_size`, Legate's keys) and count what they let go to
//! make room (`consul_acl_cache_evictions` in `/v1/agent/metrics`); a size
//! below 1 stops the agent naming the key.

mod common;

use std::process::Command;

use common::acl::{Acl, ROOT};
use common::binary;

/// The evictions `/v1/agent/metrics` reports for `cache` on the servers
/// (cumulative, in the Prometheus form).
fn evictions(acl: &Acl, cache: &str) -> f64 {
    let (status, _, text) = acl.call(
        "GET",
        "/v1/agent/metrics?format=prometheus",
        Some(ROOT),
        None,
    );
    assert_eq!(status, 200, "{text}");
    common::prometheus::sum(
        &text,
        "consul_acl_cache_evictions",
        &[("cache", cache), ("side", "server")],
    )
}

#[test]
fn a_small_token_cache_evicts_counts_and_still_answers() {
    let acl = Acl::start_with(
        "token_cache_size = 2 policy_cache_size = 1",
        &[common::prometheus::RETENTION],
    );
    let mut secrets = Vec::new();
    for n in 0..4 {
        secrets.push(
            acl.token_with_rules(&format!("kv-{n}"), "key_prefix \"\" { policy = \"read\" }"),
        );
    }
    acl.json("PUT", "/v1/kv/k", ROOT, Some("v"));
    assert_eq!(evictions(&acl, "token"), 0.0);
    for round in 0..2 {
        for secret in &secrets {
            let (status, _, body) = acl.call("GET", "/v1/kv/k", Some(secret), None);
            assert_eq!(status, 200, "round {round}: {body}");
        }
    }
    assert!(
        evictions(&acl, "token") >= 2.0,
        "four tokens through a cache of two"
    );
    assert!(
        evictions(&acl, "policy") >= 1.0,
        "four policies through a cache of one"
    );
}

#[test]
fn a_cache_size_below_one_stops_the_agent() {
    let out = Command::new(binary())
        .args([
            "agent",
            "-dev",
            "-http-port=-1",
            "-dns-port=-1",
            "-grpc-port=-1",
        ])
        .arg("-hcl=acl { enabled = true token_cache_size = 0 }")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("acl.token_cache_size must be a whole number of at least 1, not 0"),
        "{text}"
    );
}
