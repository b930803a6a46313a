//! The agent's logging: console, log file and monitor followers.

use legate_agent::config::AgentConfig;

/// Installs the agent's log output: the console at `log_level` (JSON with
/// `log_json`), the `log_file` if any, and `/v1/agent/monitor` followers
/// at their own levels, and syslog with `enable_syslog` (an agent asked
/// for syslog without a daemon to take it does not start, as Consul).
pub fn init(config: &AgentConfig) -> Result<(), String> {
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = subscriber(config)?.try_init();
    Ok(())
}

/// The subscriber [`init`] installs.
fn subscriber(config: &AgentConfig) -> Result<impl tracing::Subscriber + Send + Sync, String> {
    let level = match config.log_level.to_ascii_lowercase().as_str() {
        "err" => "error".to_string(),
        other => other.to_string(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEGATE_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},openraft=warn,h2=warn,hyper=warn"))
    });
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let console = tracing_subscriber::fmt::layer().with_writer(std::io::stdout);
    let console = if config.log_json {
        console.json().boxed()
    } else {
        console.boxed()
    };
    // The console at the configured level; `/v1/agent/monitor` followers
    // at theirs.
    let followers = legate_agent::log_stream::StreamLayer
        .with_filter(legate_agent::log_stream::FollowersFilter);
    // `log_file`: the same lines, rotated as Consul rotates them.
    let file = config.log_file.clone().and_then(|settings| {
        let dir = settings.dir.display().to_string();
        match crate::log_file::RotatingFile::open(settings) {
            Ok(file) => Some(file),
            Err(e) => {
                eprintln!("==> Error opening the log file in {dir}: {e}");
                None
            }
        }
    });
    let file = file.map(|file| {
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(file);
        let layer = if config.log_json {
            layer.json().boxed()
        } else {
            layer.boxed()
        };
        let level = filter.to_string();
        layer.with_filter(tracing_subscriber::EnvFilter::new(level))
    });
    // `enable_syslog`: the same lines without time or level (the syslog
    // line carries both), at the same level.
    let syslog = match config.syslog {
        None => None,
        Some(settings) => Some(crate::syslog::Syslog::connect(settings.facility)?),
    };
    let syslog = syslog.map(|syslog| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .without_time()
            .with_level(false)
            .with_writer(syslog)
            .with_filter(tracing_subscriber::EnvFilter::new(filter.to_string()))
    });
    // Only the outputs there are: an absent (`None`) layer would declare
    // interest in every callsite, which turns on every dependency's trace
    // spans (h2 makes one per flush) at a cost on every request.
    let mut layers: Vec<Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>> =
        vec![console.with_filter(filter).boxed(), followers.boxed()];
    layers.extend(file.map(Layer::boxed));
    layers.extend(syslog.map(Layer::boxed));
    Ok(tracing_subscriber::registry().with(layers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_agent::config::{load, ConfigSource};
    use tracing::Level;

    /// Dependencies' trace spans (h2 makes one per write) stay off at the
    /// default levels, with or without a log file; the agent's own events
    /// pass at the configured level.
    #[test]
    fn dependency_spans_stay_off_below_the_configured_level() {
        // The levels under test are the configured ones, not an override
        // from the environment (each test runs in its own process).
        std::env::remove_var("LEGATE_LOG");
        let dir = tempfile::tempdir().unwrap();
        let with_file = format!(
            "log_level = \"info\"\nlog_file = \"{}/\"",
            dir.path().display()
        );
        for hcl in ["log_level = \"warn\"", with_file.as_str()] {
            let config = load(&[ConfigSource::Hcl(hcl.to_string())]).unwrap();
            let subscriber = subscriber(&config).unwrap();
            tracing::subscriber::with_default(subscriber, || {
                assert!(
                    !tracing::span_enabled!(target: "h2::codec", Level::TRACE),
                    "{hcl}"
                );
                assert!(
                    !tracing::span_enabled!(target: "legate_xds", Level::DEBUG),
                    "{hcl}"
                );
                assert!(
                    tracing::event_enabled!(target: "legate_xds", Level::WARN),
                    "{hcl}"
                );
            });
        }
    }
}
