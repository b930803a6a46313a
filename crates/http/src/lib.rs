//! legate-http
