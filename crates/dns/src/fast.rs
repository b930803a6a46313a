//! Answers kept to be sent again: the UDP fast path.
//!
//! A service lookup answered from the agent's cache is a few addresses
//! drawn at random from the service's healthy instances. After the
//! resolver (the reference path) has answered a query, its encoded
//! response is kept as a template keyed by the query's bytes after the
//! ID: the header and question, the answer records' common start (owner,
//! type, class, TTL, length), every address the answer could hold, how
//! many it holds, and the sections after it. The same query again is
//! answered by copying the template, writing the query's ID and drawing
//! that many addresses in a random order: no parsing, no lookup, no
//! encoding. A template serves only while the instances it was built
//! from are the cache's current ones ([`Freshness`]), the DNS token is
//! the one it was read with, and for at most [`MAX_AGE`]; otherwise the
//! query takes the reference path, which builds a new one.
//!
//! Anything else (negative answers with their time-based SOA serial,
//! SRV, prepared queries, other datacenters, TCP) always takes the
//! reference path. Since a template is the reference path's own bytes,
//! the fast path answers every query exactly as the reference path does,
//! up to the ID and which addresses come first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use legate_agent::shared_watch::Freshness;

use crate::resolve::{Answer, DnsToken};

/// How long a template serves before the reference path answers again.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(10);
/// The most templates kept; past it they are all dropped and rebuilt as
/// asked for.
const MAX_TEMPLATES: usize = 10_000;
/// The most bytes the templates' addresses may take.
const MAX_BYTES: usize = 32 << 20;
/// The longest query kept as a key (a name is at most 255 bytes).
const MAX_QUERY: usize = 512;

/// What the reference path says about an answer the fast path may copy:
/// its records are some of `addresses`, in a random order, as long as
/// `freshness` holds and the DNS token is `token`.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    addresses: Vec<IpAddr>,
    freshness: Freshness,
    token: String,
}

impl Pool {
    /// The pool of a positive A or AAAA answer made only of address
    /// records: the distinct addresses of `qtype`'s family among
    /// `candidates`. `None` for anything else.
    pub(crate) fn of<I: Iterator<Item = String>>(
        answer: &Answer,
        qtype: RecordType,
        freshness: Freshness,
        token: String,
        candidates: impl FnOnce() -> I,
    ) -> Option<Pool> {
        let wanted_v4 = match qtype {
            RecordType::A => true,
            RecordType::AAAA => false,
            _ => return None,
        };
        if answer.answers.is_empty()
            || !answer.additional.is_empty()
            || !answer.authority.is_empty()
            || answer.answers.iter().any(|r| r.record_type() != qtype)
        {
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        let addresses = candidates()
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .filter(|ip| ip.is_ipv4() == wanted_v4 && seen.insert(*ip))
            .collect();
        Some(Pool {
            addresses,
            freshness,
            token,
        })
    }
}

/// A response kept to be sent again.
struct Template {
    /// Header and question as the reference path sent them.
    head: Box<[u8]>,
    /// What the first answer record starts with: owner, type, class, TTL
    /// and RDATA length.
    first_head: Box<[u8]>,
    /// What the others start with (their owner usually a pointer to the
    /// first's).
    rest_head: Box<[u8]>,
    /// Every address the answer may hold, as RDATA, back to back.
    rdata: Box<[u8]>,
    /// The length of one address's RDATA (4 or 16).
    rdata_len: usize,
    /// How many records an answer holds.
    count: usize,
    /// The sections after the answers (at most the OPT record).
    tail: Box<[u8]>,
    freshness: Freshness,
    token: String,
    built: Instant,
}

impl Template {
    fn bytes(&self) -> usize {
        self.head.len()
            + self.first_head.len()
            + self.rest_head.len()
            + self.rdata.len()
            + self.tail.len()
    }

    /// Writes the answer to `query` (whose first two bytes are its ID).
    fn write(&self, query: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.head);
        out[..2].copy_from_slice(&query[..2]);
        let addresses = self.rdata.len() / self.rdata_len;
        let mut write = |nth: usize, i: usize| {
            out.extend_from_slice(if nth == 0 {
                &self.first_head
            } else {
                &self.rest_head
            });
            out.extend_from_slice(&self.rdata[i * self.rdata_len..(i + 1) * self.rdata_len]);
        };
        if addresses == 1 {
            write(0, 0);
        } else {
            let mut rng = rand::rng();
            let drawn = rand::seq::index::sample(&mut rng, addresses, self.count);
            for (nth, i) in drawn.into_iter().enumerate() {
                write(nth, i);
            }
        }
        out.extend_from_slice(&self.tail);
    }
}

/// The templates, by query bytes after the ID.
pub(crate) struct FastAnswers {
    templates: RwLock<Templates>,
    token: DnsToken,
}

#[derive(Default)]
struct Templates {
    by_query: HashMap<Box<[u8]>, Arc<Template>>,
    bytes: usize,
}

impl FastAnswers {
    /// No templates yet; `token` names the DNS token in use.
    pub(crate) fn new(token: DnsToken) -> FastAnswers {
        FastAnswers {
            templates: RwLock::new(Templates::default()),
            token,
        }
    }

    /// Writes the answer to `query` into `out` when a current template
    /// has it; `false` sends the query down the reference path.
    pub(crate) fn answer(&self, query: &[u8], out: &mut Vec<u8>) -> bool {
        if query.len() <= 12 || query.len() > MAX_QUERY {
            return false;
        }
        let template = {
            let templates = self.templates.read().unwrap_or_else(|e| e.into_inner());
            match templates.by_query.get(&query[2..]) {
                Some(t) => t.clone(),
                None => return false,
            }
        };
        if template.built.elapsed() > MAX_AGE
            || !template.freshness.is_current()
            || (self.token)() != template.token
        {
            return false;
        }
        template.write(query, out);
        true
    }

    /// Keeps the reference path's `response` to `query` as a template
    /// when `pool` says it may be copied and its bytes are what a
    /// template can reproduce.
    pub(crate) fn learn(&self, query: &[u8], response: &[u8], pool: Pool) {
        if query.len() <= 12 || query.len() > MAX_QUERY {
            return;
        }
        let Some(template) = template_of(response, pool) else {
            return;
        };
        let mut templates = self.templates.write().unwrap_or_else(|e| e.into_inner());
        if templates.by_query.len() >= MAX_TEMPLATES
            || templates.bytes + template.bytes() > MAX_BYTES
        {
            *templates = Templates::default();
        }
        templates.bytes += template.bytes();
        if let Some(old) = templates
            .by_query
            .insert(query[2..].into(), Arc::new(template))
        {
            templates.bytes -= old.bytes();
        }
    }
}

/// Reads a name's wire form starting at `at`; returns where it ends.
/// Compression pointers must point before `limit`.
pub(crate) fn skip_name(message: &[u8], mut at: usize, limit: usize) -> Option<usize> {
    loop {
        let length = *message.get(at)? as usize;
        match length {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => {
                let target = (l & 0x3f) << 8 | *message.get(at + 1)? as usize;
                return (target < limit).then_some(at + 2);
            }
            l if l < 64 => at += 1 + l,
            _ => return None,
        }
    }
}

fn u16_at(message: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_be_bytes([*message.get(at)?, *message.get(at + 1)?]) as usize)
}

/// The template of `response` (one question, only address records of
/// one owner, type and TTL in the answer, nothing in the authority
/// section, at most an OPT record after), or `None`.
fn template_of(response: &[u8], pool: Pool) -> Option<Template> {
    let count = u16_at(response, 6)?;
    if u16_at(response, 4)? != 1 || count == 0 || u16_at(response, 8)? != 0 {
        return None;
    }
    let additional = u16_at(response, 10)?;
    let answers_start = skip_name(response, 12, 12)? + 4;
    if answers_start > response.len() {
        return None;
    }
    let rdata_len = if pool.addresses.first()?.is_ipv4() {
        4
    } else {
        16
    };
    if pool.addresses.len() < count {
        return None;
    }
    // Names in the first record may point into the question; in the
    // others, into the first record's owner too. Either way nothing points
    // at an address, so addresses can be drawn in any order.
    let first_name_end = skip_name(response, answers_start, answers_start)?;
    let rdata: Vec<u8> = pool.addresses.iter().flat_map(octets).collect();
    let addresses: std::collections::HashSet<&[u8]> = rdata.chunks(rdata_len).collect();
    let mut at = answers_start;
    let (mut first_head, mut rest_head): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    for nth in 0..count {
        let rdata_at = skip_name(response, at, first_name_end)? + 10;
        if u16_at(response, rdata_at - 2)? != rdata_len || rdata_at + rdata_len > response.len() {
            return None;
        }
        let head = &response[at..rdata_at];
        let expected = if nth == 0 {
            &mut first_head
        } else {
            &mut rest_head
        };
        if expected.is_some_and(|h| h != head) {
            return None;
        }
        *expected = Some(head);
        if !addresses.contains(&response[rdata_at..rdata_at + rdata_len]) {
            return None;
        }
        at = rdata_at + rdata_len;
    }
    let first_head = first_head?;
    // A one-record answer has no second head, and never needs one.
    let rest_head = rest_head.unwrap_or_default();
    let tail = &response[at..];
    let tail_ok = match additional {
        0 => tail.is_empty(),
        // The OPT record: the root name, type 41, no pointers.
        1 => {
            tail.len() >= 11
                && tail[0] == 0
                && u16_at(tail, 1) == Some(41)
                && u16_at(tail, 9).is_some_and(|l| 11 + l == tail.len())
        }
        _ => false,
    };
    if !tail_ok {
        return None;
    }
    Some(Template {
        head: response[..answers_start].into(),
        first_head: first_head.into(),
        rest_head: rest_head.into(),
        rdata: rdata.into(),
        rdata_len,
        count,
        tail: tail.into(),
        freshness: pool.freshness,
        token: pool.token,
        built: Instant::now(),
    })
}

fn octets(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}
