//! A fencelock backend written outside the product crates, on public APIs only: exclusive
//! locks with fencing tokens ([`FileLockBackend`]) and fenced storage ([`FileStorage`]) in a
//! directory of the local file system, reached through the URL `lockdir:///absolute/path`
//! ([`FileConfig`], [`SCHEMES`]). With its schemes registered, every tool works on it: the
//! conformance suite, and the command line's `run`, `bench` and `chaos` (the binary
//! `fencelock-file` is `fencelock_cli::main_with(SCHEMES)`).
//!
//! Honest and durable: per key, one state file holds the token counter and the holder; every
//! change is made under an exclusive advisory lock of the key's lock file and written aside,
//! flushed, renamed into place and followed by a flush of the directory before the call
//! returns, so a crash never loses or repeats a token. Leases expire on the host's wall clock,
//! so the locks are correct only between processes of **one host** (see
//! [`FileLockBackend`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fencelock_core::Result<()> {
//! use std::time::Duration;
//! use fencelock_core::{LockBackend, LockKey};
//! use fencelock_file::FileLockBackend;
//!
//! let dir = std::env::temp_dir().join(format!("lockdir-doc-{}", std::process::id()));
//! let backend = FileLockBackend::open(&dir).await?;
//! let key = LockKey::new("nightly-report")?;
//! let Some(lease) = backend.try_acquire(&key, Duration::from_secs(5)).await? else {
//!     unreachable!("a fresh directory has no holder");
//! };
//! assert!(backend.try_acquire(&key, Duration::from_secs(5)).await?.is_none(), "held");
//! assert!(backend.release(&lease).await?);
//! // Reopening the directory keeps the counter: the next token is greater.
//! let again = FileLockBackend::open(&dir).await?;
//! let Some(next) = again.try_acquire(&key, Duration::from_secs(5)).await? else {
//!     unreachable!("released just above");
//! };
//! assert!(next.token > lease.token);
//! # again.release(&next).await?;
//! # let _ = std::fs::remove_dir_all(&dir);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod backend;
mod baseline;
mod config;
mod layout;
mod state;
mod storage;

pub use backend::FileLockBackend;
pub use baseline::{FileBaseline, FileCleanup};
pub use config::{FileConfig, SCHEMES};
pub use storage::FileStorage;
