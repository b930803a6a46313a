//! The HTTP-client commands.

pub mod acl;
pub mod acl_auth;
pub mod acl_role;
pub mod acl_templated;
pub mod catalog;
pub mod config;
pub mod connect;
pub mod debug;
pub mod event;
pub mod exec;
pub mod gateway;
pub mod grpc_certs;
pub mod intention;
pub mod kv;
pub mod lock;
pub mod login;
pub mod misc;
pub mod operator;
pub mod rtt;
pub mod semaphore;
pub mod services;
pub mod snapshot;
pub mod tls;

/// Prints rows as left-aligned columns separated by two spaces, like
/// Consul's `columnize` output.
pub fn print_columns(rows: &[Vec<String>]) {
    let Some(width) = rows.iter().map(|r| r.len()).max() else {
        return;
    };
    let mut widths = vec![0; width];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", line.trim_end());
    }
}

/// Prints an error the way Consul's CLI does and returns exit code 1.
pub fn fail(message: impl std::fmt::Display) -> u8 {
    eprintln!("{message}");
    1
}
