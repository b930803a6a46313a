//! Two datacenters on loopback addresses, a built-in mesh gateway in each
//! (`legate connect proxy -gateway=mesh -register`), web's and api's
//! sidecars in dc1 and db's in dc2: web's upstream db in dc2 with
//! `mesh_gateway { mode = "local" }` goes sidecar → dc1's gateway → dc2's
//! gateway → db's sidecar → db; api's sidecar registered with mode
//! `remote` goes straight to dc2's gateway. Each gateway counts the
//! connection on the cluster it used (as Consul's gateway tests read
//! Envoy's `cx_total`), and web's cluster carries the override hash.
//! One of dc2's two gateways killed: new connections go through the
//! other; that one back on a new WAN address: dc1's gateway follows; an
//! intention deny written in dc1 is enforced in dc2; cache fails over
//! from dc1 to dc2 through both gateways.
//! (The network-namespace variant, where the sidecars cannot reach each
//! other at all, is the next step.)

mod common;

use std::process::Command;
use std::time::Duration;

use common::mesh::{admin_port, echo_server, echo_within, proxy_stat, start_proxy, Proxy};
use common::{eventually, free_port, DatacenterServer, TestAgent};

/// A line through an upstream listener on 127.0.0.1, patiently: four
/// proxies and two TLS handshakes on a loaded machine.
fn echo(port: u16, line: &str) -> Option<String> {
    echo_within("127.0.0.1", port, line, Duration::from_secs(5))
}

fn server(
    name: &str,
    ip: &str,
    dc: &str,
    join: Option<&str>,
    config: &std::path::Path,
) -> DatacenterServer {
    let extra = [
        "-grpc-tls-port=-1".to_string(),
        format!("-config-file={}", config.display()),
    ];
    DatacenterServer::with_xds(name, ip, dc, join, &extra)
}

/// `connect proxy -gateway=mesh -register -proxy-id <id>` with LAN and
/// WAN addresses.
fn gateway(agent: &TestAgent, id: &str, lan: &str, wan: &str, log: &std::path::Path) -> Proxy {
    gateway_with(agent, id, lan, wan, &[], log)
}

/// [`gateway`] with more flags.
fn gateway_with(
    agent: &TestAgent,
    id: &str,
    lan: &str,
    wan: &str,
    extra: &[&str],
    log: &std::path::Path,
) -> Proxy {
    Proxy(
        Command::new(common::binary())
            .args([
                "connect",
                "proxy",
                "-gateway=mesh",
                "-register",
                "-proxy-id",
                id,
            ])
            .args(["-address", lan, "-wan-address", wan])
            .args(extra)
            .args(["-admin-bind", "127.0.0.1:0"])
            .env("CONSUL_HTTP_ADDR", agent.addr())
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn a_sidecar_reaches_another_datacenter_through_both_gateways() {
    let dir = tempfile::tempdir().unwrap();
    // Both datacenters' sidecars share this host: their own ports.
    let (echo_port, upstream, web_sidecar, db_sidecar) =
        (free_port(), free_port(), free_port(), free_port());
    let (api_upstream, api_sidecar) = (free_port(), free_port());
    // cache runs in both datacenters; dc2's is dc1's failover.
    let (cache_up, cache1, cache1_sidecar, cache2, cache2_sidecar) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let cache1_received = echo_server(cache1);
    let cache2_received = echo_server(cache2);
    let _received = echo_server(echo_port);
    let dc1_config = common::write(
        dir.path(),
        "dc1.hcl",
        &format!(
            r#"services {{
  name = "web"
  port = 8080
  connect {{
    sidecar_service {{
      port = {web_sidecar}
      proxy {{
        upstreams {{
          destination_name = "db"
          datacenter = "dc2"
          local_bind_port = {upstream}
          mesh_gateway {{ mode = "local" }}
        }}
        upstreams {{
          destination_name = "cache"
          local_bind_port = {cache_up}
        }}
      }}
    }}
  }}
}}
services {{
  name = "cache"
  port = {cache1}
  connect {{ sidecar_service {{ port = {cache1_sidecar} }} }}
}}
services {{
  name = "api"
  port = 8081
  connect {{
    sidecar_service {{
      port = {api_sidecar}
      proxy {{
        mesh_gateway {{ mode = "remote" }}
        upstreams {{
          destination_name = "db"
          datacenter = "dc2"
          local_bind_port = {api_upstream}
        }}
      }}
    }}
  }}
}}"#
        ),
    );
    let dc2_config = common::write(
        dir.path(),
        "dc2.hcl",
        &format!(
            "services {{\n  name = \"db\"\n  port = {echo_port}\n  connect {{ sidecar_service {{ port = {db_sidecar} }} }}\n}}\nservices {{\n  name = \"cache\"\n  port = {cache2}\n  connect {{ sidecar_service {{ port = {cache2_sidecar} }} }}\n}}\n"
        ),
    );
    let dc1 = server("g1", "127.0.0.221", "dc1", None, &dc1_config);
    let dc2 = server("g2", "127.0.0.222", "dc2", Some("127.0.0.221"), &dc2_config);
    for s in [&dc1, &dc2] {
        eventually(Duration::from_secs(30), || {
            let dcs = s.agent.get("/v1/catalog/datacenters").ok()?;
            (dcs.as_array()?.len() == 2).then_some(())
        });
    }
    // cache fails over to dc2, through gateways by its service-defaults.
    for entry in [
        r#"{"Kind":"service-defaults","Name":"cache","MeshGateway":{"Mode":"local"}}"#,
        r#"{"Kind":"service-resolver","Name":"cache","Failover":{"*":{"Datacenters":["dc2"]}}}"#,
    ] {
        let (status, body) = dc1.agent.put("/v1/config", entry);
        assert_eq!((status, body.as_str()), (200, "true"), "{entry}");
    }
    let dc1_gateway_log = dir.path().join("gw1.log");
    let dc2_gateway_logs = [dir.path().join("gw2.log"), dir.path().join("gw2b.log")];
    let at = |ip: &str| format!("{ip}:{}", free_port());
    let _gw1 = gateway(
        &dc1.agent,
        "mesh-gateway",
        &at("127.0.0.223"),
        &at("127.0.0.224"),
        &dc1_gateway_log,
    );
    // Two gateways in dc2.
    let gw2 = gateway(
        &dc2.agent,
        "mesh-gateway",
        &at("127.0.0.225"),
        &at("127.0.0.226"),
        &dc2_gateway_logs[0],
    );
    let gw2b = gateway(
        &dc2.agent,
        "mesh-gateway-2",
        &at("127.0.0.227"),
        &at("127.0.0.228"),
        &dc2_gateway_logs[1],
    );
    let _db = start_proxy(&dc2.agent, "db", &dir.path().join("db.log"));
    let _web = start_proxy(&dc1.agent, "web", &dir.path().join("web.log"));
    let _api = start_proxy(&dc1.agent, "api", &dir.path().join("api.log"));
    let _cache1 = start_proxy(&dc1.agent, "cache", &dir.path().join("cache1.log"));
    let _cache2 = start_proxy(&dc2.agent, "cache", &dir.path().join("cache2.log"));
    let answer = eventually(Duration::from_secs(60), || {
        echo(upstream, "across datacenters")
    });
    assert_eq!(answer, "across datacenters");
    let td = dc1.agent.get("/v1/connect/ca/roots").unwrap()["TrustDomain"]
        .as_str()
        .unwrap()
        .to_string();
    let counted = |log: &std::path::Path, cluster: &str| {
        proxy_stat(
            log,
            &format!("legate_proxy_cluster_connections_total{{cluster=\"{cluster}\"}}"),
        )
    };
    assert!(
        counted(&dc1_gateway_log, &format!("dc2.internal.{td}")) >= 1,
        "dc1's gateway sent it to dc2's gateways"
    );
    let db_cluster = format!("db.default.dc2.internal.{td}");
    let through_dc2 = || -> u64 {
        dc2_gateway_logs
            .iter()
            .map(|log| counted(log, &db_cluster))
            .sum()
    };
    assert!(through_dc2() >= 1, "a dc2 gateway sent it to db's sidecar");
    // web's cluster for db is db's SNI prefixed by the chain's override
    // hash (the mode came from the upstream: Consul's `<hash>~<sni>`).
    let web_log = dir.path().join("web.log");
    let (_, _, stats) = common::http_request(admin_port(&web_log), "GET", "/stats", None);
    let suffix = format!("~db.default.dc2.internal.{td}\"}}");
    let line = stats
        .lines()
        .find(|l| l.contains(&suffix))
        .unwrap_or_else(|| panic!("a customized db cluster in {stats}"));
    let hash = line
        .split("cluster=\"")
        .nth(1)
        .unwrap()
        .split('~')
        .next()
        .unwrap();
    assert_eq!(hash.len(), 8, "{line}");
    // api's sidecar says `remote` (the proxy's mode, as the upstream
    // says none): straight to dc2's gateway, past dc1's.
    let via_dc1 = counted(&dc1_gateway_log, &format!("dc2.internal.{td}"));
    let via_dc2 = through_dc2();
    let answer = eventually(Duration::from_secs(60), || {
        echo(api_upstream, "remote mode")
    });
    assert_eq!(answer, "remote mode");
    assert_eq!(
        counted(&dc1_gateway_log, &format!("dc2.internal.{td}")),
        via_dc1,
        "dc1's gateway is not on the path"
    );
    assert!(through_dc2() > via_dc2, "dc2's gateway carried it");
    // Failover through the gateways: while dc1's cache is healthy it
    // answers; in maintenance, dc2's does, by way of both gateways, under
    // the same cluster name with dc2's SNI.
    use std::sync::atomic::Ordering::SeqCst;
    eventually(Duration::from_secs(60), || {
        let passing = dc1.agent.get("/v1/health/connect/cache?passing").ok()?;
        (passing.as_array()?.len() == 1).then_some(())
    });
    // Once the sidecar's config has caught up (a line reached dc1's
    // cache), every line does.
    eventually(Duration::from_secs(60), || {
        let near = cache1_received.load(SeqCst);
        echo(cache_up, "near")?;
        (cache1_received.load(SeqCst) > near).then_some(())
    });
    let far_before = cache2_received.load(SeqCst);
    for _ in 0..3 {
        assert_eq!(echo(cache_up, "near").as_deref(), Some("near"));
    }
    assert_eq!(
        cache2_received.load(SeqCst),
        far_before,
        "dc1's cache answered"
    );
    let (status, _) = dc1
        .agent
        .put("/v1/agent/service/maintenance/cache?enable=true", "");
    assert_eq!(status, 200);
    let before = counted(&dc1_gateway_log, &format!("dc2.internal.{td}"));
    let far = cache2_received.load(SeqCst);
    eventually(Duration::from_secs(90), || {
        let _ = echo(cache_up, "far");
        (cache2_received.load(SeqCst) > far).then_some(())
    });
    assert!(counted(&dc1_gateway_log, &format!("dc2.internal.{td}")) > before);
    // One of dc2's gateways goes: new connections go through the other
    // once its check says so.
    drop(gw2);
    eventually(Duration::from_secs(60), || {
        (0..5)
            .all(|i| echo(upstream, &format!("after the gateway went {i}")).is_some())
            .then_some(())
    });
    // The remaining gateway comes back on a new WAN address, a host name
    // this time: dc1's gateway follows the re-registration (the fresher
    // of dc2's catalog and the federation state), looks the name up
    // (Envoy's LOGICAL_DNS cluster) and traffic flows through it.
    drop(gw2b);
    let moved_log = dir.path().join("gw2-moved.log");
    let (moved_lan, moved_wan) = (free_port(), free_port());
    let binds = [
        format!("lan=127.0.0.227:{moved_lan}"),
        format!("wan=127.0.0.1:{moved_wan}"),
    ];
    let _moved = gateway_with(
        &dc2.agent,
        "mesh-gateway-2",
        &format!("127.0.0.227:{moved_lan}"),
        &format!("localhost:{moved_wan}"),
        &["-bind-address", &binds[0], "-bind-address", &binds[1]],
        &moved_log,
    );
    eventually(Duration::from_secs(60), || {
        (0..5)
            .all(|i| echo(upstream, &format!("after the move {i}")).is_some())
            .then_some(())
    });
    assert!(counted(&moved_log, &db_cluster) >= 5);
    // Intentions stay end to end: a deny written in dc1 (replicated to
    // dc2) is enforced by db's sidecar; api is still allowed.
    let (status, body) = dc1.agent.put(
        "/v1/connect/intentions/exact?source=web&destination=db",
        r#"{"Action":"deny"}"#,
    );
    assert_eq!((status, body.as_str()), (200, "true"));
    eventually(Duration::from_secs(30), || {
        echo(upstream, "denied").is_none().then_some(())
    });
    assert_eq!(
        echo(api_upstream, "still allowed").as_deref(),
        Some("still allowed")
    );
}
