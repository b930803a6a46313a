//! legate-cli
