//! Fencing tokens, owners, fences and the admission rule every storage applies.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A fencing token: a non-zero `u64` that a backend hands out in increasing order per key.
///
/// # In the application's own `bigint` column
///
/// SQL has no unsigned 64-bit integer, so a token goes into a `bigint` column (and into a
/// `$1` bind) through `i64::try_from(token)?`, and comes back through
/// `FencingToken::try_from(value)?`. Both are checked: a token above `i64::MAX` would wrap into
/// a negative, older-looking number, and zero or a negative number is not a token, so each is
/// refused with [`Error::InvalidConfig`] naming the value, never cast. Compare tokens in SQL
/// with the column's own `<` / `>`: the order of the `bigint`s is the order of the tokens.
///
/// ```
/// use fencelock_core::FencingToken;
///
/// # fn main() -> fencelock_core::Result<()> {
/// let token = FencingToken::new(42).expect("42 is not zero");
/// let column: i64 = i64::try_from(token)?; // bind this as the `bigint` parameter
/// assert_eq!(FencingToken::try_from(column)?, token);
///
/// let huge = FencingToken::new(u64::MAX).expect("not zero");
/// assert!(i64::try_from(huge).is_err()); // refused, never wrapped
/// # Ok(())
/// # }
/// ```
///
/// With PostgreSQL, `FenceParams::try_from(fence)` of `fencelock-postgres` gives the token and
/// the owner as the `bigint` and `bytea` binds of its row guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(NonZeroU64);

impl FencingToken {
    /// The smallest token.
    pub const MIN: FencingToken = FencingToken(NonZeroU64::MIN);

    /// `None` for zero.
    pub const fn new(value: u64) -> Option<Self> {
        match NonZeroU64::new(value) {
            Some(v) => Some(FencingToken(v)),
            None => None,
        }
    }

    /// The token as a number.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// Converts a counter value read from a backend, refusing zero and negative numbers as a
    /// protocol error of `backend`.
    pub fn from_backend(backend: &'static str, value: i64) -> Result<Self> {
        u64::try_from(value)
            .ok()
            .and_then(Self::new)
            .ok_or_else(|| Error::Backend {
                backend,
                message: format!("backend returned invalid fencing token {value}"),
                source: None,
            })
    }
}

impl TryFrom<FencingToken> for i64 {
    type Error = Error;

    /// The token as a SQL `bigint`. Tokens above `i64::MAX` are refused with
    /// [`Error::InvalidConfig`] naming the token: no backend hands them out, and storing one in a
    /// signed column would wrap it into a negative, older-looking number.
    fn try_from(token: FencingToken) -> Result<i64> {
        i64::try_from(token.get()).map_err(|_| {
            Error::config(format!(
                "fencing token {token} is above i64::MAX and cannot be stored as a SQL bigint"
            ))
        })
    }
}

impl TryFrom<i64> for FencingToken {
    type Error = Error;

    /// A token read back from a SQL `bigint`; zero and negative numbers are refused.
    fn try_from(value: i64) -> Result<Self> {
        u64::try_from(value)
            .ok()
            .and_then(Self::new)
            .ok_or_else(|| {
                Error::config(format!(
                    "{value} is not a fencing token (tokens are 1 or more)"
                ))
            })
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A random 128-bit identity drawn from the operating system's CSPRNG for each grant.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(u128);

impl OwnerId {
    /// A fresh random owner, from the thread-local CSPRNG (ChaCha, seeded and periodically
    /// reseeded from the operating system), so drawing one costs no system call.
    pub fn random() -> Self {
        OwnerId(rand::random())
    }

    /// An owner from its numeric value (for reading it back from a backend).
    pub const fn from_u128(value: u128) -> Self {
        OwnerId(value)
    }

    /// The owner as a number.
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for OwnerId {
    /// 32 lower-case hex digits, written digit by digit: an owner is formatted for every
    /// grant and release.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 32];
        for (pair, byte) in text.chunks_exact_mut(2).zip(self.0.to_be_bytes()) {
            pair.copy_from_slice(&[
                DIGITS[usize::from(byte >> 4)],
                DIGITS[usize::from(byte & 0xf)],
            ]);
        }
        // Only ASCII hex digits were written, so the text is always UTF-8.
        f.pad(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({self})")
    }
}

impl FromStr for OwnerId {
    type Err = Error;
    /// Parses the 32-digit hexadecimal form that `Display` writes.
    fn from_str(s: &str) -> Result<Self> {
        // `from_str_radix` alone would also take a leading `+`: a second spelling of one id.
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::config(format!(
                "owner id {s:?} is not 32 hex digits"
            )));
        }
        u128::from_str_radix(s, 16)
            .map(OwnerId)
            .map_err(|e| Error::InvalidConfig {
                message: format!("owner id {s:?} is not 32 hex digits"),
                source: Some(Box::new(e)),
            })
    }
}

/// A fence: the `(token, owner)` pair a holder presents to a [`FencedStorage`](crate::FencedStorage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The fencing token of the grant.
    pub token: FencingToken,
    /// The owner of the grant.
    pub owner: OwnerId,
}

impl Fence {
    /// A fence from its parts.
    pub const fn new(token: FencingToken, owner: OwnerId) -> Self {
        Fence { token, owner }
    }
}

/// The order in which to admit several resources in one transaction (a set lock's members,
/// [`CompositeGuard::fences`](crate::CompositeGuard::fences)): by name, each once. Storage
/// locks a resource's fence record from its admit to the end of the transaction, so every
/// transaction that admits in this one order takes those locks in one global order, and two
/// of them never wait for each other in a cycle. An invalid name is [`Error::InvalidKey`]; a
/// resource named twice with two different fences is [`Error::InvalidConfig`] (one holder has
/// one fence per resource).
///
/// ```
/// use fencelock_core::{Fence, FencingToken, OwnerId, admission_order};
/// let fence = |t| Fence::new(FencingToken::new(t).unwrap(), OwnerId::random());
/// let order = admission_order([("b", fence(7)), ("a", fence(3))]).unwrap();
/// let names: Vec<&str> = order.iter().map(|(key, _)| key.as_str()).collect();
/// assert_eq!(names, ["a", "b"]);
/// ```
pub fn admission_order<K: AsRef<str>>(
    fences: impl IntoIterator<Item = (K, Fence)>,
) -> Result<Vec<(crate::LockKey, Fence)>> {
    let mut order = fences
        .into_iter()
        .map(|(key, fence)| Ok((crate::LockKey::new(key)?, fence)))
        .collect::<Result<Vec<_>>>()?;
    order.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let mut unique: Vec<(crate::LockKey, Fence)> = Vec::with_capacity(order.len());
    for (key, fence) in order {
        match unique.last() {
            Some((last, same)) if *last == key && *same == fence => {}
            Some((last, other)) if *last == key => {
                return Err(Error::config(format!(
                    "{key} is named twice, with the fences {other} and {fence}: one holder has \
                     one fence per resource"
                )));
            }
            _ => unique.push((key, fence)),
        }
    }
    Ok(unique)
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {} (owner {})", self.token, self.owner)
    }
}

/// Which fences a storage admits after it has admitted `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FenceRule {
    /// The default: admit a newer token, or the same token from the same owner (so one holder
    /// can read, then write, then write again within its grant).
    #[default]
    Monotonic,
    /// Write-once / replay protection: every admitted operation needs a token strictly newer
    /// than the last one. A holder gets exactly one operation per grant.
    Strict,
}

impl FenceRule {
    /// Whether a storage that last admitted `last` admits `presented`.
    ///
    /// This is the single definition of the rule (DESIGN section 2); every storage either calls
    /// it or mirrors it in its own language (Lua, SQL) and is held to it by the conformance
    /// suite.
    ///
    /// ```
    /// use fencelock_core::{Fence, FenceRule, FencingToken, OwnerId};
    /// let a = Fence::new(FencingToken::new(5).unwrap(), OwnerId::random());
    /// let b = Fence::new(FencingToken::new(6).unwrap(), OwnerId::random());
    /// assert!(FenceRule::Monotonic.admits(None, a));
    /// assert!(FenceRule::Monotonic.admits(Some(a), a));
    /// assert!(FenceRule::Monotonic.admits(Some(a), b));
    /// assert!(!FenceRule::Monotonic.admits(Some(b), a));
    /// assert!(!FenceRule::Strict.admits(Some(a), a));
    /// ```
    pub fn admits(self, last: Option<Fence>, presented: Fence) -> bool {
        let Some(last) = last else { return true };
        match self {
            FenceRule::Monotonic => {
                presented.token > last.token
                    || (presented.token == last.token && presented.owner == last.owner)
            }
            FenceRule::Strict => presented.token > last.token,
        }
    }

    /// [`admits`](Self::admits) as a `Result`: `Err(Error::Stale)` when refused.
    pub fn check(self, resource: &str, last: Option<Fence>, presented: Fence) -> Result<()> {
        match last {
            Some(current) if !self.admits(Some(current), presented) => Err(Error::Stale {
                resource: resource.to_owned(),
                presented,
                current,
            }),
            _ => Ok(()),
        }
    }

    /// The rule's name as stored by backends that evaluate it server-side.
    pub fn as_str(self) -> &'static str {
        match self {
            FenceRule::Monotonic => "monotonic",
            FenceRule::Strict => "strict",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(token: u64, owner: u128) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(owner))
    }

    #[test]
    fn monotonic_rule() {
        let rule = FenceRule::Monotonic;
        assert!(rule.admits(None, fence(1, 1)));
        assert!(rule.admits(Some(fence(5, 1)), fence(5, 1)));
        assert!(rule.admits(Some(fence(5, 1)), fence(6, 2)));
        assert!(!rule.admits(Some(fence(5, 1)), fence(5, 2)));
        assert!(!rule.admits(Some(fence(5, 1)), fence(4, 1)));
    }

    #[test]
    fn tokens_convert_to_sql_bigint_and_back() {
        let token = FencingToken::new(42).unwrap();
        assert_eq!(i64::try_from(token).unwrap(), 42);
        assert_eq!(FencingToken::try_from(42_i64).unwrap(), token);
        let huge = FencingToken::new(i64::MAX as u64 + 1).unwrap();
        let err = i64::try_from(huge).unwrap_err().to_string();
        assert!(err.contains("9223372036854775808"), "{err}");
        assert!(FencingToken::try_from(0_i64).is_err());
        assert!(FencingToken::try_from(-1_i64).is_err());
    }

    #[test]
    fn strict_rule() {
        let rule = FenceRule::Strict;
        assert!(rule.admits(None, fence(1, 1)));
        assert!(!rule.admits(Some(fence(5, 1)), fence(5, 1)));
        assert!(rule.admits(Some(fence(5, 1)), fence(6, 1)));
    }

    #[test]
    fn check_reports_both_fences() {
        let err = FenceRule::Monotonic
            .check("r", Some(fence(6, 2)), fence(5, 1))
            .unwrap_err();
        match err {
            Error::Stale {
                presented, current, ..
            } => {
                assert_eq!(presented, fence(5, 1));
                assert_eq!(current, fence(6, 2));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn owner_ids_round_trip_and_differ() {
        let a = OwnerId::random();
        let b = OwnerId::random();
        assert_ne!(a, b);
        assert_eq!(a.to_string().parse::<OwnerId>().unwrap(), a);
        assert!("xyz".parse::<OwnerId>().is_err());
    }

    #[test]
    fn owner_ids_show_as_32_hex_digits() {
        for value in [0, 1, 0xabc, u128::from(u64::MAX) << 3, u128::MAX] {
            let owner = OwnerId::from_u128(value);
            assert_eq!(owner.to_string(), format!("{value:032x}"));
        }
        let owner = OwnerId::from_u128(0x1f);
        assert_eq!(
            format!("[{owner:>34}]"),
            "[  0000000000000000000000000000001f]"
        );
    }

    #[test]
    fn backend_tokens_must_be_positive() {
        assert!(FencingToken::from_backend("t", 0).is_err());
        assert!(FencingToken::from_backend("t", -3).is_err());
        assert_eq!(FencingToken::from_backend("t", 7).unwrap().get(), 7);
    }
}
