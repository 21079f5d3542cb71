//! What `fencelock bench` measures the file backend against, and the sweep of a run's files.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock};
use fencelock_core::{Error, HOLDER_RESOURCE_PREFIX, LockKey, OwnerId, Result};

use crate::layout::{BACKEND, Layout, Space, blocking, hex, sweep};

/// The raw baseline: what a user writes on the same directory without fencelock. A try-lock
/// is `open(O_CREAT | O_EXCL)` of a lock file (taken when the file did not exist) and
/// `unlink` to release it; the round trip is one `stat` of the directory; the plain write
/// overwrites a file (no `fsync`: a user's plain write does not flush either, so the figures
/// show what the fenced lock's durability costs).
///
/// Each baseline works in a directory of its own under `raw/`, which
/// [`close`](Baseline::close) removes with everything in it.
#[derive(Debug)]
pub struct FileBaseline {
    layout: Arc<Layout>,
    /// `raw/<random id>/`: this baseline's files only.
    dir: PathBuf,
}

impl FileBaseline {
    /// A baseline in a fresh directory under `dir` (which it creates when missing).
    pub async fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let layout = Layout::new(dir.as_ref())?;
        let own = layout.space(Space::Raw).join(OwnerId::random().to_string());
        let (created, made) = (layout.clone(), own.clone());
        blocking(move || {
            created.create(&[Space::Raw])?;
            fs::create_dir(&made).map_err(|e| io_error("cannot create", &made, e))
        })
        .await?;
        Ok(FileBaseline {
            layout: Arc::new(layout),
            dir: own,
        })
    }

    /// The file of `key` with extension `ext`. Benchmark keys are short (well under 127
    /// bytes), so one flat name fits every file-system limit.
    fn file(&self, key: &LockKey, ext: &str) -> PathBuf {
        self.dir
            .join(format!("{}.{ext}", hex(key.as_str().as_bytes())))
    }
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Unavailable {
        backend: BACKEND,
        message: format!("{what} {}: {e}", path.display()),
        source: Some(Box::new(e)),
    }
}

#[async_trait]
impl RawTryLock for FileBaseline {
    const LABEL: &'static str = "raw open(O_EXCL) + unlink";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let path = self.file(key, "lock");
        blocking(move || {
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => drop(file),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(io_error("cannot create", &path, e)),
            }
            fs::remove_file(&path).map_err(|e| io_error("cannot remove", &path, e))?;
            Ok(true)
        })
        .await
    }
}

#[async_trait]
impl Baseline for FileBaseline {
    fn round_trip_label(&self) -> String {
        "raw stat".into()
    }

    fn write_label(&self) -> String {
        "raw write (no fsync)".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let dir = self.dir.clone();
        blocking(move || {
            std::hint::black_box(fs::metadata(&dir).map_err(|e| io_error("cannot stat", &dir, e))?);
            Ok(())
        })
        .await
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        Ok(Box::new(PlainWriter {
            path: Arc::new(self.file(resource, "value")),
        }))
    }

    async fn close(&self) -> Result<()> {
        let dir = self.dir.clone();
        blocking(move || match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(io_error("cannot remove", &dir, e)),
            _ => Ok(()),
        })
        .await?;
        // The shared `raw/` goes too when no other baseline is left in it.
        let _ = fs::remove_dir(self.layout.space(Space::Raw));
        Ok(())
    }
}

/// 64-byte overwrites of one file.
struct PlainWriter {
    path: Arc<PathBuf>,
}

#[async_trait]
impl Op for PlainWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let path = self.path.clone();
        blocking(move || {
            fs::write(&*path, [7u8; 64]).map_err(|e| io_error("cannot write", &path, e))
        })
        .await?;
        Ok(None)
    }
}

/// Removes the lock, state and value files of a finished benchmark run: every key and
/// resource starting with the run's prefix, and the holder records of those keys.
#[derive(Debug)]
pub struct FileCleanup {
    layout: Layout,
}

impl FileCleanup {
    /// The cleanup of the directory `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self> {
        Ok(FileCleanup {
            layout: Layout::new(dir.as_ref())?,
        })
    }
}

#[async_trait]
impl Cleanup for FileCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        // Hex encoding is byte by byte, so a key starts with the prefix exactly when its
        // file name starts with the prefix's hex digits.
        let prefixes = vec![
            hex(key_prefix.as_bytes()),
            hex(format!("{HOLDER_RESOURCE_PREFIX}{key_prefix}").as_bytes()),
        ];
        let spaces = [Space::Locks, Space::Data].map(|space| self.layout.space(space));
        blocking(move || {
            for dir in &spaces {
                sweep(dir, "", &prefixes).map_err(|e| io_error("cannot clean", dir, e))?;
            }
            Ok(())
        })
        .await
    }
}
