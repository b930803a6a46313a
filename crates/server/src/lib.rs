//! legate-server
