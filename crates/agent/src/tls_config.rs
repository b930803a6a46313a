//! The `tls {}` block: one set of files and switches per listener — the
//! server port (`tls.internal_rpc`), HTTPS (`tls.https`) and gRPC over TLS
//! (`tls.grpc`) — each falling back to `tls.defaults` and then to the
//! older top-level keys, as Consul's do. The top-level `verify_incoming`
//! does not reach the gRPC port (Consul kept that for Envoy's sake, #13088);
//! `verify_incoming_https` and `verify_incoming_rpc` reach their own.

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::config::{get_bool, get_str, ConfigError};

/// Which listener a set of files is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The server port (`tls.internal_rpc`).
    InternalRpc,
    /// The HTTPS port (`tls.https`).
    Https,
    /// The gRPC TLS port (`tls.grpc`).
    Grpc,
}

impl Listener {
    fn section(self) -> &'static str {
        match self {
            Listener::InternalRpc => "internal_rpc",
            Listener::Https => "https",
            Listener::Grpc => "grpc",
        }
    }

    /// The older top-level keys that set `verify_incoming` here, first wins.
    fn legacy_verify_incoming(self) -> &'static [&'static str] {
        match self {
            Listener::InternalRpc => &["verify_incoming_rpc", "verify_incoming"],
            Listener::Https => &["verify_incoming_https", "verify_incoming"],
            Listener::Grpc => &[],
        }
    }
}

/// TLS files and switches for one listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificate(s) to trust.
    pub ca_file: Option<PathBuf>,
    /// A folder of CA certificates (`*.pem`, `*.crt`) to trust when no
    /// `ca_file` is given.
    pub ca_path: Option<PathBuf>,
    /// This agent's certificate.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// Require client certificates signed by the CA (and, on the server
    /// port, TLS itself).
    pub verify_incoming: bool,
    /// Dial servers over TLS and check their certificates (server port).
    pub verify_outgoing: bool,
}

impl TlsFiles {
    /// Whether a CA is configured (`ca_file` or `ca_path`).
    pub fn has_ca(&self) -> bool {
        self.ca_file.is_some() || self.ca_path.is_some()
    }

    /// This side's certificate and key as PEM text, when both files are
    /// named; an unreadable file is an error naming it.
    pub fn identity_pem(&self) -> Result<Option<(String, String)>, String> {
        let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) else {
            return Ok(None);
        };
        let read = |key: &str, path: &std::path::Path| {
            std::fs::read_to_string(path)
                .map_err(|e| format!("Error loading TLS: {key} {}: {e}", path.display()))
        };
        Ok(Some((read("cert_file", cert)?, read("key_file", key)?)))
    }

    /// The PEM text of the CA certificates to trust: `ca_file`, else every
    /// `*.pem` and `*.crt` file in `ca_path` (as Consul's tlsutil); `None`
    /// when neither is set. An unreadable file is an error naming it.
    pub fn ca_pem(&self) -> Result<Option<String>, String> {
        let read = |key: &str, path: &std::path::Path| {
            std::fs::read_to_string(path)
                .map_err(|e| format!("Error loading TLS: {key} {}: {e}", path.display()))
        };
        if let Some(file) = &self.ca_file {
            return read("ca_file", file).map(Some);
        }
        let Some(dir) = &self.ca_path else {
            return Ok(None);
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("Error loading TLS: ca_path {}: {e}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pem" || x == "crt"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(format!(
                "Error loading TLS: ca_path {} holds no .pem or .crt file",
                dir.display()
            ));
        }
        let mut pem = String::new();
        for file in files {
            pem.push_str(&read("ca_path", &file)?);
            pem.push('\n');
        }
        Ok(Some(pem))
    }

    /// Whether this listener has a certificate to serve TLS with.
    pub fn serves_tls(&self) -> bool {
        self.cert_file.is_some()
    }
}

/// `tls.<listener>.<key>`, else `tls.defaults.<key>`, else (for the keys
/// that had one) the older top-level key.
pub(crate) fn parse(map: &Map<String, Value>, listener: Listener) -> Result<TlsFiles, ConfigError> {
    if let Some(Value::Object(tls)) = map.get("tls") {
        for (section, value) in tls {
            if !["defaults", "internal_rpc", "https", "grpc"].contains(&section.as_str()) {
                return Err(ConfigError(format!("invalid config key tls.{section}")));
            }
            if !value.is_object() {
                return Err(ConfigError(format!("tls.{section} must be a block")));
            }
        }
    }
    let section = listener.section();
    let text = |key: &str| -> Result<Option<String>, ConfigError> {
        for path in [
            &["tls", section, key][..],
            &["tls", "defaults", key],
            &[key],
        ] {
            if let Some(v) = get_str(map, path)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    };
    let flag = |key: &str, legacy: &[&str]| -> Result<bool, ConfigError> {
        for path in [&["tls", section, key][..], &["tls", "defaults", key]] {
            if let Some(v) = get_bool(map, path)? {
                return Ok(v);
            }
        }
        for old in legacy {
            if let Some(v) = get_bool(map, &[old])? {
                return Ok(v);
            }
        }
        Ok(false)
    };
    let files = TlsFiles {
        ca_file: text("ca_file")?.map(PathBuf::from),
        ca_path: text("ca_path")?.map(PathBuf::from),
        cert_file: text("cert_file")?.map(PathBuf::from),
        key_file: text("key_file")?.map(PathBuf::from),
        verify_incoming: flag("verify_incoming", listener.legacy_verify_incoming())?,
        // Legate always checks the server name when it dials over TLS, so
        // asking for the check asks for TLS.
        verify_outgoing: listener == Listener::InternalRpc
            && (flag("verify_outgoing", &["verify_outgoing"])?
                || flag("verify_server_hostname", &["verify_server_hostname"])?),
    };
    if files.cert_file.is_some() != files.key_file.is_some() {
        return Err(ConfigError(format!(
            "tls.{section}: cert_file and key_file must be set together"
        )));
    }
    if (files.verify_incoming || files.verify_outgoing) && !files.has_ca() {
        return Err(ConfigError(format!(
            "tls.{section}: verify_incoming and verify_outgoing need ca_file or ca_path"
        )));
    }
    Ok(files)
}
