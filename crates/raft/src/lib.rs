//! legate-raft
