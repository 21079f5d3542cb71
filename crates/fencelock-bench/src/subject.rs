//! What a run compares. The traits live in `fencelock_core::tools`, where every backend
//! implements them for its own baseline; they are re-exported here for the harness.

pub use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock, Subject, TTL};
