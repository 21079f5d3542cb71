//! What each step of [`Scenario::STEPS`] measures: its cases, prepared against a [`Suite`].
//! Both drivers take a step's cases from [`prepare`] and only differ in how they time them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencelock_core::LockKey;

use crate::composite::{SetForm, SetGrant};
use crate::error::Result;
use crate::kinds::{Failover, Kind, KindGrant};
use crate::report::Measurement;
use crate::scenario::{FAILOVER_TTL, Scenario, Settings};
use crate::subject::{Baseline, Op, Subject};
use crate::suite::Suite;

/// How long a hand-off step measures round trips to size the waiter's pause.
const CALIBRATION: Duration = Duration::from_millis(50);

/// What one case runs.
pub(crate) enum Workload {
    /// One prepared operation, back to back.
    Latency(Box<dyn Op>),
    /// `Settings::concurrency` tasks lock and release keys drawn from `keys` through
    /// `subject`.
    Contended {
        subject: Arc<dyn Subject>,
        keys: Arc<Vec<LockKey>>,
    },
}

/// One subject in one step: one row of a report, one function of a criterion group.
pub(crate) struct Case {
    /// The scenario the row is reported under (the step's, or the unit it measures along).
    pub(crate) scenario: Scenario,
    /// The subject's label.
    pub(crate) subject: String,
    /// Whether the row is its scenario's baseline.
    pub(crate) baseline: bool,
    /// The lease ttl the case runs with, when its row is also counted in ttls.
    pub(crate) ttl: Option<Duration>,
    pub(crate) workload: Workload,
}

impl Case {
    /// The case's name within its step: the subject, and the scenario when it is not the
    /// step's own (`raw PING (round trip after idle)` in the hand-off step).
    pub(crate) fn name(&self, step: Scenario, settings: &Settings) -> String {
        if self.scenario == step {
            self.subject.clone()
        } else {
            format!("{} ({})", self.subject, self.scenario.title(settings))
        }
    }

    /// Undoes the case's preparation (releases held leases).
    pub(crate) async fn finish(self) -> Result<()> {
        match self.workload {
            Workload::Latency(op) => Ok(op.finish().await?),
            Workload::Contended { .. } => Ok(()),
        }
    }
}

/// Finishes every case, returning the first error after trying them all.
pub(crate) async fn finish_all(cases: Vec<Case>) -> Result<()> {
    let mut outcome = Ok(());
    for case in cases {
        let finished = case.finish().await;
        outcome = outcome.and(finished);
    }
    outcome
}

/// The cases of `step` against `suite`, prepared (leases taken where a case needs one):
/// the single place that says what each scenario measures. Finish them with
/// [`finish_all`]. A scenario that is not in [`Scenario::STEPS`] has no cases, nor has a lock
/// kind the backend does not offer.
pub(crate) async fn prepare(
    suite: &Suite,
    step: Scenario,
    settings: &Settings,
) -> Result<Vec<Case>> {
    let baseline = &suite.baseline;
    let fenced = &suite.fenced;
    let case = |scenario, subject, baseline, op| Case {
        scenario,
        subject,
        baseline,
        ttl: None,
        workload: Workload::Latency(op),
    };
    Ok(match step {
        Scenario::RoundTrip => vec![case(
            step,
            baseline.round_trip_label(),
            true,
            Box::new(RoundTrip(baseline.clone())),
        )],
        Scenario::AcquireRelease => {
            let mut cases = Vec::new();
            for (index, (subject, is_baseline)) in suite.contenders().into_iter().enumerate() {
                let key = suite.key(index, "acquire-release")?;
                cases.push(case(
                    step,
                    subject.label(),
                    is_baseline,
                    Box::new(AcquireRelease { subject, key }),
                ));
            }
            cases
        }
        Scenario::FencedWrite => vec![
            case(
                step,
                baseline.write_label(),
                true,
                baseline.writer(&suite.key(0, "write")?).await?,
            ),
            case(
                step,
                format!("{} fenced write", fenced.label()),
                false,
                fenced.writer(&suite.key(1, "write")?).await?,
            ),
        ],
        Scenario::Handoff => {
            let settle = settle_time(baseline).await?;
            vec![
                case(
                    Scenario::IdleRoundTrip,
                    baseline.round_trip_label(),
                    true,
                    Box::new(IdleRoundTrip {
                        baseline: baseline.clone(),
                        settle,
                    }),
                ),
                case(
                    step,
                    fenced.label(),
                    false,
                    fenced.handoff(&suite.key(1, "handoff")?, settle, false),
                ),
                case(
                    step,
                    format!("{} (watchdog on)", fenced.label()),
                    false,
                    fenced.handoff(&suite.key(1, "handoff-watched")?, settle, true),
                ),
            ]
        }
        Scenario::Extend => vec![case(
            step,
            fenced.label(),
            false,
            fenced.renewer(&suite.key(1, "extend")?).await?,
        )],
        Scenario::ContendedOneKey | Scenario::ContendedManyKeys => {
            let mut cases = Vec::new();
            let mut contenders = suite.contenders();
            // On a backend that queues, the barging mode beside the fair default.
            if fenced.backend().capabilities().fair {
                let barging: Arc<dyn Subject> = Arc::new(fenced.barging());
                contenders.insert(2, (barging, false));
            }
            for (index, (subject, is_baseline)) in contenders.into_iter().enumerate() {
                let keys = if step == Scenario::ContendedOneKey {
                    vec![suite.key(index, "contended")?]
                } else {
                    (0..settings.keys.max(1))
                        .map(|k| suite.key(index, &format!("spread/{k}")))
                        .collect::<Result<_>>()?
                };
                cases.push(Case {
                    scenario: step,
                    subject: subject.label(),
                    baseline: is_baseline,
                    ttl: None,
                    workload: Workload::Contended {
                        subject,
                        keys: Arc::new(keys),
                    },
                });
            }
            cases
        }
        Scenario::ExclusiveGrant => {
            let kinds = fenced.backend().capabilities().kinds;
            let locker = fenced.locker();
            let mut grants = vec![(step, Kind::Exclusive, "exclusive")];
            if kinds.shared {
                grants.push((Scenario::ReaderGrant, Kind::Reader, "reader"));
            }
            grants.push((Scenario::WriterGrant, Kind::Writer, "writer"));
            if kinds.semaphore {
                grants.push((Scenario::PermitGrant, Kind::Permit, "permit"));
            }
            let mut cases = Vec::with_capacity(grants.len());
            for (scenario, kind, name) in grants {
                let op = KindGrant::new(kind, locker, &suite.key(1, name)?)?;
                cases.push(case(
                    scenario,
                    fenced.label(),
                    kind == Kind::Exclusive,
                    Box::new(op),
                ));
            }
            cases
        }
        Scenario::ElectionFailover => {
            let backend = fenced.backend();
            let capabilities = backend.capabilities();
            if !capabilities.kinds.election {
                return Ok(Vec::new());
            }
            let ttl = FAILOVER_TTL.max(capabilities.min_ttl);
            let op = Failover::new(
                backend.clone(),
                fenced.storage().clone(),
                &suite.key(1, "election")?,
                &suite.key(1, "elected")?,
                ttl,
            )?;
            vec![Case {
                ttl: Some(ttl),
                ..case(step, fenced.label(), false, Box::new(op))
            }]
        }
        Scenario::CompositeSmall | Scenario::CompositeLarge => {
            let singles = match step {
                Scenario::CompositeSmall => Scenario::SinglesSmall,
                _ => Scenario::SinglesLarge,
            };
            let locker = fenced.locker();
            let mut cases = Vec::with_capacity(2);
            for (scenario, form, name) in [
                (singles, SetForm::Singles, "singles"),
                (step, SetForm::Composite, "composite"),
            ] {
                let keys = (0..step.set_size().unwrap_or(1))
                    .map(|k| suite.key(1, &format!("{}/{name}/{k}", step.id())))
                    .collect::<Result<Vec<_>>>()?;
                cases.push(case(
                    scenario,
                    fenced.label(),
                    form == SetForm::Singles,
                    Box::new(SetGrant::new(form, locker, keys)),
                ));
            }
            cases
        }
        Scenario::IdleRoundTrip
        | Scenario::ReaderGrant
        | Scenario::WriterGrant
        | Scenario::PermitGrant
        | Scenario::SinglesSmall
        | Scenario::SinglesLarge => Vec::new(),
    })
}

/// How long a hand-off's waiter is left to block before the holder releases: long enough
/// for its first try to come back refused, ten round trips and at least 5 ms, the round trip
/// measured now.
async fn settle_time(baseline: &Arc<dyn Baseline>) -> Result<Duration> {
    let mut measured = Measurement::default();
    measure_for(&RoundTrip(baseline.clone()), CALIBRATION, &mut measured).await?;
    Ok((measured.latencies.quantile(0.5) * 10).max(Duration::from_millis(5)))
}

/// Runs `op` for `budget` (at least once), adding to `into`.
pub(crate) async fn measure_for(
    op: &dyn Op,
    budget: Duration,
    into: &mut Measurement,
) -> Result<()> {
    let start = Instant::now();
    let end = start + budget;
    loop {
        let sent = Instant::now();
        let latency = match op.once().await? {
            Some(latency) => latency,
            None => sent.elapsed(),
        };
        into.latencies.record(latency);
        into.ops += 1;
        if Instant::now() >= end {
            break;
        }
    }
    into.elapsed += start.elapsed();
    Ok(())
}

/// Takes the free lock on a key and releases it.
struct AcquireRelease {
    subject: Arc<dyn Subject>,
    key: LockKey,
}

#[async_trait]
impl Op for AcquireRelease {
    async fn once(&self) -> fencelock_core::Result<Option<Duration>> {
        self.subject.acquire_release(&self.key).await?;
        Ok(None)
    }
}

/// One round trip to the baseline's server.
struct RoundTrip(Arc<dyn Baseline>);

#[async_trait]
impl Op for RoundTrip {
    async fn once(&self) -> fencelock_core::Result<Option<Duration>> {
        self.0.round_trip().await?;
        Ok(None)
    }
}

/// One round trip after a pause of `settle`, timed without the pause.
struct IdleRoundTrip {
    baseline: Arc<dyn Baseline>,
    settle: Duration,
}

#[async_trait]
impl Op for IdleRoundTrip {
    async fn once(&self) -> fencelock_core::Result<Option<Duration>> {
        tokio::time::sleep(self.settle).await;
        let sent = Instant::now();
        self.baseline.round_trip().await?;
        Ok(Some(sent.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashSet;

    use super::*;

    #[tokio::test]
    async fn the_steps_measure_every_scenario_once_per_subject() {
        let suite = Suite::connect(&fencelock_memory::MemoryConfig)
            .await
            .unwrap();
        let settings = Settings {
            keys: 3,
            ..Settings::default()
        };
        let mut seen = HashSet::new();
        for step in Scenario::STEPS {
            let cases = prepare(&suite, step, &settings).await.unwrap();
            assert!(
                cases.iter().any(|c| c.scenario == step),
                "{step:?} measures nothing of its own"
            );
            for case in &cases {
                assert!(
                    seen.insert((case.scenario, case.subject.clone())),
                    "{:?} by {} measured twice",
                    case.scenario,
                    case.subject
                );
                if let Workload::Contended { keys, .. } = &case.workload {
                    let expected = if step == Scenario::ContendedOneKey {
                        1
                    } else {
                        3
                    };
                    assert_eq!(keys.len(), expected, "{step:?}");
                }
            }
            finish_all(cases).await.unwrap();
        }
        let scenarios: HashSet<Scenario> = seen.iter().map(|(s, _)| *s).collect();
        assert_eq!(scenarios, Scenario::ALL.into_iter().collect());
        assert!(
            prepare(&suite, Scenario::IdleRoundTrip, &settings)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            prepare(&suite, Scenario::ReaderGrant, &settings)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_step_releases_the_leases_it_took() {
        let suite = Suite::connect(&fencelock_memory::MemoryConfig)
            .await
            .unwrap();
        let settings = Settings::default();
        for step in [Scenario::FencedWrite, Scenario::Extend] {
            let cases = prepare(&suite, step, &settings).await.unwrap();
            finish_all(cases).await.unwrap();
            // Taken again at once: the first preparation's lease is gone.
            let again = prepare(&suite, step, &settings).await.unwrap();
            finish_all(again).await.unwrap();
        }
    }
}
