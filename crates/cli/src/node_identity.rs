//! The node's id: from `node_id`, else the one kept in the data dir, else
//! a new one (random, or derived from the host with
//! `disable_host_node_id = false`), written to the data dir whole.

use legate_agent::config::AgentConfig;

/// Resolves the node id: from config, else the data dir, else a new one.
pub fn node_id(config: &AgentConfig) -> Result<String, String> {
    if !config.node_id.is_empty() {
        uuid::Uuid::parse_str(&config.node_id)
            .map_err(|_| format!("node_id {:?} is not a UUID", config.node_id))?;
        return Ok(config.node_id.to_lowercase());
    }
    if let Some(dir) = &config.data_dir {
        let path = dir.join("node-id");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let id = text.trim().to_string();
            if uuid::Uuid::parse_str(&id).is_ok() {
                return Ok(id);
            }
        }
        let id = new_node_id(config);
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // Written whole or not at all: a crash mid-write must not change
        // the node's identity (its Raft id derives from it).
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &id)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        return Ok(id);
    }
    Ok(new_node_id(config))
}

/// A new node id: random, or with `disable_host_node_id = false` derived
/// from the host's own id as Consul derives it (the host UUID — DMI's
/// product UUID, else `/etc/machine-id`, else the boot id — lowercased,
/// SHA-512 hashed, the first 16 bytes shaped as a UUID), falling back to a
/// random one when the host has none.
fn new_node_id(config: &AgentConfig) -> String {
    if !config.disable_host_node_id {
        if let Some(id) = host_node_id() {
            return id;
        }
        tracing::debug!("no usable host id; the node id is random");
    }
    uuid::Uuid::new_v4().to_string()
}

fn host_node_id() -> Option<String> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim().to_lowercase())
    };
    let machine_id = read("/etc/machine-id").filter(|m| m.len() == 32).map(|m| {
        format!(
            "{}-{}-{}-{}-{}",
            &m[0..8],
            &m[8..12],
            &m[12..16],
            &m[16..20],
            &m[20..32]
        )
    });
    let host = read("/sys/class/dmi/id/product_uuid")
        .filter(|id| !id.is_empty())
        .or(machine_id)
        .or_else(|| read("/proc/sys/kernel/random/boot_id"))?;
    uuid::Uuid::parse_str(&host).ok()?;
    let sum = ring::digest::digest(&ring::digest::SHA512, host.as_bytes());
    let b = sum.as_ref();
    let hex = |bytes: &[u8]| bytes.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!(
        "{}-{}-{}-{}-{}",
        hex(&b[0..4]),
        hex(&b[4..6]),
        hex(&b[6..8]),
        hex(&b[8..10]),
        hex(&b[10..16])
    ))
}
