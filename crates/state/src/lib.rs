//! legate-state
