//! The agent's log as a stream (`/v1/agent/monitor`, `legate monitor`):
//! a tracing layer that, while someone follows the log, formats each event
//! at or above the most verbose level asked for in Consul's (hclog's)
//! shapes — `2006-01-02T15:04:05.000Z [INFO]  module: message: k=v` or
//! one JSON object per line — and hands it to every follower. With nobody
//! following, events cost one atomic read here.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// How many lines a slow follower may fall behind before it loses some
/// (Consul's monitor drops lines too, and says how many).
const BACKLOG: usize = 512;

/// One log line in both of Consul's forms.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// hclog's text form (no newline).
    pub text: String,
    /// hclog's JSON form (no newline).
    pub json: String,
}

struct Hub {
    lines: broadcast::Sender<Arc<LogLine>>,
    /// Followers by level: index 0 TRACE ... 4 ERROR.
    wanted: [AtomicUsize; 5],
}

fn hub() -> &'static Hub {
    static HUB: OnceLock<Hub> = OnceLock::new();
    HUB.get_or_init(|| Hub {
        lines: broadcast::channel(BACKLOG).0,
        wanted: Default::default(),
    })
}

fn rank(level: &Level) -> usize {
    match *level {
        Level::TRACE => 0,
        Level::DEBUG => 1,
        Level::INFO => 2,
        Level::WARN => 3,
        Level::ERROR => 4,
    }
}

/// A monitor's `loglevel`, as Consul's `logging.AllowedLogLevels` reads
/// it: `trace`, `debug`, `info`, `warn`, `err` or `error`, any case;
/// `None` for anything else.
pub fn parse_level(text: &str) -> Option<Level> {
    match text.to_ascii_lowercase().as_str() {
        "trace" => Some(Level::TRACE),
        "debug" => Some(Level::DEBUG),
        "info" => Some(Level::INFO),
        "warn" => Some(Level::WARN),
        "err" | "error" => Some(Level::ERROR),
        _ => None,
    }
}

/// A follower of the log: lines at `level` or above. Dropping it stops.
pub struct Follower {
    level: Level,
    lines: broadcast::Receiver<Arc<LogLine>>,
}

impl Follower {
    /// Follows the agent's log from now on, at `level` and above.
    pub fn start(level: Level) -> Follower {
        let hub = hub();
        hub.wanted[rank(&level)].fetch_add(1, Ordering::AcqRel);
        // Callsites nobody wanted until now are asked again.
        tracing::callsite::rebuild_interest_cache();
        Follower {
            level,
            lines: hub.lines.subscribe(),
        }
    }

    /// The next line at this follower's level; `Err(n)` when `n` lines
    /// were lost to a slow reader.
    pub async fn next(&mut self) -> Result<Arc<LogLine>, u64> {
        loop {
            match self.lines.recv().await {
                Ok(line) if rank(&line.level) >= rank(&self.level) => return Ok(line),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => return Err(n),
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        hub().wanted[rank(&self.level)].fetch_sub(1, Ordering::AcqRel);
        tracing::callsite::rebuild_interest_cache();
    }
}

/// Whether some follower wants events like `metadata` (the agent's own
/// chatty dependencies only from `warn` up, as on its console).
pub fn wanted(metadata: &Metadata<'_>) -> bool {
    let hub = hub();
    let level = rank(metadata.level());
    let followed = (0..=level).any(|r| hub.wanted[r].load(Ordering::Acquire) > 0);
    if !followed {
        return false;
    }
    let noisy = ["openraft", "h2", "hyper", "tower", "rustls", "tonic"]
        .iter()
        .any(|t| metadata.target().starts_with(t));
    !noisy || level >= rank(&Level::WARN)
}

/// The layer to install beside the console's, filtered by
/// [`FollowersFilter`].
pub struct StreamLayer;

/// The stream layer's filter: an event passes while some follower wants
/// it. Callsites nobody wants are `never` (no cost) until a follower
/// comes, when the interest cache is rebuilt.
pub struct FollowersFilter;

impl<S> tracing_subscriber::layer::Filter<S> for FollowersFilter {
    fn enabled(&self, metadata: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        wanted(metadata)
    }

    fn callsite_enabled(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if wanted(metadata) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.pairs.push((field.name(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.pairs.push((field.name(), format!("{value:?}")));
        }
    }
}

/// hclog's level tag, padded as hclog pads it.
fn level_tag(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "[TRACE] ",
        Level::DEBUG => "[DEBUG] ",
        Level::INFO => "[INFO]  ",
        Level::WARN => "[WARN]  ",
        Level::ERROR => "[ERROR] ",
    }
}

/// A module name from a tracing target (`legate_agent::sync` → `agent.sync`).
fn module(target: &str) -> String {
    target.trim_start_matches("legate_").replace("::", ".")
}

/// Now, as hclog stamps a line (`2006-01-02T15:04:05.000Z`).
pub fn now_stamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond()
    )
}

/// Formats one event in hclog's two forms.
pub fn format_line(level: &Level, target: &str, fields_of: impl FnOnce(&mut dyn Visit)) -> LogLine {
    let mut fields = Fields::default();
    fields_of(&mut fields);
    let stamp = now_stamp();
    let module = module(target);
    let mut text = format!("{stamp} {}{module}: {}", level_tag(level), fields.message);
    for (i, (k, v)) in fields.pairs.iter().enumerate() {
        let _ = write!(text, "{}{k}={v}", if i == 0 { ": " } else { " " });
    }
    let mut json = serde_json::Map::new();
    json.insert(
        "@level".into(),
        level.to_string().to_ascii_lowercase().into(),
    );
    json.insert("@message".into(), fields.message.clone().into());
    json.insert("@module".into(), module.into());
    json.insert("@timestamp".into(), stamp.into());
    for (k, v) in fields.pairs {
        json.insert(k.to_string(), v.into());
    }
    LogLine {
        level: *level,
        text,
        json: serde_json::Value::Object(json).to_string(),
    }
}

impl<S: Subscriber> Layer<S> for StreamLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let metadata = event.metadata();
        let line = format_line(metadata.level(), metadata.target(), |visit| {
            event.record(visit)
        });
        let _ = hub().lines.send(Arc::new(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_get_hclog_lines_at_their_level_and_above() {
        use tracing_subscriber::layer::SubscriberExt;
        assert_eq!(parse_level("WARN"), Some(Level::WARN));
        assert_eq!(parse_level("err"), Some(Level::ERROR));
        assert_eq!(parse_level("off"), None);
        assert_eq!(parse_level("warning"), None);
        let subscriber =
            tracing_subscriber::registry().with(StreamLayer.with_filter(FollowersFilter));
        let mut info = Follower::start(Level::INFO);
        let mut debug = Follower::start(Level::DEBUG);
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!("below info");
            tracing::info!(service = "web", "registered");
            tracing::trace!("below everyone");
        });
        let line = info.next().await.unwrap();
        assert!(
            line.text
                .ends_with(" [INFO]  agent.log_stream.tests: registered: service=web"),
            "{}",
            line.text
        );
        let json: serde_json::Value = serde_json::from_str(&line.json).unwrap();
        assert_eq!(json["@level"], "info");
        assert_eq!(json["@message"], "registered");
        assert_eq!(json["service"], "web");
        assert!(debug.next().await.unwrap().text.contains("[DEBUG] "));
        assert!(debug.next().await.unwrap().text.contains("registered"));
        // Nothing else was sent (the trace event had no follower).
        assert!(debug.lines.try_recv().is_err());
    }
}
