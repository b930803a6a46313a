//! The agent's log file (`log_file`), rotated as Consul's
//! `logging.LogFile` rotates: the current file keeps its name; when it
//! reaches `log_rotate_bytes` or `log_rotate_duration` it is renamed to
//! `<stem>-<creation time in Unix nanoseconds><ext>`, old files beyond
//! `log_rotate_max_files` are removed (oldest first; -1 keeps none), and a
//! new current file is opened.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use legate_agent::log_file_config::LogFileConfig;

struct Current {
    file: File,
    bytes: u64,
    opened: Instant,
    created_unix_nanos: u128,
}

/// The rotating file; clones share it.
#[derive(Clone)]
pub struct RotatingFile {
    config: Arc<LogFileConfig>,
    current: Arc<Mutex<Current>>,
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

impl RotatingFile {
    /// Opens (appending to) the current file, creating its folder.
    pub fn open(config: LogFileConfig) -> std::io::Result<RotatingFile> {
        std::fs::create_dir_all(&config.dir)?;
        let current = Self::open_current(&config)?;
        Ok(RotatingFile {
            config: Arc::new(config),
            current: Arc::new(Mutex::new(current)),
        })
    }

    fn current_path(config: &LogFileConfig) -> PathBuf {
        config.dir.join(&config.file_name)
    }

    fn open_current(config: &LogFileConfig) -> std::io::Result<Current> {
        let path = Self::current_path(config);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Current {
            file,
            bytes,
            opened: Instant::now(),
            created_unix_nanos: unix_nanos(),
        })
    }

    /// `<stem>` and `<ext>` of the file name (`.log` when it has none).
    fn stem_and_ext(&self) -> (String, String) {
        let name = &self.config.file_name;
        match name.rfind('.') {
            Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
            _ => (name.clone(), ".log".to_string()),
        }
    }

    fn rotate(&self, current: &mut Current) -> std::io::Result<()> {
        let (stem, ext) = self.stem_and_ext();
        let _ = current.file.flush();
        let rotated = self
            .config
            .dir
            .join(format!("{stem}-{}{ext}", current.created_unix_nanos));
        std::fs::rename(Self::current_path(&self.config), rotated)?;
        self.prune(&stem, &ext);
        *current = Self::open_current(&self.config)?;
        Ok(())
    }

    /// Removes old files beyond `max_files` (their names sort by age).
    fn prune(&self, stem: &str, ext: &str) {
        if self.config.max_files == 0 {
            return;
        }
        let prefix = format!("{stem}-");
        let mut old: Vec<PathBuf> = std::fs::read_dir(&self.config.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.strip_prefix(&prefix)
                        .and_then(|rest| rest.strip_suffix(ext))
                        .is_some_and(|stamp| {
                            !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_digit())
                        })
                })
            })
            .collect();
        old.sort();
        let keep = self.config.max_files.max(0) as usize;
        let excess = old.len().saturating_sub(keep);
        for path in old.into_iter().take(excess) {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let by_size = self.config.rotate_bytes > 0 && current.bytes >= self.config.rotate_bytes;
        let by_age = current.opened.elapsed() >= self.config.rotate_duration;
        if by_size || by_age {
            // A failed rotation keeps writing to the current file.
            let _ = self.rotate(&mut current);
        }
        let written = current.file.write(buf)?;
        current.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .file
            .flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RotatingFile {
    type Writer = RotatingFile;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_by_size_and_old_ones_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = RotatingFile::open(LogFileConfig {
            dir: dir.path().to_path_buf(),
            file_name: "consul.log".into(),
            rotate_bytes: 10,
            rotate_duration: std::time::Duration::from_secs(3600),
            max_files: 2,
        })
        .unwrap();
        for i in 0..6 {
            file.write_all(format!("line {i} of the log\n").as_bytes())
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names.len(),
            3,
            "the current file and two old ones: {names:?}"
        );
        assert!(names.contains(&"consul.log".to_string()));
        assert!(names
            .iter()
            .filter(|n| *n != "consul.log")
            .all(|n| n.starts_with("consul-") && n.ends_with(".log")));
        let current = std::fs::read_to_string(dir.path().join("consul.log")).unwrap();
        assert_eq!(current, "line 5 of the log\n");
    }
}
