//! The contents of the state files: a key's lock (its token counter and holder) and a
//! resource's fenced value. Both are short text headers, checked strictly on reading, so a
//! file that is not what this crate wrote is an error, never a silently reset counter.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock_core::{Error, Fence, FencingToken, OwnerId, Result};

use crate::layout::BACKEND;

const LOCK_MAGIC: &str = "fencelock-lockdir lock 1";
const DATA_MAGIC: &str = "fencelock-lockdir data 1";

/// The wall clock of this host in microseconds since the Unix epoch: the one clock every
/// process of the host shares, so expiries written by one process mean the same to all.
/// Microseconds, not milliseconds, so rounding never shortens a lease by more than the drift
/// margin allows.
pub(crate) fn now_micros() -> Result<u64> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| corrupt_clock())?;
    u64::try_from(since.as_micros()).map_err(|_| corrupt_clock())
}

fn corrupt_clock() -> Error {
    Error::Backend {
        backend: BACKEND,
        message: "the system clock is before 1970 or beyond the year 500000".into(),
        source: None,
    }
}

/// `ttl` in microseconds, saturating (ttls are bounded well below that by `validate_ttl`).
pub(crate) fn micros(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)
}

/// The holder recorded in a lock's state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) owner: OwnerId,
    pub(crate) token: FencingToken,
    /// The wall-clock expiry, microseconds since the epoch.
    pub(crate) expires_us: u64,
}

/// A key's lock: the last token handed out (never lowered) and the holder, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LockState {
    pub(crate) last_token: u64,
    pub(crate) holder: Option<Holder>,
}

impl LockState {
    /// The holder whose lease has not expired at `now_us`.
    pub(crate) fn live_holder(&self, now_us: u64) -> Option<Holder> {
        self.holder.filter(|h| h.expires_us > now_us)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut text = format!("{LOCK_MAGIC}\nlast {}\n", self.last_token);
        if let Some(h) = self.holder {
            text.push_str(&format!(
                "holder {} {} {}\n",
                h.owner, h.token, h.expires_us
            ));
        }
        text.into_bytes()
    }

    pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<Self> {
        let bad = |what: &str| corrupt(path, what);
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let mut lines = text.split_terminator('\n');
        if lines.next() != Some(LOCK_MAGIC) {
            return Err(bad("no lock header"));
        }
        let last_token = lines
            .next()
            .and_then(|line| line.strip_prefix("last "))
            .ok_or_else(|| bad("no token counter"))?;
        let last_token = number(last_token).ok_or_else(|| bad("bad token counter"))?;
        let holder = match lines.next() {
            None => None,
            Some(line) => {
                let fields: Vec<&str> = line.split(' ').collect();
                let ["holder", owner, token, expires] = fields[..] else {
                    return Err(bad("bad holder line"));
                };
                let holder = Holder {
                    owner: OwnerId::from_str(owner).map_err(|_| bad("bad holder owner"))?,
                    token: number(token)
                        .and_then(FencingToken::new)
                        .ok_or_else(|| bad("bad holder token"))?,
                    expires_us: number(expires).ok_or_else(|| bad("bad holder expiry"))?,
                };
                if holder.token.get() > last_token {
                    return Err(bad("holder token above the counter"));
                }
                Some(holder)
            }
        };
        if lines.next().is_some() {
            return Err(bad("trailing lines"));
        }
        Ok(LockState { last_token, holder })
    }
}

/// A resource of the fenced storage: the last admitted fence and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DataState {
    pub(crate) fence: Fence,
    pub(crate) value: Option<Vec<u8>>,
}

impl DataState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let length = self
            .value
            .as_ref()
            .map_or_else(|| "-".to_owned(), |v| v.len().to_string());
        let mut bytes = format!(
            "{DATA_MAGIC}\nfence {} {}\nvalue {length}\n",
            self.fence.token, self.fence.owner
        )
        .into_bytes();
        if let Some(value) = &self.value {
            bytes.extend_from_slice(value);
        }
        bytes
    }

    pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<Self> {
        let bad = |what: &str| corrupt(path, what);
        let mut rest = bytes;
        let mut header = Vec::with_capacity(3);
        for _ in 0..3 {
            let end = rest
                .iter()
                .position(|b| *b == b'\n')
                .ok_or_else(|| bad("short header"))?;
            let line = std::str::from_utf8(&rest[..end]).map_err(|_| bad("header not UTF-8"))?;
            header.push(line);
            rest = &rest[end + 1..];
        }
        if header[0] != DATA_MAGIC {
            return Err(bad("no data header"));
        }
        let fields: Vec<&str> = header[1].split(' ').collect();
        let ["fence", token, owner] = fields[..] else {
            return Err(bad("bad fence line"));
        };
        let token = number(token)
            .and_then(FencingToken::new)
            .ok_or_else(|| bad("bad fence token"))?;
        let owner = OwnerId::from_str(owner).map_err(|_| bad("bad fence owner"))?;
        let value = match header[2].strip_prefix("value ") {
            Some("-") if rest.is_empty() => None,
            Some(length) if number(length) == u64::try_from(rest.len()).ok() => Some(rest.to_vec()),
            _ => return Err(bad("value length does not match")),
        };
        Ok(DataState {
            fence: Fence::new(token, owner),
            value,
        })
    }
}

/// A decimal `u64` as this crate writes it: digits only (no sign, no spaces).
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn corrupt(path: &Path, what: &str) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!(
            "{} is not a state file of this backend: {what}",
            path.display()
        ),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn states_round_trip_and_junk_is_refused() {
        let path = Path::new("/d/x.state");
        for state in [
            LockState::default(),
            LockState {
                last_token: 9,
                holder: Some(Holder {
                    owner: OwnerId::random(),
                    token: token(9),
                    expires_us: 123,
                }),
            },
        ] {
            assert_eq!(LockState::decode(path, &state.encode()).unwrap(), state);
        }
        for value in [None, Some(Vec::new()), Some(b"a\nb\0c".to_vec())] {
            let state = DataState {
                fence: Fence::new(token(u64::MAX), OwnerId::random()),
                value,
            };
            assert_eq!(DataState::decode(path, &state.encode()).unwrap(), state);
        }
        let junk: [&[u8]; 5] = [
            b"",
            b"fencelock-lockdir lock 1\nlast -1\n",
            b"fencelock-lockdir lock 1\nlast 1\nholder x 1 1\n",
            b"fencelock-lockdir data 1\nfence 1 00000000000000000000000000000001\nvalue 5\nab",
            b"fencelock-lockdir data 1\nfence 0 00000000000000000000000000000001\nvalue -\n",
        ];
        for bytes in junk {
            let lock = LockState::decode(path, bytes);
            let data = DataState::decode(path, bytes);
            assert!(
                lock.is_err() && data.is_err(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
