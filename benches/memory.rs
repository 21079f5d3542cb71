//! The memory backend next to a `tokio::sync::Mutex<HashMap>` lock table, every scenario of
//! `fencelock-bench` in one run.

use fencelock_bench::Suite;

fencelock_bench::define_bench!(memory => async { Ok((Suite::connect(&fencelock::memory::MemoryConfig).await?, ())) });
