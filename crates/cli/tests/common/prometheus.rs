//! Reading Prometheus text exposition in tests: the cumulative counters
//! that `/v1/agent/metrics?format=prometheus` carries (the JSON form only
//! shows the last 10 s interval, as Consul's does); and a real Prometheus
//! (Debian's package) started for a test.

use std::process::{Child, Command, Stdio};

/// A child process killed when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Prometheus server on a free loopback port with the config (YAML)
/// `config` writes for that port, keeping its data and log
/// (`prometheus.log`) in `dir`.
pub fn start(dir: &std::path::Path, config: impl FnOnce(u16) -> String) -> (Killed, u16) {
    let port = super::free_port();
    let file = super::write(dir, "prometheus.yml", &config(port));
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("prometheus (Debian's package) must be installed: scripts/test installs it");
    (Killed(child), port)
}

/// The agent flag that turns the Prometheus format on.
pub const RETENTION: &str = "-hcl=telemetry { prometheus_retention_time = \"1h\" }";

/// One sample line: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// The labels, in their order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            return labels;
        }
        if chars.next() != Some('"') {
            return labels;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((name.trim_start_matches(',').to_string(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// Every sample line of an exposition.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.trim_end_matches('}'))),
                None => (series, Vec::new()),
            };
            Some(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// The sum of the samples named `name` whose labels include `labels`.
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text)
        .into_iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value)
        .sum()
}
