//! `legate connect ca get-config|set-config`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::fail;
use crate::client::{Client, HttpFlags};

/// Connect subcommands.
#[derive(Subcommand, Debug)]
pub enum ConnectCommand {
    /// Reads and changes the Connect CA configuration.
    #[command(subcommand)]
    Ca(CaCommand),
}

/// `connect ca` subcommands.
#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Prints the CA configuration as JSON.
    GetConfig(GetConfigArgs),
    /// Replaces the CA configuration from a JSON file; a new key or root
    /// certificate rotates the root.
    SetConfig(SetConfigArgs),
}

/// Flags of `connect ca get-config`.
#[derive(Args, Debug)]
pub struct GetConfigArgs {
    #[command(flatten)]
    http: HttpFlags,
}

/// Flags of `connect ca set-config`.
#[derive(Args, Debug)]
pub struct SetConfigArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The JSON file with `Provider`, `Config` and optionally `ForceWithoutCrossSigning`.
    #[arg(long = "config-file")]
    config_file: Option<PathBuf>,
    /// Rotate even when the old root cannot cross-sign the new one.
    #[arg(long = "force-without-cross-signing")]
    force_without_cross_signing: bool,
}

/// Runs a connect subcommand.
pub async fn run(cmd: ConnectCommand) -> u8 {
    match cmd {
        ConnectCommand::Ca(CaCommand::GetConfig(args)) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Value>("/v1/connect/ca/configuration", &[])
                .await
            {
                Ok(config) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&config).unwrap_or_default()
                    );
                    0
                }
                Err(e) => fail(format!("Error request CA configuration: {e}")),
            }
        }
        ConnectCommand::Ca(CaCommand::SetConfig(args)) => {
            let Some(path) = args.config_file else {
                return fail("The -config-file flag is required");
            };
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => return fail(format!("Error reading config file: {e}")),
            };
            let mut config: Value = match serde_json::from_str(&text) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => return fail("Error parsing config file: expected a JSON object"),
                Err(e) => return fail(format!("Error parsing config file: {e}")),
            };
            if args.force_without_cross_signing {
                config["ForceWithoutCrossSigning"] = Value::Bool(true);
            }
            let client = Client::new(&args.http);
            let body = serde_json::to_vec(&config).unwrap_or_default();
            match client
                .ok(Method::PUT, "/v1/connect/ca/configuration", &[], Some(body))
                .await
            {
                Ok(_) => {
                    println!("Configuration updated!");
                    0
                }
                Err(e) => fail(format!("Error setting CA configuration: {e}")),
            }
        }
    }
}
