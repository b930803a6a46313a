//! Passing bytes between two TCP sockets without copying them through
//! user space: `splice(2)` from the source socket into a pipe and from
//! the pipe into the destination, as HAProxy does for TCP passthrough.
//! A mesh gateway moves every byte this way (it never reads the TLS it
//! carries).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per `splice` call, and the pipe's capacity asked for.
const CHUNK: usize = 256 * 1024;

/// A pipe whose two ends close with it.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors we own.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A larger pipe moves more per call; refused above the system's
        // limit, and then the default (64 KiB) serves.
        // SAFETY: fcntl on a pipe we own.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, CHUNK as libc::c_int) };
        Ok(Pipe { read, write })
    }
}

/// One non-blocking `splice` of up to `len` bytes from `from` to `to`.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain descriptors and null offsets (sockets and pipes have
    // no file position to pass).
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Moves bytes from `src` to `dst` until `src` ends, then ends `dst`'s
/// sending side; the number moved.
async fn one_way(src: &TcpStream, dst: &TcpStream) -> io::Result<u64> {
    let pipe = Pipe::new()?;
    let mut moved = 0u64;
    loop {
        let filled = loop {
            let read = src.try_io(Interest::READABLE, || {
                splice(src.as_raw_fd(), pipe.write.as_raw_fd(), CHUNK)
            });
            match read {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => src.readable().await?,
                Err(e) => return Err(e),
            }
        };
        if filled == 0 {
            // SAFETY: a socket we hold; ending its sending side only.
            unsafe { libc::shutdown(dst.as_raw_fd(), libc::SHUT_WR) };
            return Ok(moved);
        }
        let mut left = filled;
        while left > 0 {
            let written = dst.try_io(Interest::WRITABLE, || {
                splice(pipe.read.as_raw_fd(), dst.as_raw_fd(), left)
            });
            match written {
                Ok(n) => left -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => dst.writable().await?,
                Err(e) => return Err(e),
            }
        }
        moved += filled as u64;
    }
}

/// Passes bytes both ways between `a` and `b` until both directions
/// end: (bytes a → b, bytes b → a).
pub async fn splice_bidirectional(a: &TcpStream, b: &TcpStream) -> io::Result<(u64, u64)> {
    tokio::try_join!(one_way(a, b), one_way(b, a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_pass_both_ways_and_the_end_passes_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let back = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (front_addr, back_addr) = (listener.local_addr().unwrap(), back.local_addr().unwrap());
        // The server behind: echoes everything, then closes.
        tokio::spawn(async move {
            let (mut s, _) = back.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let relay = tokio::spawn(async move {
            let (down, _) = listener.accept().await.unwrap();
            let up = TcpStream::connect(back_addr).await.unwrap();
            splice_bidirectional(&down, &up).await.unwrap()
        });
        let mut client = TcpStream::connect(front_addr).await.unwrap();
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = client.split();
        let send = async {
            w.write_all(&payload).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let receive = r.read_to_end(&mut got);
        let (_, read) = tokio::join!(send, receive);
        read.unwrap();
        assert_eq!(got, payload);
        assert_eq!(relay.await.unwrap(), (300_000, 300_000));
    }
}
