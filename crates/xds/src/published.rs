//! What every stream of a proxy shares: the resources generated once per
//! snapshot (`Memo`, per proxy and certificate provider) and their
//! versions (`Published`), so a push to tens of thousands of streams
//! neither generates nor hashes anything per stream.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use envoy_types::pb::google::protobuf::Any;
use legate_proxycfg::ConnectProxySnapshot;

use crate::held::Version;
use crate::resources::{self, Resources};

/// Resources generated once per snapshot and shared by every stream of
/// that proxy (and, for proxyless clients, certificate provider).
#[derive(Default)]
pub(crate) struct Memo {
    by_proxy: std::sync::Mutex<HashMap<(String, Option<String>), Generated>>,
}

/// A snapshot with the resources generated from it.
type Generated = (Arc<ConnectProxySnapshot>, Arc<Published>);

impl Memo {
    pub(crate) fn forget(&self, proxy_id: &str) {
        self.by_proxy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _), _| id != proxy_id);
    }

    /// The resources of a snapshot: Envoy's shapes for a sidecar, gRPC's
    /// for a native service (with mTLS through `provider` when named).
    pub(crate) fn resources(
        &self,
        proxy_id: &str,
        provider: Option<&str>,
        snapshot: &Arc<ConnectProxySnapshot>,
    ) -> Arc<Published> {
        let key = (proxy_id.to_string(), provider.map(str::to_string));
        let mut map = self.by_proxy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((cached, resources)) = map.get(&key) {
            if Arc::ptr_eq(cached, snapshot) {
                return resources.clone();
            }
        }
        let resources = Arc::new(Published::new(if snapshot.native {
            crate::grpc::generate(snapshot, provider)
        } else {
            resources::generate(snapshot)
        }));
        map.insert(key, (snapshot.clone(), resources.clone()));
        resources
    }
}

/// FNV-1a over the encoded resources: a hash that changes exactly when
/// the content does.
fn content_hash<'a>(items: impl Iterator<Item = (&'a String, &'a Any)>) -> u64 {
    let mut hash: u64 = 0xcbf29ce484222325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= *b as u64;
            hash = hash.wrapping_mul(0x100000001b3);
        }
    };
    for (name, any) in items {
        feed(name.as_bytes());
        feed(any.type_url.as_bytes());
        feed(&any.value);
    }
    hash
}

/// The version of a set of resources.
pub(crate) fn version_of<'a>(items: impl Iterator<Item = (&'a String, &'a Any)>) -> String {
    Version::text(content_hash(items))
}

/// One resource's version.
pub(crate) fn resource_version(name: &String, any: &Any) -> String {
    version_of(std::iter::once((name, any)))
}

/// Resources with their versions, computed once per snapshot and shared
/// by every stream of the proxy: with tens of thousands of streams, each
/// hashing every resource on every push was most of a fan-out's work.
pub(crate) struct Published {
    pub(crate) resources: Arc<Resources>,
    /// Per type: each resource's content hash, in the order
    /// `resources.of(type)` iterates, and the version of them all.
    versions: BTreeMap<&'static str, (Vec<u64>, String)>,
}

impl Published {
    fn new(resources: Resources) -> Published {
        let versions = resources
            .by_type
            .iter()
            .map(|(type_url, all)| {
                let each = all
                    .iter()
                    .map(|item| content_hash(std::iter::once(item)))
                    .collect();
                (*type_url, (each, version_of(all.iter())))
            })
            .collect();
        Published {
            resources: Arc::new(resources),
            versions,
        }
    }

    /// The resources of one type with their hashes, and the version of
    /// them all.
    pub(crate) fn of(&self, type_url: &str) -> (Vec<(&String, &Any, u64)>, String) {
        let (Some(all), Some((hashes, version))) =
            (self.resources.of(type_url), self.versions.get(type_url))
        else {
            return (Vec::new(), version_of(std::iter::empty()));
        };
        let items = all
            .iter()
            .zip(hashes)
            .map(|((name, any), hash)| (name, any, *hash))
            .collect();
        (items, version.clone())
    }
}
