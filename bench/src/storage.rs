//! Storage load for BENCHMARKS.md: fills the KV store with many keys of
//! incompressible values (the live data a storage benchmark measures the
//! agent's memory, snapshot and restart time against).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use base64::Engine;

use crate::Target;

/// A value of `size` bytes that deflate cannot shrink (xorshift output),
/// different for every key.
fn incompressible(seed: u64, size: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut value = Vec::with_capacity(size + 8);
    while value.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        value.extend_from_slice(&state.to_le_bytes());
    }
    value.truncate(size);
    value
}

/// PUTs `keys` keys `prefix/<n>` of `size` bytes each with `concurrency`
/// clients (Legate's `/v1/kv`, or etcd's v3 gateway); prints how many
/// bytes of values were written and how fast.
pub async fn kv_fill(
    client: reqwest::Client,
    target: Target,
    url: &str,
    prefix: &str,
    keys: u64,
    size: usize,
    concurrency: usize,
) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next) = (client.clone(), next.clone());
        let (url, prefix) = (url.to_string(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            let b64 = base64::engine::general_purpose::STANDARD;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= keys {
                    return Ok::<_, anyhow::Error>(());
                }
                let key = format!("{prefix}/{n:08}");
                let value = incompressible(n, size);
                let request = match target {
                    Target::Legate => client.put(format!("{url}/v1/kv/{key}")).body(value),
                    Target::Etcd => client.post(format!("{url}/v3/kv/put")).json(
                        &serde_json::json!({"key": b64.encode(key), "value": b64.encode(value)}),
                    ),
                };
                let response = request.send().await?;
                if !response.status().is_success() {
                    bail!("PUT {n}: {}", response.status());
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "keys={keys} value_bytes={} seconds={elapsed:.2} puts_per_second={:.0}",
        keys * size as u64,
        keys as f64 / elapsed
    );
    Ok(())
}
