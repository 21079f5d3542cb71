//! Every workload of `fencelock chaos` against the memory backend, whose workers are threads
//! of the test that the pause fault stops whole (watchdog included): with fencing the checker
//! and the history checker find nothing, and the negative control without fencing loses
//! updates, so the checker is known to be able to fail on that workload.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock::spec::BackendSpec;
use std::collections::{BTreeSet, HashMap};

use fencelock_chaos::history::OpOutcome;
use fencelock_chaos::{
    ChaosConfig, ChaosReport, Linearizability, Outcome, Target, WorkerLauncher, Workload,
};

/// A short run of `workload` on `memory://` with pauses, to carry out as it is or changed.
fn config(workload: Workload) -> ChaosConfig {
    let spec = BackendSpec::parse("memory://").unwrap();
    let mut config = ChaosConfig::new(Target::Backend(Box::new(spec)));
    config.workload = workload;
    config.workers = 5;
    config.ttl = Duration::from_millis(100);
    config.duration = Duration::from_secs(4);
    config.control_duration = Some(Duration::from_secs(4));
    config
}

/// Carries out `config`.
async fn run_config(config: &ChaosConfig) -> ChaosReport {
    // Never started: memory:// workers are threads.
    let launcher = WorkerLauncher {
        program: "/nonexistent/fencelock".into(),
        args: Vec::new(),
    };
    fencelock_chaos::run(config, &launcher, &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("{} run failed: {e}", config.workload))
}

/// A short run of `workload`, as [`config`] sets it.
async fn run(workload: Workload) -> ChaosReport {
    run_config(&config(workload)).await
}

/// The fenced run is clean and had paused holders refused; the control lost updates.
fn assert_passes(report: &ChaosReport) {
    let (f, c) = (&report.fenced.verdict, &report.control.verdict);
    let text = report.text();
    assert_eq!(report.outcome, Outcome::Pass, "{text}");
    assert_eq!((f.violations, f.lost_updates), (0, 0), "{text}");
    assert!(
        matches!(
            report.fenced.linearizability,
            Linearizability::Linearizable { .. }
        ),
        "{text}"
    );
    assert!(f.writes_admitted > 0, "{text}");
    assert!(f.final_value >= f.writes_admitted, "{text}");
    assert!(report.fenced.faults.pauses > 0, "{text}");
    assert!(c.lost_updates > 0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_workload_runs_on_threads_sharing_memory() {
    let report = run(Workload::Lock).await;
    assert_passes(&report);
    assert!(report.backend.contains("threads"), "{}", report.backend);
    assert!(
        report.fenced.faults.paused_writes_refused > 0,
        "{}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_holders_keep_fenced_per_slot_counters() {
    let report = run(Workload::Semaphore { permits: 2 }).await;
    assert_passes(&report);
    // Each slot is a counter of its own, and both were worked on.
    let keys: BTreeSet<&str> = report
        .fenced
        .history
        .operations
        .iter()
        .map(|op| op.key.as_str())
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k.contains("/counter/")), "{keys:?}");
    assert!(
        report.fenced.faults.paused_writes_refused > 0,
        "{}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_loses_its_term_and_its_writes() {
    let report = run(Workload::Election).await;
    assert_passes(&report);
    // A paused leader stops renewing: its write after the pause is refused once a later
    // term has written.
    assert!(
        report.fenced.faults.paused_writes_refused > 0,
        "{}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_fence_and_never_read_past_a_later_writer() {
    let report = run(Workload::RwLock).await;
    assert_passes(&report);
    let f = &report.fenced.verdict;
    // Readers read twice per grant, writers once: more reads than writes were admitted.
    assert!(f.reads_admitted > f.writes_admitted, "{}", report.text());
    // Admitted reads by several readers of one read phase, under one fence.
    let mut readers = HashMap::new();
    for op in &report.fenced.history.operations {
        if let (Some(fence), Some(worker), OpOutcome::Ok) = (op.fence, op.process, op.outcome) {
            readers
                .entry(fence)
                .or_insert_with(BTreeSet::new)
                .insert(worker);
        }
    }
    assert!(
        readers.values().any(|workers| workers.len() > 1),
        "no read phase was shared: {}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_sets_fence_each_member_with_its_own_key() {
    let report = run(Workload::Composite { members: 2 }).await;
    assert_passes(&report);
    let text = report.text();
    assert!(report.fenced.faults.paused_writes_refused > 0, "{text}");
    // Three counters (one more than a set's keys), each written under its own key's fences.
    let mut writers: HashMap<&str, Vec<_>> = HashMap::new();
    for op in &report.fenced.history.operations {
        if let (Some(fence), fencelock_chaos::history::OpKind::Write, OpOutcome::Ok) =
            (op.fence, op.kind, op.outcome)
        {
            writers.entry(op.key.as_str()).or_default().push(fence);
        }
    }
    assert_eq!(writers.len(), 3, "{writers:?}");
    assert!(
        writers.keys().all(|k| k.contains("/counter/")),
        "{writers:?}"
    );
}

/// A control too short to see a fault bite goes on until its first lost update, within the
/// fenced run's length, instead of reporting that the run proves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_that_lost_nothing_yet_goes_on_until_it_does() {
    let mut config = config(Workload::Lock);
    config.workers = 4;
    config.duration = Duration::from_secs(8);
    // Shorter than the pause schedule's first gap: nothing can have been lost by then.
    config.control_duration = Some(Duration::from_millis(10));
    let report = run_config(&config).await;
    assert_passes(&report);
    // It stopped at its first lost update, not at the limit.
    let text = report.text();
    assert!(report.control.elapsed < Duration::from_secs(8), "{text}");
}
