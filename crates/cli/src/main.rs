//! The `legate` binary: the one place where agent meets server. Commands
//! and flags follow Consul's CLI (Go-style single-dash flags work).

mod agent_cmd;
mod allocator;
mod client;
mod cluster;
mod commands;
mod config_watch;
mod grpc_incoming;
mod host;
mod listeners;
mod log_file;
mod logging;
mod node_identity;
mod server_metadata;
mod syslog;
mod wan;
mod wanfed;
mod watch;
mod xds_acl;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Legate: a Consul-compatible service discovery and service mesh control plane.
#[derive(Parser, Debug)]
#[command(
    name = "legate",
    disable_version_flag = true,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs an agent (`-dev` runs one in-memory server).
    Agent(Box<agent_cmd::AgentArgs>),
    /// Prints the version.
    Version,
    /// Lists the members of the cluster.
    Members(commands::misc::MembersArgs),
    /// Fires a user event.
    Event(commands::event::EventArgs),
    /// Watches a view and runs a handler when it changes.
    Watch(commands::event::WatchArgs),
    /// Estimates the round trip between two nodes from their coordinates.
    Rtt(commands::rtt::RttArgs),
    /// Reads the catalog.
    #[command(subcommand)]
    Catalog(commands::catalog::CatalogCommand),
    /// Registers and deregisters services with the local agent.
    #[command(subcommand)]
    Services(commands::services::ServicesCommand),
    /// Writes, reads, lists and deletes config entries.
    #[command(subcommand)]
    Config(commands::config::ConfigCommand),
    /// Connect (service mesh) commands: the CA.
    #[command(subcommand)]
    Connect(commands::connect::ConnectCommand),
    /// Creates, reads, checks and deletes intentions.
    #[command(subcommand)]
    Intention(commands::intention::IntentionCommand),
    /// ACL bootstrap, tokens, policies and the agent's tokens.
    #[command(subcommand)]
    Acl(commands::acl::AclCommand),
    /// Reads and writes the KV store.
    #[command(subcommand)]
    Kv(commands::kv::KvCommand),
    /// Creates CA and agent certificates for TLS.
    #[command(subcommand)]
    Tls(commands::tls::TlsCommand),
    /// Asks the local agent to leave the cluster and stop.
    Leave(commands::misc::HttpOnlyArgs),
    /// Asks the local agent to reload its configuration.
    Reload(commands::misc::HttpOnlyArgs),
    /// Streams the agent's log.
    Monitor(commands::misc::MonitorArgs),
    /// Prints the agent's statistics.
    Info(commands::misc::HttpOnlyArgs),
    /// Checks agent configuration files.
    Validate(commands::misc::ValidateArgs),
    /// Controls node and service maintenance mode.
    Maint(commands::misc::MaintArgs),
    /// Cluster operations (Raft peers).
    #[command(subcommand)]
    Operator(commands::operator::OperatorCommand),
    /// Joins the agent to a cluster through members at these addresses.
    Join(commands::operator::JoinArgs),
    /// Marks a failed member as left.
    #[command(name = "force-leave")]
    ForceLeave(commands::operator::ForceLeaveArgs),
    /// Prints a new gossip encryption key.
    Keygen,
    /// Lists, installs, changes and removes gossip encryption keys on every member.
    Keyring(commands::operator::KeyringArgs),
    /// Saves, restores and inspects snapshots of the cluster's state.
    #[command(subcommand)]
    Snapshot(commands::snapshot::SnapshotCommand),
    /// Exchanges a bearer token for an ACL token through an auth method.
    Login(commands::login::LoginArgs),
    /// Gives back a token made by login.
    Logout(commands::login::LogoutArgs),
    /// Runs a command while holding a lock in the KV store.
    Lock(commands::lock::LockArgs),
    /// Runs a command on the agents the filters pick (remote execution).
    Exec(commands::exec::ExecArgs),
    /// Captures the agent's state, metrics and log into an archive.
    Debug(commands::debug::DebugArgs),
}

/// Rewrites Go-style single-dash long flags (`-dev`, `-config-file=x`) to
/// clap's double-dash form; everything after a bare `--` is left alone.
fn rewrite_go_flags(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut passthrough = false;
    for (position, arg) in args.into_iter().enumerate() {
        if position == 0 || passthrough {
            out.push(arg);
            continue;
        }
        if arg == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        if arg == "-h" {
            out.push("--help".to_string());
            continue;
        }
        let bytes = arg.as_bytes();
        if bytes.len() > 2 && bytes[0] == b'-' && bytes[1].is_ascii_alphabetic() {
            out.push(format!("-{arg}"));
        } else {
            out.push(arg);
        }
    }
    out
}

fn main() -> ExitCode {
    let args = rewrite_go_flags(std::env::args());
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Agent(args) => agent_cmd::run(*args).await,
            Command::Version => {
                commands::misc::version();
                0
            }
            Command::Members(args) => commands::misc::members(args).await,
            Command::Event(args) => commands::event::event(args).await,
            Command::Watch(args) => commands::event::watch(args).await,
            Command::Rtt(args) => commands::rtt::rtt(args).await,
            Command::Catalog(cmd) => commands::catalog::run(cmd).await,
            Command::Services(cmd) => commands::services::run(cmd).await,
            Command::Kv(cmd) => commands::kv::run(cmd).await,
            Command::Config(cmd) => commands::config::run(cmd).await,
            Command::Connect(cmd) => commands::connect::run(cmd).await,
            Command::Intention(cmd) => commands::intention::run(cmd).await,
            Command::Acl(cmd) => commands::acl::run(cmd).await,
            Command::Tls(cmd) => commands::tls::run(cmd),
            Command::Leave(args) => commands::misc::leave(args).await,
            Command::Reload(args) => commands::misc::reload(args).await,
            Command::Monitor(args) => commands::misc::monitor(args).await,
            Command::Info(args) => commands::misc::info(args).await,
            Command::Validate(args) => commands::misc::validate(args),
            Command::Maint(args) => commands::misc::maint(args).await,
            Command::Operator(cmd) => commands::operator::run(cmd).await,
            Command::Join(args) => commands::operator::join(args).await,
            Command::ForceLeave(args) => commands::operator::force_leave(args).await,
            Command::Keygen => commands::operator::keygen(),
            Command::Keyring(args) => commands::operator::keyring(args).await,
            Command::Snapshot(cmd) => commands::snapshot::run(cmd).await,
            Command::Lock(args) => commands::lock::run(args).await,
            Command::Login(args) => commands::login::login(args).await,
            Command::Logout(args) => commands::login::logout(args).await,
            Command::Exec(args) => commands::exec::run(args).await,
            Command::Debug(args) => commands::debug::run(args).await,
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_flags_become_long_flags() {
        let args = [
            "legate",
            "agent",
            "-dev",
            "-config-file=x.hcl",
            "-node",
            "n1",
            "--",
            "-l",
            "debug",
        ]
        .map(String::from);
        assert_eq!(
            rewrite_go_flags(args),
            vec![
                "legate",
                "agent",
                "--dev",
                "--config-file=x.hcl",
                "--node",
                "n1",
                "--",
                "-l",
                "debug"
            ]
        );
        assert_eq!(
            rewrite_go_flags(["legate", "-h", "-1"].map(String::from)),
            vec!["legate", "--help", "-1"]
        );
    }
}
