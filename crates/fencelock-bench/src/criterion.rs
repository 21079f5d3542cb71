//! The criterion driver: [`bench_suite`] puts every step of [`Scenario::STEPS`] into a
//! criterion group of its own, the baseline and the peers next to the fenced lock, and
//! [`define_bench!`](crate::define_bench) makes a bench target of it.

use std::time::{Duration, Instant};

use ::criterion::{BenchmarkGroup, Criterion, measurement::WallTime};
use tokio::runtime::Runtime;

use crate::cases::{Workload, finish_all, prepare};
use crate::run::{Stop, contended};
use crate::scenario::{Scenario, Settings};
use crate::subject::Op;
use crate::suite::Suite;

/// The criterion crate, for the expansion of [`define_bench!`](crate::define_bench).
pub use ::criterion as reexport;

/// Expands to a criterion bench `main` with one function per backend, each running
/// [`bench_suite`] on the [`Suite`] its setup returns.
///
/// Each `$setup` is a future of `Result<(Suite, impl Sized), BenchError>`; the second part
/// is kept alive for the whole run (a spawned server, a throwaway schema) and dropped after
/// [`Suite::close`]. A setup or a step that fails panics with the error, which is how a
/// bench target reports a failure. Put it in a bench target declared with `harness = false`,
/// and enable this crate's `criterion` feature:
///
/// ```toml
/// [dev-dependencies]
/// fencelock-bench = { version = "0.1", features = ["criterion"] }
///
/// [[bench]]
/// name = "my_backend"
/// harness = false
/// ```
///
/// `benches/my_backend.rs`, with the memory backend standing in for yours (any
/// [`Suite::new`] works the same way):
///
/// ```no_run
/// use std::sync::Arc;
/// use fencelock_bench::{BenchError, FencedSubject, Suite};
/// use fencelock_memory::{MemoryBaseline, MemoryConfig};
///
/// async fn my_backend() -> Result<(Suite, ()), BenchError> {
///     let backend = Arc::new(fencelock_memory::MemoryLockBackend::new());
///     let storage = Arc::new(fencelock_memory::MemoryStorage::new());
///     let fenced = FencedSubject::new(backend, storage);
///     let suite = Suite::new("my-backend", fenced, Arc::new(MemoryBaseline::new()), vec![]);
///     Ok((suite, ()))
/// }
///
/// fencelock_bench::define_bench!(
///     // Any backend's config gives its own suite.
///     memory => async { Ok((Suite::connect(&MemoryConfig).await?, ())) },
///     mine => my_backend(),
/// );
/// ```
///
/// The groups are named `<backend>/<scenario id>` (`my-backend/acquire_release`, ...).
#[macro_export]
macro_rules! define_bench {
    ($($name:ident => $setup:expr),+ $(,)?) => {
        $(
            fn $name(c: &mut $crate::criterion::reexport::Criterion) {
                let rt = $crate::criterion::runtime();
                let (suite, keep) = rt
                    .block_on($setup)
                    .unwrap_or_else(|e: $crate::BenchError| panic!("bench setup failed: {e}"));
                $crate::criterion::bench_suite(c, &rt, &suite);
                rt.block_on(suite.close())
                    .unwrap_or_else(|e| panic!("bench clean-up failed: {e}"));
                drop(keep);
            }
        )+
        $crate::criterion::reexport::criterion_group!(benches, $($name),+);
        $crate::criterion::reexport::criterion_main!(benches);
    };
}

/// The runtime the benches run on: one thread, so the figures carry no cross-thread wake-up
/// costs and baselines and the fenced lock are timed alike.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a Tokio runtime: {e}"))
}

fn fail(e: impl std::fmt::Display) -> ! {
    panic!("bench step failed: {e}")
}

/// Every step of [`Scenario::STEPS`] against `suite`, one criterion group each
/// (`<backend>/<scenario id>`), with the [`Settings::default`] concurrency and keys.
pub fn bench_suite(c: &mut Criterion, rt: &Runtime, suite: &Suite) {
    let settings = Settings::default();
    for step in Scenario::STEPS {
        let cases = rt
            .block_on(prepare(suite, step, &settings))
            .unwrap_or_else(|e| fail(e));
        let mut group = c.benchmark_group(format!("{}/{}", suite.backend, step.id()));
        if step.pauses() {
            // Each operation waits before its measured part: keep criterion's clock short.
            group
                .sample_size(10)
                .warm_up_time(Duration::from_millis(100))
                .measurement_time(Duration::from_millis(300));
        } else if step.is_throughput() {
            group.sample_size(10);
        }
        for case in &cases {
            let name = case.name(step, &settings);
            match &case.workload {
                Workload::Latency(op) => bench_op(&mut group, rt, &name, op.as_ref()),
                Workload::Contended { subject, keys } => {
                    group.bench_function(name, |b| {
                        b.to_async(rt).iter_custom(|iters| {
                            let subject = subject.clone();
                            let keys = keys.clone();
                            async move {
                                contended(subject, keys, settings.concurrency, Stop::Ops(iters))
                                    .await
                                    .unwrap_or_else(|e| fail(e))
                                    .elapsed
                            }
                        })
                    });
                }
            }
        }
        group.finish();
        rt.block_on(finish_all(cases)).unwrap_or_else(|e| fail(e));
    }
}

/// Times `op` per iteration (the wall time of a batch, or the sum of self-measured latencies).
fn bench_op(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, op: &dyn Op) {
    group.bench_function(name, |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let start = Instant::now();
            let mut own = Duration::ZERO;
            let mut self_timed = false;
            for _ in 0..iters {
                if let Some(latency) = op.once().await.unwrap_or_else(|e| fail(e)) {
                    own += latency;
                    self_timed = true;
                }
            }
            if self_timed { own } else { start.elapsed() }
        })
    });
}
