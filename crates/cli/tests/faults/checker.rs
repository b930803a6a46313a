//! A linearizability checker for histories of KV registers (Wing & Gong's
//! search with Lowe's memoisation of visited configurations), checked key
//! by key (linearizability is local).
//!
//! An operation takes effect at one instant between its invocation and
//! its completion. A write whose outcome is unknown (the connection broke
//! after the request was sent, a 5xx, a timeout) may take effect at any
//! instant after its invocation, or never. A history is linearizable when
//! some order of the operations respects real time and register semantics:
//! every read returns the last write before it (or nothing).

use std::collections::{BTreeMap, HashSet};

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Set the key to a value (every write's value is unique).
    Write(u64),
    /// Read the key: its value, or `None` when absent.
    Read(Option<u64>),
}

/// One operation of the history.
#[derive(Debug, Clone)]
pub struct Op {
    /// The register.
    pub key: String,
    /// What it did.
    pub kind: Kind,
    /// When it was invoked (ns since the history began).
    pub invoked: u64,
    /// When it completed, `None` when its outcome is unknown (writes only).
    pub completed: Option<u64>,
    /// Which client issued it (for messages).
    pub client: usize,
}

/// Checks every key's history; the error names the first key that cannot
/// be linearized and shows its operations.
pub fn check(history: &[Op]) -> Result<(), String> {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    for (key, ops) in by_key {
        check_register(&ops).map_err(|why| format!("key {key:?} is not linearizable: {why}"))?;
    }
    Ok(())
}

fn check_register(ops: &[&Op]) -> Result<(), String> {
    // Reads with unknown outcomes say nothing; unknown writes nobody read
    // may be taken never to have happened (which is always allowed, and
    // loses no linearization: no read depends on them).
    let observed: HashSet<u64> = ops
        .iter()
        .filter_map(|op| match op.kind {
            Kind::Read(Some(v)) if op.completed.is_some() => Some(v),
            _ => None,
        })
        .collect();
    let mut ops: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| match op.kind {
            Kind::Read(_) => op.completed.is_some(),
            Kind::Write(v) => op.completed.is_some() || observed.contains(&v),
        })
        .collect();
    ops.sort_by_key(|op| op.invoked);
    for op in &ops {
        if let (Kind::Read(Some(v)), Some(_)) = (op.kind, op.completed) {
            if !ops.iter().any(|w| w.kind == Kind::Write(v)) {
                return Err(format!("a read returned {v}, which no write wrote: {op:?}"));
            }
        }
    }
    let search = Search { ops: &ops };
    if search.run() {
        Ok(())
    } else {
        let mut shown = String::new();
        for op in ops.iter().take(200) {
            shown.push_str(&format!(
                "\n  client {} {:?} [{} .. {}]",
                op.client,
                op.kind,
                op.invoked,
                op.completed.map_or("?".to_string(), |c| c.to_string())
            ));
        }
        Err(format!("no valid order of these operations exists:{shown}"))
    }
}

struct Search<'a> {
    ops: &'a [&'a Op],
}

/// A configuration: which operations are linearized, and the value.
type Config = (Vec<u64>, Option<u64>);

impl Search<'_> {
    fn run(&self) -> bool {
        let words = self.ops.len().div_ceil(64);
        let mut visited: HashSet<Config> = HashSet::new();
        // Depth-first over configurations, with an explicit stack.
        let mut stack: Vec<Config> = vec![(vec![0; words], None)];
        while let Some((done, value)) = stack.pop() {
            if self.finished(&done) {
                return true;
            }
            if !visited.insert((done.clone(), value)) {
                continue;
            }
            for index in self.candidates(&done) {
                let op = self.ops[index];
                let next_value = match op.kind {
                    Kind::Write(v) => Some(v),
                    Kind::Read(read) if read == value => value,
                    Kind::Read(_) => continue,
                };
                let mut next = done.clone();
                next[index / 64] |= 1 << (index % 64);
                if !visited.contains(&(next.clone(), next_value)) {
                    stack.push((next, next_value));
                }
            }
        }
        false
    }

    fn is_done(done: &[u64], index: usize) -> bool {
        done[index / 64] & (1 << (index % 64)) != 0
    }

    /// Every completed operation is linearized (unknown writes may stay out).
    fn finished(&self, done: &[u64]) -> bool {
        self.ops
            .iter()
            .enumerate()
            .all(|(i, op)| op.completed.is_none() || Self::is_done(done, i))
    }

    /// Operations that may come next: not yet linearized, and invoked
    /// before every pending operation's completion (nothing that completed
    /// before an operation began may follow it).
    fn candidates(&self, done: &[u64]) -> Vec<usize> {
        let deadline = self
            .ops
            .iter()
            .enumerate()
            .filter(|(i, _)| !Self::is_done(done, *i))
            .filter_map(|(_, op)| op.completed)
            .min()
            .unwrap_or(u64::MAX);
        self.ops
            .iter()
            .enumerate()
            .take_while(|(_, op)| op.invoked < deadline)
            .filter(|(i, _)| !Self::is_done(done, *i))
            .map(|(i, _)| i)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: Kind, invoked: u64, completed: Option<u64>) -> Op {
        Op {
            key: "k".into(),
            kind,
            invoked,
            completed,
            client: 0,
        }
    }

    #[test]
    fn sequential_and_concurrent_histories_pass() {
        let history = [
            op(Kind::Write(1), 0, Some(10)),
            op(Kind::Read(Some(1)), 11, Some(20)),
            // Concurrent with the read below: either order is fine.
            op(Kind::Write(2), 21, Some(40)),
            op(Kind::Read(Some(1)), 22, Some(30)),
            op(Kind::Read(Some(2)), 41, Some(50)),
        ];
        assert!(check(&history).is_ok());
    }

    #[test]
    fn a_stale_read_fails() {
        let history = [
            op(Kind::Write(1), 0, Some(10)),
            op(Kind::Write(2), 11, Some(20)),
            op(Kind::Read(Some(1)), 21, Some(30)),
        ];
        assert!(check(&history).is_err());
    }

    #[test]
    fn a_lost_acknowledged_write_fails() {
        let history = [
            op(Kind::Write(1), 0, Some(10)),
            op(Kind::Read(None), 11, Some(20)),
        ];
        assert!(check(&history).is_err());
    }

    #[test]
    fn unknown_writes_may_land_late_or_never() {
        let late = [
            op(Kind::Write(1), 0, Some(10)),
            op(Kind::Write(2), 5, None),
            op(Kind::Read(Some(1)), 11, Some(20)),
            op(Kind::Read(Some(2)), 100, Some(110)),
        ];
        assert!(check(&late).is_ok());
        let never = [
            op(Kind::Write(1), 0, Some(10)),
            op(Kind::Write(2), 5, None),
            op(Kind::Read(Some(1)), 100, Some(110)),
        ];
        assert!(check(&never).is_ok());
        // Once read, it cannot be undone by an older value.
        let flip = [
            op(Kind::Write(1), 0, Some(10)),
            op(Kind::Write(2), 5, None),
            op(Kind::Read(Some(2)), 11, Some(20)),
            op(Kind::Read(Some(1)), 21, Some(30)),
        ];
        assert!(check(&flip).is_err());
    }

    #[test]
    fn reads_of_values_never_written_fail() {
        let history = [op(Kind::Read(Some(7)), 0, Some(1))];
        assert!(check(&history).unwrap_err().contains("no write wrote"));
    }
}
