//! Certificates for agent TLS (`legate tls ca create`, `legate tls cert
//! create`): a CA for the cluster's RPC/HTTPS traffic, and server, client
//! and CLI certificates with the SANs Consul gives them
//! (`server.<dc>.<domain>`, `<node>.server.<dc>.<domain>`, `localhost`,
//! `127.0.0.1`).

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::builtin::{internal, random_serial, validity};
use crate::keys::load_private_key;
use crate::CaError;

/// Which kind of agent certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertKind {
    /// A server (`server.<dc>.<domain>`).
    Server,
    /// A client agent (`client.<dc>.<domain>`).
    Client,
    /// The CLI (`cli.<dc>.<domain>`).
    Cli,
}

impl CertKind {
    /// The name used in SANs and file names.
    pub fn name(self) -> &'static str {
        match self {
            CertKind::Server => "server",
            CertKind::Client => "client",
            CertKind::Cli => "cli",
        }
    }
}

/// The validity of `days` days, set the way the Connect CA sets it.
fn valid_for(params: &mut CertificateParams, days: u32) {
    validity(params, Duration::from_secs(days as u64 * 86_400));
}

/// A new CA for agent TLS; returns (certificate PEM, key PEM).
pub fn create_ca(domain: &str, days: u32, cluster_id: &str) -> Result<(String, String), CaError> {
    if days == 0 {
        return Err(CaError::Config("-days must be greater than 0".into()));
    }
    let key = KeyPair::generate().map_err(internal)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    let id = if cluster_id.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        cluster_id.to_string()
    };
    dn.push(
        DnType::CommonName,
        format!("Legate Agent CA {}", &id[..id.len().min(16)]),
    );
    dn.push(DnType::OrganizationName, "Legate");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.subject_alt_names = vec![SanType::DnsName(
        domain.to_string().try_into().map_err(internal)?,
    )];
    params.serial_number = Some(random_serial());
    valid_for(&mut params, days);
    let cert = params.self_signed(&key).map_err(internal)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// What goes into an agent certificate.
#[derive(Debug, Clone)]
pub struct CertRequest {
    /// Server, client or CLI.
    pub kind: CertKind,
    /// Datacenter.
    pub datacenter: String,
    /// DNS domain (`consul`).
    pub domain: String,
    /// Node name (servers): adds `<node>.server.<dc>.<domain>`.
    pub node: String,
    /// Extra DNS SANs.
    pub additional_dns: Vec<String>,
    /// Extra IP SANs.
    pub additional_ips: Vec<IpAddr>,
    /// Validity in days.
    pub days: u32,
}

/// The DNS SANs Consul gives an agent certificate.
pub fn dns_names(req: &CertRequest) -> Vec<String> {
    let mut names = vec![format!(
        "{}.{}.{}",
        req.kind.name(),
        req.datacenter,
        req.domain
    )];
    if req.kind == CertKind::Server && !req.node.is_empty() {
        names.push(format!(
            "{}.server.{}.{}",
            req.node, req.datacenter, req.domain
        ));
    }
    names.push("localhost".into());
    for extra in &req.additional_dns {
        if !names.contains(extra) {
            names.push(extra.clone());
        }
    }
    names
}

/// Signs an agent certificate with the agent CA; returns (certificate PEM, key PEM).
pub fn create_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    req: &CertRequest,
) -> Result<(String, String), CaError> {
    if req.days == 0 {
        return Err(CaError::Config("-days must be greater than 0".into()));
    }
    let (ca_key, _) = load_private_key(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)
        .map_err(|e| CaError::Config(format!("the CA certificate cannot be used: {e}")))?;
    let key = KeyPair::generate().map_err(internal)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("{}.{}.{}", req.kind.name(), req.datacenter, req.domain),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    let mut sans = Vec::new();
    for name in dns_names(req) {
        sans.push(SanType::DnsName(
            name.try_into()
                .map_err(|e| CaError::Config(format!("invalid DNS name: {e}")))?,
        ));
    }
    sans.push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
    for ip in &req.additional_ips {
        sans.push(SanType::IpAddress(*ip));
    }
    params.subject_alt_names = sans;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = match req.kind {
        CertKind::Server | CertKind::Client => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        CertKind::Cli => vec![ExtendedKeyUsagePurpose::ClientAuth],
    };
    params.serial_number = Some(random_serial());
    params.use_authority_key_identifier_extension = true;
    valid_for(&mut params, req.days);
    let cert = params.signed_by(&key, &issuer).map_err(internal)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Validity of an agent certificate when `-days` is not given.
pub const DEFAULT_CERT_DAYS: u32 = 365;
/// Validity of an agent CA when `-days` is not given.
pub const DEFAULT_CA_DAYS: u32 = 1825;
