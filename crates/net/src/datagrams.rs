//! Datagrams read and sent in batches: one `recvmmsg` reads every
//! datagram waiting (up to the batch size, blocking only for the first),
//! one `sendmmsg` sends many. On a busy UDP socket this saves a system
//! call per datagram each way. Blocking sockets only; a read timeout set
//! on the socket bounds the wait for the first datagram.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Buffers for reading up to `capacity` datagrams of at most `size`
/// bytes at once.
pub struct RecvBatch {
    buffers: Vec<u8>,
    size: usize,
    lengths: Vec<usize>,
    sources: Vec<libc::sockaddr_storage>,
    received: usize,
}

impl RecvBatch {
    /// Room for `capacity` datagrams of `size` bytes (longer ones are cut,
    /// as `recv_from` cuts them).
    pub fn new(capacity: usize, size: usize) -> RecvBatch {
        let capacity = capacity.max(1);
        RecvBatch {
            buffers: vec![0; capacity * size],
            size,
            lengths: vec![0; capacity],
            // SAFETY: sockaddr_storage is plain data; all zeroes is valid.
            sources: vec![unsafe { zeroed() }; capacity],
            received: 0,
        }
    }

    /// Waits for at least one datagram on `socket` and reads every one
    /// waiting, up to the capacity; returns how many.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        let capacity = self.lengths.len();
        let mut iovecs: Vec<libc::iovec> = self
            .buffers
            .chunks_mut(self.size)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let mut headers: Vec<libc::mmsghdr> = self
            .sources
            .iter_mut()
            .zip(iovecs.iter_mut())
            .map(|(source, iovec)| header(source, length, iovec))
            .collect();
        // SAFETY: every header points at a live buffer and address slot of
        // this batch, sized as declared, for the duration of the call.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                headers.as_mut_ptr(),
                capacity as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.received = 0;
            return Err(io::Error::last_os_error());
        }
        self.received = n as usize;
        for (i, header) in headers.iter().take(self.received).enumerate() {
            self.lengths[i] = (header.msg_len as usize).min(self.size);
        }
        Ok(self.received)
    }

    /// The `i`th datagram read by the last [`RecvBatch::recv`] and where it
    /// came from (`None` for an address family other than IP).
    pub fn get(&self, i: usize) -> Option<(&[u8], SocketAddr)> {
        if i >= self.received {
            return None;
        }
        let data = &self.buffers[i * self.size..i * self.size + self.lengths[i]];
        Some((data, from_storage(&self.sources[i])?))
    }
}

/// Sends each `(datagram, destination)` with one `sendmmsg` (more when
/// the kernel takes only part); returns how many were sent before an
/// error, or the error when none was.
pub fn send_batch(socket: &UdpSocket, datagrams: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    let mut sent = 0;
    while sent < datagrams.len() {
        let rest = &datagrams[sent..];
        let mut addresses: Vec<(libc::sockaddr_storage, libc::socklen_t)> =
            rest.iter().map(|(_, to)| to_storage(to)).collect();
        let mut iovecs: Vec<libc::iovec> = rest
            .iter()
            .map(|(data, _)| libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            })
            .collect();
        let mut headers: Vec<libc::mmsghdr> = addresses
            .iter_mut()
            .zip(iovecs.iter_mut())
            .map(|((address, length), iovec)| header(address, *length, iovec))
            .collect();
        // SAFETY: every header points at live data and addresses for the
        // duration of the call; the kernel only reads them.
        let n = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                headers.as_mut_ptr(),
                headers.len() as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return if sent == 0 { Err(error) } else { Ok(sent) };
        }
        if n == 0 {
            break;
        }
        sent += n as usize;
    }
    Ok(sent)
}

/// One message's header: its address slot and its one buffer.
fn header(
    address: &mut libc::sockaddr_storage,
    length: libc::socklen_t,
    iovec: &mut libc::iovec,
) -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain data; all zeroes is valid.
    let mut header: libc::mmsghdr = unsafe { zeroed() };
    header.msg_hdr.msg_name = (address as *mut libc::sockaddr_storage).cast();
    header.msg_hdr.msg_namelen = length;
    header.msg_hdr.msg_iov = iovec;
    header.msg_hdr.msg_iovlen = 1;
    header
}

fn from_storage(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let v4: &libc::sockaddr_in =
                unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let v6: &libc::sockaddr_in6 =
                unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(v6.sin6_addr.s6_addr),
                u16::from_be(v6.sin6_port),
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn to_storage(address: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is valid.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let length = match address {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a
            // sockaddr_in.
            let out: &mut libc::sockaddr_in =
                unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            out.sin_family = libc::AF_INET as libc::sa_family_t;
            out.sin_port = v4.port().to_be();
            out.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for a sockaddr_in6.
            let out: &mut libc::sockaddr_in6 =
                unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            out.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            out.sin6_port = v6.port().to_be();
            out.sin6_addr.s6_addr = v6.ip().octets();
            out.sin6_flowinfo = v6.flowinfo();
            out.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, length as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn bound(timeout: Duration) -> UdpSocket {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(timeout)).unwrap();
        socket
    }

    #[test]
    fn datagrams_go_and_come_in_batches_with_their_addresses() {
        let server = bound(Duration::from_secs(5));
        let clients: Vec<UdpSocket> = (0..3).map(|_| bound(Duration::from_secs(5))).collect();
        for (i, c) in clients.iter().enumerate() {
            c.send_to(&vec![i as u8; 10 + i], server.local_addr().unwrap())
                .unwrap();
        }
        let mut batch = RecvBatch::new(8, 11);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let n = batch.recv(&server).unwrap();
            for i in 0..n {
                let (data, from) = batch.get(i).unwrap();
                seen.push((data.to_vec(), from));
            }
        }
        assert_eq!(batch.get(8), None);
        seen.sort();
        // The third datagram (12 bytes) is cut to the buffer's 11.
        for (i, (data, from)) in seen.iter().enumerate() {
            assert_eq!(data, &vec![i as u8; (10 + i).min(11)]);
            assert_eq!(*from, clients[i].local_addr().unwrap());
        }
        let replies: Vec<(&[u8], SocketAddr)> =
            seen.iter().map(|(d, from)| (&d[..], *from)).collect();
        assert_eq!(send_batch(&server, &replies).unwrap(), 3);
        for (i, c) in clients.iter().enumerate() {
            let mut buf = [0u8; 32];
            let n = c.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &vec![i as u8; (10 + i).min(11)][..]);
        }
    }

    #[test]
    fn a_read_timeout_ends_the_wait() {
        let socket = bound(Duration::from_millis(50));
        let mut batch = RecvBatch::new(4, 64);
        let error = batch.recv(&socket).unwrap_err();
        assert!(matches!(
            error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ));
        assert_eq!(batch.get(0), None);
    }
}
