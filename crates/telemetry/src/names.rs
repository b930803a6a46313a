//! Consul's metric names on top of the `metrics` facade: call sites name
//! a metric without the prefix (`raft.apply`); this layer prepends
//! `telemetry.metrics_prefix`, splices the host name into gauge names
//! unless `telemetry.disable_hostname` (go-metrics' `EnableHostname`),
//! and drops what `telemetry.prefix_filter` blocks, before any sink sees
//! the metric.

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// `telemetry.prefix_filter` with `filter_default`: the longest matching
/// prefix decides; a block wins over an allow of the same prefix; no match
/// falls back to `filter_default` (go-metrics' radix-tree filter).
#[derive(Debug, Clone)]
pub struct PrefixFilter {
    /// (prefix, allowed), sorted by prefix length, longest first.
    rules: Vec<(String, bool)>,
    default_allow: bool,
}

impl Default for PrefixFilter {
    /// No rules, and everything allowed (`filter_default = true`).
    fn default() -> Self {
        PrefixFilter {
            rules: Vec::new(),
            default_allow: true,
        }
    }
}

impl PrefixFilter {
    /// Builds the filter from Consul's `["+prefix", "-prefix"]` entries;
    /// returns it with the entries it ignored (neither `+` nor `-`).
    pub fn new(entries: &[String], filter_default: bool) -> (Self, Vec<String>) {
        let mut rules: Vec<(String, bool)> = Vec::new();
        let mut ignored = Vec::new();
        for entry in entries {
            let (allowed, prefix) = match entry.as_bytes().first() {
                Some(b'+') => (true, &entry[1..]),
                Some(b'-') => (false, &entry[1..]),
                Some(_) => {
                    ignored.push(entry.clone());
                    continue;
                }
                None => continue,
            };
            match rules.iter_mut().find(|(p, _)| p == prefix) {
                // A block of the same prefix wins, whatever the order.
                Some(rule) => rule.1 &= allowed,
                None => rules.push((prefix.to_string(), allowed)),
            }
        }
        rules.sort_by_key(|rule| std::cmp::Reverse(rule.0.len()));
        (
            PrefixFilter {
                rules,
                default_allow: filter_default,
            },
            ignored,
        )
    }

    /// Whether a full metric name (with the prefix) is emitted.
    pub fn allows(&self, name: &str) -> bool {
        self.rules
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix.as_str()))
            .map(|(_, allowed)| *allowed)
            .unwrap_or(self.default_allow)
    }
}

/// The naming rules of one agent.
#[derive(Debug, Clone)]
pub struct Naming {
    /// `metrics_prefix` ("consul"); empty for none.
    pub prefix: String,
    /// The host name spliced into gauge names, or `None` with
    /// `disable_hostname`.
    pub hostname: Option<String>,
    /// `prefix_filter` and `filter_default`.
    pub filter: PrefixFilter,
}

impl Naming {
    /// The full name of a metric: `<prefix>.[<host>.]<name>`.
    pub fn full_name(&self, name: &str, gauge: bool) -> String {
        let mut full = String::with_capacity(self.prefix.len() + name.len() + 24);
        if !self.prefix.is_empty() {
            full.push_str(&self.prefix);
            full.push('.');
        }
        if gauge {
            if let Some(host) = &self.hostname {
                full.push_str(host);
                full.push('.');
            }
        }
        full.push_str(name);
        full
    }
}

/// A recorder that renames (and filters) keys before the inner sinks.
pub struct ConsulNames<R> {
    inner: R,
    naming: Naming,
}

impl<R> ConsulNames<R> {
    /// Wraps `inner` with `naming`.
    pub fn new(inner: R, naming: Naming) -> Self {
        ConsulNames { inner, naming }
    }

    /// The key under its full name, or `None` when the filter blocks it.
    fn rename(&self, key: &Key, gauge: bool) -> Option<Key> {
        let name = self.naming.full_name(key.name(), gauge);
        if !self.naming.filter.allows(&name) {
            return None;
        }
        Some(Key::from_parts(
            name,
            key.labels().cloned().collect::<Vec<_>>(),
        ))
    }
}

impl<R: Recorder> Recorder for ConsulNames<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let name = self.naming.full_name(key.as_str(), false);
        self.inner.describe_counter(name.into(), unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let name = self.naming.full_name(key.as_str(), true);
        self.inner.describe_gauge(name.into(), unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let name = self.naming.full_name(key.as_str(), false);
        self.inner
            .describe_histogram(name.into(), unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        match self.rename(key, false) {
            Some(key) => self.inner.register_counter(&key, metadata),
            None => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        match self.rename(key, true) {
            Some(key) => self.inner.register_gauge(&key, metadata),
            None => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        match self.rename(key, false) {
            Some(key) => self.inner.register_histogram(&key, metadata),
            None => Histogram::noop(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(entries: &[&str], default: bool) -> PrefixFilter {
        let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        PrefixFilter::new(&entries, default).0
    }

    #[test]
    fn the_longest_prefix_decides_and_a_block_wins_a_tie() {
        let f = filter(
            &["+consul.raft.apply", "-consul.raft", "-consul.http"],
            true,
        );
        assert!(f.allows("consul.raft.apply"));
        assert!(!f.allows("consul.raft.commitTime"));
        assert!(!f.allows("consul.http.GET.v1.kv._"));
        assert!(f.allows("consul.kvs.apply"));
        let tie = filter(&["+consul.dns", "-consul.dns"], true);
        assert!(!tie.allows("consul.dns.domain_query"));
        let tie = filter(&["-consul.dns", "+consul.dns"], true);
        assert!(!tie.allows("consul.dns.domain_query"));
    }

    #[test]
    fn filter_default_false_blocks_what_no_rule_allows() {
        let f = filter(&["+consul.raft"], false);
        assert!(f.allows("consul.raft.apply"));
        assert!(!f.allows("consul.kvs.apply"));
    }

    #[test]
    fn entries_without_a_sign_are_ignored_and_reported() {
        let entries = vec!["consul.raft".to_string(), String::new(), "+x".to_string()];
        let (f, ignored) = PrefixFilter::new(&entries, false);
        assert_eq!(ignored, vec!["consul.raft".to_string()]);
        assert!(f.allows("x.y"));
        assert!(!f.allows("consul.raft.apply"));
    }

    #[test]
    fn gauges_get_the_host_name_spliced_in() {
        let naming = Naming {
            prefix: "consul".into(),
            hostname: Some("node1".into()),
            filter: PrefixFilter::default(),
        };
        assert_eq!(
            naming.full_name("runtime.alloc_bytes", true),
            "consul.node1.runtime.alloc_bytes"
        );
        assert_eq!(naming.full_name("raft.apply", false), "consul.raft.apply");
        let bare = Naming {
            prefix: String::new(),
            hostname: None,
            filter: PrefixFilter::default(),
        };
        assert_eq!(bare.full_name("raft.apply", true), "raft.apply");
    }
}
