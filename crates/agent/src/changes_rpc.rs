//! The agent's side of batched watches: a shared cache's [`Changes`] over
//! the servers' [`ServerRpc::changes_since`]. Keys are grouped into calls
//! by datacenter (and into calls of at most [`MAX_WATCHED`] entries); keys
//! that follow the same thing share one entry of their call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use legate_types::rpc::{ServerRpc, Watched, MAX_WATCHED, UNDECODABLE_CALL};
use legate_types::{Consistency, QueryOptions, RpcError};

use crate::acl_tokens::TokenStore;

use crate::shared_watch::{Changes, ChangesError, Checked};

/// How long one batched call may wait at the server.
const WAIT: Duration = Duration::from_secs(300);

/// The keys of one call: where each sits among all keys and which entry
/// of the call it follows; the entries, each with the lowest index a key
/// knows it at.
#[derive(Default)]
struct Call {
    keys: Vec<(usize, usize)>,
    entries: Vec<(Watched, u64)>,
    entry_of: HashMap<Watched, usize>,
}

/// A batched watch over `rpc`: each key is followed as what `watched`
/// names, in its datacenter. The first call to answer ends the wait (the
/// other calls' keys stay as they were and are asked again); a call that
/// fails is passed over while another may still answer.
pub(crate) fn batched_changes<K: Send + Sync + 'static>(
    rpc: Arc<dyn ServerRpc>,
    tokens: Arc<TokenStore>,
    watched: impl Fn(&K) -> (String, Watched) + Send + Sync + 'static,
) -> Changes<K> {
    let watched = Arc::new(watched);
    Arc::new(move |keys: Vec<(K, u64)>| {
        let (rpc, watched, token) = (rpc.clone(), watched.clone(), tokens.agent_token());
        Box::pin(async move {
            let calls = group(&keys, &*watched);
            let mut answers: futures::stream::FuturesUnordered<_> = calls
                .into_iter()
                .map(|(datacenter, call)| {
                    let (rpc, token) = (rpc.clone(), token.clone());
                    async move {
                        let opts = QueryOptions {
                            datacenter,
                            token,
                            min_index: 1,
                            max_wait: Some(WAIT),
                            consistency: Consistency::Stale,
                            ..Default::default()
                        };
                        let answer = rpc.changes_since(&opts, call.entries.clone()).await;
                        (call, answer)
                    }
                })
                .collect();
            let mut failure = None;
            while let Some((call, answer)) = answers.next().await {
                match answer {
                    Ok(answer) => {
                        return Ok(checked(&keys, &call, answer.meta.index, &answer.value))
                    }
                    Err(RpcError::BadRequest(m)) if m.starts_with(UNDECODABLE_CALL) => {
                        failure = Some(ChangesError::Unsupported);
                    }
                    Err(e) => {
                        if failure.is_none() {
                            failure = Some(ChangesError::Failed(e.to_string()));
                        }
                    }
                }
            }
            Err(failure.unwrap_or_else(|| ChangesError::Failed("no keys to watch".into())))
        })
    })
}

/// The calls for `keys`, by datacenter, each of at most [`MAX_WATCHED`]
/// distinct entries.
fn group<K>(keys: &[(K, u64)], watched: &dyn Fn(&K) -> (String, Watched)) -> Vec<(String, Call)> {
    let mut calls: Vec<(String, Call)> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    for (position, (key, since)) in keys.iter().enumerate() {
        let (datacenter, item) = watched(key);
        let at = match open.get(&datacenter) {
            Some(&at)
                if calls[at].1.entries.len() < MAX_WATCHED
                    || calls[at].1.entry_of.contains_key(&item) =>
            {
                at
            }
            _ => {
                calls.push((datacenter.clone(), Call::default()));
                open.insert(datacenter, calls.len() - 1);
                calls.len() - 1
            }
        };
        let call = &mut calls[at].1;
        let entry = match call.entry_of.get(&item) {
            Some(&entry) => {
                call.entries[entry].1 = call.entries[entry].1.min(*since);
                entry
            }
            None => {
                call.entries.push((item.clone(), *since));
                call.entry_of.insert(item, call.entries.len() - 1);
                call.entries.len() - 1
            }
        };
        call.keys.push((position, entry));
    }
    calls
}

/// What one answer says of every key: the answered call's keys are
/// current at `index`, and changed when their entry changed after the
/// lowest index its keys knew and their own index is below the answer's;
/// every other key stays as it was.
fn checked<K>(keys: &[(K, u64)], call: &Call, index: u64, changed: &[u32]) -> Vec<Checked> {
    let mut out: Vec<Checked> = keys
        .iter()
        .map(|(_, since)| Checked {
            index: *since,
            changed: false,
        })
        .collect();
    let mut entry_changed = vec![false; call.entries.len()];
    for &at in changed {
        if let Some(flag) = entry_changed.get_mut(at as usize) {
            *flag = true;
        }
    }
    for &(position, entry) in &call.keys {
        let since = keys[position].1;
        out[position] = Checked {
            index,
            changed: entry_changed[entry] && since < index,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched(key: &(String, String)) -> (String, Watched) {
        (key.1.clone(), Watched::Service(key.0.clone()))
    }

    #[test]
    fn keys_share_entries_per_datacenter_and_answers_map_back() {
        let keys = vec![
            (("db".to_string(), "dc1".to_string()), 5),
            (("db".to_string(), "dc1".to_string()), 3),
            (("web".to_string(), "dc1".to_string()), 9),
            (("db".to_string(), "dc2".to_string()), 4),
        ];
        let calls = group(&keys, &watched);
        assert_eq!(calls.len(), 2);
        let (dc, call) = &calls[0];
        assert_eq!(dc, "dc1");
        // Both `db` keys share one entry, at the lower index.
        assert_eq!(
            call.entries,
            vec![
                (Watched::Service("db".into()), 3),
                (Watched::Service("web".into()), 9)
            ]
        );
        // dc1 answers at 7: `db` changed; `web` (known at 9) did not.
        let out = checked(&keys, call, 7, &[0, 1]);
        assert_eq!(
            out[0],
            Checked {
                index: 7,
                changed: true
            }
        );
        assert_eq!(
            out[1],
            Checked {
                index: 7,
                changed: true
            }
        );
        assert_eq!(
            out[2],
            Checked {
                index: 7,
                changed: false
            }
        );
        // dc2's key is left as it was.
        assert_eq!(
            out[3],
            Checked {
                index: 4,
                changed: false
            }
        );
    }

    #[test]
    fn a_call_never_holds_more_than_the_servers_limit() {
        let keys: Vec<((String, String), u64)> = (0..MAX_WATCHED + 5)
            .map(|i| ((format!("s{i}"), "dc1".to_string()), 1))
            .collect();
        let calls = group(&keys, &watched);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].1.entries.len(), MAX_WATCHED);
        assert_eq!(calls[1].1.entries.len(), 5);
    }
}
