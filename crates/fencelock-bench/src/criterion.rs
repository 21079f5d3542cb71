//! The criterion side: [`bench_suite`] puts every scenario of a [`Suite`] into criterion
//! groups, baseline and peers next to fencelock, and [`define_bench!`](crate::define_bench)
//! makes a bench target of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::criterion::{BenchmarkGroup, Criterion, measurement::WallTime};
use tokio::runtime::Runtime;

use crate::scenario::{
    IdleRoundTrip, RoundTrip, Scenario, Settings, Stop, contended, contended_keys, contenders,
    settle_time,
};
use crate::suite::{Op, Subject, Suite};

pub use ::criterion as reexport;

/// Expands to a criterion bench `main` with one function per backend: each `$setup` is an
/// `async` block returning `Result<(Suite, impl Sized), BenchError>`, the second part kept
/// alive for the whole run (a spawned server, a throwaway schema).
///
/// ```ignore
/// fencelock_bench::define_bench!(memory => async { Ok((Suite::memory(), ())) });
/// ```
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
/// costs and baselines and fencelock are timed alike.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a Tokio runtime: {e}"))
}

fn fail(e: crate::BenchError) -> ! {
    panic!("bench step failed: {e}")
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

/// Every scenario of `suite`, one criterion group each (`<backend>/<scenario>`), the baseline
/// and the peers in the same group as fencelock.
pub fn bench_suite(c: &mut Criterion, rt: &Runtime, suite: &Suite) {
    let settings = Settings::default();
    let backend = &suite.backend;
    let key = |index: usize, name: &str| suite.key(index, name).unwrap_or_else(|e| fail(e));

    let mut group = c.benchmark_group(format!("{backend}/{}", Scenario::RoundTrip.id()));
    let round_trip = RoundTrip(suite.baseline.clone());
    bench_op(
        &mut group,
        rt,
        &suite.baseline.round_trip_label(),
        &round_trip,
    );
    group.finish();

    let mut group = c.benchmark_group(format!("{backend}/{}", Scenario::AcquireRelease.id()));
    for (index, (subject, _)) in contenders(suite).into_iter().enumerate() {
        let op = AcquireReleaseOp {
            subject: subject.clone(),
            key: key(index, "acquire-release"),
        };
        bench_op(&mut group, rt, &subject.label(), &op);
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{backend}/{}", Scenario::FencedWrite.id()));
    let plain = rt
        .block_on(suite.baseline.writer(&key(0, "write")))
        .unwrap_or_else(|e| fail(e));
    bench_op(
        &mut group,
        rt,
        &suite.baseline.write_label(),
        plain.as_ref(),
    );
    rt.block_on(plain.finish()).unwrap_or_else(|e| fail(e));
    let fenced = rt
        .block_on(suite.fencelock.writer(&key(1, "write")))
        .unwrap_or_else(|e| fail(e));
    bench_op(
        &mut group,
        rt,
        &format!("{} fenced write", suite.fencelock.label()),
        fenced.as_ref(),
    );
    rt.block_on(fenced.finish()).unwrap_or_else(|e| fail(e));
    group.finish();

    // Each hand-off waits `settle` before the measured part, so keep criterion's clock short.
    let mut group = c.benchmark_group(format!("{backend}/{}", Scenario::Handoff.id()));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300));
    let settle = settle_time(Duration::from_micros(200));
    let idle = IdleRoundTrip {
        baseline: suite.baseline.clone(),
        settle,
    };
    bench_op(
        &mut group,
        rt,
        &format!("{} after idle", suite.baseline.round_trip_label()),
        &idle,
    );
    let handoff = suite.fencelock.handoff(&key(1, "handoff"), settle);
    bench_op(&mut group, rt, &suite.fencelock.label(), handoff.as_ref());
    group.finish();

    let mut group = c.benchmark_group(format!("{backend}/{}", Scenario::Extend.id()));
    bench_op(
        &mut group,
        rt,
        &suite.baseline.round_trip_label(),
        &round_trip,
    );
    let renewer = rt
        .block_on(suite.fencelock.renewer(&key(1, "extend")))
        .unwrap_or_else(|e| fail(e));
    bench_op(&mut group, rt, &suite.fencelock.label(), renewer.as_ref());
    rt.block_on(renewer.finish()).unwrap_or_else(|e| fail(e));
    group.finish();

    for scenario in [Scenario::ContendedOneKey, Scenario::ContendedManyKeys] {
        let name = format!("{backend}/{}", scenario.id());
        let mut group = c.benchmark_group(name);
        group.sample_size(10);
        for (index, (subject, _)) in contenders(suite).into_iter().enumerate() {
            let keys =
                contended_keys(suite, index, scenario, &settings).unwrap_or_else(|e| fail(e));
            let concurrency = settings.concurrency;
            group.bench_function(subject.label(), |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let subject = subject.clone();
                    let keys = keys.clone();
                    async move {
                        contended(subject, keys, concurrency, Stop::Ops(iters))
                            .await
                            .unwrap_or_else(|e| fail(e))
                            .elapsed
                    }
                })
            });
        }
        group.finish();
    }
}

struct AcquireReleaseOp {
    subject: Arc<dyn Subject>,
    key: fencelock_core::LockKey,
}

#[async_trait::async_trait]
impl Op for AcquireReleaseOp {
    async fn once(&self) -> crate::Result<Option<Duration>> {
        self.subject.acquire_release(&self.key).await?;
        Ok(None)
    }
}
