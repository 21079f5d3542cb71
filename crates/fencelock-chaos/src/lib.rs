#![cfg_attr(docsrs, feature(doc_cfg))]
//! Jepsen-style fault injection against a real fencelock backend, with a checker and a negative
//! control (DESIGN section 6). The `fencelock chaos` command is a thin front end to [`run`].
//!
//! Worker processes loop over lock, fenced read, work, fenced write of a counter + 1, release,
//! and report every step on stdout. The nemesis pauses holders with SIGSTOP past their ttl,
//! kills and restarts servers a backend spawned for the run, partitions the
//! network through fault proxies and ends Postgres sessions. The checker then reads the
//! history and the final counter: no admitted write lost, no fence admitted after a newer one.
//!
//! Every storage operation is also recorded with its invoke and complete times, and
//! [`linearizability::check`] searches each key's history for an order that obeys the fence
//! rule. [`ChaosReport::write_history`] exports it as JSON lines ([`history`] has the format);
//! [`ChaosReport::html`] renders the report as a self-contained page with a time line per
//! worker and latency plots.
//!
//! The negative control repeats the workload and the faults against the same storage without
//! fencing: every worker reads with `peek` and writes with one shared fence (the largest token
//! and one fixed owner), which the storage always admits. It must show lost updates, or the
//! run proves nothing and is reported [`Outcome::ControlFoundNothing`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), fencelock_chaos::ChaosError> {
//! use fencelock_chaos::{ChaosConfig, Persistence, Target, WorkerLauncher};
//!
//! // Three Redlock nodes without persistence, started through the backend's own spawner (the
//! // build registers it with the facade's `servers` feature).
//! let target = Target::Spawn { scheme: "redlock".into(), nodes: 3, persistence: Persistence::None };
//! let config = ChaosConfig::new(target);
//! // This program must run `fencelock_chaos::serve_worker()` when started as `<exe> worker`.
//! let launcher = WorkerLauncher::current_exe(["worker"])?;
//! let report = fencelock_chaos::run(&config, &launcher, &mut |p| eprintln!("{p}")).await?;
//! print!("{}", report.text());
//! # Ok(()) }
//! ```
//!
//! This crate names no backend: specs resolve through the facade's registry
//! (`fencelock::spec`), and the servers the kill fault takes down come from the scheme's own
//! spawner (`Scheme::spawn`, usually built on `fencelock-servers`, where the fault proxy comes
//! from too).
#![warn(missing_docs)]

mod checker;
mod clock;
mod cluster;
mod config;
mod error;
mod events;
pub mod history;
pub mod linearizability;
mod nemesis;
mod page;
mod phase;
mod process;
mod report;
mod run;
mod worker;

pub use checker::Verdict;
pub use config::{
    ChaosConfig, FaultKind, MAX_MEMBERS, MIN_TTL, Mode, Persistence, Target, Workload,
};
pub use error::{ChaosError, Result};
pub use linearizability::Linearizability;
pub use nemesis::FaultTally;
pub use process::WorkerLauncher;
pub use report::{ChaosReport, Outcome, Progress, RunReport};
pub use run::run;
pub use worker::serve_worker;
