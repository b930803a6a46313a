//! `GET /v1/agent/host` (`operator:read`) and `GET /v1/agent/version`.
//! The host's facts in the shape Consul's gopsutil-based answer has
//! (`Memory`, `CPU`, `Host`, `Disk`, `CollectionTime`, `Errors`), read
//! from `/proc`, `uname` and `statvfs`; what cannot be read is named in
//! `Errors` and the rest still answers.

use std::collections::BTreeMap;

use axum::extract::State;
use legate_acl::{Access, Resource};
use serde_json::{json, Value};

use crate::agent_acl::check;
use crate::util::{json as json_body, ApiResult};
use crate::{AppState, Req};

/// `/proc/meminfo` in bytes, by its own names.
fn meminfo() -> Result<BTreeMap<String, u64>, String> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("memory: {e}"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((name.to_string(), kib * 1024))
        })
        .collect())
}

fn memory() -> Result<Value, String> {
    let m = meminfo()?;
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let total = get("MemTotal");
    let available = get("MemAvailable");
    let used = total.saturating_sub(available);
    Ok(json!({
        "total": total,
        "available": available,
        "used": used,
        "usedPercent": if total == 0 { 0.0 } else { used as f64 * 100.0 / total as f64 },
        "free": get("MemFree"),
        "active": get("Active"),
        "inactive": get("Inactive"),
        "wired": 0,
        "laundry": 0,
        "buffers": get("Buffers"),
        "cached": get("Cached"),
        "writeBack": get("Writeback"),
        "dirty": get("Dirty"),
        "writeBackTmp": get("WritebackTmp"),
        "shared": get("Shmem"),
        "slab": get("Slab"),
        "sreclaimable": get("SReclaimable"),
        "sunreclaim": get("SUnreclaim"),
        "pageTables": get("PageTables"),
        "swapCached": get("SwapCached"),
        "commitLimit": get("CommitLimit"),
        "committedAS": get("Committed_AS"),
        "highTotal": get("HighTotal"),
        "highFree": get("HighFree"),
        "lowTotal": get("LowTotal"),
        "lowFree": get("LowFree"),
        "swapTotal": get("SwapTotal"),
        "swapFree": get("SwapFree"),
        "mapped": get("Mapped"),
        "vmallocTotal": get("VmallocTotal"),
        "vmallocUsed": get("VmallocUsed"),
        "vmallocChunk": get("VmallocChunk"),
        "hugePagesTotal": get("HugePages_Total") / 1024,
        "hugePagesFree": get("HugePages_Free") / 1024,
        "hugePageSize": get("Hugepagesize"),
    }))
}

/// One entry per processor of `/proc/cpuinfo`.
fn cpus() -> Result<Value, String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").map_err(|e| format!("cpu: {e}"))?;
    let mut out = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let field = |name: &str| -> String {
            block
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == name).then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let number = |name: &str| field(name).parse::<i64>().unwrap_or(0);
        out.push(json!({
            "cpu": number("processor"),
            "vendorId": field("vendor_id"),
            "family": field("cpu family"),
            "model": field("model"),
            "stepping": number("stepping"),
            "physicalId": field("physical id"),
            "coreId": field("core id"),
            "cores": number("cpu cores").max(1),
            "modelName": field("model name"),
            "mhz": field("cpu MHz").parse::<f64>().unwrap_or(0.0),
            "cacheSize": field("cache size").trim_end_matches(" KB").parse::<i64>().unwrap_or(0),
            "flags": field("flags").split_whitespace().collect::<Vec<_>>(),
            "microcode": field("microcode"),
        }));
    }
    Ok(Value::Array(out))
}

fn uname() -> Option<[String; 4]> {
    // SAFETY: uname fills the zeroed struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let text = |field: &[libc::c_char]| {
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).to_string()
    };
    Some([
        text(&u.nodename),
        text(&u.sysname),
        text(&u.release),
        text(&u.machine),
    ])
}

fn host() -> Result<Value, String> {
    let [hostname, os, kernel, arch] = uname().ok_or("host: uname failed")?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let procs = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count()
        })
        .unwrap_or(0);
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let release = |key: &str| {
        os_release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default()
    };
    Ok(json!({
        "hostname": hostname,
        "uptime": uptime as u64,
        "bootTime": now.saturating_sub(uptime as u64),
        "procs": procs,
        "os": os.to_ascii_lowercase(),
        "platform": release("ID"),
        "platformFamily": release("ID_LIKE"),
        "platformVersion": release("VERSION_ID"),
        "kernelVersion": kernel,
        "kernelArch": arch,
        "virtualizationSystem": "",
        "virtualizationRole": "",
        "hostId": std::fs::read_to_string("/etc/machine-id").unwrap_or_default().trim(),
    }))
}

fn disk() -> Result<Value, String> {
    // SAFETY: statvfs fills the zeroed struct for the NUL-terminated path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c"/".as_ptr(), &mut s) } != 0 {
        return Err(format!("disk: {}", std::io::Error::last_os_error()));
    }
    let block = s.f_frsize as u64;
    let total = s.f_blocks as u64 * block;
    let free = s.f_bavail as u64 * block;
    let used = total.saturating_sub(s.f_bfree as u64 * block);
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 * 100.0 / whole as f64
        }
    };
    let inodes = s.f_files as u64;
    let inodes_free = s.f_ffree as u64;
    Ok(json!({
        "path": "/",
        "fstype": "",
        "total": total,
        "free": free,
        "used": used,
        "usedPercent": percent(used, used + free),
        "inodesTotal": inodes,
        "inodesUsed": inodes.saturating_sub(inodes_free),
        "inodesFree": inodes_free,
        "inodesUsedPercent": percent(inodes.saturating_sub(inodes_free), inodes),
    }))
}

pub async fn agent_host(State(st): State<AppState>, req: Req) -> ApiResult {
    check(&st, &req, Resource::Operator, "", Access::Read).await?;
    let mut errors = Vec::new();
    let mut take = |fact: Result<Value, String>| {
        fact.unwrap_or_else(|e| {
            errors.push(Value::String(e));
            Value::Null
        })
    };
    let body = json!({
        "Memory": take(memory()),
        "CPU": take(cpus()),
        "Host": take(host()),
        "Disk": take(disk()),
        "CollectionTime": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as i64,
        "Errors": if errors.is_empty() { Value::Null } else { Value::Array(errors) },
    });
    Ok(json_body(&req.params, &body))
}

/// `GET /v1/agent/version`: no ACL, as Consul's.
pub async fn agent_version(req: Req) -> ApiResult {
    Ok(json_body(
        &req.params,
        &json!({
            "SHA": format!("legate-{}", legate_types::LEGATE_VERSION),
            "BuildDate": "",
            "HumanVersion": legate_types::CONSUL_API_VERSION,
            "FIPS": "",
        }),
    ))
}
