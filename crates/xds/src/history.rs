//! Each proxy's recent xDS pushes and the resources of its last
//! configuration, for the UI's per-proxy page: bounded to
//! [`PUSHES_KEPT`] pushes per proxy and [`PROXIES_KEPT`] proxies (the one
//! least recently pushed to goes first).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use legate_types::proxy_status::{
    ProxyStatusSource, ProxyXdsStatus, PushRecord, ResourceRecord, PUSHES_KEPT,
};

use crate::resources::Resources;

/// How many proxies' histories are kept.
pub const PROXIES_KEPT: usize = 4096;

#[derive(Default)]
struct Entry {
    resources: Option<Arc<Resources>>,
    pushes: VecDeque<PushRecord>,
    last_push_ms: u64,
}

/// Pushes and configurations per proxy.
#[derive(Default)]
pub struct PushHistory {
    proxies: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for PushHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proxies = self.proxies.lock().map(|p| p.len()).unwrap_or(0);
        f.debug_struct("PushHistory")
            .field("proxies", &proxies)
            .finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl PushHistory {
    /// Records a response sent to `proxy` on stream `stream` from
    /// `resources`; an unanswered push of the same type on that stream is
    /// superseded.
    pub fn sent(
        &self,
        proxy: &str,
        stream: u64,
        resources: Option<&Arc<Resources>>,
        record: (&str, &str, usize, usize),
    ) {
        if proxy.is_empty() {
            return;
        }
        let (type_url, nonce, count, removed) = record;
        let mut proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        if !proxies.contains_key(proxy) && proxies.len() >= PROXIES_KEPT {
            let oldest = proxies
                .iter()
                .min_by_key(|(_, e)| e.last_push_ms)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                proxies.remove(&oldest);
            }
        }
        let entry = proxies.entry(proxy.to_string()).or_default();
        let at = now_ms();
        entry.last_push_ms = at;
        entry.resources = resources.cloned();
        for older in entry
            .pushes
            .iter_mut()
            .filter(|p| p.stream == stream && p.type_url == type_url && p.status == "sent")
        {
            older.status = "superseded".into();
        }
        entry.pushes.push_front(PushRecord {
            stream,
            sent_at_ms: at,
            type_url: type_url.to_string(),
            nonce: nonce.to_string(),
            resources: count,
            removed,
            status: "sent".into(),
            error: String::new(),
        });
        entry.pushes.truncate(PUSHES_KEPT);
    }

    /// Records the proxy's answer on `stream` to the response `nonce` of
    /// `type_url`: an ACK, or a NACK with its error.
    pub fn answered(&self, proxy: &str, stream: u64, answer: (&str, &str, Option<&str>)) {
        let (type_url, nonce, error) = answer;
        let mut proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = proxies.get_mut(proxy) else {
            return;
        };
        if let Some(push) = entry
            .pushes
            .iter_mut()
            .find(|p| p.stream == stream && p.nonce == nonce && p.type_url == type_url)
        {
            match error {
                Some(error) => {
                    push.status = "nacked".into();
                    push.error = error.to_string();
                }
                None => push.status = "acked".into(),
            }
        }
    }
}

impl PushHistory {
    /// Forgets a proxy that was deregistered.
    pub fn forget(&self, proxy: &str) {
        self.proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(proxy);
    }
}

impl ProxyStatusSource for PushHistory {
    fn status(&self, proxy_id: &str) -> Option<ProxyXdsStatus> {
        let proxies = self.proxies.lock().unwrap_or_else(|e| e.into_inner());
        let entry = proxies.get(proxy_id)?;
        let mut resources = Vec::new();
        if let Some(all) = &entry.resources {
            for (type_url, by_name) in &all.by_type {
                for (name, any) in by_name {
                    resources.push(ResourceRecord {
                        type_url: type_url.to_string(),
                        name: name.clone(),
                        version: crate::published::resource_version(name, any),
                        bytes: any.value.len(),
                    });
                }
            }
        }
        Some(ProxyXdsStatus {
            proxy_id: proxy_id.to_string(),
            resources,
            pushes: entry.pushes.iter().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_are_bounded_newest_first_and_answers_land_on_their_push() {
        let history = PushHistory::default();
        for n in 0..PUSHES_KEPT + 5 {
            let nonce = n.to_string();
            history.sent("p", 1, None, ("t", &nonce, 1, 0));
            let error = (n % 2 == 1).then_some("bad listener");
            history.answered("p", 1, ("t", &nonce, error));
        }
        // Another stream of the same proxy reuses nonces: its answers are its own.
        history.sent("p", 2, None, ("t", "1", 1, 0));
        history.sent("p", 2, None, ("u", "2", 1, 0));
        history.sent("p", 2, None, ("u", "3", 1, 0));
        history.answered("p", 2, ("u", "3", None));
        history.answered("unknown", 1, ("t", "1", None));
        let status = history.status("p").unwrap();
        assert_eq!(status.pushes.len(), PUSHES_KEPT);
        let states: Vec<(u64, &str)> = status.pushes[..5]
            .iter()
            .map(|p| (p.stream, p.status.as_str()))
            .collect();
        assert_eq!(
            states,
            [
                (2, "acked"),
                (2, "superseded"),
                (2, "sent"),
                (1, "acked"),
                (1, "nacked")
            ]
        );
        assert_eq!(status.pushes[4].error, "bad listener");
        assert!(history.status("unknown").is_none());
        assert!(status.resources.is_empty());
        history.forget("p");
        assert!(history.status("p").is_none());
    }
}
