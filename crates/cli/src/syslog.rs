//! Log lines to the local syslog daemon (`enable_syslog`), in the form
//! Go's `log/syslog` writes them to a local daemon — `<PRI>Mmm dd
//! hh:mm:ss consul[pid]: message`, local time and no host name — over the
//! daemon's datagram socket (`/dev/log`, else `/var/run/syslog`, else
//! `/var/run/log`), reconnecting once when a write fails (a restarted
//! daemon), at the priorities Consul maps its levels to (trace → debug,
//! debug → info, info → notice, warn → warning, error → err).

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Where a syslog daemon listens, in Go's order.
const SOCKETS: &[&str] = &["/dev/log", "/var/run/syslog", "/var/run/log"];
/// The tag Consul logs under.
const TAG: &str = "consul";

/// The connection to the daemon.
#[derive(Clone)]
pub struct Syslog {
    socket: Arc<Mutex<UnixDatagram>>,
    facility: u8,
    /// Where the daemon may listen, in the order tried.
    paths: Arc<[PathBuf]>,
}

/// A datagram socket connected to the first of `paths` that answers.
fn connect_daemon(paths: &[PathBuf]) -> Option<UnixDatagram> {
    let socket = UnixDatagram::unbound().ok()?;
    paths
        .iter()
        .any(|path| socket.connect(path).is_ok())
        .then_some(socket)
}

impl Syslog {
    /// Connects to the first daemon socket that answers; Consul's error
    /// when none does.
    pub fn connect(facility: u8) -> Result<Syslog, String> {
        Syslog::connect_to(SOCKETS.iter().map(PathBuf::from).collect(), facility)
    }

    fn connect_to(paths: Vec<PathBuf>, facility: u8) -> Result<Syslog, String> {
        let socket =
            connect_daemon(&paths).ok_or("Syslog setup failed: Unix syslog delivery error")?;
        Ok(Syslog {
            socket: Arc::new(Mutex::new(socket)),
            facility,
            paths: paths.into(),
        })
    }

    /// Sends one line; when the daemon went away (restarted, its socket
    /// replaced), reconnects and tries once more, as Go's writer does.
    /// A line that still cannot go is lost: logging never blocks on it.
    fn send(&self, line: &[u8]) {
        let mut socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        if socket.send(line).is_ok() {
            return;
        }
        if let Some(fresh) = connect_daemon(&self.paths) {
            *socket = fresh;
            let _ = socket.send(line);
        }
    }
}

/// The time as Go's `time.Stamp` prints it in local time (`Jan _2
/// 15:04:05`).
fn local_stamp() -> String {
    // SAFETY: `time` with a null pointer only returns the time;
    // `localtime_r` writes only into the `tm` it is given.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        let utc = time::OffsetDateTime::now_utc();
        return stamp(utc.month() as usize - 1, utc.day(), utc.time().as_hms());
    }
    stamp(
        tm.tm_mon as usize,
        tm.tm_mday as u8,
        (tm.tm_hour as u8, tm.tm_min as u8, tm.tm_sec as u8),
    )
}

fn stamp(month: usize, day: u8, (hour, minute, second): (u8, u8, u8)) -> String {
    const NAMES: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = NAMES.get(month).copied().unwrap_or("Jan");
    format!("{month} {day:>2} {hour:02}:{minute:02}:{second:02}")
}

/// Consul's priority for a level.
fn severity(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 7,
        Level::DEBUG => 6,
        Level::INFO => 5,
        Level::WARN => 4,
        Level::ERROR => 3,
    }
}

/// One event's line, sent when the formatter is done with it.
pub struct SyslogLine {
    syslog: Syslog,
    priority: u8,
    buffer: Vec<u8>,
}

impl Write for SyslogLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SyslogLine {
    fn drop(&mut self) {
        let message = String::from_utf8_lossy(&self.buffer);
        let message = message.trim_end();
        if message.is_empty() {
            return;
        }
        let line = format!(
            "<{}>{} {TAG}[{}]: {message}",
            self.priority,
            local_stamp(),
            std::process::id(),
        );
        self.syslog.send(line.as_bytes());
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = SyslogLine;

    fn make_writer(&'a self) -> SyslogLine {
        self.line(5)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> SyslogLine {
        self.line(severity(meta.level()))
    }
}

impl Syslog {
    fn line(&self, severity: u8) -> SyslogLine {
        SyslogLine {
            syslog: self.clone(),
            priority: self.facility * 8 + severity,
            buffer: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_take_consuls_priorities() {
        assert_eq!(severity(&Level::INFO), 5, "notice");
        assert_eq!(severity(&Level::DEBUG), 6, "info");
        assert_eq!(severity(&Level::ERROR), 3, "err");
        assert_eq!(stamp(11, 4, (9, 5, 7)), "Dec  4 09:05:07");
        assert_eq!(stamp(0, 24, (23, 59, 0)), "Jan 24 23:59:00");
    }

    #[test]
    fn a_restarted_daemon_gets_the_next_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let first = UnixDatagram::bind(&path).unwrap();
        let missing = dir.path().join("missing");
        let syslog = Syslog::connect_to(vec![missing.clone(), path.clone()], 1).unwrap();
        let mut buf = [0u8; 512];
        syslog.send(b"one");
        let n = first.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one");
        // The daemon restarts: its old socket goes, a new one is bound.
        drop(first);
        std::fs::remove_file(&path).unwrap();
        let second = UnixDatagram::bind(&path).unwrap();
        syslog.send(b"two");
        second
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let n = second.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"two");
        // No daemon at all: the setup fails with Consul's error.
        let none = Syslog::connect_to(vec![missing], 1).err().unwrap();
        assert_eq!(none, "Syslog setup failed: Unix syslog delivery error");
    }

    #[test]
    fn lines_have_no_host_name_as_go_writes_them_locally() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let daemon = UnixDatagram::bind(&path).unwrap();
        let syslog = Syslog::connect_to(vec![path], 3).unwrap();
        let mut line = syslog.line(5);
        line.write_all(b"hello\n").unwrap();
        drop(line);
        let mut buf = [0u8; 512];
        let n = daemon.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).to_string();
        // `<29>Mmm dd hh:mm:ss consul[pid]: hello`
        let (head, rest) = got.split_once('>').unwrap();
        assert_eq!(head, "<29");
        let stamp: Vec<char> = rest[..16].chars().collect();
        assert_eq!(
            (stamp[3], stamp[6], stamp[9], stamp[12], stamp[15]),
            (' ', ' ', ':', ':', ' '),
            "{got}"
        );
        assert_eq!(
            &rest[16..],
            format!("consul[{}]: hello", std::process::id())
        );
    }
}
