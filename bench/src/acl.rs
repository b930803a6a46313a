//! ACL load for BENCHMARKS.md: many tokens made in the store, and the
//! tokens each GET of the read benchmark carries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// The tokens a GET load sends: none, one, or many taken in turn.
pub struct Tokens(Vec<String>);

impl Tokens {
    /// From `--token` and `--tokens-file` (one secret per line).
    pub fn from_args(token: Option<String>, file: Option<String>) -> Result<Tokens> {
        let mut all: Vec<String> = token.into_iter().collect();
        if let Some(path) = file {
            let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
            all.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string));
        }
        Ok(Tokens(all))
    }

    /// The token of request `n` (round robin), if any.
    pub fn nth(&self, n: u64) -> Option<&str> {
        (!self.0.is_empty()).then(|| self.0[(n % self.0.len() as u64) as usize].as_str())
    }
}

/// Creates `count` tokens linking `policy` with `concurrency` clients,
/// authorised by `management`; writes their secrets to `out`, one a line,
/// and prints how fast the store took them.
pub async fn make_tokens(
    client: reqwest::Client,
    url: &str,
    management: &str,
    policy: &str,
    count: u64,
    concurrency: usize,
    out: &str,
) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next) = (client.clone(), next.clone());
        let (url, management, policy) =
            (url.to_string(), management.to_string(), policy.to_string());
        tasks.push(tokio::spawn(async move {
            let mut secrets = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < count {
                let body = serde_json::json!({"Policies": [{"Name": policy}]});
                let response = client
                    .put(format!("{url}/v1/acl/token"))
                    .header("X-Consul-Token", &management)
                    .json(&body)
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!("token create failed: {}", response.status());
                }
                let token: serde_json::Value = response.json().await?;
                secrets.push(token["SecretID"].as_str().unwrap_or_default().to_string());
            }
            Ok::<_, anyhow::Error>(secrets)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let elapsed = started.elapsed();
    std::fs::write(out, all.join("\n") + "\n")?;
    println!(
        "tokens={} seconds={:.2} tokens_per_sec={:.0}",
        all.len(),
        elapsed.as_secs_f64(),
        all.len() as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
