//! A [`Suite`]: the fenced lock on one backend, the raw baseline on the same server, and
//! peers, with the keys of one run and what cleans them up.

use std::sync::Arc;

use fencelock_core::tools::{BenchKit, Peer};
use fencelock_core::{BackendConfig, LockKey};

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Subject};

/// The first part of every key of every run.
const KEY_ROOT: &str = "fencelock-bench";

/// The fenced lock on one backend, the raw baseline on the same server, and peers: what
/// [`run_all`](crate::run_all) and the criterion benches measure.
///
/// [`Suite::connect`] builds one from any backend's config, with the kit the backend
/// provides ([`BackendConfig::bench_kit`]); [`Suite::new`] builds one from parts (see the
/// crate docs for a whole example).
#[derive(Debug, Clone)]
pub struct Suite {
    /// The backend, as shown in reports (`memory`, `redis`, `pg-lease`, ...).
    pub backend: String,
    /// The fenced lock on that backend.
    pub fenced: Arc<FencedSubject>,
    /// The raw baseline on the same server.
    pub baseline: Arc<dyn Baseline>,
    /// Other libraries on the same server.
    pub peers: Vec<Arc<dyn Subject>>,
    cleanup: Option<Arc<dyn Cleanup>>,
    run_id: String,
}

impl Suite {
    /// A suite from its parts. `backend` names the backend in reports. Each suite gets a
    /// fresh random run id, so its keys are its own (see [`key`](Self::key)).
    ///
    /// Without [`with_cleanup`](Self::with_cleanup), [`close`](Self::close) removes only
    /// what the baseline created: the fenced lock's token counters and stored values for the
    /// run's keys stay on the server.
    pub fn new(
        backend: impl Into<String>,
        fenced: FencedSubject,
        baseline: Arc<dyn Baseline>,
        peers: Vec<Arc<dyn Subject>>,
    ) -> Self {
        Suite {
            backend: backend.into(),
            fenced: Arc::new(fenced),
            baseline,
            peers,
            cleanup: None,
            run_id: format!("{:016x}", rand::random::<u64>()),
        }
    }

    /// The suite of the backend `config` names, from the kit the backend provides
    /// ([`BackendConfig::bench_kit`]): its fenced lock, its raw baseline, its peers and its
    /// cleanup. A backend without a kit is [`BenchError::Run`] saying so.
    pub async fn connect(config: &dyn BackendConfig) -> Result<Self> {
        match config.bench_kit().await? {
            Some(kit) => Ok(Self::from_kit(kit)),
            None => Err(BenchError::Run(format!(
                "fencelock bench has no baseline for {} yet",
                config.redacted_url()
            ))),
        }
    }

    /// The suite of a backend's kit.
    pub fn from_kit(kit: BenchKit) -> Self {
        let peers = kit
            .peers
            .into_iter()
            .filter_map(|peer| match peer {
                Peer::Fenced(connected) => {
                    let subject: Arc<dyn Subject> =
                        Arc::new(FencedSubject::new(connected.backend, connected.storage));
                    Some(subject)
                }
                Peer::Raw(subject) => Some(subject),
                // A kind of peer this harness does not know yet is not measured.
                _ => None,
            })
            .collect();
        let fenced = FencedSubject::new(kit.fenced.backend, kit.fenced.storage);
        let suite = Suite::new(kit.name, fenced, kit.baseline, peers);
        match kit.cleanup {
            Some(cleanup) => suite.with_cleanup(cleanup),
            None => suite,
        }
    }

    /// What [`close`](Self::close) runs to remove the fenced lock's state for the run's keys
    /// (locks, token counters, stored values) from its servers.
    pub fn with_cleanup(mut self, cleanup: Arc<dyn Cleanup>) -> Self {
        self.cleanup = Some(cleanup);
        self
    }

    /// `fencelock-bench/<run id>/`: the start of every key of this suite's runs. The run id
    /// is 64 random bits, so no other run, and no application, shares it.
    pub fn key_prefix(&self) -> String {
        format!("{KEY_ROOT}/{}/", self.run_id)
    }

    /// A key no other run and no other subject of this run uses: the runs of each subject
    /// start from a free lock, and raw baselines never contend with the fenced lock.
    /// `subject` is the subject's place in the run (0 the baseline, 1 the fenced lock, then
    /// the peers).
    pub fn key(&self, subject: usize, name: &str) -> Result<LockKey> {
        Ok(LockKey::new(format!(
            "{}{subject}/{name}",
            self.key_prefix()
        ))?)
    }

    /// Everything that contends in the suite, with whether it is the baseline: the baseline
    /// first, then the fenced lock, then the peers.
    pub(crate) fn contenders(&self) -> Vec<(Arc<dyn Subject>, bool)> {
        let baseline: Arc<dyn Subject> = self.baseline.clone();
        let fenced: Arc<dyn Subject> = self.fenced.clone();
        let mut all = vec![(baseline, true), (fenced, false)];
        all.extend(self.peers.iter().map(|peer| (peer.clone(), false)));
        all
    }

    /// Removes what the run left on the servers: first it ends the fenced lock's requests
    /// ([`FencedSubject::shutdown`]: a stopped run's queue leaves are awaited), then the
    /// fenced lock's locks, token
    /// counters and stored values under [`key_prefix`](Self::key_prefix) (with a
    /// [`Cleanup`]; the suites of this crate have one), then what the baseline created
    /// ([`Baseline::close`]). Both are tried; the first error is returned. Call it once, after
    /// the run, whatever the run's outcome.
    ///
    /// A backend never deletes a token counter, because a later holder of the same key must
    /// get a higher token. Deleting the counters of a finished run is safe all the same: its
    /// keys are under a prefix no one else uses, and no one will ever lock them again. What
    /// stays is what a backend installs once and every run shares: the PostgreSQL schema
    /// with fencelock's tables and functions.
    pub async fn close(&self) -> Result<()> {
        // A stopped run's dropped requests still send their queue leaves; a leave landing
        // after the cleanup would leave its place behind. A release that fails here needs
        // nothing more: the cleanup removes the run's locks with everything else.
        let _ = self.fenced.shutdown().await;
        let cleaned = match &self.cleanup {
            Some(cleanup) => cleanup.clean(&self.key_prefix()).await,
            None => Ok(()),
        };
        let closed = self.baseline.close().await;
        Ok(cleaned.and(closed)?)
    }
}
