//! Where each key's files live in the directory, and the file operations every
//! read-modify-write is made of.
//!
//! The directory holds one sub-directory per space (`locks/` for the lock backend, `data/` for
//! the fenced storage, `raw/` for the benchmark baseline). A key is named by the hex digits of
//! its bytes, so any key (quotes, slashes, Unicode) is a safe file name and two keys never
//! share one. Per key there are three files: `<hex>.lock`, only ever locked (flock), never
//! written; `<hex>.state`, replaced whole under that lock; `<hex>.tmp`, the next state being
//! written.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

use fencelock_core::{Error, LockKey, Result};

/// The backend's name in errors and logs: the URL scheme.
pub(crate) const BACKEND: &str = "lockdir";

/// Hex digits per path component (64 bytes of the key). A 512-byte key has 1024 digits, far
/// beyond the 255-byte file-name limit of common file systems, so long keys are split into
/// nested directories of 128 digits each; `<128 digits>.state` still fits every limit.
const SEGMENT: usize = 128;

/// One space of the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// The lock backend's state files.
    Locks,
    /// The fenced storage's values.
    Data,
    /// The raw benchmark baseline's files.
    Raw,
}

impl Space {
    fn dir_name(self) -> &'static str {
        match self {
            Space::Locks => "locks",
            Space::Data => "data",
            Space::Raw => "raw",
        }
    }
}

/// The root directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: PathBuf,
}

/// The files of one key in one space.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The space's directory: when it is missing, the whole directory is gone.
    base: PathBuf,
    /// The nested directories of a long key, outermost first.
    segments: Vec<String>,
    /// The last (or only) run of hex digits, the files' name before the extension.
    stem: String,
}

/// The hex digits of `bytes`, lower case.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

impl Layout {
    /// The layout under `root` (made absolute, so that a later change of the working
    /// directory does not move it).
    pub(crate) fn new(root: &Path) -> Result<Self> {
        let root = std::path::absolute(root).map_err(|e| Error::InvalidConfig {
            message: format!("cannot make {} absolute", root.display()),
            source: Some(Box::new(e)),
        })?;
        Ok(Layout { root })
    }

    /// The root directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of `space`.
    pub(crate) fn space(&self, space: Space) -> PathBuf {
        self.root.join(space.dir_name())
    }

    /// Creates the root (and its parents) and the directories of `spaces`, durably. The only
    /// place anything above a space directory is created: operations never re-create a
    /// directory that was removed, so a removed directory is an outage, not a silent reset of
    /// every token counter.
    pub(crate) fn create(&self, spaces: &[Space]) -> Result<()> {
        let fail = |what: &str, path: &Path, e: io::Error| unavailable(what, path, e);
        fs::create_dir_all(&self.root).map_err(|e| fail("cannot create", &self.root, e))?;
        for space in spaces {
            let dir = self.space(*space);
            match fs::create_dir(&dir) {
                Ok(()) => sync_dir(&self.root).map_err(|e| fail("cannot sync", &self.root, e))?,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(fail("cannot create", &dir, e)),
            }
        }
        Ok(())
    }

    /// The files of `key` in `space`.
    pub(crate) fn entry(&self, space: Space, key: &LockKey) -> Entry {
        let digits = hex(key.as_str().as_bytes());
        // Keys are ASCII hex now, so byte offsets are character boundaries.
        let mut chunks: Vec<String> = digits
            .as_bytes()
            .chunks(SEGMENT)
            .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
            .collect();
        let stem = chunks.pop().unwrap_or_default();
        Entry {
            base: self.space(space),
            segments: chunks,
            stem,
        }
    }

    /// The error of a failed file operation: the directory is gone (renamed, removed,
    /// unmounted) when the space directory no longer exists, else the operation's own error.
    /// Both are [`Error::Unavailable`]: the directory is this backend's server.
    pub(crate) fn io_error(&self, entry: &Entry, what: &str, path: &Path, e: io::Error) -> Error {
        if !entry.base.is_dir() {
            return Error::Unavailable {
                backend: BACKEND,
                message: format!(
                    "the lock directory {} (or its {}) is gone",
                    self.root.display(),
                    entry.base.display()
                ),
                source: Some(Box::new(e)),
            };
        }
        unavailable(what, path, e)
    }
    /// One read-modify-write of `entry`'s state file under the key's exclusive lock:
    /// `change` gets the current file (`None` when there is none yet) and returns the file to
    /// write instead (`None` to leave it) and the call's result. The new file is on disk
    /// before this returns, so nothing the caller hands out can be lost or repeated by a
    /// crash.
    pub(crate) fn update<T>(
        &self,
        entry: &Entry,
        change: impl FnOnce(Option<&[u8]>) -> Result<(Option<Vec<u8>>, T)>,
    ) -> Result<T> {
        let dir = entry.dir();
        entry
            .ensure_dirs()
            .map_err(|e| self.io_error(entry, "cannot create", &dir, e))?;
        let lock_path = entry.file("lock");
        let _lock = lock_exclusive(&lock_path)
            .map_err(|e| self.io_error(entry, "cannot lock", &lock_path, e))?;
        let state_path = entry.file("state");
        let current = read_optional(&state_path)
            .map_err(|e| self.io_error(entry, "cannot read", &state_path, e))?;
        let (next, out) = change(current.as_deref())?;
        if let Some(bytes) = next {
            replace_durably(&dir, &entry.file("tmp"), &state_path, &bytes)
                .map_err(|e| self.io_error(entry, "cannot write", &state_path, e))?;
        }
        Ok(out)
    }

    /// `entry`'s state file without taking the lock (`None` when there is none): a state
    /// file is only ever replaced by a rename, so a plain read sees one whole version.
    pub(crate) fn read(&self, entry: &Entry) -> Result<Option<Vec<u8>>> {
        let path = entry.file("state");
        match read_optional(&path) {
            Ok(None) if !entry.base.is_dir() => {
                Err(self.io_error(entry, "cannot read", &path, ErrorKind::NotFound.into()))
            }
            Ok(found) => Ok(found),
            Err(e) => Err(self.io_error(entry, "cannot read", &path, e)),
        }
    }
}

fn unavailable(what: &str, path: &Path, e: io::Error) -> Error {
    Error::Unavailable {
        backend: BACKEND,
        message: format!("{what} {}: {e}", path.display()),
        source: Some(Box::new(e)),
    }
}

impl Entry {
    /// The directory holding the key's files.
    pub(crate) fn dir(&self) -> PathBuf {
        let mut dir = self.base.clone();
        dir.extend(&self.segments);
        dir
    }

    /// The key's file with extension `ext` (`lock`, `state`, `tmp`).
    pub(crate) fn file(&self, ext: &str) -> PathBuf {
        self.dir().join(format!("{}.{ext}", self.stem))
    }

    /// Creates the nested directories of a long key, durably. The space directory itself is
    /// never created here (see [`Layout::create`]).
    pub(crate) fn ensure_dirs(&self) -> io::Result<()> {
        let mut dir = self.base.clone();
        for segment in &self.segments {
            let parent = dir.clone();
            dir.push(segment);
            match fs::create_dir(&dir) {
                // A state file in a directory whose own entry was lost in a crash is lost
                // with it: the new directory's entry is made durable first.
                Ok(()) => sync_dir(&parent)?,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Opens (creating) the lock file at `path` and takes its exclusive advisory lock, waiting
/// for it. The lock is released when the returned file is dropped (or the process dies).
pub(crate) fn lock_exclusive(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.lock()?;
    Ok(file)
}

/// The whole file at `path`, `None` when there is none.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `target` by `bytes` so that a crash at any point leaves either the old or the new
/// file, whole: write `tmp`, flush it to disk, rename it over `target`, then flush the
/// directory so the rename itself is on disk before the caller acts on the new state (hands
/// out the token it records, say).
pub(crate) fn replace_durably(
    dir: &Path,
    tmp: &Path,
    target: &Path,
    bytes: &[u8],
) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    drop(file);
    fs::rename(tmp, target)?;
    sync_dir(dir)
}

/// Flushes the entries of directory `dir` to disk.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Runs blocking file I/O on tokio's blocking pool, off the async workers.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Backend {
            backend: BACKEND,
            message: format!("a file system task failed: {e}"),
            source: Some(Box::new(e)),
        })?
}

/// Removes, under the space directory `dir`, the files of every key whose hex digits start
/// with one of `prefixes`, and the nested directories of such keys once empty. `digits` is
/// the hex of the directories walked so far.
pub(crate) fn sweep(dir: &Path, digits: &str, prefixes: &[String]) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        // Every name this crate writes is ASCII; anything else is someone else's file.
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            let full = format!("{digits}{name}");
            let inside = |p: &String| full.starts_with(p.as_str());
            if prefixes.iter().any(|p| inside(p) || p.starts_with(&full)) {
                sweep(&path, &full, prefixes)?;
                if prefixes.iter().any(inside) {
                    // Only succeeds when empty: a longer key of another run may live below.
                    let _ = fs::remove_dir(&path);
                }
            }
        } else {
            let stem = name.split_once('.').map_or(name.as_str(), |(stem, _)| stem);
            let full = format!("{digits}{stem}");
            if prefixes.iter().any(|p| full.starts_with(p.as_str())) {
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_become_hex_names_split_into_short_components() {
        let layout = Layout::new(Path::new("/d")).unwrap();
        let short = layout.entry(Space::Locks, &LockKey::new("a/b").unwrap());
        assert_eq!(short.file("state"), Path::new("/d/locks/612f62.state"));
        let long = LockKey::new("x".repeat(LockKey::MAX_LEN)).unwrap();
        let entry = layout.entry(Space::Data, &long);
        assert_eq!(entry.segments.len(), 7);
        assert!(entry.segments.iter().all(|s| s.len() == SEGMENT));
        assert_eq!(entry.stem.len(), SEGMENT);
        let exact = layout.entry(Space::Data, &LockKey::new("y".repeat(64)).unwrap());
        assert!(exact.segments.is_empty(), "64 bytes fit one name");
    }
}
