//! The Connect CA of a secondary datacenter (Consul's
//! `leader_connect_ca.go`, secondary side): its leader follows the
//! primary's roots with a blocking read, adopts the primary's trust
//! domain, makes its own intermediate key and has the primary sign it
//! (`ConnectCA.SignIntermediate`), and signs its own datacenter's leaves
//! with that intermediate. A root rotation in the primary, or the
//! intermediate passing half of its life, brings a new one; intermediates
//! that expired are dropped. While the primary cannot be reached the
//! secondary keeps signing with what it holds.

use std::sync::Arc;

use legate_ca::info::describe;
use legate_state::{Command, CommandResult, StoredCaRoot};
use legate_types::connect::IndexedCaRoots;
use legate_types::rpc::ServerRpc;
use legate_types::{RaftIndex, RpcError, WriteOptions};
use time::OffsetDateTime;

use crate::ca::{ca_error, config_record, parse_config};
use crate::replication::{backoff, fetch_options};
use crate::{Access, Resource, Server};

/// Consul's refusal of a secondary asking another secondary.
pub const NOT_PRIMARY: &str = "not the primary datacenter";
/// Consul's warning when the primary will not sign.
pub const PRIMARY_REFUSED: &str =
    "Primary datacenter refused to sign our intermediate CA certificate";

impl Server {
    /// `ConnectCA.SignIntermediate` in the primary: operator write, the CSR
    /// limits, the trust domain's signing identity only.
    pub(crate) async fn ca_sign_intermediate_request(
        &self,
        opts: &WriteOptions,
        csr: String,
    ) -> Result<String, RpcError> {
        self.check_datacenter(&opts.datacenter)?;
        if self.is_secondary() {
            return Err(RpcError::Internal(NOT_PRIMARY.into()));
        }
        self.authorize(&opts.token, Resource::Operator, Access::Write)?;
        let (config_index, config, active, trust_domain) = {
            let tables = self.store.read();
            let (config_index, config) = tables.ca_config();
            (
                config_index,
                config.cloned(),
                tables.ca_roots().1.iter().find(|r| r.root.active).cloned(),
                Self::trust_domain(&tables),
            )
        };
        let (Some(config), Some(active), Some(trust_domain)) = (config, active, trust_domain)
        else {
            return Err(RpcError::Internal("CA is not initialised yet".into()));
        };
        let config = parse_config(&config)?;
        let _permit = self.csr_permit(config_index, &config).await?;
        let ttl = self
            .config
            .intermediate_cert_ttl
            .unwrap_or(config.intermediate_cert_ttl);
        let root = crate::ca::provider_root(&active)?;
        let cert = tokio::task::spawn_blocking(move || {
            legate_ca::intermediate::sign_intermediate(&root, &csr, &trust_domain, ttl)
        })
        .await
        .map_err(|e| RpcError::Internal(e.to_string()))?
        .map_err(ca_error)?;
        tracing::info!("connect CA: signed an intermediate for a secondary datacenter");
        Ok(cert)
    }

    /// When this datacenter's intermediate is past half of its life (or
    /// `None` when it holds none).
    fn intermediate_renewal_at(&self) -> Option<OffsetDateTime> {
        let tables = self.store.read();
        let active = tables.ca_roots().1.iter().find(|r| r.root.active)?.clone();
        let info = describe(active.signing_cert.as_deref()?).ok()?;
        Some(legate_ca::intermediate::half_life(
            info.not_before,
            info.not_after,
        ))
    }

    /// Brings this secondary's roots in line with the primary's: a new
    /// intermediate when the primary's active root is not the one ours
    /// chains to, when we hold none, or when ours is past half its life.
    async fn secondary_ca_sync(
        &self,
        primary_roots: &IndexedCaRoots,
        remote: &Arc<dyn ServerRpc>,
        primary: &str,
    ) -> Result<(), RpcError> {
        let Some(primary_active) = primary_roots.active().cloned() else {
            return Ok(()); // The primary has no CA yet.
        };
        if !crate::features::cluster_supports(
            &self.server_features(),
            crate::features::SECONDARY_INTERMEDIATES,
        ) {
            return Err(RpcError::Internal(
                "not every server of this datacenter supports its own intermediate CA yet".into(),
            ));
        }
        let _guard = self.ca.rotating.lock().await;
        let (index, local) = {
            let tables = self.store.read();
            let (index, roots) = tables.ca_roots();
            (index, roots.to_vec())
        };
        let local_active = local.iter().find(|r| r.root.active);
        let now = OffsetDateTime::now_utc();
        let due = match local_active {
            None => true,
            Some(mine) => {
                mine.root.id != primary_active.id
                    || mine.signing_cert.is_none()
                    || self.intermediate_renewal_at().is_none_or(|at| now >= at)
            }
        };
        let config = parse_config(&self.ca.bootstrap)?;
        let (signing_cert, key) = match (due, local_active) {
            (false, Some(mine)) => (
                mine.signing_cert.clone().unwrap_or_default(),
                mine.private_key.clone(),
            ),
            _ => {
                let (trust_domain, datacenter) = (
                    primary_roots.trust_domain.clone(),
                    self.config.datacenter.clone(),
                );
                let (key_type, bits) = (config.private_key_type.clone(), config.private_key_bits);
                let (csr, key) = tokio::task::spawn_blocking(move || {
                    legate_ca::intermediate::make_intermediate_csr(
                        &trust_domain,
                        &datacenter,
                        &key_type,
                        bits,
                    )
                })
                .await
                .map_err(|e| RpcError::Internal(e.to_string()))?
                .map_err(ca_error)?;
                let routed = WriteOptions {
                    datacenter: primary.to_string(),
                    token: self.replication_token(),
                };
                let cert = remote
                    .ca_sign_intermediate(&routed, csr)
                    .await
                    .inspect_err(|e| tracing::warn!(error = %e, "{PRIMARY_REFUSED}"))?;
                (cert, key)
            }
        };
        let ours_before: Vec<String> = local_active
            .filter(|mine| mine.root.id == primary_active.id)
            .and_then(|mine| mine.root.intermediate_certs.clone())
            .unwrap_or_default();
        let next = secondary_roots(primary_roots, &signing_cert, &key, &ours_before, now);
        let unchanged = next.len() == local.len()
            && next.iter().zip(&local).all(|(a, b)| {
                let mut b = b.clone();
                b.root.raft = RaftIndex::default();
                *a == b
            });
        if unchanged {
            return Ok(());
        }
        let cluster_id = primary_roots
            .trust_domain
            .strip_suffix(".consul")
            .unwrap_or(&primary_roots.trust_domain)
            .to_string();
        let (_, result) = self
            .write(Command::CaSet {
                roots: Some(next),
                config: Some(Box::new(config_record(&cluster_id, &config, false))),
                cas: Some(index),
            })
            .await?;
        if result == CommandResult::Applied(true) && due {
            tracing::info!(root = %primary_active.id, "connect CA: this secondary's intermediate was signed by the primary");
        }
        Ok(())
    }
}

/// The secondary's roots: the primary's (without keys), the active one
/// holding this datacenter's intermediate and key, its intermediates the
/// current one first, then the primary's own, then our earlier ones that
/// have not expired.
fn secondary_roots(
    primary: &IndexedCaRoots,
    signing_cert: &str,
    key: &str,
    ours_before: &[String],
    now: OffsetDateTime,
) -> Vec<StoredCaRoot> {
    primary
        .roots
        .iter()
        .map(|root| {
            let mut root = root.clone();
            root.raft = RaftIndex::default();
            if !root.active {
                return StoredCaRoot {
                    root,
                    private_key: String::new(),
                    signing_cert: None,
                };
            }
            let theirs = root.intermediate_certs.clone().unwrap_or_default();
            let mut intermediates = vec![signing_cert.to_string()];
            intermediates.extend(theirs.iter().filter(|c| *c != signing_cert).cloned());
            intermediates.extend(
                ours_before
                    .iter()
                    .filter(|c| *c != signing_cert && !theirs.contains(c))
                    .filter(|c| describe(c).is_ok_and(|info| info.not_after > now))
                    .cloned(),
            );
            root.intermediate_certs = Some(intermediates);
            StoredCaRoot {
                root,
                private_key: key.to_string(),
                signing_cert: Some(signing_cert.to_string()),
            }
        })
        .collect()
}

/// The secondary's leader: follows the primary's roots and keeps this
/// datacenter's intermediate current, retrying with backoff.
pub(crate) async fn run(server: Arc<Server>) {
    let mut last_index = 0u64;
    let mut failures = 0u32;
    let mut primary_roots: Option<IndexedCaRoots> = None;
    loop {
        let (remote, primary) = match server.to_primary() {
            Ok(route) => route,
            Err(e) => {
                tracing::warn!(error = %e, "connect CA: no way to the primary datacenter");
                tokio::time::sleep(backoff(8)).await;
                continue;
            }
        };
        // Wake for the renewal even when the primary's roots do not change.
        let renew_in = server
            .intermediate_renewal_at()
            .map(|at| (at - OffsetDateTime::now_utc()).max(time::Duration::ZERO))
            .and_then(|d| std::time::Duration::try_from(d).ok());
        let opts = fetch_options(&server, &primary, last_index);
        let fetch = remote.ca_roots(&opts);
        let fetched = match renew_in {
            Some(wait) if primary_roots.is_some() => tokio::select! {
                r = fetch => Some(r),
                _ = tokio::time::sleep(wait) => None,
            },
            _ => Some(fetch.await),
        };
        match fetched {
            Some(Ok(roots)) => {
                last_index = if roots.meta.index < last_index {
                    0
                } else {
                    roots.meta.index
                };
                primary_roots = Some(roots.value);
            }
            Some(Err(e)) => {
                failures += 1;
                last_index = 0;
                let wait = backoff(failures);
                tracing::warn!(error = %e, retry_in = ?wait, "connect CA: reading the primary's roots failed; signing with the intermediate held");
                tokio::time::sleep(wait).await;
                continue;
            }
            None => {}
        }
        let Some(roots) = &primary_roots else {
            continue;
        };
        match server.secondary_ca_sync(roots, &remote, &primary).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                last_index = 0;
                let wait = backoff(failures);
                tracing::warn!(error = %e, retry_in = ?wait, "connect CA: updating this datacenter's intermediate failed");
                tokio::time::sleep(wait).await;
            }
        }
    }
}
