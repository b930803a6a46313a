//! The DNS interface through `dig` (Debian's dnsutils: an independent
//! client) against the real agent: every name form, record types, health
//! filtering, TTLs, UDP limits and truncation, TCP, recursors, and bad input.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::dig::dig;
use common::{eventually, free_port, write, TestAgent};

fn agent_with_dns(extra: &[&str]) -> (TestAgent, u16) {
    let dns_port = free_port();
    let dns_flag = format!("-dns-port={dns_port}");
    let mut flags = vec!["-dev", "-grpc-port=-1", "-node=node1", dns_flag.as_str()];
    flags.extend_from_slice(extra);
    (TestAgent::start_with(&flags, false), dns_port)
}

fn register(agent: &TestAgent, body: &str) {
    let (status, text) = agent.put("/v1/agent/service/register", body);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn names_types_health_and_ttls_answer_as_consul_does() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "dns.hcl",
        r#"
        dns_config {
          node_ttl = "10s"
          service_ttl { "*" = "5s", "db*" = "30s" }
        }
        alt_domain = "mesh.example"
        "#,
    );
    let (agent, port) = agent_with_dns(&["-config-file", config.to_str().unwrap()]);
    register(
        &agent,
        r#"{"ID": "web1", "Name": "web", "Port": 8080, "Tags": ["v1"]}"#,
    );
    register(
        &agent,
        r#"{"ID": "web2", "Name": "web", "Port": 8081, "Address": "10.0.0.2", "Tags": ["v2"],
            "Weights": {"Passing": 7, "Warning": 1}}"#,
    );
    register(
        &agent,
        r#"{"ID": "db1", "Name": "db", "Port": 5432, "Address": "2001:db8::1"}"#,
    );
    register(&agent, r#"{"ID": "api", "Name": "api", "Port": 9000}"#);
    // Its sidecar, registered directly (no listening check to fail here).
    register(
        &agent,
        r#"{"ID": "api-sidecar-proxy", "Name": "api-sidecar-proxy", "Kind": "connect-proxy",
            "Port": 21000, "Proxy": {"DestinationServiceName": "api"}}"#,
    );
    // A records of every healthy instance, with the service TTL.
    let web = dig(port, &["web.service.consul"]);
    assert_eq!(web.status, "NOERROR");
    assert!(web.flags.contains(&"aa".to_string()));
    assert_eq!(web.answers_of("A"), vec!["10.0.0.2", "127.0.0.1"]);
    assert!(web
        .answer
        .iter()
        .all(|r| r.ttl == 5 && r.name == "web.service.consul."));
    // SRV: node targets for node addresses, .addr targets for service
    // addresses, weights, addresses in the additional section.
    let srv = dig(port, &["web.service.consul", "SRV"]);
    assert_eq!(
        srv.answers_of("SRV"),
        vec![
            "1 1 8080 node1.node.dc1.consul.",
            "1 7 8081 0a000002.addr.dc1.consul."
        ]
    );
    let extra: Vec<(String, String)> = srv
        .additional
        .iter()
        .filter(|r| r.kind == "A")
        .map(|r| (r.name.clone(), r.data.clone()))
        .collect();
    assert!(extra.contains(&("node1.node.dc1.consul.".into(), "127.0.0.1".into())));
    assert!(extra.contains(&("0a000002.addr.dc1.consul.".into(), "10.0.0.2".into())));
    // Tag filter with an explicit datacenter; RFC 2782 forms; alt_domain.
    assert_eq!(
        dig(port, &["v1.web.service.dc1.consul"]).answers_of("A"),
        vec!["127.0.0.1"]
    );
    assert_eq!(
        dig(port, &["_web._v2.service.consul", "SRV"]).answer.len(),
        1
    );
    assert_eq!(
        dig(port, &["_web._tcp.service.consul", "SRV"]).answer.len(),
        2
    );
    assert_eq!(dig(port, &["_web._tcp.consul", "SRV"]).answer.len(), 2);
    let alt = dig(port, &["web.service.mesh.example", "SRV"]);
    assert!(alt.answers_of("SRV")[0].ends_with("node1.node.dc1.mesh.example."));
    // IPv6: AAAA answers; an A question falls back to the node's IPv4
    // address, as Consul does.
    let db = dig(port, &["db.service.consul", "AAAA"]);
    assert_eq!(db.answers_of("AAAA"), vec!["2001:db8::1"]);
    assert_eq!(db.answer[0].ttl, 30);
    assert_eq!(
        dig(port, &["db.service.consul", "A"]).answers_of("A"),
        vec!["127.0.0.1"]
    );
    // No address of the asked family anywhere: NOERROR with the SOA.
    let web_v6 = dig(port, &["v1.web.service.consul", "AAAA"]);
    assert_eq!(
        (web_v6.status.as_str(), web_v6.answer.len()),
        ("NOERROR", 0)
    );
    assert_eq!(web_v6.authority[0].kind, "SOA");
    // Nodes: A with the node TTL, metadata as TXT.
    let node = dig(port, &["node1.node.consul"]);
    assert_eq!(node.answers_of("A"), vec!["127.0.0.1"]);
    assert_eq!(node.answer[0].ttl, 10);
    assert!(node.additional.iter().any(|r| r.kind == "TXT"));
    assert!(dig(port, &["node1.node.dc1.consul", "TXT"])
        .answer
        .iter()
        .all(|r| r.kind == "TXT"));
    // Mesh-capable instances: the sidecar's port.
    let connect = dig(port, &["api.connect.consul", "SRV"]);
    assert_eq!(connect.answer.len(), 1, "{connect:?}");
    assert!(
        connect.answer[0].data.starts_with("1 1 21000 "),
        "{connect:?}"
    );
    assert_eq!(dig(port, &["web.connect.consul"]).status, "NXDOMAIN");
    // Dual-stack nodes: lan_ipv4 / lan_ipv6 tagged addresses by family.
    let (status, text) = agent.put(
        "/v1/catalog/register",
        r#"{"Node": "dual", "Address": "10.0.5.1",
            "TaggedAddresses": {"lan_ipv4": "10.0.5.4", "lan_ipv6": "2001:db8::5"},
            "Service": {"ID": "dual", "Service": "dual", "Port": 7}}"#,
    );
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        dig(port, &["dual.node.consul", "AAAA"]).answers_of("AAAA"),
        vec!["2001:db8::5"]
    );
    assert_eq!(
        dig(port, &["dual.node.consul", "A"]).answers_of("A"),
        vec!["10.0.5.4"]
    );
    assert_eq!(
        dig(port, &["dual.service.consul", "AAAA"]).answers_of("AAAA"),
        vec!["2001:db8::5"]
    );
    // .addr, PTR, SOA and NS.
    assert_eq!(
        dig(port, &["7f000001.addr.dc1.consul"]).answers_of("A"),
        vec!["127.0.0.1"]
    );
    assert_eq!(
        dig(port, &["-x", "127.0.0.1"]).answers_of("PTR"),
        vec!["node1.node.dc1.consul."]
    );
    let soa = dig(port, &["consul", "SOA"]);
    assert!(soa.answers_of("SOA")[0].starts_with("ns.consul. hostmaster.consul. "));
    assert_eq!(
        dig(port, &["consul", "NS"]).answers_of("NS"),
        vec!["node1.node.dc1.consul."]
    );
    // Unknown names and datacenters: NXDOMAIN with the SOA; outside our
    // domain without recursors: REFUSED.
    for name in [
        "nope.service.consul",
        "web.service.dc9.consul",
        "x.y.consul",
        "nope.node.consul",
    ] {
        let d = dig(port, &[name]);
        assert_eq!(d.status, "NXDOMAIN", "{name}");
        assert_eq!(d.authority[0].kind, "SOA", "{name}");
    }
    let outside = dig(port, &["example.com"]);
    assert_eq!(outside.status, "REFUSED");
    assert!(!outside.flags.contains(&"aa".to_string()));
    // Unsupported types for a service: NOERROR and the SOA.
    let mx = dig(port, &["web.service.consul", "MX"]);
    assert_eq!((mx.status.as_str(), mx.answer.len()), ("NOERROR", 0));

    // Health: a critical check hides the instance; warning keeps it.
    register(
        &agent,
        r#"{"ID": "web3", "Name": "web", "Port": 8082, "Address": "10.0.0.3",
            "Check": {"TTL": "60s", "Status": "critical"}}"#,
    );
    register(
        &agent,
        r#"{"ID": "web4", "Name": "web", "Port": 8083, "Address": "10.0.0.4",
            "Check": {"TTL": "60s", "Status": "warning"}}"#,
    );
    assert_eq!(
        dig(port, &["web.service.consul"]).answers_of("A"),
        vec!["10.0.0.2", "10.0.0.4", "127.0.0.1"]
    );
    assert_eq!(
        dig(port, &["_web._tcp.service.consul", "SRV"])
            .answers_of("SRV")
            .iter()
            .filter(|s| s.contains(" 8083 "))
            .count(),
        1,
        "warning instances get their warning weight"
    );
}

#[test]
fn udp_limits_truncation_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "dns.hcl",
        r#"dns_config { enable_truncate = true }"#,
    );
    let (agent, port) = agent_with_dns(&["-config-file", config.to_str().unwrap()]);
    for i in 1..=6 {
        register(
            &agent,
            &format!(r#"{{"ID": "web{i}", "Name": "web", "Port": 80, "Address": "10.0.1.{i}"}}"#),
        );
    }
    // Plain UDP (no EDNS): udp_answer_limit (3), TC set (enable_truncate).
    let udp = dig(port, &["+noedns", "+ignore", "web.service.consul"]);
    assert_eq!(udp.answer.len(), 3, "{udp:?}");
    assert!(udp.flags.contains(&"tc".to_string()), "{:?}", udp.flags);
    // Answers are shuffled: several queries see more than three addresses.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        seen.extend(dig(port, &["+noedns", "+ignore", "web.service.consul"]).answers_of("A"));
    }
    assert!(seen.len() > 3, "answers were never shuffled: {seen:?}");
    // dig retries a truncated answer over TCP by itself: all six.
    assert_eq!(
        dig(port, &["+noedns", "web.service.consul"]).answer.len(),
        6
    );
    assert_eq!(
        dig(port, &["+tcp", "web.service.consul", "SRV"])
            .answer
            .len(),
        6
    );
    // EDNS lifts the count limit.
    assert_eq!(
        dig(port, &["+bufsize=4096", "web.service.consul"])
            .answer
            .len(),
        6
    );
}

#[test]
fn without_enable_truncate_udp_answers_are_cut_silently() {
    let (agent, port) = agent_with_dns(&[]);
    for i in 1..=5 {
        register(
            &agent,
            &format!(r#"{{"ID": "web{i}", "Name": "web", "Port": 80, "Address": "10.0.2.{i}"}}"#),
        );
    }
    let udp = dig(port, &["+noedns", "+ignore", "web.service.consul"]);
    assert_eq!(udp.answer.len(), 3);
    assert!(!udp.flags.contains(&"tc".to_string()));
}

#[test]
fn only_passing_hides_warning_instances() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "dns.hcl",
        r#"dns_config { only_passing = true }"#,
    );
    let (agent, port) = agent_with_dns(&["-config-file", config.to_str().unwrap()]);
    register(
        &agent,
        r#"{"ID": "a", "Name": "web", "Port": 1, "Address": "10.0.3.1"}"#,
    );
    register(
        &agent,
        r#"{"ID": "b", "Name": "web", "Port": 1, "Address": "10.0.3.2",
            "Check": {"TTL": "60s", "Status": "warning"}}"#,
    );
    assert_eq!(
        dig(port, &["web.service.consul"]).answers_of("A"),
        vec!["10.0.3.1"]
    );
}

#[test]
fn thousands_of_instances_fill_one_tcp_message() {
    let (agent, port) = agent_with_dns(&[]);
    // 5,000 instances on their own addresses, registered in the catalog.
    for i in 0..5000u32 {
        let body = format!(
            r#"{{"Node": "n{i}", "Address": "10.{}.{}.{}", "Service": {{"ID": "s{i}", "Service": "big", "Port": 80}}}}"#,
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255
        );
        let (status, text) = agent.put("/v1/catalog/register", &body);
        assert_eq!(status, 200, "{text}");
    }
    // One DNS message holds at most 64 KiB: as many A records as fit
    // (about 2,000: hickory compresses the first 120 names), never a broken message.
    let tcp = dig(port, &["+tcp", "big.service.consul"]);
    assert_eq!(tcp.status, "NOERROR");
    assert!(
        tcp.answer.len() > 1900,
        "only {} answers over TCP",
        tcp.answer.len()
    );
    let srv = dig(port, &["+tcp", "big.service.consul", "SRV"]);
    assert_eq!(srv.status, "NOERROR");
    assert!(
        srv.answer.len() > 500,
        "only {} SRV answers over TCP",
        srv.answer.len()
    );
    // Every SRV answer has its target's address in the additional section.
    let targets: std::collections::BTreeSet<String> = srv
        .answer
        .iter()
        .map(|r| r.data.split_whitespace().last().unwrap().to_string())
        .collect();
    let addressed: std::collections::BTreeSet<String> = srv
        .additional
        .iter()
        .filter(|r| r.kind == "A")
        .map(|r| r.name.clone())
        .collect();
    assert!(targets.is_subset(&addressed));
    // UDP with a large EDNS buffer: as many as fit 4,096 bytes.
    let udp = dig(port, &["+bufsize=4096", "+ignore", "big.service.consul"]);
    assert!(
        udp.answer.len() > 100 && udp.answer.len() < 300,
        "{}",
        udp.answer.len()
    );
}

#[test]
fn recursors_answer_other_names_in_order_until_one_succeeds() {
    // The recursor: another agent whose domain is `consul`.
    let (upstream, upstream_port) = agent_with_dns(&[]);
    register(
        &upstream,
        r#"{"ID": "r", "Name": "remote", "Port": 1, "Address": "10.9.9.9"}"#,
    );
    // A dead recursor first (nothing listens), then the live one.
    let dead = format!("127.0.0.1:{}", free_port());
    let live = format!("127.0.0.1:{upstream_port}");
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "dns.hcl",
        &format!(
            r#"domain = "mesh"
               recursors = ["{dead}", "{live}"]
               dns_config {{ recursor_timeout = "1s" }}"#
        ),
    );
    let (_agent, port) = agent_with_dns(&["-config-file", config.to_str().unwrap()]);
    let forwarded = dig(port, &["remote.service.consul"]);
    assert_eq!(forwarded.answers_of("A"), vec!["10.9.9.9"]);
    assert!(forwarded.flags.contains(&"ra".to_string()));
    assert!(!forwarded.flags.contains(&"aa".to_string()));
    // NXDOMAIN from the recursor is passed on; our own domain still answers.
    assert_eq!(dig(port, &["missing.service.consul"]).status, "NXDOMAIN");
    assert_eq!(
        dig(port, &["node1.node.mesh"]).answers_of("A"),
        vec!["127.0.0.1"]
    );
    // Over TCP too.
    assert_eq!(
        dig(port, &["+tcp", "remote.service.consul"]).answers_of("A"),
        vec!["10.9.9.9"]
    );

    // Every recursor failing: SERVFAIL.
    let dir2 = tempfile::tempdir().unwrap();
    let config2 = write(
        dir2.path(),
        "dns.hcl",
        &format!(
            r#"recursors = ["{dead}"]
                     dns_config {{ recursor_timeout = "500ms" }}"#
        ),
    );
    let (_lonely, lonely_port) = agent_with_dns(&["-config-file", config2.to_str().unwrap()]);
    assert_eq!(dig(lonely_port, &["example.com"]).status, "SERVFAIL");
}

#[test]
fn malformed_queries_get_errors_and_never_stop_the_server() {
    let (_agent, port) = agent_with_dns(&[]);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    socket.connect(("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 4096];
    // A header claiming two questions but carrying garbage: FORMERR (or dropped).
    let garbage: Vec<u8> = vec![
        0x12, 0x34, 0x01, 0x00, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0xff, 0xfe,
    ];
    socket.send(&garbage).unwrap();
    if let Ok(n) = socket.recv(&mut buf) {
        assert!(n >= 12);
        assert_eq!(&buf[..2], &[0x12, 0x34]);
        assert_eq!(buf[3] & 0x0f, 1, "FORMERR");
    }
    // Random bytes of every length up to 600.
    let mut x: u32 = 0x1234_5678;
    for len in 0..600 {
        let packet: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        socket.send(&packet).unwrap();
        let _ = socket.recv(&mut buf);
    }
    // A name longer than DNS allows (five 63-byte labels): FORMERR.
    let mut long = vec![0x55, 0x66, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for _ in 0..5 {
        long.push(63);
        long.extend(std::iter::repeat_n(b'a', 63));
    }
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send(&long).unwrap();
    let n = socket
        .recv(&mut buf)
        .expect("an answer to an oversized name");
    assert!(n >= 12);
    assert_eq!(&buf[..2], &[0x55, 0x66]);
    assert_eq!(buf[3] & 0x0f, 1, "FORMERR");
    // An opcode other than QUERY (STATUS = 2): NOTIMP.
    let status_query = [0xab, 0xcd, 0x10, 0x00, 0, 0, 0, 0, 0, 0, 0, 0];
    socket.send(&status_query).unwrap();
    let n = socket.recv(&mut buf).expect("an answer to a STATUS query");
    assert!(n >= 12);
    assert_eq!(buf[3] & 0x0f, 4, "NOTIMP");
    // Still answering.
    eventually(Duration::from_secs(5), || {
        (dig(port, &["node1.node.consul"]).answers_of("A") == vec!["127.0.0.1"]).then_some(())
    });
}
