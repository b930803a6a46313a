//! TLS on the server port. A connection whose first byte is a TLS
//! handshake (0x16) is a TLS connection; its kind (RPC or Raft) is the ALPN
//! protocol it negotiated, so one port carries every kind, and anything
//! that can route on a ClientHello's ALPN (a mesh gateway) can route it.
//! With `verify_incoming` the server asks for a client certificate signed
//! by the CA and refuses plain connections; with `verify_outgoing` dialers
//! speak TLS, check the server's chain against the CA and its name
//! (`server.<datacenter>.<domain>`, as `tls cert create -server` writes).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::Kind;

/// The ALPN protocol of each kind.
/// Consul names its own `consul/rpc-single`, `consul/raft`, one for its
/// yamux-multiplexed RPC (`RPCMultiplexV2`; Legate's `rpc-multiplex` is
/// its own framing, not yamux), `consul/wan-gossip/packet` and
/// `consul/wan-gossip/stream`; Legate's
/// gossip sends datagrams only (its push-pull is chunked into them), so
/// it has no stream protocol.
pub fn alpn(kind: Kind) -> &'static [u8] {
    match kind {
        Kind::Rpc => b"legate/rpc",
        Kind::Raft => b"legate/raft",
        Kind::RpcMux => b"legate/rpc-multiplex",
        Kind::WanGossip => b"legate/wan-gossip/packet",
    }
}

/// Every kind, in the order the server offers their ALPN protocols.
pub const KINDS: [Kind; 4] = [Kind::Rpc, Kind::Raft, Kind::RpcMux, Kind::WanGossip];

/// The kind an ALPN protocol names.
pub(crate) fn kind_of_alpn(protocol: &[u8]) -> Option<Kind> {
    KINDS.into_iter().find(|k| alpn(*k) == protocol)
}

/// Whether the first certificate of `chain` is valid for `name` (a
/// server's `server.<dc>.<domain>`).
pub fn certificate_names(chain: &[CertificateDer<'_>], name: &str) -> bool {
    let Ok(name) = ServerName::try_from(name) else {
        return false;
    };
    chain
        .first()
        .and_then(|leaf| webpki::EndEntityCert::try_from(leaf).ok())
        .is_some_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
}

/// PEM material and switches, as the agent config gives them.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// The CA certificate(s) (PEM).
    pub ca_pem: String,
    /// This agent's certificate chain (PEM), empty when it has none.
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// Servers: ask for client certificates and refuse plain connections.
    pub verify_incoming: bool,
    /// Dial servers over TLS, checking their certificates.
    pub verify_outgoing: bool,
    /// The name servers' certificates must carry (`server.dc1.consul`).
    pub server_name: String,
}

/// The listener's side.
pub struct ServerTls {
    pub(crate) acceptor: TlsAcceptor,
    /// Plain connections are refused.
    pub(crate) required: bool,
    /// With `verify_incoming`, Raft connections must present a server
    /// certificate (this name), not just any certificate of the CA: a
    /// client agent's certificate must not let it speak Raft.
    pub(crate) raft_peer_name: Option<ServerName<'static>>,
}

impl ServerTls {
    /// Whether the peer of an accepted connection may carry `kind`.
    pub(crate) fn admits(
        &self,
        kind: Kind,
        peer: Option<&[CertificateDer<'_>]>,
    ) -> Result<(), String> {
        if kind == Kind::WanGossip && peer.is_none_or(|chain| chain.is_empty()) {
            // Its hello names a server, checked against this certificate.
            return Err("WAN gossip without a client certificate".into());
        }
        let (Kind::Raft, Some(name)) = (kind, &self.raft_peer_name) else {
            return Ok(());
        };
        let leaf = peer
            .and_then(|chain| chain.first())
            .ok_or("a Raft connection without a client certificate")?;
        let cert = webpki::EndEntityCert::try_from(leaf).map_err(|e| e.to_string())?;
        cert.verify_is_valid_for_subject_name(name)
            .map_err(|_| format!("a Raft connection whose certificate is not for {name:?}"))
    }
}

/// The dialer's side: one client configuration per kind (its ALPN).
pub struct ClientTls {
    rpc: TlsConnector,
    rpc_mux: TlsConnector,
    raft: TlsConnector,
    wan_gossip: TlsConnector,
    pub(crate) server_name: ServerName<'static>,
    /// The configured name, `server.<dc>.<domain>`.
    name_text: String,
}

impl ClientTls {
    /// The name a server of `datacenter` must carry: the configured
    /// `server.<dc>.<domain>` with that datacenter in place of this one.
    pub(crate) fn name_for(&self, datacenter: &str) -> Result<ServerName<'static>, String> {
        let mut labels = self.name_text.splitn(3, '.');
        let name = match (labels.next(), labels.next(), labels.next()) {
            (Some("server"), Some(_), Some(domain)) => format!("server.{datacenter}.{domain}"),
            _ => return Ok(self.server_name.clone()),
        };
        ServerName::try_from(name.clone()).map_err(|e| format!("server name {name:?}: {e}"))
    }

    /// The name a server of `datacenter` is dialled by through a mesh
    /// gateway: `<node>.server.<dc>.<domain>`, or `server.<dc>.<domain>`
    /// for any server (the gateway routes on it, and the certificate must
    /// carry it: `tls cert create -server -node`).
    pub fn name_through_gateway(
        &self,
        node: Option<&str>,
        datacenter: &str,
    ) -> Result<ServerName<'static>, String> {
        let domain = self
            .name_text
            .splitn(3, '.')
            .nth(2)
            .filter(|_| self.name_text.starts_with("server."))
            .unwrap_or("consul");
        let name = match node {
            Some(node) => format!("{node}.server.{datacenter}.{domain}"),
            None => format!("server.{datacenter}.{domain}"),
        };
        ServerName::try_from(name.clone()).map_err(|e| format!("server name {name:?}: {e}"))
    }

    /// The `<node>.server.<dc>.<domain>` name of a server, as text (what
    /// a WAN gossip peer's certificate must carry for the name its hello
    /// claims).
    pub fn node_name_in(&self, node: &str, datacenter: &str) -> Result<String, String> {
        self.name_through_gateway(Some(node), datacenter)
            .map(|name| name.to_str().into_owned())
    }

    pub(crate) fn connector(&self, kind: Kind) -> &TlsConnector {
        match kind {
            Kind::Rpc => &self.rpc,
            Kind::RpcMux => &self.rpc_mux,
            Kind::Raft => &self.raft,
            Kind::WanGossip => &self.wan_gossip,
        }
    }
}

impl TlsSettings {
    /// Whether any TLS is configured.
    pub fn enabled(&self) -> bool {
        self.verify_incoming || self.verify_outgoing || !self.cert_pem.is_empty()
    }

    /// The listener's TLS (servers with a certificate), or `None`.
    pub fn server(&self) -> Result<Option<Arc<ServerTls>>, String> {
        if self.cert_pem.is_empty() {
            if self.verify_incoming {
                return Err("verify_incoming needs cert_file and key_file".into());
            }
            return Ok(None);
        }
        let config = legate_net::tls::server_config(
            &legate_net::tls::ServerPem {
                cert_pem: self.cert_pem.clone(),
                key_pem: self.key_pem.clone(),
                client_ca_pem: self.verify_incoming.then(|| self.ca_pem.clone()),
            },
            &KINDS.map(alpn),
        )?;
        let raft_peer_name = if self.verify_incoming {
            Some(
                ServerName::try_from(self.server_name.clone())
                    .map_err(|e| format!("server name {:?}: {e}", self.server_name))?,
            )
        } else {
            None
        };
        Ok(Some(Arc::new(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            required: self.verify_incoming,
            raft_peer_name,
        })))
    }

    /// The dialer's TLS (with `verify_outgoing`), or `None`.
    pub fn client(&self) -> Result<Option<Arc<ClientTls>>, String> {
        if !self.verify_outgoing {
            return Ok(None);
        }
        if self.ca_pem.is_empty() {
            return Err("verify_outgoing needs ca_file".into());
        }
        let server_name = ServerName::try_from(self.server_name.clone())
            .map_err(|e| format!("server name {:?}: {e}", self.server_name))?;
        let identity = (!self.cert_pem.is_empty()).then(|| (&*self.cert_pem, &*self.key_pem));
        let config = |kind: Kind| -> Result<TlsConnector, String> {
            let config = legate_net::tls::client_config(&self.ca_pem, identity, &[alpn(kind)])?;
            Ok(TlsConnector::from(Arc::new(config)))
        };
        Ok(Some(Arc::new(ClientTls {
            rpc: config(Kind::Rpc)?,
            rpc_mux: config(Kind::RpcMux)?,
            raft: config(Kind::Raft)?,
            wan_gossip: config(Kind::WanGossip)?,
            server_name,
            name_text: self.server_name.clone(),
        })))
    }
}
