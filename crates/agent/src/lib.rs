//! legate-agent
