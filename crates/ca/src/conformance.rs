//! The conformance suite every [`CaProvider`] must pass: roots are CAs
//! carrying the trust domain's signing id, leaves carry exactly the asked
//! identity and verify against the root (rustls), CSRs for another
//! identity, another trust domain or garbage are refused, and cross-signing
//! (when supported) lets a peer trusting only the old root accept leaves
//! of the new one.

use std::time::Duration;

use crate::builtin::make_csr;
use crate::info::describe;
use crate::verify::verify_leaf;
use crate::{CaConfig, CaProvider, SpiffeId};

/// Runs the suite against `provider` configured with `config`; the error
/// names the first property that failed.
pub fn check_provider(provider: &dyn CaProvider, config: &CaConfig) -> Result<(), String> {
    let td = "11111111-2222-3333-4444-555555555555.consul";
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let root = provider
        .generate_root(td, config)
        .map_err(|e| fail("generate_root", &e))?;
    let info = describe(&root.cert_pem).map_err(|e| fail("root certificate", &e))?;
    if config.root_cert.is_none() && info.uris != [format!("spiffe://{td}")] {
        return Err(format!(
            "root must carry the signing id spiffe://{td}, has {:?}",
            info.uris
        ));
    }
    let web = SpiffeId::service(td, "dc1", "web");
    let (csr, _) = make_csr(&web).map_err(|e| fail("make_csr", &e))?;
    let leaf = provider
        .sign_leaf(&root, &csr, &web, config.leaf_cert_ttl)
        .map_err(|e| fail("sign_leaf", &e))?;
    let verified = verify_leaf(&[&root.cert_pem], &leaf).map_err(|e| fail("leaf verify", &e))?;
    if verified != web {
        return Err(format!("leaf carries {verified}, expected {web}"));
    }
    let leaf_info = describe(&leaf).map_err(|e| fail("leaf", &e))?;
    let lifetime = leaf_info.not_after - leaf_info.not_before;
    let ttl = time::Duration::seconds(config.leaf_cert_ttl.as_secs() as i64);
    if lifetime < ttl || lifetime > ttl + time::Duration::minutes(5) {
        return Err(format!("leaf lifetime {lifetime} does not match TTL {ttl}"));
    }
    let (db_csr, _) = make_csr(&SpiffeId::service(td, "dc1", "db")).map_err(|e| fail("csr", &e))?;
    if provider
        .sign_leaf(&root, &db_csr, &web, Duration::from_secs(3600))
        .is_ok()
    {
        return Err("signed a CSR for db when web was asked".into());
    }
    let (foreign, _) =
        make_csr(&SpiffeId::service("other.consul", "dc1", "web")).map_err(|e| fail("csr", &e))?;
    if provider
        .sign_leaf(&root, &foreign, &web, Duration::from_secs(3600))
        .is_ok()
    {
        return Err("signed a CSR from another trust domain".into());
    }
    if provider
        .sign_leaf(&root, "garbage", &web, Duration::from_secs(3600))
        .is_ok()
    {
        return Err("signed garbage".into());
    }
    let next = provider
        .generate_root(
            td,
            &CaConfig {
                private_key: None,
                root_cert: None,
                ..config.clone()
            },
        )
        .map_err(|e| fail("second root", &e))?;
    if let Some(bridge) = provider
        .cross_sign(&root, &next)
        .map_err(|e| fail("cross_sign", &e))?
    {
        let (csr, _) = make_csr(&web).map_err(|e| fail("csr", &e))?;
        let new_leaf = provider
            .sign_leaf(&next, &csr, &web, config.leaf_cert_ttl)
            .map_err(|e| fail("sign with new root", &e))?;
        let chain = format!("{new_leaf}{bridge}");
        verify_leaf(&[&root.cert_pem], &chain)
            .map_err(|e| fail("new leaf + cross-signed root against the old root", &e))?;
        verify_leaf(&[&next.cert_pem], &chain)
            .map_err(|e| fail("new leaf + cross-signed root against the new root", &e))?;
        if verify_leaf(&[&root.cert_pem], &new_leaf).is_ok() {
            return Err("a new leaf verified against the old root without the bridge".into());
        }
    }
    Ok(())
}
