//! Validated lock and resource keys.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A validated key naming a lock or a storage resource.
///
/// A key is valid UTF-8, between 1 and [`LockKey::MAX_LEN`] bytes long, and contains no NUL or
/// other control character. Everything else (spaces, quotes, braces, any Unicode) is allowed and
/// reaches the backend unchanged. Cloning is cheap.
///
/// ```
/// use fencelock_core::LockKey;
/// let key = LockKey::new("invoices/2026-11").unwrap();
/// assert_eq!(key.as_str(), "invoices/2026-11");
/// assert!(LockKey::new("").is_err());
/// assert!(LockKey::new("a\0b").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(Arc<str>);

impl LockKey {
    /// The longest key accepted, in bytes.
    pub const MAX_LEN: usize = 512;

    /// Validates `key`.
    pub fn new(key: impl AsRef<str>) -> Result<Self> {
        let key = key.as_ref();
        Self::check(key)?;
        Ok(LockKey(Arc::from(key)))
    }

    /// Validates raw bytes, which must be UTF-8.
    pub fn from_bytes(key: &[u8]) -> Result<Self> {
        match std::str::from_utf8(key) {
            Ok(key) => Self::new(key),
            Err(_) => Err(invalid(&String::from_utf8_lossy(key), "not valid UTF-8")),
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn check(key: &str) -> Result<()> {
        if key.is_empty() {
            return Err(invalid(key, "empty"));
        }
        if key.len() > Self::MAX_LEN {
            return Err(invalid(key, "longer than 512 bytes"));
        }
        if key.contains('\0') {
            return Err(invalid(key, "contains a NUL character"));
        }
        if key.chars().any(char::is_control) {
            return Err(invalid(key, "contains a control character"));
        }
        Ok(())
    }
}

fn invalid(key: &str, reason: &'static str) -> Error {
    let shown: String = key.chars().take(64).collect();
    Error::InvalidKey { key: shown, reason }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for LockKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for LockKey {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<&str> for LockKey {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<String> for LockKey {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<&LockKey> for LockKey {
    type Error = Error;
    fn try_from(k: &LockKey) -> Result<Self> {
        Ok(k.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_and_unusual_keys() {
        for key in [
            "a",
            "{braces}",
            "quote\"s",
            "with space",
            "ünïcødé ✓",
            &"x".repeat(512),
        ] {
            assert_eq!(LockKey::new(key).unwrap().as_str(), key);
        }
    }

    #[test]
    fn refuses_bad_keys() {
        let long = "x".repeat(513);
        for key in ["", "nul\0", "tab\t", "newline\n", "del\u{7f}", &long] {
            assert!(
                matches!(LockKey::new(key), Err(Error::InvalidKey { .. })),
                "{key:?}"
            );
        }
        assert!(matches!(
            LockKey::from_bytes(&[0xff, 0xfe]),
            Err(Error::InvalidKey { .. })
        ));
    }

    #[test]
    fn length_is_counted_in_bytes() {
        // 171 three-byte characters = 513 bytes.
        assert!(LockKey::new("€".repeat(171)).is_err());
        assert!(LockKey::new("€".repeat(170)).is_ok());
    }
}
