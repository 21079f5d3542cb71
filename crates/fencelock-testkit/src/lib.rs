//! Test tools for fencelock: real services for real tests. `publish = false`.

pub mod postgres;
pub mod proxy;
pub mod redis;
