//! `dig` (Debian's dnsutils: an independent DNS client) and its output
//! parsed into sections.

use std::process::Command;

/// One record line of dig's output.
#[derive(Debug, Clone, PartialEq)]
pub struct Rr {
    pub name: String,
    pub ttl: u32,
    pub kind: String,
    pub data: String,
}

/// What dig printed for one query.
#[derive(Debug, Default)]
pub struct Dig {
    pub status: String,
    pub flags: Vec<String>,
    pub answer: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
}

impl Dig {
    /// The data of the answers of record type `kind`, sorted.
    pub fn answers_of(&self, kind: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .answer
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.data.clone())
            .collect();
        v.sort();
        v
    }
}

/// Runs `dig @127.0.0.1 -p <port> <args>` and parses what it printed.
pub fn dig(port: u16, args: &[&str]) -> Dig {
    let out = Command::new("dig")
        .arg("@127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        .args(["+tries=1", "+time=5"])
        .args(args)
        .output()
        .expect("dig (dnsutils) is installed by .ci/run");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut result = Dig::default();
    let mut section = "";
    for line in text.lines() {
        if let Some(rest) = line.split("status: ").nth(1) {
            result.status = rest.split(',').next().unwrap_or("").to_string();
        } else if let Some(rest) = line.strip_prefix(";; flags: ") {
            let flags = rest.split(';').next().unwrap_or("");
            result.flags = flags.split_whitespace().map(String::from).collect();
        } else if line.starts_with(";; ANSWER SECTION") {
            section = "answer";
        } else if line.starts_with(";; AUTHORITY SECTION") {
            section = "authority";
        } else if line.starts_with(";; ADDITIONAL SECTION") {
            section = "additional";
        } else if line.is_empty() || line.starts_with(';') {
            if line.is_empty() {
                section = "";
            }
        } else if !section.is_empty() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if parts.len() < 5 {
                continue;
            }
            let rr = Rr {
                name: parts[0].to_string(),
                ttl: parts[1].parse().unwrap_or(u32::MAX),
                kind: parts[3].to_string(),
                data: parts[4..].join(" "),
            };
            match section {
                "answer" => result.answer.push(rr),
                "authority" => result.authority.push(rr),
                _ => result.additional.push(rr),
            }
        }
    }
    assert!(!result.status.is_empty(), "dig printed no status:\n{text}");
    result
}
