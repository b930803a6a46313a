//! The servers' CA manager: initialises the CA on the first leader,
//! rotates roots when the configuration asks for new key material
//! (cross-signing the new root with the old one), prunes rotated-out roots
//! after twice the leaf TTL, and signs CSRs behind Consul's limits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use legate_ca::info::{describe, rfc3339};
use legate_ca::{CaConfig, CaProvider, CsrLimiter, SpiffeId};
use legate_state::{Command, CommandResult, StoredCaRoot, Table, Tables};
use legate_types::connect::{
    CaConfiguration, CaRoot, CaSignRequest, IndexedCaRoots, IssuedCert, ZERO_TIME,
};
use legate_types::{Queried, QueryOptions, RaftIndex, RpcError, WriteOptions};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::{Access, Resource, Server};

/// How often the leader looks for roots to prune.
const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// The provider and the signing limiter of one server.
pub(crate) struct CaManager {
    provider: Arc<dyn CaProvider>,
    /// The configuration used when the CA is initialised (`connect { ca_provider, ca_config }`).
    pub(crate) bootstrap: CaConfiguration,
    /// The limiter, rebuilt when the configuration's modify index changes.
    limiter: Mutex<Option<(u64, Arc<CsrLimiter>)>>,
    /// Serialises rotations on this server (Raft CAS settles races across servers).
    pub(crate) rotating: tokio::sync::Mutex<()>,
    last_prune: Mutex<Option<std::time::Instant>>,
    signed: AtomicU64,
    rate_limited: AtomicU64,
}

/// Counts of CSR outcomes on one server since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaSignCounts {
    /// Certificates signed.
    pub signed: u64,
    /// Requests refused with `Rate limit reached, try again later`.
    pub rate_limited: u64,
}

impl CaManager {
    pub(crate) fn new(bootstrap: CaConfiguration) -> CaManager {
        CaManager {
            provider: Arc::new(legate_ca::BuiltinProvider),
            bootstrap,
            limiter: Mutex::new(None),
            rotating: tokio::sync::Mutex::new(()),
            last_prune: Mutex::new(None),
            signed: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
        }
    }
}

pub(crate) fn ca_error(e: legate_ca::CaError) -> RpcError {
    match e {
        legate_ca::CaError::Internal(m) => RpcError::Internal(m),
        other => RpcError::BadRequest(other.to_string()),
    }
}

/// Parses a stored or submitted configuration.
pub(crate) fn parse_config(config: &CaConfiguration) -> Result<CaConfig, RpcError> {
    CaConfig::from_map(&config.provider, &config.config).map_err(ca_error)
}

/// What makes the provider's key material: a change here means a new root.
fn key_identity(c: &CaConfig) -> (Option<&str>, Option<&str>, &str, u32) {
    (
        c.private_key.as_deref(),
        c.root_cert.as_deref(),
        &c.private_key_type,
        c.private_key_bits,
    )
}

fn to_time(t: OffsetDateTime) -> String {
    rfc3339(t)
}

/// Builds the stored form of a provider root.
fn stored_root(
    root: &legate_ca::CaRoot,
    config: &CaConfig,
    intermediates: Vec<String>,
) -> Result<StoredCaRoot, RpcError> {
    let info = describe(&root.cert_pem).map_err(ca_error)?;
    let serial_number = info.serial_u64();
    Ok(StoredCaRoot {
        root: CaRoot {
            id: info.fingerprint,
            name: info.common_name,
            serial_number,
            signing_key_id: info.subject_key_id,
            external_trust_domain: String::new(),
            not_before: to_time(info.not_before),
            not_after: to_time(info.not_after),
            root_cert: root.cert_pem.clone(),
            intermediate_certs: (!intermediates.is_empty()).then_some(intermediates),
            active: true,
            rotated_out_at: ZERO_TIME.to_string(),
            private_key_type: config.private_key_type.clone(),
            private_key_bits: config.private_key_bits,
            raft: RaftIndex::default(),
        },
        private_key: root.key_pem.clone(),
        signing_cert: None,
    })
}

/// What signs leaves: the root with its key in the primary, this
/// datacenter's intermediate with its key in a secondary.
pub(crate) fn provider_root(stored: &StoredCaRoot) -> Result<legate_ca::CaRoot, RpcError> {
    if let Some(signing) = &stored.signing_cert {
        return legate_ca::intermediate::intermediate_signer(signing, &stored.private_key)
            .map_err(ca_error);
    }
    let info = describe(&stored.root.root_cert).map_err(ca_error)?;
    Ok(legate_ca::CaRoot {
        cert_pem: stored.root.root_cert.clone(),
        key_pem: stored.private_key.clone(),
        not_after: info.not_after,
    })
}

/// The stored configuration map: the parsed settings in Consul's spelling,
/// with the operator's key material kept so later changes can be compared.
pub(crate) fn config_record(cluster_id: &str, config: &CaConfig, force: bool) -> CaConfiguration {
    CaConfiguration {
        cluster_id: cluster_id.to_string(),
        provider: config.provider.clone(),
        config: config.to_map(),
        force_without_cross_signing: force,
        raft: RaftIndex::default(),
    }
}

/// Roots to keep at `now`: rotated-out roots go once twice the leaf TTL has
/// passed since they stopped being active (every leaf they signed has then
/// expired).
pub fn prune_roots(
    roots: &[StoredCaRoot],
    leaf_ttl: Duration,
    now: SystemTime,
) -> Vec<StoredCaRoot> {
    let now = OffsetDateTime::from(now);
    let keep_for = time::Duration::seconds((leaf_ttl * 2).as_secs() as i64);
    roots
        .iter()
        .filter(|r| {
            if r.root.active || r.root.rotated_out_at == ZERO_TIME {
                return true;
            }
            match OffsetDateTime::parse(
                &r.root.rotated_out_at,
                &time::format_description::well_known::Rfc3339,
            ) {
                Ok(out) => now - out <= keep_for,
                Err(_) => true,
            }
        })
        .cloned()
        .collect()
}

impl Server {
    /// How many CSRs this server signed and refused over the limits.
    pub fn ca_sign_counts(&self) -> CaSignCounts {
        CaSignCounts {
            signed: self.ca.signed.load(Ordering::Relaxed),
            rate_limited: self.ca.rate_limited.load(Ordering::Relaxed),
        }
    }

    /// The trust domain: from the CA configuration's cluster id (in a
    /// secondary, the primary's), else this cluster's own id.
    pub(crate) fn trust_domain(tables: &Tables) -> Option<String> {
        let configured = tables
            .ca_config()
            .1
            .map(|c| c.cluster_id.clone())
            .filter(|id| !id.is_empty());
        configured
            .or_else(|| {
                tables
                    .system_metadata(crate::CLUSTER_ID_KEY)
                    .map(String::from)
            })
            .map(|id| format!("{id}.consul"))
    }

    /// The roots as `/v1/connect/ca/roots` shows them.
    fn indexed_roots(tables: &Tables) -> (u64, IndexedCaRoots) {
        let (index, stored) = tables.ca_roots();
        let roots: Vec<CaRoot> = stored.iter().map(|s| s.root.clone()).collect();
        let active_root_id = roots
            .iter()
            .find(|r| r.active)
            .map(|r| r.id.clone())
            .unwrap_or_default();
        (
            index,
            IndexedCaRoots {
                active_root_id,
                trust_domain: Self::trust_domain(tables).unwrap_or_default(),
                roots,
            },
        )
    }

    /// Leader: creates the first root when there is none.
    pub(crate) async fn ca_initialize(&self) -> Result<(), RpcError> {
        if self.is_secondary() {
            return Ok(()); // Its intermediate comes from the primary.
        }
        let _guard = self.ca.rotating.lock().await;
        let (cluster_id, has_roots) = {
            let tables = self.store.read();
            (
                tables
                    .system_metadata(crate::CLUSTER_ID_KEY)
                    .map(String::from),
                !tables.ca_roots().1.is_empty(),
            )
        };
        if has_roots {
            return Ok(());
        }
        let cluster_id =
            cluster_id.ok_or_else(|| RpcError::Internal("the cluster id is not set yet".into()))?;
        let config = parse_config(&self.ca.bootstrap)?;
        let trust_domain = format!("{cluster_id}.consul");
        let provider = self.ca.provider.clone();
        let cfg = config.clone();
        let root = tokio::task::spawn_blocking(move || provider.generate_root(&trust_domain, &cfg))
            .await
            .map_err(|e| RpcError::Internal(e.to_string()))?
            .map_err(ca_error)?;
        let stored = stored_root(&root, &config, Vec::new())?;
        let id = stored.root.id.clone();
        let (_, result) = self
            .write(Command::CaSet {
                roots: Some(vec![stored]),
                config: Some(Box::new(config_record(&cluster_id, &config, false))),
                cas: Some(0),
            })
            .await?;
        if result == CommandResult::Applied(true) {
            tracing::info!(root = %id, "connect CA initialised");
        }
        Ok(())
    }

    /// Leader: drops roots rotated out more than twice the leaf TTL ago
    /// (checked at most once a minute unless `force`).
    pub async fn ca_prune_roots(&self, now: SystemTime, force: bool) -> Result<usize, RpcError> {
        if self.is_secondary() {
            return Ok(0); // Its roots follow the primary's.
        }
        {
            let mut last = self.ca.last_prune.lock().unwrap_or_else(|e| e.into_inner());
            if !force && last.is_some_and(|t| t.elapsed() < PRUNE_INTERVAL) {
                return Ok(0);
            }
            *last = Some(std::time::Instant::now());
        }
        let _guard = self.ca.rotating.lock().await;
        let (index, roots, config) = {
            let tables = self.store.read();
            let (index, roots) = tables.ca_roots();
            (index, roots.to_vec(), tables.ca_config().1.cloned())
        };
        let Some(config) = config else { return Ok(0) };
        let leaf_ttl = parse_config(&config)?.leaf_cert_ttl;
        let kept = prune_roots(&roots, leaf_ttl, now);
        let pruned = roots.len() - kept.len();
        if pruned > 0 {
            self.write(Command::CaSet {
                roots: Some(kept),
                config: None,
                cas: Some(index),
            })
            .await?;
            tracing::info!(pruned, "pruned rotated-out CA roots");
        }
        Ok(pruned)
    }

    /// A slot under the CSR limits (counted when refused).
    pub(crate) async fn csr_permit(
        &self,
        config_index: u64,
        config: &CaConfig,
    ) -> Result<legate_ca::limits::CsrPermit, RpcError> {
        self.limiter(config_index, config)
            .acquire()
            .await
            .map_err(|_| {
                self.ca.rate_limited.fetch_add(1, Ordering::Relaxed);
                RpcError::RateLimited
            })
    }

    fn limiter(&self, config_index: u64, config: &CaConfig) -> Arc<CsrLimiter> {
        let mut slot = self.ca.limiter.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some((index, limiter)) if *index == config_index => limiter.clone(),
            _ => {
                let limiter = Arc::new(CsrLimiter::new(
                    config.csr_max_per_second,
                    config.csr_max_concurrent,
                ));
                *slot = Some((config_index, limiter.clone()));
                limiter
            }
        }
    }

    /// `GET /v1/connect/ca/roots`.
    pub(crate) async fn ca_roots_query(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<IndexedCaRoots>, RpcError> {
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::CaRoots]),
            |t| Ok(Self::indexed_roots(t)),
        )
        .await
    }

    /// `GET /v1/connect/ca/configuration`: the private key is never shown.
    pub(crate) async fn ca_config_query(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<CaConfiguration>, RpcError> {
        self.authorize(&opts.token, Resource::Operator, Access::Read)?;
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::CaConfig]),
            |t| {
                let (index, config) = t.ca_config();
                let mut config = config
                    .cloned()
                    .ok_or_else(|| RpcError::Internal("CA is not initialised yet".into()))?;
                config.config.remove("PrivateKey");
                Ok((index, config))
            },
        )
        .await
    }

    /// `PUT /v1/connect/ca/configuration`: validates, and rotates the root
    /// when the key material changes.
    pub(crate) async fn ca_config_set_inner(
        &self,
        opts: &WriteOptions,
        mut request: CaConfiguration,
    ) -> Result<(), RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.ca_config_set(&routed, request).await;
        }
        self.check_datacenter(&opts.datacenter)?;
        self.authorize(&opts.token, Resource::Operator, Access::Write)?;
        let _guard = self.ca.rotating.lock().await;
        let (index, roots, current, cluster_id) = {
            let tables = self.store.read();
            let (index, roots) = tables.ca_roots();
            (
                index,
                roots.to_vec(),
                tables.ca_config().1.cloned(),
                tables
                    .system_metadata(crate::CLUSTER_ID_KEY)
                    .map(String::from),
            )
        };
        let (Some(current), Some(cluster_id)) = (current, cluster_id) else {
            return Err(RpcError::Internal("CA is not initialised yet".into()));
        };
        // A configuration read back from GET has no private key: keep the
        // stored one when the root certificate is unchanged.
        let has_key = request
            .config
            .keys()
            .any(|k| k.replace('_', "").eq_ignore_ascii_case("privatekey"));
        if !has_key {
            let cert_of = |m: &Map<String, Value>| {
                m.iter()
                    .find(|(k, _)| k.replace('_', "").eq_ignore_ascii_case("rootcert"))
                    .map(|(_, v)| v.clone())
            };
            if let (Some(asked), Some(stored)) =
                (cert_of(&request.config), cert_of(&current.config))
            {
                if asked == stored {
                    if let Some(key) = current.config.get("PrivateKey") {
                        request.config.insert("PrivateKey".into(), key.clone());
                    }
                }
            }
        }
        if !request.cluster_id.is_empty() && request.cluster_id != cluster_id {
            return Err(RpcError::BadRequest(format!(
                "cannot change the cluster id (ClusterID {} is not this cluster's {cluster_id})",
                request.cluster_id
            )));
        }
        let new = parse_config(&request)?;
        new.check_key_material().map_err(ca_error)?;
        // A stored configuration this build cannot decode (written by an
        // older, less strict one) must never block repairing it: its key
        // identity is unknown, so the new one gets a fresh, cross-signed root.
        let old = parse_config(&current)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "the stored CA configuration cannot be decoded; replacing it with a new root")
            })
            .ok();
        let record = config_record(&cluster_id, &new, request.force_without_cross_signing);
        if old.as_ref().map(key_identity) == Some(key_identity(&new)) {
            self.write(Command::CaSet {
                roots: None,
                config: Some(Box::new(record)),
                cas: None,
            })
            .await?;
            return Ok(());
        }
        let trust_domain = format!("{cluster_id}.consul");
        let provider = self.ca.provider.clone();
        let cfg = new.clone();
        let new_root =
            tokio::task::spawn_blocking(move || provider.generate_root(&trust_domain, &cfg))
                .await
                .map_err(|e| RpcError::Internal(e.to_string()))?
                .map_err(ca_error)?;
        let active = roots
            .iter()
            .find(|r| r.root.active)
            .ok_or_else(|| RpcError::Internal("no active CA root".into()))?;
        let mut intermediates = Vec::new();
        if !request.force_without_cross_signing {
            match self
                .ca
                .provider
                .cross_sign(&provider_root(active)?, &new_root)
                .map_err(ca_error)?
            {
                Some(bridge) => intermediates.push(bridge),
                None => {
                    return Err(RpcError::BadRequest(
                        "The current CA Provider does not support cross-signing. You can try again with ForceWithoutCrossSigningSet but this may cause disruption - see documentation for more.".into(),
                    ))
                }
            }
        }
        let new_stored = stored_root(&new_root, &new, intermediates)?;
        if new_stored.root.id == active.root.id {
            // The same certificate again (an operator root re-submitted).
            self.write(Command::CaSet {
                roots: None,
                config: Some(Box::new(record)),
                cas: None,
            })
            .await?;
            return Ok(());
        }
        let now = to_time(OffsetDateTime::now_utc());
        let mut next: Vec<StoredCaRoot> = roots
            .into_iter()
            .filter(|r| r.root.id != new_stored.root.id)
            .map(|mut r| {
                if r.root.active {
                    r.root.active = false;
                    r.root.rotated_out_at = now.clone();
                }
                r
            })
            .collect();
        let new_id = new_stored.root.id.clone();
        next.insert(0, new_stored);
        let (_, result) = self
            .write(Command::CaSet {
                roots: Some(next),
                config: Some(Box::new(record)),
                cas: Some(index),
            })
            .await?;
        if result != CommandResult::Applied(true) {
            return Err(RpcError::Internal(
                "the CA roots changed during the rotation; try again".into(),
            ));
        }
        tracing::info!(root = %new_id, cross_signed = !request.force_without_cross_signing, "connect CA root rotated");
        Ok(())
    }

    /// `ConnectCA.Sign`: checks the CSR's identity and signs it with the
    /// active root, behind the CSR limits.
    pub(crate) async fn ca_sign_request(
        &self,
        opts: &WriteOptions,
        request: CaSignRequest,
    ) -> Result<IssuedCert, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        let (config_index, config, active, trust_domain, roots_index) = {
            let tables = self.store.read();
            let (config_index, config) = tables.ca_config();
            let (roots_index, roots) = tables.ca_roots();
            (
                config_index,
                config.cloned(),
                roots.iter().find(|r| r.root.active).cloned(),
                Self::trust_domain(&tables),
                roots_index,
            )
        };
        let (Some(config), Some(active), Some(trust_domain)) = (config, active, trust_domain)
        else {
            return Err(RpcError::Internal("CA is not initialised yet".into()));
        };
        // A stored configuration that cannot be decoded (see
        // `ca_config_set_inner`) signs with the default TTL and limits
        // until a valid one is written, rather than refusing every leaf.
        let config = parse_config(&config).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the stored CA configuration cannot be decoded; signing with the defaults");
            CaConfig::default()
        });
        let asked = legate_ca::builtin::csr_spiffe_id(&request.csr).map_err(ca_error)?;
        if asked.trust_domain() != trust_domain {
            return Err(RpcError::BadRequest(format!(
                "SPIFFE ID in CSR from a different trust domain: {}, we are {trust_domain}",
                asked.trust_domain()
            )));
        }
        let datacenter = &self.config.datacenter;
        let same_datacenter = |dc: &str| {
            if dc == datacenter {
                Ok(())
            } else {
                Err(RpcError::BadRequest(format!(
                    "SPIFFE ID in CSR from a different datacenter: {dc}, we are {datacenter}"
                )))
            }
        };
        let (service, service_uri, agent, agent_uri) = match &asked {
            SpiffeId::Service {
                service,
                datacenter: dc,
                namespace,
                ..
            } => {
                same_datacenter(dc)?;
                if namespace != "default" {
                    return Err(RpcError::BadRequest(format!(
                        "SPIFFE ID in CSR for namespace {namespace:?}: only the \"default\" namespace exists"
                    )));
                }
                if !request.service.is_empty() && &request.service != service {
                    return Err(RpcError::BadRequest(format!(
                        "SPIFFE ID in CSR ({asked}) does not match the requested service {}",
                        request.service
                    )));
                }
                self.authorize(
                    &opts.token,
                    Resource::Service(service.clone()),
                    Access::Write,
                )?;
                (
                    service.clone(),
                    asked.to_string(),
                    String::new(),
                    String::new(),
                )
            }
            SpiffeId::Agent {
                node,
                datacenter: dc,
                ..
            } => {
                same_datacenter(dc)?;
                self.authorize(&opts.token, Resource::Node(node.clone()), Access::Write)?;
                (
                    String::new(),
                    String::new(),
                    node.clone(),
                    asked.to_string(),
                )
            }
            SpiffeId::MeshGateway { .. } | SpiffeId::Server { .. } => {
                self.authorize(&opts.token, Resource::Operator, Access::Write)?;
                (
                    String::new(),
                    asked.to_string(),
                    String::new(),
                    String::new(),
                )
            }
            SpiffeId::Signing { .. } => {
                return Err(RpcError::BadRequest(
                    "a CSR may not ask for the signing CA's own SPIFFE ID".into(),
                ))
            }
        };
        let _permit = self.csr_permit(config_index, &config).await?;
        let root = provider_root(&active)?;
        let leaf = self
            .ca
            .provider
            .sign_leaf(&root, &request.csr, &asked, config.leaf_cert_ttl)
            .map_err(ca_error)?;
        self.ca.signed.fetch_add(1, Ordering::Relaxed);
        let info = describe(&leaf).map_err(ca_error)?;
        let mut cert_pem = leaf;
        for intermediate in active.root.intermediate_certs.iter().flatten() {
            if !cert_pem.ends_with('\n') {
                cert_pem.push('\n');
            }
            cert_pem.push_str(intermediate);
        }
        Ok(IssuedCert {
            serial_number: info.serial_hex(),
            cert_pem,
            private_key_pem: String::new(),
            service,
            service_uri,
            agent,
            agent_uri,
            namespace: "default".into(),
            partition: "default".into(),
            valid_after: to_time(info.not_before),
            valid_before: to_time(info.not_after),
            raft: RaftIndex::at(roots_index),
        })
    }
}
