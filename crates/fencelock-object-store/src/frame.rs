//! The header line that holds a fence, and the framed layout of a fenced object: that line,
//! then the payload.
//!
//! ```text
//! fencelock-object v1 <token> <owner, 32 hex digits> value\n<payload bytes>
//! fencelock-object v1 <token> <owner, 32 hex digits> none\n
//! ```
//!
//! The framed layout keeps the fence in the body because S3 derives a plain object's ETag
//! from its body alone: a fence kept in metadata could advance without the ETag changing,
//! and a conditional put made against the older fence would still match (DESIGN section
//! 5.7). The raw layout ([`ObjectLayout::Raw`](crate::ObjectLayout::Raw)) keeps the same
//! line, without its `\n`, in the object's metadata, on stores where every put moves the
//! version.

use bytes::{BufMut, Bytes, BytesMut};
use fencelock_core::{Fence, FencingToken, OwnerId};

/// What every fenced object starts with.
const MAGIC: &str = "fencelock-object v1 ";

/// The longest header line: the magic, a `u64`, a space, 32 hex digits, a space, `value`, `\n`.
pub(crate) const MAX_HEADER_LEN: usize = MAGIC.len() + 20 + 1 + 32 + 1 + 5 + 1;

/// One fenced object, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The last admitted fence.
    pub(crate) fence: Fence,
    /// The payload; `None` when only fenced reads have touched the object.
    pub(crate) value: Option<Bytes>,
}

impl Frame {
    /// The object's body.
    pub(crate) fn encode(fence: Fence, value: Option<&[u8]>) -> Bytes {
        let header = header_line(fence, value.is_some());
        let payload = value.unwrap_or_default();
        let mut body = BytesMut::with_capacity(header.len() + 1 + payload.len());
        body.put_slice(header.as_bytes());
        body.put_u8(b'\n');
        body.put_slice(payload);
        body.freeze()
    }

    /// Decodes a body written by [`encode`](Self::encode). The error says, in a few words,
    /// what is wrong; it never quotes the body.
    pub(crate) fn decode(body: Bytes) -> Result<Frame, &'static str> {
        if !body.starts_with(MAGIC.as_bytes()) {
            return Err("it does not start with a fencelock header");
        }
        let window = &body[..body.len().min(MAX_HEADER_LEN)];
        let line_len = window
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("its header line has no end")?;
        let (fence, has_value) = parse_header_line(&body[..line_len])?;
        let payload_at = line_len + 1;
        let value = if has_value {
            Some(body.slice(payload_at..))
        } else if body.len() == payload_at {
            None
        } else {
            return Err("it says it holds no value but has bytes after its header");
        };
        Ok(Frame { fence, value })
    }
}

/// A fenced object as [`ObjectFence::peek`](crate::ObjectFence::peek) sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedObject {
    /// The payload, `None` when only fenced reads have touched the object.
    pub value: Option<Bytes>,
    /// The last fence admitted for the object.
    pub fence: Fence,
}

/// Splits the body of a fenced object of the default layout
/// ([`ObjectLayout::Framed`](crate::ObjectLayout::Framed)) into its fence and payload, for
/// readers that fetch the object themselves (`aws s3 cp`, a job reading the bucket); `None`
/// when `body` is not a fenced object. An object of
/// [`ObjectLayout::Raw`](crate::ObjectLayout::Raw) needs no decoding: its body is the payload.
pub fn decode(body: Bytes) -> Option<FencedObject> {
    Frame::decode(body).ok().map(|frame| FencedObject {
        value: frame.value,
        fence: frame.fence,
    })
}

/// The header line, without its `\n`: `fencelock-object v1 <token> <owner> value|none`.
pub(crate) fn header_line(fence: Fence, has_value: bool) -> String {
    let kind = if has_value { "value" } else { "none" };
    format!("{MAGIC}{} {} {kind}", fence.token, fence.owner)
}

/// Parses a line written by [`header_line`]: the fence, and whether a payload goes with it.
pub(crate) fn parse_header_line(line: &[u8]) -> Result<(Fence, bool), &'static str> {
    let rest = line
        .strip_prefix(MAGIC.as_bytes())
        .ok_or("it does not start with a fencelock header")?;
    if line.len() >= MAX_HEADER_LEN {
        return Err("its header line is too long");
    }
    let line = std::str::from_utf8(rest).map_err(|_| "its header is not UTF-8")?;
    let mut fields = line.split(' ');
    let (Some(token), Some(owner), Some(kind), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err("its header does not have three fields");
    };
    let fence = Fence::new(parse_token(token)?, parse_owner(owner)?);
    let has_value = match kind {
        "value" => true,
        "none" => false,
        _ => return Err("its header's last field is neither `value` nor `none`"),
    };
    Ok((fence, has_value))
}

/// A token as [`Frame::encode`] writes it: decimal, no sign, no leading zero, not zero.
fn parse_token(text: &str) -> Result<FencingToken, &'static str> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && !(text.len() > 1 && text.starts_with('0'));
    if !canonical {
        return Err("its fencing token is not a decimal number");
    }
    text.parse::<u64>()
        .ok()
        .and_then(FencingToken::new)
        .ok_or("its fencing token is zero or too large")
}

/// An owner as [`Frame::encode`] writes it: 32 lower-case hex digits.
fn parse_owner(text: &str) -> Result<OwnerId, &'static str> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("its owner is not 32 lower-case hex digits");
    }
    text.parse::<OwnerId>()
        .map_err(|_| "its owner is not 32 lower-case hex digits")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fence(token: u64, owner: u128) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(owner))
    }

    #[test]
    fn frames_round_trip() {
        for (f, value) in [
            (fence(1, 0), None),
            (fence(u64::MAX, u128::MAX), Some(&b""[..])),
            (
                fence(42, 7),
                Some(&b"payload\nwith fencelock-object v1 1 x none\n"[..]),
            ),
        ] {
            let body = Frame::encode(f, value);
            assert!(body.len() <= MAX_HEADER_LEN + value.map_or(0, <[u8]>::len));
            let frame = Frame::decode(body).unwrap();
            assert_eq!(frame.fence, f);
            assert_eq!(frame.value.as_deref(), value);
        }
        let body = Frame::encode(fence(5, 0xab), Some(b"x"));
        assert_eq!(
            &body[..],
            b"fencelock-object v1 5 000000000000000000000000000000ab value\nx"
        );
    }

    #[test]
    fn anything_else_is_refused() {
        let owner = "000000000000000000000000000000ab";
        for body in [
            String::new(),
            "plain user data".to_owned(),
            "fencelock-object v1 ".to_owned(),
            format!("fencelock-object v1 5 {owner} value"),
            format!("fencelock-object v1 0 {owner} value\n"),
            format!("fencelock-object v1 05 {owner} value\n"),
            format!("fencelock-object v1 +5 {owner} value\n"),
            format!("fencelock-object v1 18446744073709551616 {owner} value\n"),
            "fencelock-object v1 5 00ab value\n".to_owned(),
            format!("fencelock-object v1 5 {} value\n", owner.to_uppercase()),
            format!("fencelock-object v1 5 {owner} maybe\n"),
            format!("fencelock-object v1 5 {owner} none\nextra"),
            format!("fencelock-object v1 5 {owner} value extra\n"),
            format!("fencelock-object v2 5 {owner} value\n"),
            format!("fencelock-object v1 5 {owner}{} value\n", " ".repeat(80)),
        ] {
            assert!(
                Frame::decode(Bytes::from(body.clone())).is_err(),
                "{body:?} was accepted"
            );
        }
    }
}
