//! This repository's backends, each with the raw baseline on its server and its
//! [`Suite`](crate::Suite) constructor.

pub(crate) mod memory;
pub(crate) mod postgres;
pub(crate) mod redis;
