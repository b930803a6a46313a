//! TLS on the server port, with certificates made here by rcgen: kinds
//! routed by ALPN, client certificates checked with `verify_incoming`,
//! plain connections refused then, and servers checked by CA and name.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legate_rpc::{FrameHandler, Kind, Listener, Pool, TlsSettings};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

struct Tagged(&'static str);

#[async_trait]
impl FrameHandler for Tagged {
    async fn handle(&self, _peer: std::net::SocketAddr, request: Vec<u8>) -> Vec<u8> {
        let mut answer = self.0.as_bytes().to_vec();
        answer.extend(request);
        answer
    }
}

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf for `names` signed by `ca`: (certificate PEM, key PEM).
fn leaf(ca: &Ca, names: &[&str]) -> (String, String) {
    let params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

async fn listen(settings: &TlsSettings) -> String {
    let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    listener.route(Kind::Rpc, Arc::new(Tagged("rpc:")));
    listener.route(Kind::Raft, Arc::new(Tagged("raft:")));
    listener.set_tls(settings.server().unwrap());
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(listener.serve());
    address
}

fn dialer(settings: &TlsSettings) -> Pool {
    Pool::with_tls(Duration::from_secs(2), settings.client().unwrap())
}

async fn call(pool: &Pool, address: &str, kind: Kind) -> Result<String, String> {
    pool.call(address, kind, b"hi", Duration::from_secs(2))
        .await
        .map(|a| String::from_utf8(a).unwrap())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn tls_connections_route_by_alpn_and_check_both_sides() {
    let ca1 = ca("Legate CA");
    let (server_cert, server_key) = leaf(&ca1, &["server.dc1.consul", "localhost"]);
    let (client_cert, client_key) = leaf(&ca1, &["client.dc1.consul"]);
    let server = TlsSettings {
        ca_pem: ca1.pem.clone(),
        cert_pem: server_cert,
        key_pem: server_key,
        verify_incoming: true,
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
    };
    let address = listen(&server).await;
    let client = TlsSettings {
        ca_pem: ca1.pem.clone(),
        cert_pem: client_cert.clone(),
        key_pem: client_key.clone(),
        verify_incoming: false,
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
    };
    let pool = dialer(&client);
    assert_eq!(call(&pool, &address, Kind::Rpc).await.unwrap(), "rpc:hi");
    // Pooled TLS connections are reused.
    assert_eq!(call(&pool, &address, Kind::Rpc).await.unwrap(), "rpc:hi");
    // Raft needs a server's certificate: a client agent's is refused.
    assert!(call(&pool, &address, Kind::Raft).await.is_err());
    let peer_server = dialer(&server);
    assert_eq!(
        call(&peer_server, &address, Kind::Raft).await.unwrap(),
        "raft:hi"
    );

    // verify_incoming: plain connections and clients without a
    // certificate from the CA are refused.
    let plain = Pool::new(Duration::from_secs(2));
    assert!(call(&plain, &address, Kind::Rpc).await.is_err());
    let anonymous = dialer(&TlsSettings {
        cert_pem: String::new(),
        key_pem: String::new(),
        ..client.clone()
    });
    assert!(call(&anonymous, &address, Kind::Rpc).await.is_err());
    let stranger_ca = ca("Another CA");
    let (stranger_cert, stranger_key) = leaf(&stranger_ca, &["client.dc1.consul"]);
    let stranger = dialer(&TlsSettings {
        cert_pem: stranger_cert,
        key_pem: stranger_key,
        ..client.clone()
    });
    assert!(call(&stranger, &address, Kind::Rpc).await.is_err());

    // The dialer checks the server's name: a server of another datacenter
    // (or any other name) is refused.
    let other_dc = dialer(&TlsSettings {
        server_name: "server.dc2.consul".into(),
        ..client.clone()
    });
    let error = call(&other_dc, &address, Kind::Rpc).await.unwrap_err();
    assert!(error.contains("certificate"), "{error}");
    // Dialing it as a server of dc1 from dc2 checks dc1's name instead.
    let from_dc2 = other_dc
        .call_in(
            Some("dc1"),
            &address,
            Kind::Rpc,
            b"hi",
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    assert_eq!(from_dc2, b"rpc:hi");
    // And a server of dc1 dialed as dc3's is refused.
    let as_dc3 = dialer(&client)
        .call_in(
            Some("dc3"),
            &address,
            Kind::Rpc,
            b"hi",
            Duration::from_secs(2),
        )
        .await;
    assert!(as_dc3.is_err());
    // And its CA: a client trusting another CA refuses this server.
    let wrong_trust = dialer(&TlsSettings {
        ca_pem: stranger_ca.pem.clone(),
        ..client
    });
    assert!(call(&wrong_trust, &address, Kind::Rpc).await.is_err());
}

#[tokio::test]
async fn without_verify_incoming_plain_and_tls_both_work() {
    let ca1 = ca("Legate CA");
    let (server_cert, server_key) = leaf(&ca1, &["server.dc1.consul"]);
    let server = TlsSettings {
        ca_pem: ca1.pem.clone(),
        cert_pem: server_cert,
        key_pem: server_key,
        verify_incoming: false,
        verify_outgoing: false,
        server_name: "server.dc1.consul".into(),
    };
    let address = listen(&server).await;
    let plain = Pool::new(Duration::from_secs(2));
    assert_eq!(call(&plain, &address, Kind::Rpc).await.unwrap(), "rpc:hi");
    let tls = dialer(&TlsSettings {
        ca_pem: ca1.pem.clone(),
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
        ..Default::default()
    });
    assert_eq!(call(&tls, &address, Kind::Raft).await.unwrap(), "raft:hi");
}

#[test]
fn bad_settings_name_what_is_wrong() {
    let missing_ca = TlsSettings {
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
        ..Default::default()
    };
    assert!(missing_ca.client().err().unwrap().contains("ca_file"));
    let no_cert = TlsSettings {
        verify_incoming: true,
        ..Default::default()
    };
    assert!(no_cert.server().err().unwrap().contains("cert_file"));
    let garbage = TlsSettings {
        ca_pem: "not a pem".into(),
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
        ..Default::default()
    };
    assert!(garbage.client().err().unwrap().contains("ca_file"));
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed() {
    let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    listener.route(Kind::Rpc, Arc::new(Tagged("rpc:")));
    listener.set_max_connections(2);
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(listener.serve());
    // Two pools hold one connection each; a third is refused while they
    // stay open, and accepted once one closes.
    let first = Pool::new(Duration::from_secs(2));
    let second = Pool::new(Duration::from_secs(2));
    assert_eq!(call(&first, &address, Kind::Rpc).await.unwrap(), "rpc:hi");
    assert_eq!(call(&second, &address, Kind::Rpc).await.unwrap(), "rpc:hi");
    let third = Pool::new(Duration::from_secs(2));
    assert!(call(&third, &address, Kind::Rpc).await.is_err());
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(call(&third, &address, Kind::Rpc).await.unwrap(), "rpc:hi");
}

/// Waits `delay` then answers like [`Tagged`].
struct Slow(Duration);

#[async_trait]
impl FrameHandler for Slow {
    async fn handle(&self, _peer: std::net::SocketAddr, request: Vec<u8>) -> Vec<u8> {
        tokio::time::sleep(self.0).await;
        [b"slow:".as_slice(), &request].concat()
    }
}

/// A stand-in for a mesh gateway with one server behind it: it copies
/// bytes both ways and counts the connections it carried.
async fn byte_relay(server: String) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let carried = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = carried.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let server = server.clone();
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(server).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (address, carried)
}

fn server_settings(ca1: &Ca) -> TlsSettings {
    let (cert, key) = leaf(ca1, &["server.dc2.consul", "s1.server.dc2.consul"]);
    TlsSettings {
        ca_pem: ca1.pem.clone(),
        cert_pem: cert,
        key_pem: key,
        verify_incoming: true,
        verify_outgoing: true,
        server_name: "server.dc2.consul".into(),
    }
}

/// A dc2 server (node s1) answering after `delay`, at most
/// `max_per_client` connections per client carrying no call (0: any).
async fn slow_dc2_server(ca1: &Ca, delay: Duration, max_per_client: usize) -> String {
    let mut listener = Listener::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    listener.route(Kind::Rpc, Arc::new(Slow(delay)));
    listener.set_tls(server_settings(ca1).server().unwrap());
    listener.set_client_limits(max_per_client, Duration::from_secs(5));
    let server = listener.local_addr().unwrap().to_string();
    tokio::spawn(listener.serve());
    server
}

fn dc1_server(ca1: &Ca) -> Pool {
    let (cert, key) = leaf(ca1, &["server.dc1.consul", "a1.server.dc1.consul"]);
    dialer(&TlsSettings {
        ca_pem: ca1.pem.clone(),
        cert_pem: cert,
        key_pem: key,
        verify_incoming: true,
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
    })
}

async fn call_through(pool: &Pool, gateway: &str, node: Option<&str>) -> Result<Vec<u8>, String> {
    let dial = legate_rpc::Dial {
        address: "s1",
        datacenter: Some("dc2"),
        gateway: Some(gateway),
        node,
    };
    pool.call_dial(&dial, Kind::Rpc, b"hi", Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn calls_through_a_gateway_share_a_bounded_number_of_multiplexed_connections() {
    let ca1 = ca("Legate CA");
    let server = slow_dc2_server(&ca1, Duration::from_millis(300), 0).await;
    let (gateway, carried) = byte_relay(server).await;
    let pool = Arc::new(dc1_server(&ca1));

    // 600 calls at once, each held 300 ms by the server: without
    // multiplexing that is 600 connections through the gateway.
    let mut calls = Vec::new();
    for _ in 0..600 {
        let (pool, gateway) = (pool.clone(), gateway.clone());
        calls.push(tokio::spawn(async move {
            call_through(&pool, &gateway, Some("s1")).await
        }));
    }
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), b"slow:hi");
    }
    let used = carried.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=legate_rpc::MAX_MUX_CONNS).contains(&used),
        "{used} connections through the gateway"
    );
    assert_eq!(
        pool.mux_connections()
            .get(&format!("{gateway}/s1.server.dc2")),
        Some(&used)
    );
    // Later calls reuse them.
    call_through(&pool, &gateway, Some("s1")).await.unwrap();
    assert_eq!(carried.load(std::sync::atomic::Ordering::SeqCst), used);
    // The server checks the name the caller asked for: a node it is not.
    let error = call_through(&pool, &gateway, Some("s9")).await.unwrap_err();
    assert!(error.contains("certificate"), "{error}");
}

/// A server of an older Legate: TLS without the multiplexed protocol,
/// one call per connection.
async fn older_server(settings: &TlsSettings) -> String {
    let config = legate_net::tls::server_config(
        &legate_net::tls::ServerPem {
            cert_pem: settings.cert_pem.clone(),
            key_pem: settings.key_pem.clone(),
            client_ca_pem: Some(settings.ca_pem.clone()),
        },
        &[b"legate/rpc", b"legate/raft"],
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(stream).await else {
                    return;
                };
                while let Ok(Some(request)) = legate_rpc::read_frame(&mut stream).await {
                    let answer = [b"old:".as_slice(), &request].concat();
                    if legate_rpc::write_frame(&mut stream, &answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

#[tokio::test]
async fn a_server_without_multiplexed_rpc_is_called_one_connection_per_call() {
    let ca1 = ca("Legate CA");
    let server = older_server(&server_settings(&ca1)).await;
    let (gateway, _) = byte_relay(server).await;
    let pool = dc1_server(&ca1);
    for _ in 0..3 {
        assert_eq!(
            call_through(&pool, &gateway, Some("s1")).await.unwrap(),
            b"old:hi"
        );
    }
    assert!(pool.mux_connections().values().all(|open| *open == 0));
}

#[tokio::test]
async fn a_multiplexed_connection_counts_against_its_client_only_while_idle() {
    let ca1 = ca("Legate CA");
    let server = slow_dc2_server(&ca1, Duration::from_millis(1500), 1).await;
    let (gateway, _) = byte_relay(server.clone()).await;
    let through = Arc::new(dc1_server(&ca1));
    call_through(&through, &gateway, Some("s1")).await.unwrap();

    // Idle, it is this address's one connection: another is refused.
    async fn single(pool: &Pool, server: &str) -> Result<Vec<u8>, legate_rpc::CallError> {
        let timeout = Duration::from_secs(5);
        pool.call_in(Some("dc2"), server, Kind::Rpc, b"hi", timeout)
            .await
    }
    assert!(single(&dc1_server(&ca1), &server).await.is_err());
    // Carrying a call, it leaves room for one.
    let busy = {
        let (through, gateway) = (through.clone(), gateway.clone());
        tokio::spawn(async move { call_through(&through, &gateway, Some("s1")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        single(&dc1_server(&ca1), &server).await.unwrap(),
        b"slow:hi"
    );
    assert_eq!(busy.await.unwrap().unwrap(), b"slow:hi");
}

/// A leaf for `names` signed by `ca` that expired in 2021.
fn expired_leaf(ca: &Ca, names: &[&str]) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn expired_certificates_are_refused_either_way_and_the_caller_hears_why() {
    let ca1 = ca("Legate CA");
    let settings = |(cert_pem, key_pem): (String, String)| TlsSettings {
        ca_pem: ca1.pem.clone(),
        cert_pem,
        key_pem,
        verify_incoming: true,
        verify_outgoing: true,
        server_name: "server.dc1.consul".into(),
    };
    // A server whose certificate expired: the dialler refuses it.
    let stale_server = listen(&settings(expired_leaf(&ca1, &["server.dc1.consul"]))).await;
    let client = dialer(&settings(leaf(&ca1, &["client.dc1.consul"])));
    let error = call(&client, &stale_server, Kind::Rpc).await.unwrap_err();
    assert!(error.to_lowercase().contains("expired"), "{error}");
    // A dialler whose certificate expired: the server refuses it, and its
    // alert tells the dialler why.
    let server = listen(&settings(leaf(&ca1, &["server.dc1.consul"]))).await;
    let stale_client = dialer(&settings(expired_leaf(&ca1, &["client.dc1.consul"])));
    let error = call(&stale_client, &server, Kind::Rpc).await.unwrap_err();
    assert!(error.to_lowercase().contains("expired"), "{error}");
    // Through a gateway (multiplexed RPC) the same.
    let (gateway, _) = byte_relay(server).await;
    let dial = legate_rpc::Dial {
        address: "s1",
        datacenter: Some("dc1"),
        gateway: Some(&gateway),
        node: None,
    };
    let error = stale_client
        .call_dial(&dial, Kind::Rpc, b"hi", Duration::from_secs(5))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.to_lowercase().contains("expired"), "{error}");
}
