#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[macro_use]
mod backends;
#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(all(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "zookeeper",
    feature = "object-store",
    feature = "blocking"
))]
pub mod guide;
pub mod spec;
mod storage_spec;

pub use fencelock_core::*;

built_in_backends!(re_export);
