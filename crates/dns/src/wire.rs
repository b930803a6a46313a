//! Encoding responses the way hickory's own server does, for the UDP and
//! TCP servers Legate runs itself: the size limit of the transport (the
//! client's EDNS buffer, else 512 bytes, over UDP), SERVFAIL when a
//! response cannot be encoded, FORMERR for a query whose header can be
//! read but not the rest.

use std::sync::{Arc, Mutex};

use hickory_proto::op::{Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use hickory_server::net::NetError;
use hickory_server::server::{ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;

/// FORMERR for a message whose header could be read but not the rest
/// (what hickory's own server answers, whatever the QR bit says: a
/// 12-byte answer is no amplification); nothing for shorter input.
pub(crate) fn format_error(message: &[u8]) -> Option<Vec<u8>> {
    if message.len() < 12 {
        return None;
    }
    let mut header = vec![0u8; 12];
    header[..2].copy_from_slice(&message[..2]);
    // QR, the query's opcode and RD; its CD; rcode 1 (FORMERR); no records.
    header[2] = 0x80 | (message[2] & 0x79);
    header[3] = 0x01 | (message[3] & 0x10);
    Some(header)
}

/// Keeps the encoded response for the server to send.
#[derive(Clone)]
pub(crate) struct Collect {
    protocol: Protocol,
    bytes: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Collect {
    /// Encodes for `protocol`.
    pub(crate) fn new(protocol: Protocol) -> Collect {
        Collect {
            protocol,
            bytes: Arc::default(),
        }
    }

    /// The response, once one was sent.
    pub(crate) fn take(&self) -> Option<Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[async_trait::async_trait]
impl ResponseHandler for Collect {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let id = response.metadata().id;
        let max_size = match self.protocol {
            Protocol::Udp => response.edns().map(|e| e.max_payload()).unwrap_or(512),
            _ => u16::MAX,
        };
        let mut bytes = Vec::with_capacity(512);
        let emitted = {
            let mut encoder = BinEncoder::new(&mut bytes);
            encoder.set_max_size(max_size);
            response.destructive_emit(&mut encoder)
        };
        let info = match emitted {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, "a DNS response could not be encoded");
                bytes.clear();
                let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
                metadata.response_code = ResponseCode::ServFail;
                let header = Header {
                    metadata,
                    counts: HeaderCounts::default(),
                };
                header.emit(&mut BinEncoder::new(&mut bytes))?;
                ResponseInfo::from(header)
            }
        };
        *self.bytes.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_messages_get_formerr_and_short_ones_nothing() {
        let mut query = vec![0xab, 0xcd, 0x01, 0x10, 0, 1, 0, 0, 0, 0, 0, 0, 0xff];
        let answer = format_error(&query).unwrap();
        assert_eq!(&answer[..4], &[0xab, 0xcd, 0x81, 0x11]);
        assert_eq!(&answer[4..], &[0; 8]);
        query[2] |= 0x80;
        assert_eq!(
            &format_error(&query).unwrap()[..4],
            &[0xab, 0xcd, 0x81, 0x11]
        );
        assert_eq!(format_error(&[1, 2, 3]), None);
    }
}
