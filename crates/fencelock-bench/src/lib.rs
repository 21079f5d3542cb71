#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod cases;
mod composite;
mod error;
mod fenced_subject;
mod histogram;
mod kinds;
mod report;
mod run;
mod scenario;
mod subject;
mod suite;
mod table;

#[cfg(feature = "criterion")]
pub mod criterion;

pub use error::{BenchError, Result};
pub use fenced_subject::FencedSubject;
pub use histogram::Histogram;
pub use report::{Measurement, Report, Row};
pub use run::{run_all, run_sweep};
pub use scenario::{COMPOSITE_LARGE, COMPOSITE_SMALL, FAILOVER_TTL, PERMITS, Scenario, Settings};
pub use subject::{Baseline, Cleanup, Op, RawTryLock, Subject, TTL};
pub use suite::Suite;
pub use table::format_latency;
