//! Query names as Consul reads them: which of our domains the name is in,
//! and what it asks for.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a name under one of our domains asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// `[tag.]svc.service[.dc]`, RFC 2782 `_svc._tag.service[.dc]`, or
    /// `svc.connect[.dc]` (mesh-capable instances: sidecars or native).
    Service {
        /// Service name.
        service: String,
        /// Tag filter.
        tag: Option<String>,
        /// Explicit datacenter.
        datacenter: Option<String>,
        /// `.connect`: the instances that accept mesh traffic for it.
        connect: bool,
    },
    /// `node.node[.dc]`.
    Node {
        /// Node name.
        node: String,
        /// Explicit datacenter.
        datacenter: Option<String>,
    },
    /// `<query>.query[.dc]` (the name may hold dots) or RFC 2782
    /// `_<query>._tcp.query[.dc]`: a prepared query by name or ID.
    Query {
        /// The query's name or ID.
        query: String,
        /// Explicit datacenter.
        datacenter: Option<String>,
    },
    /// `<hex>.addr[.dc]`: an address encoded in the name.
    Addr(IpAddr),
    /// The domain itself (SOA, NS).
    Apex,
    /// A well-formed name of a kind Legate does not serve (`.virtual`,
    /// `.ingress`): answered NXDOMAIN.
    Unsupported(&'static str),
    /// Anything else under our domain: NXDOMAIN.
    Invalid,
}

/// A parsed query name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Under `domain` (one of ours, as configured, without dots at the ends).
    Ours {
        /// The domain the name was under (`domain` or `alt_domain`).
        domain: String,
        /// What it asks for.
        lookup: Lookup,
    },
    /// `in-addr.arpa` / `ip6.arpa` for an address.
    Reverse(IpAddr),
    /// Not ours: recursors answer it, if any.
    Outside,
}

fn hex_addr(label: &str) -> Option<IpAddr> {
    let bytes: Option<Vec<u8>> = (0..label.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(label.get(i..i + 2)?, 16).ok())
        .collect();
    match bytes?.as_slice() {
        [a, b, c, d] if label.len() == 8 => Some(IpAddr::V4(Ipv4Addr::new(*a, *b, *c, *d))),
        b if b.len() == 16 && label.len() == 32 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(b);
            Some(IpAddr::V6(Ipv6Addr::from(octets)))
        }
        _ => None,
    }
}

/// The `<hex>` label that encodes `ip` in an `.addr` name.
pub fn addr_label(ip: IpAddr) -> String {
    let octets: Vec<u8> = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    octets.iter().map(|b| format!("{b:02x}")).collect()
}

fn reverse(name: &str) -> Option<IpAddr> {
    if let Some(rest) = name.strip_suffix(".in-addr.arpa") {
        let parts: Vec<&str> = rest.split('.').collect();
        if parts.len() != 4 {
            return None;
        }
        let mut octets = [0u8; 4];
        for (i, p) in parts.iter().rev().enumerate() {
            octets[i] = p.parse().ok()?;
        }
        return Some(IpAddr::V4(Ipv4Addr::from(octets)));
    }
    if let Some(rest) = name.strip_suffix(".ip6.arpa") {
        let nibbles: Vec<&str> = rest.split('.').collect();
        if nibbles.len() != 32 {
            return None;
        }
        let hex: String = nibbles.iter().rev().copied().collect();
        return u128::from_str_radix(&hex, 16)
            .ok()
            .filter(|_| nibbles.iter().all(|n| n.len() == 1))
            .map(|v| IpAddr::V6(Ipv6Addr::from(v)));
    }
    None
}

/// Parses `name` (any case, with or without the final dot) against our
/// domains. `srv`: the question is for SRV records, where Consul also reads
/// `_svc._tag[.dc].<domain>` without the `service` label.
pub fn parse(name: &str, domains: &[&str], srv: bool) -> Parsed {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if let Some(ip) = reverse(&name) {
        return Parsed::Reverse(ip);
    }
    // The longest of our domains the name ends with.
    let Some(domain) = domains
        .iter()
        .filter(|d| name == **d || name.ends_with(&format!(".{d}")))
        .max_by_key(|d| d.len())
    else {
        return Parsed::Outside;
    };
    let rest = name[..name.len() - domain.len()].trim_end_matches('.');
    Parsed::Ours {
        domain: domain.to_string(),
        lookup: lookup(rest, srv),
    }
}

/// What the labels before the domain ask for.
fn lookup(rest: &str, srv: bool) -> Lookup {
    if rest.is_empty() {
        return Lookup::Apex;
    }
    let labels: Vec<&str> = rest.split('.').collect();
    // The type label is the last or the one before a datacenter.
    let (kind_at, datacenter) = match labels.as_slice() {
        [.., kind] if is_kind(kind) => (labels.len() - 1, None),
        [.., kind, dc] if is_kind(kind) => (labels.len() - 2, Some(dc.to_string())),
        // RFC 2782 without `service`, for SRV questions: `_svc._tag[.dc]`.
        [svc, tag] if srv && svc.starts_with('_') && tag.starts_with('_') => {
            return rfc2782(svc, tag, None);
        }
        [svc, tag, dc] if srv && svc.starts_with('_') && tag.starts_with('_') => {
            return rfc2782(svc, tag, Some(dc.to_string()));
        }
        _ => return Lookup::Invalid,
    };
    let before = &labels[..kind_at];
    match labels[kind_at] {
        "service" => match before {
            [service] => service_lookup(service, None, datacenter, false),
            [first, second] if first.starts_with('_') && second.starts_with('_') => {
                rfc2782(first, second, datacenter)
            }
            [tag, service] => service_lookup(service, Some(tag.to_string()), datacenter, false),
            _ => Lookup::Invalid,
        },
        "connect" => match before {
            [service] => service_lookup(service, None, datacenter, true),
            _ => Lookup::Invalid,
        },
        // Node names may contain dots.
        "node" if !before.is_empty() && before.iter().all(|l| !l.is_empty()) => Lookup::Node {
            node: before.join("."),
            datacenter,
        },
        "addr" => match before {
            [hex] => hex_addr(hex).map(Lookup::Addr).unwrap_or(Lookup::Invalid),
            _ => Lookup::Invalid,
        },
        "query" => match before {
            // RFC 2782 `_<query>._<protocol>`; the query's name may hold dots.
            [first, .., protocol] if first.starts_with('_') && protocol.starts_with('_') => {
                query_lookup(&before[..before.len() - 1].join(".")[1..], datacenter)
            }
            _ => query_lookup(&before.join("."), datacenter),
        },
        "virtual" => Lookup::Unsupported("virtual"),
        "ingress" => Lookup::Unsupported("ingress"),
        _ => Lookup::Invalid,
    }
}

/// RFC 2782 `_service._tag`: the protocol `_tcp` means no tag filter.
fn rfc2782(service: &str, tag: &str, datacenter: Option<String>) -> Lookup {
    let tag = &tag[1..];
    let tag = (tag != "tcp").then(|| tag.to_string());
    service_lookup(&service[1..], tag, datacenter, false)
}

fn query_lookup(query: &str, datacenter: Option<String>) -> Lookup {
    if query.is_empty() || query.split('.').any(str::is_empty) {
        return Lookup::Invalid;
    }
    Lookup::Query {
        query: query.to_string(),
        datacenter,
    }
}

fn is_kind(label: &str) -> bool {
    matches!(
        label,
        "service" | "connect" | "node" | "addr" | "query" | "virtual" | "ingress"
    )
}

fn service_lookup(
    service: &str,
    tag: Option<String>,
    datacenter: Option<String>,
    connect: bool,
) -> Lookup {
    if service.is_empty() || tag.as_deref() == Some("") {
        return Lookup::Invalid;
    }
    Lookup::Service {
        service: service.to_string(),
        tag,
        datacenter,
        connect,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(name: &str) -> Lookup {
        match parse(name, &["consul", "alt.example"], false) {
            Parsed::Ours { lookup, .. } => lookup,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn service(s: &str, tag: Option<&str>, dc: Option<&str>, connect: bool) -> Lookup {
        Lookup::Service {
            service: s.into(),
            tag: tag.map(String::from),
            datacenter: dc.map(String::from),
            connect,
        }
    }

    #[test]
    fn every_name_form() {
        assert_eq!(
            ours("web.service.consul."),
            service("web", None, None, false)
        );
        assert_eq!(
            ours("WEB.Service.Consul"),
            service("web", None, None, false)
        );
        assert_eq!(
            ours("v1.web.service.dc1.consul"),
            service("web", Some("v1"), Some("dc1"), false)
        );
        assert_eq!(
            ours("_web._tcp.service.consul"),
            service("web", None, None, false)
        );
        assert_eq!(
            ours("_web._v1.service.dc2.consul"),
            service("web", Some("v1"), Some("dc2"), false)
        );
        assert_eq!(ours("web.connect.consul"), service("web", None, None, true));
        assert_eq!(
            ours("web.service.alt.example"),
            service("web", None, None, false)
        );
        assert_eq!(
            ours("node1.node.dc1.consul"),
            Lookup::Node {
                node: "node1".into(),
                datacenter: Some("dc1".into())
            }
        );
        assert_eq!(
            ours("7f000001.addr.dc1.consul"),
            Lookup::Addr("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            ours("20010db8000000000000000000000001.addr.dc1.consul"),
            Lookup::Addr("2001:db8::1".parse().unwrap())
        );
        assert_eq!(ours("consul."), Lookup::Apex);
        assert_eq!(
            ours("a.b.node.consul"),
            Lookup::Node {
                node: "a.b".into(),
                datacenter: None
            }
        );
        match parse("_web._tcp.dc1.consul", &["consul"], true) {
            Parsed::Ours { lookup, .. } => {
                assert_eq!(lookup, service("web", None, Some("dc1"), false))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse("_web._tcp.consul", &["consul"], false),
            Parsed::Ours {
                lookup: Lookup::Invalid,
                ..
            }
        ));
        let query = |q: &str, dc: Option<&str>| Lookup::Query {
            query: q.into(),
            datacenter: dc.map(String::from),
        };
        assert_eq!(ours("q.query.consul"), query("q", None));
        assert_eq!(
            ours("Geo.DB.query.dc2.consul"),
            query("geo.db", Some("dc2"))
        );
        assert_eq!(ours("_geo-db._tcp.query.consul"), query("geo-db", None));
        assert_eq!(
            ours("_geo.db._tcp.query.dc2.consul"),
            query("geo.db", Some("dc2"))
        );
        assert_eq!(ours("query.consul"), Lookup::Invalid);
        for bad in [
            "web.consul",
            "a.b.c.service.consul",
            "zz.addr.consul",
            "node.consul",
            "ns.consul",
            "x.connect.y.z.consul",
        ] {
            assert_eq!(ours(bad), Lookup::Invalid, "{bad}");
        }
        assert_eq!(parse("example.com.", &["consul"], false), Parsed::Outside);
        assert_eq!(parse("notconsul", &["consul"], false), Parsed::Outside);
        assert_eq!(
            parse("1.0.0.127.in-addr.arpa.", &["consul"], false),
            Parsed::Reverse("127.0.0.1".parse().unwrap())
        );
        let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa";
        assert_eq!(
            parse(v6, &["consul"], false),
            Parsed::Reverse("2001:db8::1".parse().unwrap())
        );
        assert_eq!(addr_label("127.0.0.1".parse().unwrap()), "7f000001");
    }
}
