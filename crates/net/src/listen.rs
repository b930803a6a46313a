//! Binding a TCP listener with the accept queue a server needs.
//!
//! tokio (through mio) and the standard library listen with a backlog of
//! 128. A burst of connections larger than that — thousands of watches
//! reconnecting after an agent restart — overflows the accept queue, and
//! the kernel drops the extra SYNs; each client then waits out a
//! retransmission (one second, then three). Go's listeners, and so
//! Consul's, ask for `net.core.somaxconn` (4096 on current kernels).
//! [`bind_tcp`] asks for the largest backlog, which the kernel caps at
//! `somaxconn`: the same queue a Consul agent gets on the same machine.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// The backlog asked of `listen(2)`; Linux caps it at
/// `net.core.somaxconn`.
const LISTEN_BACKLOG: i32 = 65_535;

/// Binds a TCP listener on `address` (port 0 picks one) with the address
/// reusable at once after a restart, as tokio's `bind` has it, and the
/// largest accept queue the kernel allows. Needs a tokio runtime.
pub fn bind_tcp(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&address.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// The accept queue's limit of a listening socket: Linux reports it in
    /// `tcpi_sacked` of `TCP_INFO`.
    fn accept_queue_limit(listener: &TcpListener) -> u32 {
        // SAFETY: `info` is a plain struct as large as `len` says, and the
        // descriptor is open for the call.
        unsafe {
            let mut info: libc::tcp_info = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            let rc = libc::getsockopt(
                listener.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            );
            assert_eq!(rc, 0, "{}", io::Error::last_os_error());
            info.tcpi_sacked
        }
    }

    #[tokio::test]
    async fn the_accept_queue_is_as_long_as_the_kernel_allows() {
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let ours = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        // The kernel's cap itself (up to the most `listen` takes);
        // tokio's own bind would show 128 here.
        assert_eq!(accept_queue_limit(&ours), somaxconn.min(65_535));
    }

    #[tokio::test]
    async fn a_bound_listener_accepts_and_an_address_in_use_is_refused() {
        let listener = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (accepted, from) = listener.accept().await.unwrap();
        assert_eq!(from, client.local_addr().unwrap());
        drop(accepted);
        let again = bind_tcp(address).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
        let v6 = bind_tcp("[::1]:0".parse().unwrap());
        // A host without IPv6 on loopback refuses the address itself.
        if let Ok(v6) = v6 {
            assert!(v6.local_addr().unwrap().is_ipv6());
        }
    }
}
