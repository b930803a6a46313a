//! `legate tls ca create` and `legate tls cert create`: files for agent TLS,
//! named and worded as Consul's.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use legate_ca::agent_tls::{
    create_ca, create_cert, CertKind, CertRequest, DEFAULT_CA_DAYS, DEFAULT_CERT_DAYS,
};

use super::fail;

/// TLS subcommands.
#[derive(Subcommand, Debug)]
pub enum TlsCommand {
    /// Certificate authority files.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Agent certificates.
    #[command(subcommand)]
    Cert(CertCommand),
}

/// `tls ca` subcommands.
#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Creates a CA certificate and key in the current directory.
    Create(CaCreateArgs),
}

/// `tls cert` subcommands.
#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Creates a certificate and key signed by the agent CA.
    Create(CertCreateArgs),
}

/// Flags of `tls ca create`.
#[derive(Args, Debug)]
pub struct CaCreateArgs {
    /// DNS domain of the cluster.
    #[arg(long, default_value = "consul")]
    domain: String,
    /// Validity in days.
    #[arg(long, default_value_t = DEFAULT_CA_DAYS)]
    days: u32,
    /// Cluster id to embed in the CA's name.
    #[arg(long = "cluster-id", default_value = "")]
    cluster_id: String,
}

/// Flags of `tls cert create`.
#[derive(Args, Debug)]
pub struct CertCreateArgs {
    /// A server certificate.
    #[arg(long)]
    server: bool,
    /// A client agent certificate.
    #[arg(long)]
    client: bool,
    /// A CLI certificate.
    #[arg(long)]
    cli: bool,
    /// Datacenter.
    #[arg(long, default_value = "dc1")]
    dc: String,
    /// DNS domain.
    #[arg(long, default_value = "consul")]
    domain: String,
    /// Node name (servers): adds `<node>.server.<dc>.<domain>`.
    #[arg(long, default_value = "")]
    node: String,
    /// Extra DNS name; repeatable.
    #[arg(long = "additional-dnsname")]
    additional_dnsname: Vec<String>,
    /// Extra IP address; repeatable.
    #[arg(long = "additional-ipaddress")]
    additional_ipaddress: Vec<String>,
    /// The CA certificate (default `<domain>-agent-ca.pem`).
    #[arg(long)]
    ca: Option<PathBuf>,
    /// The CA key (default `<domain>-agent-ca-key.pem`).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Validity in days.
    #[arg(long, default_value_t = DEFAULT_CERT_DAYS)]
    days: u32,
}

fn save(path: &Path, contents: &str, private: bool) -> Result<(), String> {
    std::fs::write(path, contents)
        .map_err(|e| format!("==> Failed to write {}: {e}", path.display()))?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("==> Failed to protect {}: {e}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    println!("==> Saved {}", path.display());
    Ok(())
}

/// Runs a TLS subcommand.
pub fn run(cmd: TlsCommand) -> u8 {
    let result = match cmd {
        TlsCommand::Ca(CaCommand::Create(args)) => ca_create(args),
        TlsCommand::Cert(CertCommand::Create(args)) => cert_create(args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn ca_create(args: CaCreateArgs) -> Result<(), String> {
    let cert_path = PathBuf::from(format!("{}-agent-ca.pem", args.domain));
    let key_path = PathBuf::from(format!("{}-agent-ca-key.pem", args.domain));
    for path in [&cert_path, &key_path] {
        if path.exists() {
            return Err(format!("==> CA file {} already exists", path.display()));
        }
    }
    let (cert, key) =
        create_ca(&args.domain, args.days, &args.cluster_id).map_err(|e| format!("==> {e}"))?;
    save(&cert_path, &cert, false)?;
    save(&key_path, &key, true)
}

fn cert_create(args: CertCreateArgs) -> Result<(), String> {
    let kind = match (args.server, args.client, args.cli) {
        (true, false, false) => CertKind::Server,
        (false, true, false) => CertKind::Client,
        (false, false, true) => CertKind::Cli,
        _ => return Err("==> Please provide either -server, -client, or -cli".into()),
    };
    if !args.node.is_empty() && kind != CertKind::Server {
        return Err("==> -node requires -server".into());
    }
    let additional_ips = args
        .additional_ipaddress
        .iter()
        .map(|ip| {
            ip.parse::<IpAddr>()
                .map_err(|_| format!("==> -additional-ipaddress {ip:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ca_path = args
        .ca
        .unwrap_or_else(|| PathBuf::from(format!("{}-agent-ca.pem", args.domain)));
    let key_path = args
        .key
        .unwrap_or_else(|| PathBuf::from(format!("{}-agent-ca-key.pem", args.domain)));
    let ca = std::fs::read_to_string(&ca_path)
        .map_err(|e| format!("==> CA file {}: {e}", ca_path.display()))?;
    let ca_key = std::fs::read_to_string(&key_path)
        .map_err(|e| format!("==> CA key file {}: {e}", key_path.display()))?;
    if kind == CertKind::Server {
        println!(
            "==> WARNING: Server Certificates grants authority to become a\n    server and access all state in the cluster including root keys\n    and all ACL tokens. Do not distribute them to production hosts\n    that are not server nodes. Store them as securely as CA keys."
        );
    }
    println!("==> Using {} and {}", ca_path.display(), key_path.display());
    let request = CertRequest {
        kind,
        datacenter: args.dc.clone(),
        domain: args.domain.clone(),
        node: args.node.clone(),
        additional_dns: args.additional_dnsname.clone(),
        additional_ips,
        days: args.days,
    };
    let (cert, key) = create_cert(&ca, &ca_key, &request).map_err(|e| format!("==> {e}"))?;
    let prefix = format!("{}-{}-{}", args.dc, kind.name(), args.domain);
    let mut n = 0;
    while Path::new(&format!("{prefix}-{n}.pem")).exists()
        || Path::new(&format!("{prefix}-{n}-key.pem")).exists()
    {
        n += 1;
    }
    save(Path::new(&format!("{prefix}-{n}.pem")), &cert, false)?;
    save(Path::new(&format!("{prefix}-{n}-key.pem")), &key, true)
}
