//! Benchmark scenarios for fencelock, shared by the criterion benches (`benches/`) and
//! `fencelock bench`, so that both report the same thing.
//!
//! A [`Suite`] holds, for one backend on one server: fencelock itself ([`Fencelock`]), the
//! raw baseline a user would otherwise write against the same server ([`Baseline`]), and
//! peers from crates.io. [`Scenario`]s drive them:
//!
//! | scenario | fencelock | baseline |
//! |---|---|---|
//! | round trip | — | `PING` / `SELECT 1` / one `Mutex<HashMap>` lookup |
//! | acquire + release | `try_acquire` + `release` | `SET NX PX` + `DEL`, `pg_try_advisory_lock` + `pg_advisory_unlock`, `Mutex<HashMap>` insert + remove |
//! | fenced write | `FencedStorage::write` under a held lease | plain `SET`, `UPDATE`, `Mutex<HashMap>` insert |
//! | hand-off | a holder releases, a waiter blocked in `Locker::lock(..).wait(..)` holds: release-call start to grant | one round trip (the ratio counts round trips) |
//! | extend | `LockBackend::extend` of a held lease | one round trip |
//! | contended | `concurrency` tasks lock + release through `Locker` on one key, or spread over `keys` keys | the same tasks polling the raw try-lock with the same backoff |

mod baseline;
mod error;
mod fencelock;
mod histogram;
mod scenario;
mod suite;

#[cfg(feature = "criterion")]
pub mod criterion;

pub use baseline::{MemoryBaseline, PgBaseline, RedisBaseline, SqlxAdvisoryLockPeer};
pub use error::{BenchError, Result};
pub use fencelock::Fencelock;
pub use histogram::Histogram;
pub use scenario::{Measurement, Report, Row, Scenario, Settings, run_all};
pub use suite::{Baseline, PgLockKind, Subject, Suite};
