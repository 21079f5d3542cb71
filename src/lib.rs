#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod spec;

pub use fencelock_core::*;

/// The in-process backend.
#[cfg(feature = "memory")]
pub use fencelock_memory as memory;
