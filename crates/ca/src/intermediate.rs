//! Intermediate CAs of secondary datacenters: a secondary makes its own
//! key and a CSR for the trust domain's signing identity, the primary
//! signs it with its active root (`ConnectCA.SignIntermediate`), and the
//! secondary signs its own datacenter's leaves with it. A leaf never
//! outlives the intermediate that signed it.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, IsCa, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

use crate::builtin::{generate_key, internal, issuer, random_serial, single_spiffe_uri, CaRoot};
use crate::{CaError, SpiffeId};

/// How far before its issue an intermediate's validity starts (clock
/// skew between datacenters); its life is counted from its issue.
pub const BACKDATE: Duration = Duration::from_secs(60);

/// When an intermediate valid from `not_before` to `not_after` is past
/// half of its life (counted from its issue, after [`BACKDATE`]).
pub fn half_life(not_before: OffsetDateTime, not_after: OffsetDateTime) -> OffsetDateTime {
    let issued = (not_before + BACKDATE).min(not_after);
    issued + (not_after - issued) / 2
}

/// A fresh key and a CSR for `trust_domain`'s signing identity, named for
/// `datacenter` (Consul's `sec-…` names). Returns (CSR PEM, key PEM).
pub fn make_intermediate_csr(
    trust_domain: &str,
    datacenter: &str,
    key_type: &str,
    key_bits: u32,
) -> Result<(String, String), CaError> {
    let key = generate_key(key_type, key_bits)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    let prefix: String = trust_domain.chars().take(8).collect();
    dn.push(
        DnType::CommonName,
        format!("sec-{datacenter}.consul.ca.{prefix}.consul"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let uri = SpiffeId::Signing {
        trust_domain: trust_domain.to_string(),
    }
    .to_string();
    params.subject_alt_names = vec![SanType::URI(uri.try_into().map_err(internal)?)];
    let csr = params.serialize_request(&key).map_err(internal)?;
    Ok((csr.pem().map_err(internal)?, key.serialize_pem()))
}

/// Signs a secondary's intermediate CSR with `root` for `ttl` (never past
/// the root's own expiry). The CSR must ask for exactly `trust_domain`'s
/// signing identity; the certificate is a CA that may sign leaves only.
pub fn sign_intermediate(
    root: &CaRoot,
    csr_pem: &str,
    trust_domain: &str,
    ttl: Duration,
) -> Result<String, CaError> {
    let csr = CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| CaError::BadCsr(e.to_string()))?;
    match single_spiffe_uri(&csr)? {
        SpiffeId::Signing {
            trust_domain: asked,
        } if asked == trust_domain => {}
        SpiffeId::Signing {
            trust_domain: asked,
        } => {
            return Err(CaError::WrongIdentity(format!(
                "incoming CSR domain {asked:?} is not our trust domain {trust_domain:?}"
            )))
        }
        other => {
            return Err(CaError::WrongIdentity(format!(
                "an intermediate CSR must ask for the signing identity, not {other}"
            )))
        }
    }
    let mut params = CertificateParams::default();
    params.distinguished_name = csr.params.distinguished_name.clone();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.subject_alt_names = csr.params.subject_alt_names.clone();
    params.serial_number = Some(random_serial());
    params.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = (now + time::Duration::seconds(ttl.as_secs() as i64)).min(root.not_after);
    let cert = params
        .signed_by(&csr.public_key, &issuer(root)?)
        .map_err(internal)?;
    Ok(cert.pem())
}

/// The signing CA a secondary holds: its intermediate with its key.
pub fn intermediate_signer(cert_pem: &str, key_pem: &str) -> Result<CaRoot, CaError> {
    let info = crate::info::describe(cert_pem)?;
    Ok(CaRoot {
        cert_pem: cert_pem.to_string(),
        key_pem: key_pem.to_string(),
        not_after: info.not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::{generate_root, make_csr, sign_leaf};

    fn openssl_verify(roots: &str, intermediates: &str, leaf: &str, purpose_uri: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let out = std::process::Command::new("openssl")
            .arg("verify")
            .arg("-CAfile")
            .arg(write("roots.pem", roots))
            .arg("-untrusted")
            .arg(write("inter.pem", intermediates))
            .arg(write("leaf.pem", leaf))
            .output()
            .expect("openssl is installed by .ci/run");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let shown = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
            .arg(dir.path().join("leaf.pem"))
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&shown.stdout).contains(purpose_uri));
        text
    }

    #[test]
    fn a_secondary_intermediate_signs_leaves_that_verify_against_the_primary_root() {
        let td = "11111111-2222-3333-4444-555555555555.consul";
        let root = generate_root(td, "pri-test", Duration::from_secs(86400 * 30)).unwrap();
        let (csr, key) = make_intermediate_csr(td, "dc2", "ec", 256).unwrap();
        let cert = sign_intermediate(&root, &csr, td, Duration::from_secs(86400)).unwrap();
        let signer = intermediate_signer(&cert, &key).unwrap();
        assert!(signer.not_after <= root.not_after);
        // Half of a day from now, give or take the test's own run time.
        let info = crate::info::describe(&cert).unwrap();
        let half = half_life(info.not_before, info.not_after) - OffsetDateTime::now_utc();
        assert!((half.whole_seconds() - 43_200).abs() < 60, "{half}");
        let id = SpiffeId::parse(&format!("spiffe://{td}/ns/default/dc/dc2/svc/db")).unwrap();
        let (leaf_csr, _) = make_csr(&id).unwrap();
        let leaf = sign_leaf(&signer, &leaf_csr, &id, Duration::from_secs(3600)).unwrap();
        let text = openssl_verify(&root.cert_pem, &cert, &leaf, &id.to_string());
        assert!(text.contains(": OK"), "{text}");
        // Without the intermediate the leaf does not verify.
        let text = openssl_verify(&root.cert_pem, &root.cert_pem, &leaf, &id.to_string());
        assert!(!text.contains(": OK"), "{text}");
    }

    #[test]
    fn the_primary_refuses_another_domain_or_a_leaf_csr() {
        let td = "11111111-2222-3333-4444-555555555555.consul";
        let root = generate_root(td, "pri-test", Duration::from_secs(86400)).unwrap();
        let (other, _) = make_intermediate_csr("99999999-0000.consul", "dc2", "ec", 256).unwrap();
        let e = sign_intermediate(&root, &other, td, Duration::from_secs(3600)).unwrap_err();
        assert!(e.to_string().contains("is not our trust domain"), "{e}");
        let id = SpiffeId::parse(&format!("spiffe://{td}/ns/default/dc/dc2/svc/db")).unwrap();
        let (leaf_csr, _) = make_csr(&id).unwrap();
        assert!(sign_intermediate(&root, &leaf_csr, td, Duration::from_secs(3600)).is_err());
        assert!(sign_intermediate(&root, "garbage", td, Duration::from_secs(3600)).is_err());
        // The intermediate's life is capped at the root's.
        let (csr, _) = make_intermediate_csr(td, "dc2", "ec", 256).unwrap();
        let cert = sign_intermediate(&root, &csr, td, Duration::from_secs(86400 * 400)).unwrap();
        let info = crate::info::describe(&cert).unwrap();
        assert!(info.not_after <= root.not_after);
    }
}
