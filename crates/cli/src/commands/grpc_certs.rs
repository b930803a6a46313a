//! `legate connect grpc-certs`: gives a proxyless gRPC application its mesh
//! identity. Writes the service's leaf certificate, key and the CA roots as
//! PEM files (and, with `-bootstrap`, a gRPC xDS bootstrap whose
//! `file_watcher` certificate provider reads them), then keeps the files
//! current as the leaf renews and roots rotate, until interrupted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use legate_types::connect::{IndexedCaRoots, IssuedCert};
use serde_json::{json, Value};

use super::connect::grpc_address;
use super::fail;
use crate::client::{Client, HttpFlags};

/// The certificate provider instance the bootstrap declares and the node
/// metadata names, so the agent sends clusters that use it.
pub const PROVIDER_INSTANCE: &str = "legate";

/// Leaf certificate chain file name.
pub const CERT_FILE: &str = "cert.pem";
/// Private key file name.
pub const KEY_FILE: &str = "key.pem";
/// CA roots file name.
pub const ROOTS_FILE: &str = "roots.pem";

/// Flags of `connect grpc-certs`.
#[derive(Args, Debug)]
pub struct GrpcCertsArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The Connect-native service whose identity to write.
    #[arg(long)]
    service: Option<String>,
    /// The directory for cert.pem, key.pem and roots.pem (created if missing).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write a gRPC xDS bootstrap file here (for GRPC_XDS_BOOTSTRAP).
    #[arg(long)]
    bootstrap: Option<PathBuf>,
    /// The bootstrap's node id: the native service's registration id
    /// (default: the only local native instance of -service).
    #[arg(long = "node-id")]
    node_id: Option<String>,
    /// The agent's gRPC address for the bootstrap (env CONSUL_GRPC_ADDR; default: the agent's xDS port).
    #[arg(long = "grpc-addr")]
    grpc_addr: Option<String>,
    /// How often gRPC re-reads the files (bootstrap `refresh_interval`).
    #[arg(long = "refresh-interval", default_value = "10s")]
    refresh_interval: String,
    /// Write the files once and exit instead of keeping them current.
    #[arg(long)]
    once: bool,
}

/// Writes `contents` to `path` through a temporary file and a rename, so a
/// reader never sees half a file.
fn write_atomically(path: &Path, contents: &str, private: bool) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    let mut file = options.open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn write_leaf(dir: &Path, leaf: &IssuedCert) -> std::io::Result<()> {
    // The key first: a reader pairing files mid-update sees the new key
    // with the old certificate only briefly, and gRPC keeps its last good pair.
    write_atomically(&dir.join(KEY_FILE), &leaf.private_key_pem, true)?;
    write_atomically(&dir.join(CERT_FILE), &leaf.cert_pem, false)
}

fn write_roots(dir: &Path, roots: &IndexedCaRoots) -> std::io::Result<()> {
    let bundle: String = roots
        .roots
        .iter()
        .map(|r| format!("{}\n", r.root_cert.trim_end()))
        .collect();
    write_atomically(&dir.join(ROOTS_FILE), &bundle, false)
}

/// The gRPC bootstrap: the agent as xDS server, the node (with the metadata
/// that asks for mTLS clusters) and a file-watching certificate provider.
pub fn grpc_bootstrap(
    server: &str,
    node_id: &str,
    service: &str,
    dir: &Path,
    refresh_interval: &str,
) -> Value {
    let file = |name: &str| dir.join(name).to_string_lossy().to_string();
    json!({
        "xds_servers": [{
            "server_uri": server,
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }],
        "node": {
            "id": node_id,
            "cluster": service,
            "metadata": {legate_xds::grpc::CERTIFICATE_PROVIDER_METADATA: PROVIDER_INSTANCE},
        },
        "certificate_providers": {
            PROVIDER_INSTANCE: {
                "plugin_name": "file_watcher",
                "config": {
                    "certificate_file": file(CERT_FILE),
                    "private_key_file": file(KEY_FILE),
                    "ca_certificate_file": file(ROOTS_FILE),
                    "refresh_interval": refresh_interval,
                },
            },
        },
    })
}

/// The id of the only local Connect-native instance of `service`.
async fn native_instance(client: &Client, service: &str) -> Result<String, String> {
    let services: serde_json::Map<String, Value> = client
        .get_json("/v1/agent/services", &[])
        .await
        .map_err(|e| format!("Error listing local services: {e}"))?;
    let ids: Vec<&String> = services
        .iter()
        .filter(|(_, s)| {
            s["Service"] == service && s["Connect"]["Native"].as_bool().unwrap_or(false)
        })
        .map(|(id, _)| id)
        .collect();
    match ids.as_slice() {
        [id] => Ok(id.to_string()),
        [] => Err(format!(
            "No Connect-native instance of {service:?} is registered with this agent: register one (Connect {{ Native = true }}) or pass -node-id"
        )),
        _ => Err(format!(
            "Several Connect-native instances of {service:?} are registered here: choose one with -node-id"
        )),
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("Error decoding the {what}: {e}"))
}

/// Keeps one file set current: fetches (blocking past `index`) and writes.
async fn follow<F>(client: &Client, path: &str, mut index: u64, mut write: F)
where
    F: FnMut(&[u8]) -> Result<(), String>,
{
    loop {
        match client.get_blocking(path, index).await {
            Ok((body, new_index)) if new_index != index => {
                if let Err(e) = write(&body) {
                    eprintln!("{e}");
                }
                index = new_index;
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("Error watching {path}: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Runs `connect grpc-certs`.
pub async fn run(args: GrpcCertsArgs) -> u8 {
    let Some(service) = args.service.clone().filter(|s| !s.is_empty()) else {
        return fail("The -service flag is required");
    };
    let Some(dir) = args.dir.clone() else {
        return fail("The -dir flag is required");
    };
    if legate_types::duration::parse_go_duration(&args.refresh_interval).is_err() {
        return fail(format!(
            "Invalid -refresh-interval {:?}: expected a duration such as 10s",
            args.refresh_interval
        ));
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(format!("Error creating -dir {}: {e}", dir.display()));
    }
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let client = Client::new(&args.http);
    let leaf_path = format!("/v1/agent/connect/ca/leaf/{service}");
    let roots_path = "/v1/agent/connect/ca/roots";
    // The first round: fail clearly (before writing anything) instead of
    // retrying forever.
    let first = async {
        let bootstrap = match &args.bootstrap {
            None => None,
            Some(path) => {
                let node_id = match &args.node_id {
                    Some(id) => id.clone(),
                    None => native_instance(&client, &service).await?,
                };
                let (host, port) = grpc_address(&client, args.grpc_addr.as_deref()).await?;
                let server = format!("{host}:{port}");
                let config =
                    grpc_bootstrap(&server, &node_id, &service, &dir, &args.refresh_interval);
                Some((path.clone(), config))
            }
        };
        let (body, leaf_index) = client
            .get_blocking(&leaf_path, 0)
            .await
            .map_err(|e| format!("Error fetching the leaf certificate of {service}: {e}"))?;
        let leaf: IssuedCert = decode("leaf certificate", &body)?;
        let (body, roots_index) = client
            .get_blocking(roots_path, 0)
            .await
            .map_err(|e| format!("Error fetching the CA roots: {e}"))?;
        let roots: IndexedCaRoots = decode("CA roots", &body)?;
        write_leaf(&dir, &leaf).map_err(|e| format!("Error writing to {}: {e}", dir.display()))?;
        write_roots(&dir, &roots)
            .map_err(|e| format!("Error writing to {}: {e}", dir.display()))?;
        if let Some((path, bootstrap)) = &bootstrap {
            let text = serde_json::to_string_pretty(bootstrap).unwrap_or_default() + "\n";
            write_atomically(path, &text, false)
                .map_err(|e| format!("Error writing -bootstrap {}: {e}", path.display()))?;
            println!("Wrote the gRPC xDS bootstrap to {}", path.display());
        }
        Ok::<(u64, u64), String>((leaf_index, roots_index))
    };
    let (leaf_index, roots_index) = match first.await {
        Ok(indexes) => indexes,
        Err(e) => return fail(e),
    };
    println!(
        "Wrote {CERT_FILE}, {KEY_FILE} and {ROOTS_FILE} for {service} to {}",
        dir.display()
    );
    if args.once {
        return 0;
    }
    let leaf_dir = dir.clone();
    let leaves = follow(&client, &leaf_path, leaf_index, |body| {
        let leaf: IssuedCert = decode("leaf certificate", body)?;
        write_leaf(&leaf_dir, &leaf).map_err(|e| format!("Error writing the leaf: {e}"))?;
        println!(
            "Renewed the leaf certificate of {service} (serial {})",
            leaf.serial_number
        );
        Ok(())
    });
    let roots = follow(&client, roots_path, roots_index, |body| {
        let roots: IndexedCaRoots = decode("CA roots", body)?;
        write_roots(&dir, &roots).map_err(|e| format!("Error writing the roots: {e}"))?;
        println!("Updated the CA roots (active {})", roots.active_root_id);
        Ok(())
    });
    tokio::select! {
        _ = leaves => 0,
        _ = roots => 0,
        _ = tokio::signal::ctrl_c() => 0,
    }
}
