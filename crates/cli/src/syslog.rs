//! Log lines to the local syslog daemon (`enable_syslog`), in the form
//! Go's `log/syslog` writes them — `<PRI>Mmm dd hh:mm:ss host consul[pid]:
//! message` over the daemon's datagram socket (`/dev/log`, else
//! `/var/run/syslog`, else `/var/run/log`) — at the priorities Consul maps
//! its levels to (trace → debug, debug → info, info → notice, warn →
//! warning, error → err).

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Where a syslog daemon listens, in Go's order.
const SOCKETS: &[&str] = &["/dev/log", "/var/run/syslog", "/var/run/log"];
/// The tag Consul logs under.
const TAG: &str = "consul";

/// The connection to the daemon.
#[derive(Clone)]
pub struct Syslog {
    socket: Arc<UnixDatagram>,
    facility: u8,
    host: String,
}

impl Syslog {
    /// Connects to the first daemon socket that answers; Consul's error
    /// when none does.
    pub fn connect(facility: u8) -> Result<Syslog, String> {
        let socket = UnixDatagram::unbound().map_err(|e| format!("Syslog setup failed: {e}"))?;
        let connected = SOCKETS.iter().any(|path| socket.connect(path).is_ok());
        if !connected {
            return Err("Syslog setup failed: Unix syslog delivery error".into());
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        Ok(Syslog {
            socket: Arc::new(socket),
            facility,
            host,
        })
    }
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
        let stamp = time::OffsetDateTime::now_utc();
        let line = format!(
            "<{}>{} {:>2} {:02}:{:02}:{:02} {} {TAG}[{}]: {message}",
            self.priority,
            month(stamp.month()),
            stamp.day(),
            stamp.hour(),
            stamp.minute(),
            stamp.second(),
            self.syslog.host,
            std::process::id(),
        );
        // A daemon that went away loses lines; logging never blocks on it.
        let _ = self.syslog.socket.send(line.as_bytes());
    }
}

fn month(month: time::Month) -> &'static str {
    const NAMES: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    NAMES[month as usize - 1]
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
        assert_eq!(month(time::Month::December), "Dec");
    }
}
