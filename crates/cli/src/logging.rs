//! The agent's logging: console, log file and monitor followers.

use legate_agent::config::AgentConfig;

/// Installs the agent's log output: the console at `log_level` (JSON with
/// `log_json`), the `log_file` if any, and `/v1/agent/monitor` followers
/// at their own levels, and syslog with `enable_syslog` (an agent asked
/// for syslog without a daemon to take it does not start, as Consul).
pub fn init(config: &AgentConfig) -> Result<(), String> {
    let level = match config.log_level.to_ascii_lowercase().as_str() {
        "err" => "error".to_string(),
        other => other.to_string(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEGATE_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},openraft=warn,h2=warn,hyper=warn"))
    });
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
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
    let _ = tracing_subscriber::registry()
        .with(console.with_filter(filter))
        .with(file)
        .with(syslog)
        .with(followers)
        .try_init();
    Ok(())
}
