//! SPIFFE ids as Consul formats them.

use std::fmt;

/// An identity in the mesh.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SpiffeId {
    /// A service: `spiffe://<td>/ns/<ns>/dc/<dc>/svc/<service>`.
    Service {
        /// Trust domain (`<cluster-id>.consul`).
        trust_domain: String,
        /// Namespace.
        namespace: String,
        /// Datacenter.
        datacenter: String,
        /// Service name.
        service: String,
    },
    /// A client agent: `spiffe://<td>/agent/client/dc/<dc>/id/<node>`.
    Agent {
        /// Trust domain.
        trust_domain: String,
        /// Datacenter.
        datacenter: String,
        /// Node name.
        node: String,
    },
    /// A server: `spiffe://<td>/agent/server/dc/<dc>`.
    Server {
        /// Trust domain.
        trust_domain: String,
        /// Datacenter.
        datacenter: String,
    },
    /// A mesh gateway: `spiffe://<td>/gateway/mesh/dc/<dc>`.
    MeshGateway {
        /// Trust domain.
        trust_domain: String,
        /// Datacenter.
        datacenter: String,
    },
    /// The signing CA itself: `spiffe://<td>`.
    Signing {
        /// Trust domain.
        trust_domain: String,
    },
}

impl SpiffeId {
    /// The trust domain of any id.
    pub fn trust_domain(&self) -> &str {
        match self {
            SpiffeId::Service { trust_domain, .. }
            | SpiffeId::Agent { trust_domain, .. }
            | SpiffeId::Server { trust_domain, .. }
            | SpiffeId::MeshGateway { trust_domain, .. }
            | SpiffeId::Signing { trust_domain } => trust_domain,
        }
    }

    /// A service id in the default namespace.
    pub fn service(trust_domain: &str, datacenter: &str, service: &str) -> SpiffeId {
        SpiffeId::Service {
            trust_domain: trust_domain.to_string(),
            namespace: "default".to_string(),
            datacenter: datacenter.to_string(),
            service: service.to_string(),
        }
    }

    /// Parses a `spiffe://` URI.
    pub fn parse(uri: &str) -> Result<SpiffeId, String> {
        let rest = uri
            .strip_prefix("spiffe://")
            .ok_or_else(|| format!("{uri:?} is not a spiffe:// URI"))?;
        let (trust_domain, path) = match rest.split_once('/') {
            Some((td, path)) => (td.to_ascii_lowercase(), path),
            None => (rest.to_ascii_lowercase(), ""),
        };
        if trust_domain.is_empty() {
            return Err(format!("{uri:?} has no trust domain"));
        }
        let decoded: Vec<String> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/')
                .map(legate_types::connect::unescape_spiffe_segment)
                .collect::<Result<_, _>>()?
        };
        let parts: Vec<&str> = decoded.iter().map(String::as_str).collect();
        let id = match parts.as_slice() {
            [] => SpiffeId::Signing { trust_domain },
            ["ns", ns, "dc", dc, "svc", svc] => SpiffeId::Service {
                trust_domain,
                namespace: ns.to_string(),
                datacenter: dc.to_string(),
                service: svc.to_string(),
            },
            ["ap", "default", "ns", ns, "dc", dc, "svc", svc] => SpiffeId::Service {
                trust_domain,
                namespace: ns.to_string(),
                datacenter: dc.to_string(),
                service: svc.to_string(),
            },
            ["agent", "client", "dc", dc, "id", node] => SpiffeId::Agent {
                trust_domain,
                datacenter: dc.to_string(),
                node: node.to_string(),
            },
            ["agent", "server", "dc", dc] => SpiffeId::Server {
                trust_domain,
                datacenter: dc.to_string(),
            },
            ["gateway", "mesh", "dc", dc] => SpiffeId::MeshGateway {
                trust_domain,
                datacenter: dc.to_string(),
            },
            _ => return Err(format!("{uri:?} is not a SPIFFE id Legate recognizes")),
        };
        if let SpiffeId::Service {
            namespace,
            datacenter,
            service,
            ..
        } = &id
        {
            if namespace.is_empty() || datacenter.is_empty() || service.is_empty() {
                return Err(format!(
                    "{uri:?} has an empty namespace, datacenter or service"
                ));
            }
        }
        Ok(id)
    }
}

use legate_types::connect::escape_spiffe_segment as escape;

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpiffeId::Service {
                trust_domain,
                namespace,
                datacenter,
                service,
            } => f.write_str(&legate_types::connect::spiffe_service_uri(
                trust_domain,
                namespace,
                datacenter,
                service,
            )),
            SpiffeId::Agent {
                trust_domain,
                datacenter,
                node,
            } => {
                write!(
                    f,
                    "spiffe://{trust_domain}/agent/client/dc/{}/id/{}",
                    escape(datacenter),
                    escape(node)
                )
            }
            SpiffeId::Server {
                trust_domain,
                datacenter,
            } => write!(
                f,
                "spiffe://{trust_domain}/agent/server/dc/{}",
                escape(datacenter)
            ),
            SpiffeId::MeshGateway {
                trust_domain,
                datacenter,
            } => {
                write!(
                    f,
                    "spiffe://{trust_domain}/gateway/mesh/dc/{}",
                    escape(datacenter)
                )
            }
            SpiffeId::Signing { trust_domain } => write!(f, "spiffe://{trust_domain}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_form() {
        for uri in [
            "spiffe://1111-2222.consul/ns/default/dc/dc1/svc/web",
            "spiffe://1111-2222.consul/agent/client/dc/dc1/id/node-1",
            "spiffe://1111-2222.consul/agent/server/dc/dc1",
            "spiffe://1111-2222.consul/gateway/mesh/dc/dc2",
            "spiffe://1111-2222.consul",
        ] {
            assert_eq!(SpiffeId::parse(uri).unwrap().to_string(), uri);
        }
        // A name with a space is percent-encoded, and read back.
        let odd = SpiffeId::service("td.consul", "dc1", "x y");
        assert_eq!(
            odd.to_string(),
            "spiffe://td.consul/ns/default/dc/dc1/svc/x%20y"
        );
        assert_eq!(SpiffeId::parse(&odd.to_string()).unwrap(), odd);
        let with_partition =
            SpiffeId::parse("spiffe://td.consul/ap/default/ns/default/dc/dc1/svc/web").unwrap();
        assert_eq!(with_partition, SpiffeId::service("td.consul", "dc1", "web"));
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        for bad in [
            "https://td/ns/default/dc/dc1/svc/web",
            "spiffe://",
            "spiffe://td/ns/default/dc/dc1/svc/",
            "spiffe://td/unknown/path",
        ] {
            assert!(SpiffeId::parse(bad).is_err(), "{bad}");
        }
    }
}
