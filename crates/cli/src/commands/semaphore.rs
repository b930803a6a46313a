//! `lock -n N` (N > 1): Consul's semaphore (`api.Semaphore`). Each
//! contender holds its own key `<prefix>/<session>` with its session; the
//! key `<prefix>/.lock` holds `{"Limit": N, "Holders": {session: true}}`,
//! changed only by check-and-set. A contender takes a slot by adding its
//! session to the holders while fewer than the limit hold one (holders
//! whose contender key lost its session are pruned first), waits on the
//! prefix otherwise, and gives its slot back by removing itself.

use std::collections::BTreeMap;
use std::time::Instant;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::Client;

/// The flags Consul's API gives semaphore keys (`api.SemaphoreFlagValue`).
pub const SEMAPHORE_FLAG_VALUE: u64 = 0xe0f6_9a2b_aa41_4de0;

/// The `.lock` key's value.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Slots {
    #[serde(rename = "Limit")]
    limit: u32,
    #[serde(rename = "Holders")]
    holders: BTreeMap<String, bool>,
}

/// One read of the prefix: the `.lock` key (its modify index, 0 when
/// absent, and its slots), the contender keys held by a session, and the
/// index to block on.
struct View {
    lock_index: u64,
    slots: Slots,
    live: Vec<String>,
    index: u64,
}

async fn read(client: &Client, prefix: &str, index: u64) -> Result<View, String> {
    let query = [
        ("recurse", String::new()),
        ("index", index.to_string()),
        ("wait", "15s".to_string()),
    ];
    let (status, index, body) = client
        .exchange(Method::GET, &format!("/v1/kv/{prefix}/"), &query, None)
        .await
        .map_err(|e| e.to_string())?;
    let entries: Vec<Value> = match status.as_u16() {
        404 => Vec::new(),
        s if (200..300).contains(&s) => serde_json::from_slice(&body).map_err(|e| e.to_string())?,
        _ => return Err(String::from_utf8_lossy(&body).to_string()),
    };
    let mut view = View {
        lock_index: 0,
        slots: Slots::default(),
        live: Vec::new(),
        index,
    };
    let lock_key = format!("{prefix}/.lock");
    for entry in entries {
        let key = entry["Key"].as_str().unwrap_or_default();
        if key == lock_key {
            view.lock_index = entry["ModifyIndex"].as_u64().unwrap_or(0);
            let raw = entry["Value"].as_str().unwrap_or_default();
            let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, raw)
                .unwrap_or_default();
            view.slots = serde_json::from_slice(&bytes).unwrap_or_default();
        } else if entry["Session"].as_str().is_some_and(|s| !s.is_empty()) {
            if let Some(session) = key.strip_prefix(&format!("{prefix}/")) {
                view.live.push(session.to_string());
            }
        }
    }
    Ok(view)
}

async fn write_slots(
    client: &Client,
    prefix: &str,
    cas: u64,
    slots: &Slots,
) -> Result<bool, String> {
    let body = serde_json::to_vec(slots).map_err(|e| e.to_string())?;
    let (status, answer) = client
        .call(
            Method::PUT,
            &format!("/v1/kv/{prefix}/.lock"),
            &[
                ("cas", cas.to_string()),
                ("flags", SEMAPHORE_FLAG_VALUE.to_string()),
            ],
            Some(body),
        )
        .await
        .map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(String::from_utf8_lossy(&answer).to_string());
    }
    Ok(answer.trim_ascii() == b"true")
}

/// Takes one of `limit` slots; `false` when `deadline` passed first.
pub async fn acquire(
    client: &Client,
    prefix: &str,
    session: &str,
    limit: u32,
    deadline: Option<Instant>,
) -> Result<bool, String> {
    let (status, answer) = client
        .call(
            Method::PUT,
            &format!("/v1/kv/{prefix}/{session}"),
            &[
                ("acquire", session.to_string()),
                ("flags", SEMAPHORE_FLAG_VALUE.to_string()),
            ],
            Some(Vec::new()),
        )
        .await
        .map_err(|e| e.to_string())?;
    if !status.is_success() || answer.trim_ascii() != b"true" {
        return Err("failed to make contender entry".into());
    }
    let mut index = 0;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        let view = match deadline {
            Some(d) => match tokio::time::timeout(
                d.saturating_duration_since(Instant::now()),
                read(client, prefix, index),
            )
            .await
            {
                Ok(view) => view?,
                Err(_) => return Ok(false),
            },
            None => read(client, prefix, index).await?,
        };
        if view.lock_index != 0 && view.slots.limit != limit {
            return Err(format!(
                "semaphore limit conflict (lock: {}, local: {limit})",
                view.slots.limit
            ));
        }
        let mut slots = Slots {
            limit,
            holders: view
                .slots
                .holders
                .into_iter()
                .filter(|(holder, _)| view.live.contains(holder))
                .collect(),
        };
        if slots.holders.len() < limit as usize {
            slots.holders.insert(session.to_string(), true);
            if write_slots(client, prefix, view.lock_index, &slots).await? {
                return Ok(true);
            }
            // Another contender changed the slots first: read again.
            index = 0;
            continue;
        }
        index = view.index;
    }
}

/// Resolves once `session` no longer holds a slot.
pub async fn lost(client: &Client, prefix: &str, session: &str) {
    let mut index = 0;
    loop {
        match read(client, prefix, index).await {
            Ok(view)
                if view.slots.holders.contains_key(session)
                    && view.live.iter().any(|s| s == session) =>
            {
                index = view.index;
            }
            Ok(_) => return,
            Err(_) => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
        }
    }
}

/// Gives the slot back and removes the contender key.
pub async fn release(client: &Client, prefix: &str, session: &str) {
    for _ in 0..10 {
        let Ok(view) = read(client, prefix, 0).await else {
            break;
        };
        let mut slots = view.slots;
        if slots.holders.remove(session).is_none() {
            break;
        }
        if write_slots(client, prefix, view.lock_index, &slots)
            .await
            .unwrap_or(false)
        {
            break;
        }
    }
    let _ = client
        .call(
            Method::DELETE,
            &format!("/v1/kv/{prefix}/{session}"),
            &[],
            None,
        )
        .await;
}
