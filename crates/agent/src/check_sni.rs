//! The name an HTTPS or gRPC-over-TLS check puts in its TLS handshake
//! (SNI). Go's `tls.Config.ServerName`, which Consul's
//! `OutgoingTLSConfigForCheck` sets from the check's `TLSServerName` (or,
//! with `enable_agent_tls_for_checks`, `server_name` else the node name),
//! is both the name the certificate is checked against and the name sent
//! to the server; the HTTP client here sends the URL's host. So a check
//! with such a name dials a URL whose host is that name, resolved to the
//! real host's addresses by [`SniRoute`], with the real host in its `Host`
//! header: the server sees Consul's SNI and Consul's request.

use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// Sends a check to `host` while its TLS handshake names `name`.
#[derive(Debug, Clone)]
pub struct SniRoute {
    /// The name in the handshake (and in the dialed URL).
    name: String,
    /// The URL's real host, which `name` resolves to.
    host: String,
    /// The real `Host` header (host and any explicit port).
    authority: String,
    /// The URL as dialed.
    url: Url,
}

impl SniRoute {
    /// The route for dialing `url` with `name` in the handshake; `None`
    /// when nothing needs rerouting: a plain-HTTP URL, a name that is an
    /// address (never sent as SNI) or already the URL's host.
    pub fn new(url: &str, name: &str) -> Option<SniRoute> {
        let parsed = Url::parse(url).ok()?;
        if parsed.scheme() != "https" || name.is_empty() || name.parse::<IpAddr>().is_ok() {
            return None;
        }
        let host = parsed.host_str()?.trim_matches(['[', ']']).to_string();
        if host.eq_ignore_ascii_case(name) {
            return None;
        }
        let authority = match parsed.port() {
            Some(port) => format!("{}:{port}", parsed.host_str()?),
            None => parsed.host_str()?.to_string(),
        };
        let mut dialed = parsed;
        dialed.set_host(Some(name)).ok()?;
        Some(SniRoute {
            name: name.to_ascii_lowercase(),
            host,
            authority,
            url: dialed,
        })
    }

    /// The URL to dial: the original with `name` as its host.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The `Host` header the original URL would have sent.
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

impl Resolve for SniRoute {
    fn resolve(&self, name: Name) -> Resolving {
        // The handshake's name stands for the real host; any other name
        // (a redirect's) resolves as usual. Ports are the URL's: the
        // connector puts them on the addresses.
        let target = if name.as_str().eq_ignore_ascii_case(&self.name) {
            self.host.clone()
        } else {
            name.as_str().to_string()
        };
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.as_str(), 0))
                .await?
                .collect();
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_to_another_host_are_rerouted() {
        let route =
            SniRoute::new("https://127.0.0.1:8443/health?x=1", "server.dc1.consul").unwrap();
        assert_eq!(
            route.url().as_str(),
            "https://server.dc1.consul:8443/health?x=1"
        );
        assert_eq!(route.authority(), "127.0.0.1:8443");
        assert_eq!(route.host, "127.0.0.1");
        let v6 = SniRoute::new("https://[::1]/", "svc").unwrap();
        assert_eq!((v6.host.as_str(), v6.authority()), ("::1", "[::1]"));
        assert!(SniRoute::new("http://127.0.0.1/", "svc").is_none());
        assert!(SniRoute::new("https://svc:1/", "SVC").is_none());
        assert!(SniRoute::new("https://localhost/", "10.0.0.1").is_none());
        assert!(SniRoute::new("https://localhost/", "").is_none());
        assert!(SniRoute::new("not a url", "svc").is_none());
    }

    #[tokio::test]
    async fn the_handshake_name_resolves_to_the_real_host() {
        let route = SniRoute::new("https://127.0.0.1:1/", "server.dc1.consul").unwrap();
        let addrs: Vec<SocketAddr> = route
            .resolve("server.dc1.consul".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(addrs, vec!["127.0.0.1:0".parse().unwrap()]);
    }
}
