//! The statsd and DogStatsD sinks (`telemetry.statsd_address`,
//! `telemetry.dogstatsd_addr`, `telemetry.dogstatsd_tags`): one UDP line
//! per observation, as go-metrics' sinks send them — `name:value|c`,
//! `|g`, and timers as `|ms`. Statsd flattens label values into the name
//! (`consul.api.http.GET.v1_kv__`); DogStatsD sends them as `#key:value`
//! tags after the global tags. A sender thread packs lines into datagrams
//! of at most 1,432 bytes and flushes every 100 ms; when it falls behind,
//! lines are dropped rather than slowing the caller.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// The largest datagram go-metrics' statsd sink sends.
const MAX_PACKET: usize = 1432;
/// Lines waiting for the sender thread before new ones are dropped.
const QUEUE: usize = 16_384;

/// Which line format a sink writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Flavor {
    /// Plain statsd: label values are flattened into the name.
    Statsd,
    /// DogStatsD: labels become tags, after these global `key:value` tags;
    /// the host name is taken out of gauge names again (go-metrics'
    /// DogStatsD sink drops it from the name).
    DogStatsd {
        /// The global tags.
        tags: Vec<String>,
        /// The host name the naming layer spliced into gauge names.
        hostname: Option<String>,
    },
}

/// A statsd or DogStatsD sink.
#[derive(Clone)]
pub struct StatsdSink {
    flavor: Arc<Flavor>,
    lines: SyncSender<String>,
}

/// Replaces what the line format reserves, as go-metrics does.
fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| match c {
            ':' | ' ' | '|' | ',' | '#' | '@' => '_',
            c => c,
        })
        .collect()
}

impl StatsdSink {
    /// Resolves `address` and starts the sender thread.
    pub fn start(address: &str, flavor: Flavor) -> Result<Self, String> {
        let target: SocketAddr = address
            .to_socket_addrs()
            .map_err(|e| format!("invalid statsd address {address:?}: {e}"))?
            .next()
            .ok_or_else(|| format!("invalid statsd address {address:?}: no address"))?;
        let bind: SocketAddr = if target.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(bind).map_err(|e| format!("statsd socket: {e}"))?;
        socket
            .connect(target)
            .map_err(|e| format!("statsd address {address:?}: {e}"))?;
        let (lines, queue) = sync_channel::<String>(QUEUE);
        std::thread::Builder::new()
            .name("statsd-sink".into())
            .spawn(move || {
                let mut packet = String::with_capacity(MAX_PACKET);
                loop {
                    match queue.recv_timeout(Duration::from_millis(100)) {
                        Ok(line) => {
                            if !packet.is_empty() && packet.len() + line.len() + 1 > MAX_PACKET {
                                let _ = socket.send(packet.as_bytes());
                                packet.clear();
                            }
                            packet.push_str(&line);
                            packet.push('\n');
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            if !packet.is_empty() {
                                let _ = socket.send(packet.as_bytes());
                                packet.clear();
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| format!("statsd thread: {e}"))?;
        Ok(StatsdSink {
            flavor: Arc::new(flavor),
            lines,
        })
    }

    fn handle(&self, key: &Key, kind: &'static str) -> Arc<LineHandle> {
        let (name, tags) = match &*self.flavor {
            Flavor::Statsd => {
                let mut name = sanitize(key.name());
                for label in key.labels() {
                    name.push('.');
                    name.push_str(&sanitize(label.value()));
                }
                (name, String::new())
            }
            Flavor::DogStatsd {
                tags: global,
                hostname,
            } => {
                let tags: Vec<String> = global
                    .iter()
                    .cloned()
                    .chain(
                        key.labels()
                            .map(|l| format!("{}:{}", sanitize(l.key()), sanitize(l.value()))),
                    )
                    .collect();
                let tags = if tags.is_empty() {
                    String::new()
                } else {
                    format!("|#{}", tags.join(","))
                };
                let mut name = key.name().to_string();
                if let Some(host) = hostname.as_deref().filter(|_| kind == "g") {
                    name = name.replacen(&format!(".{host}."), ".", 1);
                }
                (sanitize(&name), tags)
            }
        };
        Arc::new(LineHandle {
            name,
            kind,
            tags,
            lines: self.lines.clone(),
        })
    }
}

/// One series' line maker.
struct LineHandle {
    name: String,
    kind: &'static str,
    tags: String,
    lines: SyncSender<String>,
}

impl LineHandle {
    fn send(&self, value: f64) {
        let line = format!("{}:{value:.6}|{}{}", self.name, self.kind, self.tags);
        match self.lines.try_send(line) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

impl CounterFn for LineHandle {
    fn increment(&self, value: u64) {
        self.send(value as f64);
    }

    fn absolute(&self, value: u64) {
        self.send(value as f64);
    }
}

impl GaugeFn for LineHandle {
    fn increment(&self, _: f64) {}

    fn decrement(&self, _: f64) {}

    fn set(&self, value: f64) {
        self.send(value);
    }
}

impl HistogramFn for LineHandle {
    fn record(&self, value: f64) {
        self.send(value);
    }
}

impl Recorder for StatsdSink {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key, "c"))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key, "g"))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key, "ms"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen() -> (UdpSocket, String) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let address = socket.local_addr().unwrap().to_string();
        (socket, address)
    }

    fn receive(socket: &UdpSocket) -> String {
        let mut buf = [0u8; 2048];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn statsd_lines_flatten_labels_into_the_name() {
        let (socket, address) = listen();
        let sink = StatsdSink::start(&address, Flavor::Statsd).unwrap();
        metrics::with_local_recorder(&sink, || {
            metrics::counter!("consul.raft.apply").increment(1);
            metrics::gauge!("consul.state.nodes").set(3.0);
            metrics::histogram!("consul.api.http", "method" => "GET", "path" => "v1_kv_")
                .record(1.5);
        });
        let packet = receive(&socket);
        assert_eq!(
            packet,
            "consul.raft.apply:1.000000|c\nconsul.state.nodes:3.000000|g\n\
             consul.api.http.GET.v1_kv_:1.500000|ms\n"
        );
    }

    #[test]
    fn dogstatsd_lines_carry_global_tags_then_labels() {
        let (socket, address) = listen();
        let sink = StatsdSink::start(
            &address,
            Flavor::DogStatsd {
                tags: vec!["env:test".into(), "team:mesh".into()],
                hostname: Some("node1".into()),
            },
        )
        .unwrap();
        metrics::with_local_recorder(&sink, || {
            metrics::histogram!("consul.api.http", "method" => "PUT").record(2.0);
            metrics::gauge!("consul.node1.runtime.sys_bytes").set(5.0);
        });
        assert_eq!(
            receive(&socket),
            "consul.api.http:2.000000|ms|#env:test,team:mesh,method:PUT\n\
             consul.runtime.sys_bytes:5.000000|g|#env:test,team:mesh\n"
        );
    }

    #[test]
    fn an_unresolvable_address_is_an_error() {
        let err = StatsdSink::start("not an address", Flavor::Statsd)
            .err()
            .unwrap();
        assert!(err.contains("invalid statsd address"), "{err}");
    }
}
