//! Login load for BENCHMARKS.md: a `jwt` auth method with a key this
//! process holds, a binding rule giving each identity a service identity,
//! and `count` logins (each a distinct workload's JWT, signed before the
//! clock starts), optionally each followed by its logout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use legate_auth::signer::{now, Signer};
use serde_json::json;

/// `legate-bench logins`.
#[derive(clap::Args)]
pub struct LoginArgs {
    /// The agent's HTTP address.
    #[arg(long)]
    url: String,
    /// A management token, to make the auth method and binding rule.
    #[arg(long)]
    management: String,
    /// How many logins.
    #[arg(long, default_value_t = 100_000)]
    count: usize,
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Log each token out right after its login.
    #[arg(long)]
    logout: bool,
}

async fn put(
    client: &reqwest::Client,
    url: String,
    token: &str,
    body: serde_json::Value,
) -> Result<()> {
    let response = client
        .put(url)
        .header("X-Consul-Token", token)
        .json(&body)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("{}: {}", response.status(), response.text().await?);
    }
    Ok(())
}

/// Makes the method and rule, signs the JWTs, then logs in with all of
/// them; prints the rate.
pub async fn run(client: reqwest::Client, args: LoginArgs) -> Result<()> {
    let signer = Signer::generate();
    let method = "bench-jwt";
    put(
        &client,
        format!("{}/v1/acl/auth-method", args.url),
        &args.management,
        json!({"Name": method, "Type": "jwt", "Config": {
            "JWTValidationPubKeys": [signer.public_pem()],
            "BoundAudiences": ["bench"],
            "ClaimMappings": {"sub": "workload"}}}),
    )
    .await?;
    put(
        &client,
        format!("{}/v1/acl/binding-rule", args.url),
        &args.management,
        json!({"AuthMethod": method, "BindType": "service",
            "BindName": "svc-${value.workload}"}),
    )
    .await?;
    let signing = Instant::now();
    let issued = now();
    let jwts: Arc<Vec<String>> = Arc::new(
        (0..args.count)
            .map(|i| {
                let claims = json!({"sub": format!("w{i}"), "aud": "bench",
                    "iat": issued, "exp": issued + 3600});
                signer.sign(&claims, None)
            })
            .collect(),
    );
    println!(
        "signed={} signing_seconds={:.2} (not counted)",
        jwts.len(),
        signing.elapsed().as_secs_f64()
    );
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, next, jwts) = (client.clone(), next.clone(), jwts.clone());
        let (url, logout) = (args.url.clone(), args.logout);
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(jwt) = jwts.get(n) else {
                    return Ok::<_, anyhow::Error>(());
                };
                let response = client
                    .post(format!("{url}/v1/acl/login"))
                    .json(&json!({"AuthMethod": method, "BearerToken": jwt}))
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!("login: {}: {}", response.status(), response.text().await?);
                }
                let token: serde_json::Value = response.json().await?;
                if logout {
                    let secret = token["SecretID"].as_str().unwrap_or_default();
                    let response = client
                        .post(format!("{url}/v1/acl/logout"))
                        .header("X-Consul-Token", secret)
                        .send()
                        .await?;
                    if !response.status().is_success() {
                        bail!("logout: {}", response.status());
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "logins={} logout={} seconds={elapsed:.2} logins_per_sec={:.0}",
        jwts.len(),
        args.logout,
        jwts.len() as f64 / elapsed
    );
    Ok(())
}
