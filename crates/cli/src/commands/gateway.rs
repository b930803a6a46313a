//! `-gateway=mesh` for `connect envoy` and `connect proxy`, as Consul's
//! `connect envoy` takes it: find the mesh gateway registered with the
//! local agent, or register one (`-register`) with Consul's body — kind,
//! ID and name, LAN and WAN tagged addresses (port 8443 unless given),
//! `consul-wan-federation` meta with `-expose-servers`, the bind knobs in
//! `Proxy.Config`, and the `mesh-gateway listening` TCP check.

use std::collections::BTreeMap;
use std::net::IpAddr;

use clap::Args;
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::client::Client;

/// The port a gateway address without one gets (Consul's).
pub const DEFAULT_GATEWAY_PORT: u16 = 8443;

/// Gateway flags shared by `connect envoy` and `connect proxy`.
#[derive(Args, Debug, Default)]
pub struct GatewayArgs {
    /// The type of gateway to register. One of: mesh (terminating,
    /// ingress and api are Consul's and not run by Legate).
    #[arg(long)]
    pub gateway: Option<String>,
    /// Configure as a mesh gateway (deprecated: -gateway=mesh).
    #[arg(long = "mesh-gateway")]
    pub mesh_gateway: bool,
    /// Register a new gateway service before configuring and starting the proxy.
    #[arg(long)]
    pub register: bool,
    /// LAN address to advertise in the gateway service registration (`ip[:port]`).
    #[arg(long)]
    pub address: Option<String>,
    /// WAN address to advertise in the gateway service registration (`ip[:port]`).
    #[arg(long = "wan-address")]
    pub wan_address: Option<String>,
    /// Bind address to use instead of the default binding rules, as
    /// `<name>=<ip>:<port>` (repeatable).
    #[arg(long = "bind-address")]
    pub bind_addresses: Vec<String>,
    /// Expose the servers for WAN federation via this mesh gateway.
    #[arg(long = "expose-servers")]
    pub expose_servers: bool,
    /// The gateway's check deregisters it after this long critical.
    #[arg(long = "deregister-after-critical", default_value = "6h")]
    pub deregister_after_critical: String,
}

/// An address and port as the gateway flags take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagAddress {
    /// Address (empty when only a port was given).
    pub address: String,
    /// Port.
    pub port: u16,
}

/// Consul's parsing of a gateway address: `ip`, `ip:port`, `host:port`,
/// `:port` or `[ipv6]:port`; no port (or an empty one) is 8443.
pub fn parse_address(raw: &str) -> Result<FlagAddress, String> {
    let split = if let Some(rest) = raw.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, tail)) => match tail.strip_prefix(':') {
                Some(port) => Some((host, port)),
                None if tail.is_empty() => None,
                None => {
                    return Err(format!(
                        "Error parsing address {raw:?}: missing port in address"
                    ))
                }
            },
            None => {
                return Err(format!(
                    "Error parsing address {raw:?}: missing ']' in address"
                ))
            }
        }
    } else {
        match raw.matches(':').count() {
            0 => None,
            1 => raw.split_once(':'),
            _ => {
                return Err(format!(
                    "Error parsing address {raw:?}: address {raw}: too many colons"
                ))
            }
        }
    };
    let Some((host, port)) = split else {
        let ip: IpAddr = raw
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("Error parsing address {raw:?}: not an IP address"))?;
        return Ok(FlagAddress {
            address: ip.to_string(),
            port: DEFAULT_GATEWAY_PORT,
        });
    };
    let port = if port.is_empty() {
        DEFAULT_GATEWAY_PORT
    } else {
        port.parse::<u16>().map_err(|_| {
            format!("Error parsing port {port:?}: strconv.Atoi: parsing {port:?}: invalid syntax")
        })?
    };
    Ok(FlagAddress {
        address: host.to_string(),
        port,
    })
}

/// `name=ip:port` of `-bind-address`.
pub fn parse_bind_address(raw: &str) -> Result<(String, FlagAddress), String> {
    let (name, address) = raw
        .split_once('=')
        .ok_or_else(|| format!("Missing \"=\" in argument: {raw}"))?;
    Ok((name.to_string(), parse_address(address)?))
}

/// What the gateway flags ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayPlan {
    /// No gateway flags.
    None,
    /// Run the mesh gateway registered with the local agent.
    Find,
    /// Register a mesh gateway (this body) and run it.
    Register(Value),
}

fn invalid_flag(flag: &str, value: &str, error: String) -> String {
    format!("invalid value {value:?} for flag -{flag}: {error}")
}

/// Whether this host can bind `address` (an IP of one of its interfaces).
fn can_bind(address: &str) -> bool {
    let Ok(ip) = address.parse::<IpAddr>() else {
        return false;
    };
    !ip.is_unspecified() && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

impl GatewayArgs {
    /// The gateway kind asked for (`mesh`), checked as Consul checks it.
    fn kind(&self) -> Result<Option<&str>, String> {
        if self.mesh_gateway && self.gateway.is_some() {
            return Err(
                "The mesh-gateway flag is deprecated and cannot be used alongside the gateway flag"
                    .into(),
            );
        }
        let kind = if self.mesh_gateway {
            Some("mesh")
        } else {
            self.gateway.as_deref()
        };
        if self.expose_servers {
            if kind != Some("mesh") {
                return Err("'-expose-servers' can only be used for mesh gateways".into());
            }
            if !self.register {
                return Err("'-expose-servers' requires '-register'".into());
            }
        }
        match kind {
            None | Some("mesh") => Ok(kind),
            Some("terminating" | "ingress" | "api") => Err(format!(
                "Legate runs mesh gateways only: -gateway={} is not supported",
                kind.unwrap_or_default()
            )),
            Some(_) => Err("Gateway must be one of: api, terminating, mesh, or ingress".into()),
        }
    }

    /// What to do: nothing, find the registered gateway, or register one
    /// named `service` (default `mesh-gateway`) with id `proxy_id`
    /// (default: the name).
    pub fn plan(
        &self,
        service: Option<&str>,
        proxy_id: Option<&str>,
    ) -> Result<GatewayPlan, String> {
        let kind = self.kind()?;
        if kind.is_none() {
            if self.register {
                return Err("Auto-Registration can only be used for gateways".into());
            }
            return Ok(GatewayPlan::None);
        }
        if !self.register {
            return Ok(GatewayPlan::Find);
        }
        let name = service.unwrap_or("mesh-gateway");
        let id = proxy_id.unwrap_or(name);
        let lan = match &self.address {
            Some(raw) => parse_address(raw).map_err(|e| invalid_flag("address", raw, e))?,
            None => FlagAddress {
                address: String::new(),
                port: DEFAULT_GATEWAY_PORT,
            },
        };
        let wan = match &self.wan_address {
            Some(raw) => Some(parse_address(raw).map_err(|e| invalid_flag("wan-address", raw, e))?),
            None => None,
        };
        let mut binds = BTreeMap::new();
        for raw in &self.bind_addresses {
            let (name, at) =
                parse_bind_address(raw).map_err(|e| invalid_flag("bind-address", raw, e))?;
            binds.insert(name, at);
        }
        let as_json = |a: &FlagAddress| json!({"Address": a.address, "Port": a.port});
        let mut tagged = Map::new();
        if !lan.address.is_empty() {
            tagged.insert("lan".into(), as_json(&lan));
        }
        if let Some(wan) = wan.as_ref().filter(|w| !w.address.is_empty()) {
            tagged.insert("wan".into(), as_json(wan));
        }
        let wan_bindable = wan.as_ref().is_some_and(|w| can_bind(&w.address));
        let proxy_config = if !binds.is_empty() {
            let addresses: Map<String, Value> =
                binds.iter().map(|(n, a)| (n.clone(), as_json(a))).collect();
            Some(
                json!({"envoy_gateway_no_default_bind": true, "envoy_gateway_bind_addresses": addresses}),
            )
        } else if can_bind(&lan.address) && wan_bindable {
            Some(
                json!({"envoy_gateway_no_default_bind": true, "envoy_gateway_bind_tagged_addresses": true}),
            )
        } else if !lan.address.is_empty() && !can_bind(&lan.address) {
            return Err(format!(
                "The LAN address {:?} will not be bindable. Either set a bindable address or override the bind addresses with -bind-address",
                lan.address
            ));
        } else {
            None
        };
        let check_host = if lan.address.is_empty() {
            "127.0.0.1"
        } else {
            &lan.address
        };
        let check_target = match check_host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]:{}", lan.port),
            _ => format!("{check_host}:{}", lan.port),
        };
        let mut body = json!({
            "Kind": "mesh-gateway",
            "ID": id,
            "Name": name,
            "Port": lan.port,
            "Check": {
                "Name": "mesh-gateway listening",
                "Interval": "10s",
                "TCP": check_target,
                "DeregisterCriticalServiceAfter": self.deregister_after_critical,
            },
            "Checks": null,
        });
        if !lan.address.is_empty() {
            body["Address"] = Value::String(lan.address.clone());
        }
        if !tagged.is_empty() {
            body["TaggedAddresses"] = Value::Object(tagged);
        }
        if self.expose_servers {
            body["Meta"] = json!({"consul-wan-federation": "1"});
        }
        if let Some(config) = proxy_config {
            body["Proxy"] = json!({"Config": config});
        }
        Ok(GatewayPlan::Register(body))
    }
}

/// Registers the gateway `body` with the local agent; its registration as
/// the agent then holds it.
pub async fn register(client: &Client, body: &Value) -> Result<Value, String> {
    let name = body["Name"].as_str().unwrap_or_default();
    client
        .ok(
            Method::PUT,
            "/v1/agent/service/register",
            &[],
            Some(serde_json::to_vec(body).unwrap_or_default()),
        )
        .await
        .map_err(|e| format!("Error registering service {name:?}: {e}"))?;
    let id = body["ID"].as_str().unwrap_or(name);
    client
        .get_json(&format!("/v1/agent/service/{id}"), &[])
        .await
        .map_err(|e| format!("Error reading the registered gateway {id:?}: {e}"))
}

/// The gateway the flags name, registered first with `-register`
/// (announced unless `quiet`); `None` without gateway flags, or when
/// `-proxy-id` or `-sidecar-for` names the proxy (as in Consul, they win
/// over the lookup).
pub async fn gateway_proxy(
    client: &Client,
    args: &GatewayArgs,
    service: Option<&str>,
    proxy_id: Option<&str>,
    sidecar_for: Option<&str>,
    quiet: bool,
) -> Result<Option<Value>, String> {
    match args.plan(service, proxy_id)? {
        GatewayPlan::None => Ok(None),
        GatewayPlan::Find if proxy_id.is_some() || sidecar_for.is_some() => Ok(None),
        GatewayPlan::Find => find(client).await.map(Some),
        GatewayPlan::Register(body) => {
            let registered = register(client, &body).await?;
            if !quiet {
                println!(
                    "Registered service: {}",
                    body["Name"].as_str().unwrap_or_default()
                );
            }
            Ok(Some(registered))
        }
    }
}

/// The single mesh gateway registered with the local agent (Consul's
/// `LookupGatewayProxy`).
pub async fn find(client: &Client) -> Result<Value, String> {
    let services: Map<String, Value> = client
        .get_json("/v1/agent/services", &[])
        .await
        .map_err(|e| format!("Failed looking up mesh-gateway instances: {e}"))?;
    let found: Vec<&Value> = services
        .values()
        .filter(|s| s["Kind"] == "mesh-gateway")
        .collect();
    match found.as_slice() {
        [] => Err("No mesh-gateway services registered with this agent".into()),
        [one] => Ok((*one).clone()),
        _ => Err(
            "Cannot lookup the mesh-gateway's proxy ID because multiple are registered with the agent"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_consuls_flags_do() {
        let parsed = |raw: &str| parse_address(raw).map(|a| (a.address, a.port));
        assert_eq!(parsed("8.8.8.8"), Ok(("8.8.8.8".into(), 8443)));
        assert_eq!(parsed("8.8.8.8:"), Ok(("8.8.8.8".into(), 8443)));
        assert_eq!(parsed("10.0.0.5:4431"), Ok(("10.0.0.5".into(), 4431)));
        assert_eq!(parsed(":9000"), Ok(("".into(), 9000)));
        assert_eq!(parsed("localhost:3333"), Ok(("localhost".into(), 3333)));
        assert_eq!(
            parsed("[2001:db8::ff]:9999"),
            Ok(("2001:db8::ff".into(), 9999))
        );
        assert_eq!(
            parsed("localhost"),
            Err("Error parsing address \"localhost\": not an IP address".into())
        );
        assert_eq!(
            parsed("too:many:colons"),
            Err("Error parsing address \"too:many:colons\": address too:many:colons: too many colons".into())
        );
        assert_eq!(
            parsed("1.2.3.4:notaport"),
            Err("Error parsing port \"notaport\": strconv.Atoi: parsing \"notaport\": invalid syntax".into())
        );
        assert_eq!(
            parse_bind_address("lan"),
            Err("Missing \"=\" in argument: lan".into())
        );
    }

    #[test]
    fn flags_are_checked_in_consuls_order() {
        let args = |f: fn(&mut GatewayArgs)| {
            let mut a = GatewayArgs {
                deregister_after_critical: "6h".into(),
                ..Default::default()
            };
            f(&mut a);
            a.plan(None, None)
        };
        assert_eq!(
            args(|a| a.expose_servers = true),
            Err("'-expose-servers' can only be used for mesh gateways".into())
        );
        assert_eq!(
            args(|a| {
                a.gateway = Some("mesh".into());
                a.expose_servers = true;
            }),
            Err("'-expose-servers' requires '-register'".into())
        );
        assert_eq!(
            args(|a| a.gateway = Some("edge".into())),
            Err("Gateway must be one of: api, terminating, mesh, or ingress".into())
        );
        assert_eq!(
            args(|a| a.register = true),
            Err("Auto-Registration can only be used for gateways".into())
        );
        assert_eq!(
            args(|a| a.gateway = Some("mesh".into())),
            Ok(GatewayPlan::Find)
        );
        let Ok(GatewayPlan::Register(body)) = args(|a| {
            a.gateway = Some("mesh".into());
            a.register = true;
        }) else {
            panic!("a plain registration")
        };
        assert_eq!(
            body,
            json!({"Kind":"mesh-gateway","ID":"mesh-gateway","Name":"mesh-gateway","Port":8443,
                   "Check":{"Name":"mesh-gateway listening","Interval":"10s","TCP":"127.0.0.1:8443","DeregisterCriticalServiceAfter":"6h"},
                   "Checks":null})
        );
    }

    #[test]
    fn local_addresses_bind_their_tagged_addresses() {
        let a = GatewayArgs {
            gateway: Some("mesh".into()),
            register: true,
            address: Some("127.0.0.15:4431".into()),
            wan_address: Some("127.0.0.16:4432".into()),
            expose_servers: true,
            deregister_after_critical: "6h".into(),
            ..Default::default()
        };
        let Ok(GatewayPlan::Register(body)) = a.plan(Some("gw"), None) else {
            panic!("a registration")
        };
        assert_eq!(body["ID"], "gw");
        assert_eq!(body["Address"], "127.0.0.15");
        assert_eq!(body["Port"], 4431);
        assert_eq!(
            body["TaggedAddresses"]["wan"],
            json!({"Address":"127.0.0.16","Port":4432})
        );
        assert_eq!(body["Meta"], json!({"consul-wan-federation":"1"}));
        assert_eq!(
            body["Proxy"]["Config"],
            json!({"envoy_gateway_no_default_bind": true, "envoy_gateway_bind_tagged_addresses": true})
        );
        assert_eq!(body["Check"]["TCP"], "127.0.0.15:4431");
        let far = GatewayArgs {
            address: Some("192.0.2.77:4431".into()),
            ..a
        };
        assert_eq!(
            far.plan(None, None),
            Err("The LAN address \"192.0.2.77\" will not be bindable. Either set a bindable address or override the bind addresses with -bind-address".into())
        );
    }
}
