//! A whole chaos run: check the configuration, set up the servers, the fenced run, the
//! control run, the report.

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::{ChaosConfig, FaultKind, Mode, Target, Workload};
use crate::error::{ChaosError, Result};
use crate::nemesis;
use crate::phase::{Length, Settings, run_phase};
use crate::process::WorkerLauncher;
use crate::report::{ChaosReport, Outcome, Progress};

/// Runs `config`: the fenced run, then the negative control, and reports both.
///
/// Workers are started with `launcher`. `progress` is called about once a second with where
/// the current run stands. A run that was carried out returns its report whatever it found;
/// [`ChaosReport::outcome`] says whether it passed. Dropping the future stops everything: the
/// workers and the spawned servers are killed.
pub async fn run(
    config: &ChaosConfig,
    launcher: &WorkerLauncher,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<ChaosReport> {
    config.validate()?;
    let faults = config.distinct_faults();
    let tag = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
    let proxied = faults.contains(&FaultKind::Partition);
    let mut cluster = match &config.target {
        Target::Spawn {
            scheme,
            nodes,
            persistence,
        } => Cluster::spawn(scheme, *nodes, *persistence, &tag, proxied).await?,
        Target::Backend(spec) => Cluster::external(spec, &tag, proxied).await?,
    };
    if let Some(storage) = &config.storage {
        cluster.store_in(storage, proxied).await?;
    }
    nemesis::check_applicable(&faults, &cluster)?;
    // Connecting once up front checks the spec (and migrates a Postgres schema) before any
    // worker starts.
    cluster.storage().await?;
    let backend = cluster.backend().await?;
    check_workload(config.workload, backend.as_ref())?;
    // A ttl below the lock service's shortest lease would fail every grant.
    let min_ttl = backend.capabilities().min_ttl;
    if config.ttl < min_ttl {
        return Err(ChaosError::config(format!(
            "{} grants leases of at least {min_ttl:?}: give a ttl of at least that \
             (--ttl {}ms)",
            cluster.described,
            min_ttl.as_millis()
        )));
    }
    let settings = Settings {
        workers: config.workers,
        ttl: config.ttl,
        work: config.work(),
        op_timeout: config.op_timeout,
        faults,
        workload: config.workload,
        search_budget: config.search_budget,
        tag,
    };
    let cluster = Arc::new(cluster);
    let fenced = run_phase(
        &cluster,
        &settings,
        launcher,
        Mode::Fenced,
        Length {
            duration: config.duration,
            until_lost_within: None,
        },
        progress,
    )
    .await?;
    let control = run_phase(
        &cluster,
        &settings,
        launcher,
        Mode::Control,
        Length {
            duration: config.control_duration(),
            until_lost_within: Some(config.control_limit()),
        },
        progress,
    )
    .await?;
    let outcome = Outcome::of(&fenced, &control);
    Ok(ChaosReport {
        backend: cluster.described.clone(),
        workload: settings.workload,
        workers: settings.workers,
        ttl: settings.ttl,
        work: settings.work,
        faults: settings.faults,
        session_fault: cluster.faults.as_ref().map(|faults| faults.label()),
        fenced,
        control,
        outcome,
    })
}

/// Refuses a workload whose lock kind the backend does not offer, before any worker starts.
fn check_workload(workload: Workload, backend: &dyn fencelock::LockBackend) -> Result<()> {
    let kinds = backend.capabilities().kinds;
    let (offered, what) = match workload {
        Workload::Lock | Workload::Composite { .. } => (true, ""),
        Workload::Semaphore { .. } => (kinds.semaphore, "semaphores"),
        Workload::Election => (kinds.election, "leader election"),
        Workload::RwLock => (kinds.shared, "shared (reader) locks"),
    };
    if offered {
        Ok(())
    } else {
        Err(ChaosError::config(format!(
            "the {} workload needs {what}, which {} does not offer",
            workload.name(),
            backend.name()
        )))
    }
}
