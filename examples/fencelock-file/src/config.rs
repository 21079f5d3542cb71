//! `lockdir:///absolute/path`: the file backend as a [`BackendConfig`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::tools::BenchKit;
use fencelock_core::{BackendConfig, Connected, Error, HostPort, Result, Scheme};

use crate::baseline::{FileBaseline, FileCleanup};
use crate::{FileLockBackend, FileStorage};

/// The URL scheme, without `://`.
const SCHEME: &str = "lockdir";

/// What every refusal says a URL looks like.
const GRAMMAR: &str = "a lockdir URL is lockdir:///absolute/path (three slashes, no host)";

/// The scheme this crate owns, `lockdir://`, to register in a
/// [`Schemes`](fencelock_core::Schemes) registry or pass to `fencelock_cli::main_with`.
pub const SCHEMES: &[Scheme] = &[Scheme::new(
    SCHEME,
    "a directory on this host (locks shared by the processes of one host only)",
    |url| Ok(Box::new(FileConfig::from_url(url)?)),
)];

/// `lockdir:///absolute/path`: locks and fenced values in a directory of this host.
///
/// The path is percent-decoded (`%20` for a space; `%3F` and `%23` for `?` and `#`, which a
/// URL would otherwise read as options); it must be absolute, UTF-8 and free of NUL. The URL
/// takes no host, options or fragment. [`connect`](BackendConfig::connect) creates the
/// directory when missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileConfig {
    dir: PathBuf,
}

impl FileConfig {
    /// A config for the directory `dir`, which must be absolute, UTF-8 and free of NUL.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        let Some(text) = dir.to_str() else {
            return Err(Error::config("the lockdir path is not UTF-8"));
        };
        if text.contains('\0') {
            return Err(Error::config("the lockdir path contains a NUL byte"));
        }
        if !dir.is_absolute() {
            return Err(Error::config(format!(
                "the lockdir path {text:?} is relative: {GRAMMAR}"
            )));
        }
        Ok(FileConfig { dir })
    }

    /// Parses `lockdir:///absolute/path` (the scheme in any case).
    pub fn from_url(url: &str) -> Result<Self> {
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(SCHEME) => rest,
            _ => return Err(Error::config(GRAMMAR)),
        };
        if rest.contains('?') {
            return Err(Error::config(format!(
                "lockdir:// takes no options (found a query after '?'): {GRAMMAR}"
            )));
        }
        if rest.contains('#') {
            return Err(Error::config(format!(
                "lockdir:// takes no fragment (found '#'): {GRAMMAR}"
            )));
        }
        if rest.is_empty() {
            return Err(Error::config(format!("no directory given: {GRAMMAR}")));
        }
        if !rest.starts_with('/') {
            // `lockdir://host/path` and `lockdir://relative/path` read the same; say both.
            return Err(Error::config(format!(
                "lockdir:// takes no host, and the path must be absolute: {GRAMMAR}"
            )));
        }
        let bytes = percent_decode(rest)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::config("the lockdir path is not UTF-8 once percent-decoded"))?;
        Self::new(text)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `%XX` escapes decoded to bytes; every other character as it is.
fn percent_decode(text: &str) -> Result<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let digits = bytes
                .get(i + 1..i + 3)
                .and_then(|d| std::str::from_utf8(d).ok());
            let byte = digits
                .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| {
                    Error::config("the lockdir path has a '%' not followed by two hex digits")
                })?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// `path` with every byte but the unreserved characters and `/` percent-encoded, so that
/// [`FileConfig::from_url`] reads it back unchanged.
fn percent_encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'/' | b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[async_trait]
impl BackendConfig for FileConfig {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn to_url(&self) -> String {
        // `new` refused a non-UTF-8 path, so nothing is lost here.
        format!("{SCHEME}://{}", percent_encode(&self.dir.to_string_lossy()))
    }

    fn redacted_url(&self) -> String {
        // No credentials in this scheme.
        self.to_url()
    }

    fn hosts(&self) -> Vec<HostPort> {
        Vec::new()
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        if hosts.is_empty() {
            Ok(Box::new(self.clone()))
        } else {
            Err(Error::config(
                "lockdir:// reaches no server to point elsewhere",
            ))
        }
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn connect(&self) -> Result<Connected> {
        Ok(Connected {
            backend: Arc::new(FileLockBackend::open(&self.dir).await?),
            storage: Arc::new(FileStorage::open(&self.dir).await?),
        })
    }

    /// The fenced lock against `open(O_CREAT | O_EXCL)` + `unlink` of a lock file in the same
    /// directory, a `stat` as the round trip and plain writes of a file; the cleanup removes
    /// a run's lock, state and value files.
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        let fenced = self.connect().await?;
        let baseline = FileBaseline::open(&self.dir).await?;
        let cleanup = FileCleanup::new(&self.dir)?;
        Ok(Some(
            BenchKit::new(SCHEME, fenced, Arc::new(baseline)).cleanup(Arc::new(cleanup)),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refusal(url: &str) -> String {
        match FileConfig::from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn urls_round_trip() {
        for (url, dir) in [
            ("lockdir:///tmp/locks", "/tmp/locks"),
            ("LOCKDIR:///tmp/locks/", "/tmp/locks/"),
            ("lockdir:///a%20b/%3Fq%23f/%25/%C3%BC", "/a b/?q#f/%/ü"),
            ("lockdir:///", "/"),
        ] {
            let config = FileConfig::from_url(url).unwrap();
            assert_eq!(config.dir(), Path::new(dir), "{url}");
            let again = FileConfig::from_url(&config.to_url()).unwrap();
            assert_eq!(again, config, "{url} -> {}", config.to_url());
            assert_eq!(config.redacted_url(), config.to_url());
        }
        let parsed = (SCHEMES[0].parse)("lockdir:///x").unwrap();
        assert!(parsed.is_shared());
        assert!(parsed.hosts().is_empty());
        assert_eq!(parsed.with_hosts(&[]).unwrap().to_url(), "lockdir:///x");
        assert!(parsed.with_hosts(&[HostPort::new("h", 1)]).is_err());
    }

    #[test]
    fn bad_urls_name_what_is_wrong() {
        for (url, says) in [
            ("lockdir://host/tmp/x", "no host"),
            ("lockdir://relative/dir", "absolute"),
            ("lockdir://", "no directory"),
            ("lockdir:///tmp/x?sync=0", "no options"),
            ("lockdir:///tmp/x#f", "no fragment"),
            ("lockdir:///tmp/%FF", "not UTF-8"),
            ("lockdir:///tmp/%00x", "NUL"),
            ("lockdir:///tmp/%4", "two hex digits"),
            ("lockdir:///tmp/%+1", "two hex digits"),
            ("memory://", "lockdir:///absolute/path"),
            ("lockdir:/tmp/x", "lockdir:///absolute/path"),
        ] {
            let message = refusal(url);
            assert!(message.contains(says), "{url}: {message}");
        }
        assert!(FileConfig::new("relative").is_err());
    }
}
