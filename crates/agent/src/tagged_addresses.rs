//! The node's tagged addresses, as Consul's agent sets them: `lan` and
//! `wan`, and `lan_ipv4`/`lan_ipv6`/`wan_ipv4`/`wan_ipv6` from the family
//! of those addresses or from `advertise_addr_ipv4`, `advertise_addr_ipv6`,
//! `advertise_addr_wan_ipv4` and `advertise_addr_wan_ipv6`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::config::{get_str, ConfigError};

/// The per-family advertise addresses (each of its family, checked at
/// load).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FamilyAddresses {
    /// `advertise_addr_ipv4`.
    pub lan_ipv4: Option<IpAddr>,
    /// `advertise_addr_ipv6`.
    pub lan_ipv6: Option<IpAddr>,
    /// `advertise_addr_wan_ipv4`.
    pub wan_ipv4: Option<IpAddr>,
    /// `advertise_addr_wan_ipv6`.
    pub wan_ipv6: Option<IpAddr>,
}

fn family_address(
    map: &Map<String, Value>,
    key: &str,
    v4: bool,
) -> Result<Option<IpAddr>, ConfigError> {
    let Some(text) = get_str(map, &[key])? else {
        return Ok(None);
    };
    let family = if v4 { "ipv4" } else { "ipv6" };
    match text.parse::<IpAddr>() {
        Ok(ip) if ip.is_ipv4() == v4 => Ok(Some(ip)),
        _ => Err(ConfigError(format!(
            "{key} must be an {family} address, got {text:?}"
        ))),
    }
}

/// Reads the four keys.
pub fn parse(map: &Map<String, Value>) -> Result<FamilyAddresses, ConfigError> {
    Ok(FamilyAddresses {
        lan_ipv4: family_address(map, "advertise_addr_ipv4", true)?,
        lan_ipv6: family_address(map, "advertise_addr_ipv6", false)?,
        wan_ipv4: family_address(map, "advertise_addr_wan_ipv4", true)?,
        wan_ipv6: family_address(map, "advertise_addr_wan_ipv6", false)?,
    })
}

/// The tagged addresses of a node advertising `lan` and `wan`.
pub fn tagged_addresses(
    lan: IpAddr,
    wan: IpAddr,
    family: &FamilyAddresses,
) -> BTreeMap<String, String> {
    let mut tagged = BTreeMap::new();
    for (name, address, v4, v6) in [
        ("lan", lan, family.lan_ipv4, family.lan_ipv6),
        ("wan", wan, family.wan_ipv4, family.wan_ipv6),
    ] {
        tagged.insert(name.to_string(), address.to_string());
        let own = if address.is_ipv4() { "ipv4" } else { "ipv6" };
        tagged.insert(format!("{name}_{own}"), address.to_string());
        if let Some(v4) = v4 {
            tagged.insert(format!("{name}_ipv4"), v4.to_string());
        }
        if let Some(v6) = v6 {
            tagged.insert(format!("{name}_ipv6"), v6.to_string());
        }
    }
    tagged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_gets_its_own_tag() {
        let lan: IpAddr = "10.0.0.5".parse().unwrap();
        let wan: IpAddr = "2001:db8::5".parse().unwrap();
        let tagged = tagged_addresses(lan, wan, &FamilyAddresses::default());
        assert_eq!(tagged["lan_ipv4"], "10.0.0.5");
        assert_eq!(tagged["wan_ipv6"], "2001:db8::5");
        assert!(!tagged.contains_key("wan_ipv4") && !tagged.contains_key("lan_ipv6"));
        let both = FamilyAddresses {
            lan_ipv6: Some("fd00::5".parse().unwrap()),
            wan_ipv4: Some("203.0.113.5".parse().unwrap()),
            ..Default::default()
        };
        let tagged = tagged_addresses(lan, wan, &both);
        assert_eq!(tagged["lan_ipv6"], "fd00::5");
        assert_eq!(tagged["wan_ipv4"], "203.0.113.5");
        assert_eq!(tagged["wan"], "2001:db8::5");
    }
}
