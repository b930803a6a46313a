//! Where configuration comes from: files and directories (HCL or JSON by
//! extension, or all in one format with `-config-format`, as Consul's
//! loader reads them: without it, files of another extension are skipped
//! with a warning), inline HCL (`-hcl`) and fragments the binary builds.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::ConfigError;

/// One source of configuration.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// A file (format by extension: `.hcl` or `.json`).
    File(PathBuf),
    /// A directory: every `.hcl` and `.json` file in it, in lexical order.
    Dir(PathBuf),
    /// An inline HCL fragment (`-hcl`).
    Hcl(String),
    /// An already-built JSON fragment (flags, dev defaults).
    Json(String, Value),
}

/// A config file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// HCL.
    Hcl,
    /// JSON.
    Json,
}

impl ConfigFormat {
    /// Reads `-config-format` (Consul's text when it is neither).
    pub fn parse(text: &str) -> Result<ConfigFormat, ConfigError> {
        match text {
            "hcl" => Ok(ConfigFormat::Hcl),
            "json" => Ok(ConfigFormat::Json),
            _ => Err(ConfigError(
                "-config-format must be either 'hcl' or 'json'".into(),
            )),
        }
    }

    /// The format a file's extension names.
    fn of(path: &Path) -> Option<ConfigFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("hcl") => Some(ConfigFormat::Hcl),
            Some("json") => Some(ConfigFormat::Json),
            _ => None,
        }
    }
}

/// Reads one file into JSON, by extension (HCL unless `.json`).
pub fn parse_file(path: &Path) -> Result<Value, ConfigError> {
    let format = ConfigFormat::of(path).unwrap_or(ConfigFormat::Hcl);
    parse_file_as(path, format)
}

fn parse_file_as(path: &Path, format: ConfigFormat) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("Error reading {}: {e}", path.display())))?;
    let name = path.display().to_string();
    match format {
        ConfigFormat::Json => serde_json::from_str(&text)
            .map_err(|e| ConfigError(format!("Error parsing {name}: {e}"))),
        ConfigFormat::Hcl => {
            legate_hcl::parse(&text).map_err(|e| ConfigError(format!("Error parsing {name}: {e}")))
        }
    }
}

/// The format `path` is read in: `forced`, else its extension's; `None`
/// (with Consul's warning) when it has neither.
fn format_for(
    path: &Path,
    forced: Option<ConfigFormat>,
    warnings: &mut Vec<String>,
) -> Option<ConfigFormat> {
    let format = forced.or_else(|| ConfigFormat::of(path));
    if format.is_none() {
        warnings.push(format!(
            "skipping file {}, extension must be .hcl or .json, or config format must be set",
            path.display()
        ));
    }
    format
}

/// Every fragment the sources hold, named, in order.
pub(crate) fn expand_sources(
    sources: &[ConfigSource],
    forced: Option<ConfigFormat>,
    warnings: &mut Vec<String>,
) -> Result<Vec<(String, Value)>, ConfigError> {
    let mut out = Vec::new();
    for source in sources {
        match source {
            ConfigSource::File(path) => {
                if !path.exists() {
                    // Named as the read error names it.
                    parse_file_as(path, ConfigFormat::Hcl)?;
                }
                if let Some(format) = format_for(path, forced, warnings) {
                    out.push((path.display().to_string(), parse_file_as(path, format)?));
                }
            }
            ConfigSource::Dir(dir) => {
                let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                    .map_err(|e| {
                        ConfigError(format!("Error reading config dir {}: {e}", dir.display()))
                    })?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .collect();
                files.sort();
                for path in files {
                    if let Some(format) = format_for(&path, forced, warnings) {
                        out.push((path.display().to_string(), parse_file_as(&path, format)?));
                    }
                }
            }
            ConfigSource::Hcl(text) => {
                let value = legate_hcl::parse(text)
                    .map_err(|e| ConfigError(format!("Error parsing -hcl {text:?}: {e}")))?;
                out.push(("-hcl".to_string(), value));
            }
            ConfigSource::Json(name, value) => out.push((name.clone(), value.clone())),
        }
    }
    Ok(out)
}
