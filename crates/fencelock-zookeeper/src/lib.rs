#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

/// The schemes this crate owns (none yet).
pub const SCHEMES: &[fencelock_core::Scheme] = &[];
