//! Benchmark scenarios for fencelock, shared by the criterion benches (`benches/`) and
//! `fencelock bench`, so that both report the same thing.
//!
//! A [`Suite`] holds, for one backend on one server: the fenced lock itself
//! ([`FencedSubject`]), the raw baseline a user would otherwise write against the same server
//! ([`Baseline`]), and peers from crates.io. The steps of [`Scenario::STEPS`] drive them:
//!
//! | scenario | fenced lock | baseline |
//! |---|---|---|
//! | round trip | — | `PING` / `SELECT 1` / one `Mutex<HashMap>` lookup |
//! | acquire + release | `try_acquire` + `release` | `SET NX PX` + `DEL`, `pg_try_advisory_lock` + `pg_advisory_unlock`, `Mutex<HashMap>` insert + remove |
//! | fenced write | `FencedStorage::write` under a held lease | plain `SET`, `UPDATE`, `Mutex<HashMap>` insert |
//! | hand-off | a holder releases, a waiter blocked in `Locker::lock(..).wait(..)` holds: release-call start to grant | one round trip after the same idle pause (the ratio counts round trips) |
//! | extend | `LockBackend::extend` of a held lease | one round trip |
//! | contended | `concurrency` tasks lock + release through `Locker` on one key, or spread over `keys` keys | the same tasks polling the raw try-lock with the same backoff |

mod backends;
mod cases;
mod error;
mod fenced_subject;
mod histogram;
mod report;
mod run;
mod scenario;
mod subject;
mod suite;

#[cfg(feature = "criterion")]
pub mod criterion;

pub use backends::memory::MemoryBaseline;
pub use backends::postgres::{PgBaseline, PgLockKind, SqlxAdvisoryLockPeer};
pub use backends::redis::RedisBaseline;
pub use error::{BenchError, Result};
pub use fenced_subject::FencedSubject;
pub use histogram::Histogram;
pub use report::{Measurement, Report, Row};
pub use run::run_all;
pub use scenario::{Scenario, Settings};
pub use subject::{Baseline, Op, RawTryLock, Subject, TTL};
pub use suite::Suite;
