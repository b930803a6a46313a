//! Full-state sync (serf's push-pull, over UDP): every so often, and right
//! after a join, a member sends its whole membership table to another,
//! which applies it and answers with its own. Gossip alone only spreads
//! changes, so without this a member that restarted would learn of
//! long-stable members only as they happen to probe it.
//!
//! Every datagram's plaintext starts with a kind byte: foca's own messages,
//! or a chunk of a state: `[kind][push id: u64][wants an answer: u8]` and
//! then members, each as `[u16 length][foca's encoding]`.

use foca::{Codec, Member, PostcardCodec};

use crate::NodeId;

/// A foca message.
pub(crate) const FOCA: u8 = 0;
/// A chunk of a membership state.
const STATE: u8 = 1;

/// Largest plaintext of a state chunk (under the datagram limit with the
/// keyring's overhead).
const CHUNK: usize = 1200;

/// Prefixes a foca message with its kind.
pub(crate) fn foca_datagram(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(FOCA);
    out.extend_from_slice(data);
    out
}

/// A received state chunk.
pub(crate) struct StateChunk {
    /// The push it belongs to (answers are sent once per push).
    pub(crate) id: u64,
    /// The sender wants our state back.
    pub(crate) wants_answer: bool,
    /// The members it carries.
    pub(crate) members: Vec<Member<NodeId>>,
}

/// Encodes `members` as chunks of one push.
pub(crate) fn encode_state<'a>(
    members: impl Iterator<Item = &'a Member<NodeId>>,
    id: u64,
    wants_answer: bool,
) -> Vec<Vec<u8>> {
    let header = |out: &mut Vec<u8>| {
        out.push(STATE);
        out.extend_from_slice(&id.to_be_bytes());
        out.push(u8::from(wants_answer));
    };
    let mut chunks = Vec::new();
    let mut current = Vec::with_capacity(CHUNK);
    header(&mut current);
    let empty = current.len();
    let mut codec = PostcardCodec;
    for member in members {
        let mut encoded = Vec::new();
        if codec.encode_member(member, &mut encoded).is_err() || encoded.len() > CHUNK - 16 {
            continue;
        }
        if current.len() + 2 + encoded.len() > CHUNK {
            chunks.push(std::mem::replace(&mut current, Vec::with_capacity(CHUNK)));
            header(&mut current);
        }
        current.extend_from_slice(&(encoded.len() as u16).to_be_bytes());
        current.extend_from_slice(&encoded);
    }
    if current.len() > empty || chunks.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// Decodes a state chunk (`None`: not one, or damaged).
pub(crate) fn decode_state(data: &[u8]) -> Option<StateChunk> {
    let (&kind, rest) = data.split_first()?;
    if kind != STATE || rest.len() < 9 {
        return None;
    }
    let id = u64::from_be_bytes(rest[..8].try_into().ok()?);
    let wants_answer = rest[8] == 1;
    let mut rest = &rest[9..];
    let mut members = Vec::new();
    let mut codec = PostcardCodec;
    while !rest.is_empty() {
        if rest.len() < 2 {
            return None;
        }
        let len = u16::from_be_bytes([rest[0], rest[1]]) as usize;
        let body = rest.get(2..2 + len)?;
        let mut reader = body;
        members.push(codec.decode_member(&mut reader).ok()?);
        rest = &rest[2 + len..];
    }
    Some(StateChunk {
        id,
        wants_answer,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: u16) -> NodeId {
        NodeId {
            addr: format!("10.0.0.{}:8301", i % 250).parse().unwrap(),
            name: format!("node-{i}-with-a-longish-name"),
            bump: i as u64,
            tags: crate::Tags {
                role: "client".into(),
                dc: "dc1".into(),
                node_id: format!("00000000-0000-0000-0000-{i:012}"),
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_large_state_splits_into_chunks_that_decode_back() {
        let members: Vec<Member<NodeId>> = (0..200).map(|i| Member::alive(node(i))).collect();
        let chunks = encode_state(members.iter(), 7, true);
        assert!(chunks.len() > 5, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.len() <= CHUNK));
        let mut back = Vec::new();
        for chunk in &chunks {
            let decoded = decode_state(chunk).expect("a chunk");
            assert_eq!((decoded.id, decoded.wants_answer), (7, true));
            back.extend(decoded.members);
        }
        assert_eq!(back, members);
        assert!(decode_state(&chunks[0][..chunks[0].len() - 3]).is_none());
        assert!(decode_state(&foca_datagram(b"x")).is_none());
    }
}
