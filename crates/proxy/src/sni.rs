//! The built-in proxy as a mesh gateway: listeners whose connections are
//! routed by the SNI of their TLS ClientHello and passed through
//! untouched (never decrypted), as Envoy's `tls_inspector` +
//! `server_names` filter chains + `sni_cluster` do.

use envoy_types::pb::envoy::config::listener::v3 as listener;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3 as tcp_proxy;

use crate::config::{decode, socket, typed, Destination, ListenerConfig};

/// The listener filter that makes a listener SNI-routed.
pub const TLS_INSPECTOR: &str = "envoy.filters.listener.tls_inspector";
const SNI_CLUSTER: &str = "envoy.extensions.filters.network.sni_cluster.v3.SniCluster";
const TCP_PROXY: &str = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

/// One filter chain of an SNI-routed listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniRoute {
    /// The server names it matches (`*.suffix` wildcards); empty: any.
    pub server_names: Vec<String>,
    /// Where matching connections go; `None`: the cluster the SNI names.
    pub cluster: Option<String>,
}

impl SniRoute {
    fn matches(&self, sni: &str) -> bool {
        self.server_names.is_empty()
            || self
                .server_names
                .iter()
                .any(|name| match name.strip_prefix('*') {
                    Some(suffix) => sni.len() > suffix.len() && sni.ends_with(suffix),
                    None => name.eq_ignore_ascii_case(sni),
                })
    }
}

/// The cluster a connection presenting `sni` goes to: the first chain
/// matching by name (exact or wildcard), else the catch-all (Envoy picks
/// the most specific match; Consul's chains never overlap).
pub fn route(routes: &[SniRoute], sni: &str) -> Option<String> {
    let named = routes
        .iter()
        .filter(|r| !r.server_names.is_empty())
        .find(|r| r.matches(sni));
    let chosen = named.or_else(|| routes.iter().find(|r| r.server_names.is_empty()))?;
    match &chosen.cluster {
        Some(cluster) => Some(cluster.clone()),
        None => Some(sni.to_string()),
    }
}

/// Translates an SNI-routed listener (`tls_inspector`): each chain is a
/// `tcp_proxy` to one cluster, or `sni_cluster` then `tcp_proxy`; a chain
/// that would terminate TLS or run any other filter makes the listener
/// one the built-in proxy refuses.
pub fn gateway_listener(l: &listener::Listener) -> Option<ListenerConfig> {
    let address = socket(&l.address)?;
    let mut routes = Vec::new();
    for chain in &l.filter_chains {
        if chain.transport_socket.is_some() {
            return None; // gateways pass TLS through
        }
        let server_names = chain
            .filter_chain_match
            .as_ref()
            .map(|m| m.server_names.clone())
            .unwrap_or_default();
        let mut from_sni = false;
        let mut cluster = None;
        for filter in &chain.filters {
            let any = typed(filter)?;
            match any.type_url.rsplit('/').next().unwrap_or("") {
                SNI_CLUSTER => from_sni = true,
                TCP_PROXY => {
                    let t: tcp_proxy::TcpProxy = decode(any)?;
                    match t.cluster_specifier? {
                        tcp_proxy::tcp_proxy::ClusterSpecifier::Cluster(c) => cluster = Some(c),
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
        let cluster = cluster?;
        routes.push(SniRoute {
            server_names,
            cluster: if from_sni { None } else { Some(cluster) },
        });
    }
    Some(ListenerConfig {
        name: l.name.clone(),
        address,
        tls: None,
        authorization: None,
        destination: Destination::Cluster(String::new()),
        route_name: None,
        sni_routes: routes,
    })
}

/// What the first bytes of a connection say of its SNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not a whole ClientHello yet.
    NeedMore,
    /// A ClientHello naming this server.
    Sni(String),
    /// A ClientHello without a server name.
    NoSni,
    /// Not TLS, or a malformed ClientHello.
    NotTls,
}

/// Reads the server name from the TLS records at the start of `buf`
/// (the ClientHello may span records).
pub fn client_hello_sni(buf: &[u8]) -> Hello {
    let mut handshake = Vec::new();
    let mut at = 0;
    loop {
        if buf.len() < at + 5 {
            return Hello::NeedMore;
        }
        if buf[at] != 22 || buf[at + 1] != 3 {
            return Hello::NotTls;
        }
        let length = u16::from_be_bytes([buf[at + 3], buf[at + 4]]) as usize;
        if length == 0 || length > 16 * 1024 + 2048 {
            return Hello::NotTls;
        }
        let Some(payload) = buf.get(at + 5..at + 5 + length) else {
            return Hello::NeedMore;
        };
        handshake.extend_from_slice(payload);
        at += 5 + length;
        if handshake.len() >= 4 {
            if handshake[0] != 1 {
                return Hello::NotTls;
            }
            let body = u32::from_be_bytes([0, handshake[1], handshake[2], handshake[3]]) as usize;
            if handshake.len() >= 4 + body {
                return parse_client_hello(&handshake[4..4 + body]);
            }
        }
    }
}

/// A cursor over a ClientHello's fields.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.buf.get(self.at..self.at + n)?;
        self.at += n;
        Some(out)
    }

    fn length(&mut self, bytes: usize) -> Option<usize> {
        let raw = self.take(bytes)?;
        Some(raw.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize))
    }

    fn vector(&mut self, length_bytes: usize) -> Option<&'a [u8]> {
        let n = self.length(length_bytes)?;
        self.take(n)
    }
}

fn parse_client_hello(body: &[u8]) -> Hello {
    let mut r = Reader { buf: body, at: 0 };
    let parsed = (|| {
        r.take(2 + 32)?; // version, random
        r.vector(1)?; // session id
        r.vector(2)?; // cipher suites
        r.vector(1)?; // compression methods
        if r.at == body.len() {
            return Some(None); // no extensions
        }
        let mut extensions = Reader {
            buf: r.vector(2)?,
            at: 0,
        };
        while extensions.at < extensions.buf.len() {
            let kind = extensions.length(2)?;
            let data = extensions.vector(2)?;
            if kind != 0 {
                continue;
            }
            let mut list = Reader {
                buf: Reader { buf: data, at: 0 }.vector(2)?,
                at: 0,
            };
            while list.at < list.buf.len() {
                let name_type = list.take(1)?[0];
                let name = list.vector(2)?;
                if name_type == 0 {
                    let name = std::str::from_utf8(name).ok()?;
                    return Some(Some(name.to_ascii_lowercase()));
                }
            }
            return Some(None);
        }
        Some(None)
    })();
    match parsed {
        Some(Some(name)) if !name.is_empty() => Hello::Sni(name),
        Some(_) => Hello::NoSni,
        None => Hello::NotTls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls sends it, naming `server`.
    fn hello(server: &str) -> Vec<u8> {
        use std::sync::Arc;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(server.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn the_server_name_is_read_from_a_real_client_hello() {
        let bytes = hello("db.default.dc2.internal.1111.consul");
        assert_eq!(
            client_hello_sni(&bytes),
            Hello::Sni("db.default.dc2.internal.1111.consul".into())
        );
        for cut in [0, 3, 5, 40, bytes.len() - 1] {
            assert_eq!(client_hello_sni(&bytes[..cut]), Hello::NeedMore, "{cut}");
        }
        assert_eq!(client_hello_sni(b"GET / HTTP/1.1\r\n\r\n"), Hello::NotTls);
        // An IP address sends no server name.
        assert_eq!(client_hello_sni(&hello("10.0.0.1")), Hello::NoSni);
    }

    #[test]
    fn routes_match_exact_and_wildcard_names_then_the_catch_all() {
        let routes = vec![
            SniRoute {
                server_names: vec!["*.dc2.internal.td".into()],
                cluster: Some("dc2.internal.td".into()),
            },
            SniRoute {
                server_names: Vec::new(),
                cluster: None,
            },
        ];
        assert_eq!(
            route(&routes, "db.default.dc2.internal.td").as_deref(),
            Some("dc2.internal.td")
        );
        assert_eq!(
            route(&routes, "db.default.dc1.internal.td").as_deref(),
            Some("db.default.dc1.internal.td")
        );
        assert_eq!(
            route(&routes, "dc2.internal.td").as_deref(),
            Some("dc2.internal.td"),
            "the bare suffix is no wildcard match: the SNI names it"
        );
        assert_eq!(route(&routes[..1], "other"), None);
    }
}
