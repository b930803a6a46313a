//! Address ranges (`10.0.0.0/8`, `::1/128`), as the agent's allow-lists
//! (`allow_write_http_from`, `serf_lan_allowed_cidrs`, …) name them.

use std::net::IpAddr;

/// An address range (`10.0.0.0/8`, `::1/128`; a bare address is one
/// address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`, `x::y/n` or a bare address.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = address
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a CIDR range"))?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("{text:?} is not a CIDR range"))?,
        };
        Ok(Cidr { network, prefix })
    }

    /// Whether `address` is in the range (IPv4-mapped IPv6 addresses
    /// count as IPv4).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        match (self.network, address) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_what_they_name() {
        let lan = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(lan.contains("10.1.200.3".parse().unwrap()));
        assert!(!lan.contains("10.2.0.1".parse().unwrap()));
        assert!(lan.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("::/0")
            .unwrap()
            .contains("fe80::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nope", "10.0.0.0/x", "::/129"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
