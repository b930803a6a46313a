//! The HTTP API on a unix socket: `addresses { http = "unix:///path" }`,
//! and `unix_sockets { user, group, mode }` for the socket file's owner,
//! group and permissions (user and group by name or number, the mode in
//! octal), as Consul reads them.

use std::ffi::CString;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::config::{get, get_str, ConfigError};

/// The scheme that marks a unix socket address.
const UNIX: &str = "unix://";

/// A unix socket to serve on, and what its file should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixSocket {
    /// The socket file.
    pub path: PathBuf,
    /// Its owner (a user id).
    pub user: Option<u32>,
    /// Its group (a group id).
    pub group: Option<u32>,
    /// Its permission bits.
    pub mode: Option<u32>,
}

/// Whether an address names a unix socket.
pub fn is_unix(address: &str) -> bool {
    address.starts_with(UNIX)
}

fn user_id(name: &str) -> Result<u32, ConfigError> {
    if let Ok(id) = name.parse() {
        return Ok(id);
    }
    let c = CString::new(name).map_err(|_| ConfigError(format!("unix_sockets.user: {name:?}")))?;
    // SAFETY: getpwnam reads a NUL-terminated name; the record it returns
    // is read at once, before any other call could reuse it.
    let entry = unsafe { libc::getpwnam(c.as_ptr()) };
    if entry.is_null() {
        return Err(ConfigError(format!("unix_sockets.user: no user {name:?}")));
    }
    // SAFETY: a non-null record from getpwnam.
    Ok(unsafe { (*entry).pw_uid })
}

fn group_id(name: &str) -> Result<u32, ConfigError> {
    if let Ok(id) = name.parse() {
        return Ok(id);
    }
    let c = CString::new(name).map_err(|_| ConfigError(format!("unix_sockets.group: {name:?}")))?;
    // SAFETY: as in `user_id`, for getgrnam.
    let entry = unsafe { libc::getgrnam(c.as_ptr()) };
    if entry.is_null() {
        return Err(ConfigError(format!(
            "unix_sockets.group: no group {name:?}"
        )));
    }
    // SAFETY: a non-null record from getgrnam.
    Ok(unsafe { (*entry).gr_gid })
}

/// Reads `addresses.http` when it is a unix socket, with `unix_sockets`.
pub fn parse_http(map: &Map<String, Value>) -> Result<Option<UnixSocket>, ConfigError> {
    let Some(address) = get_str(map, &["addresses", "http"])? else {
        return Ok(None);
    };
    let Some(path) = address.strip_prefix(UNIX) else {
        return Ok(None);
    };
    if path.is_empty() {
        return Err(ConfigError(
            "addresses.http: a unix socket needs a path".into(),
        ));
    }
    let text = |key: &str| get_str(map, &["unix_sockets", key]);
    if let Some(Value::Object(block)) = get(map, &["unix_sockets"]) {
        if let Some(key) = block
            .keys()
            .find(|k| !["user", "group", "mode"].contains(&k.as_str()))
        {
            return Err(ConfigError(format!(
                "invalid config key unix_sockets.{key}"
            )));
        }
    }
    let mode = match text("mode")? {
        None => None,
        Some(mode) => Some(
            u32::from_str_radix(&mode, 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| {
                    ConfigError(format!("unix_sockets.mode: {mode:?} is not an octal mode"))
                })?,
        ),
    };
    Ok(Some(UnixSocket {
        path: PathBuf::from(path),
        user: text("user")?.as_deref().map(user_id).transpose()?,
        group: text("group")?.as_deref().map(group_id).transpose()?,
        mode,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_and_their_owners_load_by_number_or_name() {
        let parse = |v: serde_json::Value| parse_http(v.as_object().unwrap());
        assert_eq!(
            parse(serde_json::json!({"addresses": {"http": "127.0.0.1"}})).unwrap(),
            None
        );
        let socket = parse(serde_json::json!({
            "addresses": {"http": "unix:///tmp/legate.sock"},
            "unix_sockets": {"user": "root", "group": "0", "mode": "0660"},
        }))
        .unwrap()
        .unwrap();
        assert_eq!(socket.path, PathBuf::from("/tmp/legate.sock"));
        assert_eq!(
            (socket.user, socket.group, socket.mode),
            (Some(0), Some(0), Some(0o660))
        );
        for bad in [
            serde_json::json!({"addresses": {"http": "unix://"}}),
            serde_json::json!({"addresses": {"http": "unix:///s"}, "unix_sockets": {"mode": "rw"}}),
            serde_json::json!({"addresses": {"http": "unix:///s"}, "unix_sockets": {"user": "no-such-user-here"}}),
            serde_json::json!({"addresses": {"http": "unix:///s"}, "unix_sockets": {"owner": "x"}}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
    }
}
