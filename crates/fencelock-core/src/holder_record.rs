//! Holder metadata: who holds a lock (host, process, purpose), recorded in the fenced storage
//! beside the lock and shown by `inspect`.
//!
//! The record is a fenced write of the grant's own fence to a resource of its own
//! ([`holder_resource`]), so it needs nothing from a backend beyond its
//! [`FencedStorage`]: every backend with a storage has it. It is informational only and safe
//! by the same rule as data: a holder whose lock was superseded, and whose successor recorded
//! itself, is refused ([`Error::Stale`]) and cannot overwrite the newer record; and a reader
//! shows a record only when its fence is the current holder's ([`read_holder`]), so a record
//! left by an earlier holder is never shown as the current one.

use std::fmt;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::key::LockKey;
use crate::storage::FencedStorage;

/// The resource name prefix of holder records. Resource names starting with it are
/// fencelock's; applications should not use them for their own data.
pub const HOLDER_RESOURCE_PREFIX: &str = "fencelock:holder:";

/// The longest host name recorded, in bytes.
pub const MAX_HOST_LEN: usize = 255;

/// The longest purpose recorded, in bytes.
pub const MAX_PURPOSE_LEN: usize = 256;

/// The first line of a record: its format and version.
const FORMAT: &str = "fencelock-holder/1";

/// A small description of a lock's holder: the host and process it runs in, and what it holds
/// the lock for. None of it may contain a control character (so records stay one line per
/// field and print safely).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    host: String,
    pid: u32,
    purpose: String,
}

impl HolderInfo {
    /// A description from its parts; [`Error::InvalidConfig`] when a part is too long or
    /// contains a control character.
    pub fn new(host: impl Into<String>, pid: u32, purpose: impl Into<String>) -> Result<Self> {
        let (host, purpose) = (host.into(), purpose.into());
        check("host", &host, MAX_HOST_LEN)?;
        check("purpose", &purpose, MAX_PURPOSE_LEN)?;
        Ok(HolderInfo { host, pid, purpose })
    }

    /// This process: the machine's host name (or `unknown`), this process's id, and
    /// `purpose`.
    pub fn this_process(purpose: impl Into<String>) -> Result<Self> {
        Self::new(host_name(), std::process::id(), purpose)
    }

    /// The host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the lock is held for (may be empty).
    pub fn purpose(&self) -> &str {
        &self.purpose
    }

    /// The stored form: a format line, then host, pid and purpose, a line each.
    pub fn to_bytes(&self) -> Vec<u8> {
        format!("{FORMAT}\n{}\n{}\n{}", self.host, self.pid, self.purpose).into_bytes()
    }

    /// Reads the stored form back; `None` for anything not written by [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.splitn(4, '\n');
        if lines.next()? != FORMAT {
            return None;
        }
        let host = lines.next()?;
        let pid = lines.next()?.parse().ok()?;
        let purpose = lines.next()?;
        Self::new(host, pid, purpose).ok()
    }
}

impl fmt::Display for HolderInfo {
    /// `pid 4242 on build-7: nightly billing` (the purpose left out when empty).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} on {}", self.pid, self.host)?;
        if !self.purpose.is_empty() {
            write!(f, ": {}", self.purpose)?;
        }
        Ok(())
    }
}

fn check(what: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::config(format!(
            "the holder's {what} is {} bytes, more than the {max} allowed",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::config(format!(
            "the holder's {what} contains a control character"
        )));
    }
    Ok(())
}

/// The machine's host name as the kernel reports it, else `$HOSTNAME`, else `unknown`.
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty());
    let mut name = name.unwrap_or_else(|| "unknown".to_owned());
    name.retain(|c| !c.is_control());
    if name.len() > MAX_HOST_LEN {
        let mut end = MAX_HOST_LEN;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

/// The storage resource holding the record of `key`'s holder:
/// [`HOLDER_RESOURCE_PREFIX`] then the key. [`Error::InvalidKey`] when that is longer than a
/// key may be (a lock key of more than 495 bytes has no holder record).
pub fn holder_resource(key: &LockKey) -> Result<LockKey> {
    LockKey::new(format!("{HOLDER_RESOURCE_PREFIX}{}", key.as_str()))
}

/// Records `info` as the holder of `key` under `fence` (the grant's, or a read phase's, or a
/// permit's on its slot key): a fenced write, so [`Error::Stale`] once a newer holder of the
/// key has recorded itself.
pub async fn record_holder(
    storage: &dyn FencedStorage,
    key: &LockKey,
    fence: Fence,
    info: &HolderInfo,
) -> Result<()> {
    storage
        .write(&holder_resource(key)?, fence, &info.to_bytes())
        .await
}

/// The recorded holder of `key` if it was recorded under `fence` (the current holder's, as
/// `inspect` reports it); `None` when nothing was recorded under that fence.
pub async fn read_holder(
    storage: &dyn FencedStorage,
    key: &LockKey,
    fence: Fence,
) -> Result<Option<HolderInfo>> {
    let Some(snapshot) = storage.peek(&holder_resource(key)?).await? else {
        return Ok(None);
    };
    if snapshot.fence != fence {
        return Ok(None);
    }
    Ok(snapshot.value.as_deref().and_then(HolderInfo::from_bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_control_characters() {
        let info = HolderInfo::new("build-7", 4242, "nightly billing: run 3").unwrap();
        assert_eq!(HolderInfo::from_bytes(&info.to_bytes()), Some(info.clone()));
        assert_eq!(
            info.to_string(),
            "pid 4242 on build-7: nightly billing: run 3"
        );
        let bare = HolderInfo::new("h", 1, "").unwrap();
        assert_eq!(HolderInfo::from_bytes(&bare.to_bytes()), Some(bare));
        assert!(HolderInfo::new("h", 1, "two\nlines").is_err());
        assert!(HolderInfo::new("h\u{1b}[2J", 1, "").is_err());
        assert!(HolderInfo::new("h", 1, "x".repeat(MAX_PURPOSE_LEN + 1)).is_err());
        assert!(HolderInfo::new("h".repeat(MAX_HOST_LEN + 1), 1, "").is_err());
        for junk in [
            &b""[..],
            b"x",
            b"fencelock-holder/1\nh\nnot a pid\n",
            b"\xff",
        ] {
            assert_eq!(HolderInfo::from_bytes(junk), None);
        }
        let here = HolderInfo::this_process("p").unwrap();
        assert_eq!(here.pid(), std::process::id());
        assert!(!here.host().is_empty());
    }

    #[test]
    fn the_resource_is_the_key_behind_a_prefix() {
        let key = LockKey::new("invoices/42").unwrap();
        assert_eq!(
            holder_resource(&key).unwrap().as_str(),
            "fencelock:holder:invoices/42"
        );
        let long = LockKey::new("k".repeat(512)).unwrap();
        assert!(matches!(
            holder_resource(&long),
            Err(Error::InvalidKey { .. })
        ));
    }
}
