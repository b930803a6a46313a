//! Service and node identities: the synthetic policies a token's
//! `ServiceIdentities` and `NodeIdentities` expand to, with Consul's rules
//! text, names and (quirky) IDs.

/// The rules a service identity grants: write on the service and its
/// sidecar proxy, read on every service and node (for discovery).
pub fn service_identity_rules(service: &str) -> String {
    format!(
        "\nservice \"{service}\" {{\n\tpolicy = \"write\"\n}}\nservice \"{service}-sidecar-proxy\" {{\n\tpolicy = \"write\"\n}}\nservice_prefix \"\" {{\n\tpolicy = \"read\"\n}}\nnode_prefix \"\" {{\n\tpolicy = \"read\"\n}}"
    )
}

/// The rules a node identity grants: write on the node, read on every
/// service.
pub fn node_identity_rules(node: &str) -> String {
    format!(
        "\nnode \"{node}\" {{\n\tpolicy = \"write\"\n}}\nservice_prefix \"\" {{\n\tpolicy = \"read\"\n}}"
    )
}

/// The FNV-1a 128-bit offset basis: the digest of no input.
const FNV128A_EMPTY: [u8; 16] = [
    0x6c, 0x62, 0x27, 0x2e, 0x07, 0xbb, 0x01, 0x42, 0x62, 0xb8, 0x21, 0x75, 0x62, 0x95, 0xc5, 0x8d,
];

/// A synthetic policy's ID as Consul computes it: Go's `fnv128a.Sum(rules)`
/// appends the digest of nothing to the rules, so the ID is the rules'
/// bytes followed by the empty digest, in hex.
pub fn synthetic_policy_id(rules: &str) -> String {
    let mut id = String::with_capacity((rules.len() + 16) * 2);
    for byte in rules.bytes().chain(FNV128A_EMPTY) {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

/// A synthetic policy's name.
pub fn synthetic_policy_name(id: &str) -> String {
    format!("synthetic-policy-{id}")
}

/// A synthetic policy's description: `synthetic policy for service
/// identity "web"` (or node identity).
pub fn synthetic_policy_description(kind: &str, name: &str) -> String {
    format!("synthetic policy for {kind} identity \"{name}\"")
}

/// Whether a service or node identity name is valid: lower-case letters,
/// digits, `-` and `_`, at most 256 characters.
pub fn valid_identity_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
