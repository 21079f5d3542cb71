//! Where a fenced object keeps its fence: in a header line of its body (framed, the default),
//! or in the object's metadata beside a body left exactly as written (raw).
//!
//! Only the encoding differs; admissions decide the same way for both ([`ObjectFence`]).
//!
//! [`ObjectFence`]: crate::ObjectFence

use bytes::Bytes;
use fencelock_core::Fence;
use object_store::{Attribute, AttributeValue, Attributes};

use crate::frame::{Frame, MAX_HEADER_LEN, header_line, parse_header_line};

/// Where a fenced object keeps its fence, chosen with [`ObjectFence::connect_with_layout`].
///
/// - [`Framed`](Self::Framed) (the default): the body is a header line holding the fence, then
///   the payload. Safe on every store with conditional puts, S3 included; other readers see
///   the header line (strip it with [`decode`](crate::decode)).
/// - [`Raw`](Self::Raw): the body is the payload exactly as written, so Spark, Delta readers
///   or `aws s3 cp` read it as it is; the fence is the object's metadata entry
///   [`RAW_METADATA_KEY`](Self::RAW_METADATA_KEY) (`fencelock-object v1 <token> <owner>
///   value|none`). A tombstone, or an object only fenced reads touched, has an empty body.
///   Safe only where the version a conditional put names changes on **every** put, a put of
///   the same body with other metadata included (GCS generations, Azure ETags, the in-memory
///   store's counter); not on S3, where a plain object's ETag is its body's MD5, so a newer
///   holder's fenced read that only advances the fence would leave the ETag as it was and an
///   older holder's `If-Match` would still land (DESIGN section 5.7, *A layout for other
///   readers*). The connect checks it with a probe object and refuses such a store with
///   [`Error::InvalidConfig`](fencelock_core::Error::InvalidConfig).
///
/// [`ObjectFence::connect_with_layout`]: crate::ObjectFence::connect_with_layout
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObjectLayout {
    /// The fence in a header line of the body, before the payload.
    #[default]
    Framed,
    /// The body exactly as written; the fence in the object's metadata.
    Raw,
}

impl ObjectLayout {
    /// The metadata key under which [`Raw`](Self::Raw) keeps the fence
    /// (`x-amz-meta-fencelock`, `x-goog-meta-fencelock`, `x-ms-meta-fencelock`): letters only,
    /// since Azure takes only identifiers as metadata names and some HTTP proxies drop headers
    /// with underscores.
    pub const RAW_METADATA_KEY: &'static str = "fencelock";

    /// The metadata attribute of [`Raw`](Self::Raw).
    pub(crate) fn raw_attribute() -> Attribute {
        Attribute::Metadata(Self::RAW_METADATA_KEY.into())
    }

    /// The body and attributes of an object holding `fence` and `value`.
    pub(crate) fn encode(self, fence: Fence, value: Option<&[u8]>) -> (Bytes, Attributes) {
        match self {
            ObjectLayout::Framed => (Frame::encode(fence, value), Attributes::new()),
            ObjectLayout::Raw => {
                let mut attributes = Attributes::new();
                attributes.insert(
                    Self::raw_attribute(),
                    AttributeValue::from(header_line(fence, value.is_some())),
                );
                let body = value.map(Bytes::copy_from_slice).unwrap_or_default();
                (body, attributes)
            }
        }
    }

    /// Decodes an object written by [`encode`](Self::encode) from its body and the attributes
    /// a read returned. The error says, in a few words, what is wrong; it never quotes the
    /// object.
    pub(crate) fn decode(
        self,
        body: Bytes,
        attributes: &Attributes,
    ) -> Result<Frame, &'static str> {
        match self {
            ObjectLayout::Framed => Frame::decode(body),
            ObjectLayout::Raw => {
                let line = attributes
                    .get(&Self::raw_attribute())
                    .ok_or("it has no `fencelock` metadata holding a fence")?;
                let (fence, has_value) = parse_header_line(line.as_ref().as_bytes())?;
                let value = if has_value {
                    Some(body)
                } else if body.is_empty() {
                    None
                } else {
                    return Err("its fence says it holds no value but its body is not empty");
                };
                Ok(Frame { fence, value })
            }
        }
    }

    /// How many bytes a body holds beyond the payload, at most.
    pub(crate) fn overhead(self) -> usize {
        match self {
            ObjectLayout::Framed => MAX_HEADER_LEN,
            ObjectLayout::Raw => 0,
        }
    }

    /// The name used in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ObjectLayout::Framed => "ObjectLayout::Framed",
            ObjectLayout::Raw => "ObjectLayout::Raw",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use fencelock_core::{FencingToken, OwnerId};

    use super::*;

    fn fence(token: u64, owner: u128) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(owner))
    }

    #[test]
    fn raw_objects_round_trip_with_the_body_as_written() {
        for (f, value) in [
            (fence(1, 0), None),
            (fence(u64::MAX, u128::MAX), Some(&b""[..])),
            (
                fence(42, 7),
                Some(&b"fencelock-object v1 1 x none\npayload"[..]),
            ),
        ] {
            let (body, attributes) = ObjectLayout::Raw.encode(f, value);
            assert_eq!(&body[..], value.unwrap_or_default());
            let frame = ObjectLayout::Raw.decode(body, &attributes).unwrap();
            assert_eq!((frame.fence, frame.value.as_deref()), (f, value));
        }
        let (_, attributes) = ObjectLayout::Raw.encode(fence(5, 0xab), Some(b"x"));
        assert_eq!(
            attributes
                .get(&ObjectLayout::raw_attribute())
                .unwrap()
                .as_ref(),
            "fencelock-object v1 5 000000000000000000000000000000ab value"
        );
        let (body, attributes) = ObjectLayout::Framed.encode(fence(5, 0xab), Some(b"x"));
        assert!(attributes.is_empty());
        assert_eq!(Frame::decode(body).unwrap().fence, fence(5, 0xab));
    }

    #[test]
    fn raw_objects_without_a_good_fence_are_refused() {
        let owner = "000000000000000000000000000000ab";
        let with = |line: String| {
            let mut attributes = Attributes::new();
            attributes.insert(ObjectLayout::raw_attribute(), AttributeValue::from(line));
            attributes
        };
        for (body, attributes) in [
            (&b"plain"[..], Attributes::new()),
            (
                b"plain",
                with(format!("fencelock-object v1 5 {owner} maybe")),
            ),
            (
                b"plain",
                with(format!("fencelock-object v1 0 {owner} value")),
            ),
            (
                b"plain",
                with(format!("fencelock-object v1 5 {owner} none")),
            ),
            (
                b"plain",
                with(format!("fencelock-object v1 5 {owner}  value")),
            ),
            (
                b"",
                with(format!(
                    "fencelock-object v1 5 {owner}{} none",
                    " ".repeat(80)
                )),
            ),
        ] {
            assert!(
                ObjectLayout::Raw
                    .decode(Bytes::from_static(body), &attributes)
                    .is_err(),
                "{attributes:?} was accepted"
            );
        }
    }
}
