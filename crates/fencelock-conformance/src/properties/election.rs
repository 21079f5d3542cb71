//! Leader election (fencelock-core's `Election`, a campaign being the election key's lock
//! held with the watchdog), on every backend that claims `Capabilities::kinds.election`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{Election, Error, FencingToken, Locker};
use tokio::time::{sleep, timeout};

use super::support::{not_applicable, LONG_TTL, PATIENCE, assert_stale, key};
use crate::Setup;

/// The election, or `None` after checking that a backend which does not claim elections is
/// refused with `Unsupported` (never a silent pass).
fn election(s: &Setup, name: &str) -> Option<Election> {
    let locker = Locker::new(s.backend.clone());
    let election = Election::new(&locker, key(name).as_str());
    if s.backend.capabilities().kinds.election {
        return Some(election.expect("Election::new failed"));
    }
    match election {
        Err(Error::Unsupported { .. }) => None,
        other => panic!("elections are not claimed: expected Unsupported, got {other:?}"),
    }
}

declare_properties!(__fencelock_conformance_election, {
    /// Campaigners that contend each lead in turn: one leader per term (no two leaders'
    /// terms overlap in time), and terms strictly increase in the order leaders took office.
    pub async fn one_leader_per_term_and_terms_increase(s: &Setup) {
        let Some(election) = election(s, "terms") else {
            return not_applicable("one_leader_per_term_and_terms_increase", "the backend offers no election (LockKinds::election)");
        };
        let leading = Arc::new(Mutex::new(None::<FencingToken>));
        let terms = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (election, leading, terms) = (election.clone(), leading.clone(), terms.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let leader = election.campaign().ttl(LONG_TTL).wait(PATIENCE * 3).await.unwrap();
                    let term = leader.term();
                    if let Some(other) = leading.lock().unwrap().replace(term) {
                        panic!("term {term} began while term {other} led");
                    }
                    terms.lock().unwrap().push(term);
                    sleep(Duration::from_millis(20)).await;
                    assert_eq!(
                        leading.lock().unwrap().take(),
                        Some(term),
                        "term {term} was not the one leading when its leader resigned"
                    );
                    assert!(leader.resign().await.unwrap(), "a leader was deposed without contention");
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let terms = terms.lock().unwrap().clone();
        assert_eq!(
            terms.len(),
            9,
            "3 campaigners of 3 terms each did not lead 9 terms"
        );
        assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms out of order: {terms:?}");
    }

    /// An observer reports every change: each new leader with its term, and each time the
    /// election has none; terms it could not see are counted in `missed`, never dropped.
    pub async fn observer_sees_every_change(s: &Setup) {
        let Some(election) = election(s, "observed") else {
            return not_applicable("observer_sees_every_change", "the backend offers no election (LockKinds::election)");
        };
        let mut observer = election.observe().poll(Duration::from_millis(20));
        let first = observer.changed().await.unwrap();
        assert_eq!(
            (first.leader, first.missed),
            (None, 0),
            "an observer's first look reports a leader or missed terms before anyone ran"
        );
        for _ in 0..3 {
            let leader = election.campaign().ttl(LONG_TTL).wait(PATIENCE).await.unwrap();
            let seen = timeout(PATIENCE, observer.changed()).await.expect("leader not observed").unwrap();
            assert_eq!(
                seen.leader,
                Some(leader.fence()),
                "the observer does not report the new leader"
            );
            assert_eq!(
                seen.last_term,
                Some(leader.term()),
                "the observer does not report the new leader's term"
            );
            assert_eq!(
                seen.missed, 0,
                "the observer counted a missed term though it saw every one"
            );
            assert!(
                leader.resign().await.unwrap(),
                "resign of a leader still in office answered false (not leading)"
            );
            let seen = timeout(PATIENCE, observer.changed()).await.expect("resignation not observed").unwrap();
            assert_eq!(
                seen.leader, None,
                "the observer still reports a leader after the resignation"
            );
            assert_eq!(
                seen.missed, 0,
                "the observer counted a missed term though it saw every one"
            );
        }
        // Two terms between two looks: the second is seen, the first counted as missed.
        for _ in 0..2 {
            let leader = election.campaign().ttl(LONG_TTL).wait(PATIENCE).await.unwrap();
            assert!(
                leader.resign().await.unwrap(),
                "resign of a leader still in office answered false (not leading)"
            );
        }
        let last = election.campaign().ttl(LONG_TTL).wait(PATIENCE).await.unwrap();
        let seen = timeout(PATIENCE, observer.changed()).await.expect("change not observed").unwrap();
        assert_eq!(
            seen.leader,
            Some(last.fence()),
            "the observer does not report the latest leader"
        );
        assert_eq!(seen.missed, 2, "terms that came and went unseen were not counted");
        assert!(
            last.resign().await.unwrap(),
            "resign of a leader still in office answered false (not leading)"
        );
    }

    /// A leader paused past its lease is deposed: the next leader's term is greater, its
    /// writes are admitted, and the old leader's write is refused as stale.
    pub async fn paused_leader_is_refused_after_failover(s: &Setup) {
        let Some(election) = election(s, "failover") else {
            return not_applicable("paused_leader_is_refused_after_failover", "the backend offers no election (LockKinds::election)");
        };
        let resource = key("failover-data");
        let old = election.campaign().ttl(s.short_ttl()).watchdog(false).wait(PATIENCE).await.unwrap();
        s.storage.write(&resource, old.fence(), b"old").await.unwrap();
        // The successor is another campaigner: a clone holds on its own, while the same value
        // campaigning again for a term it still holds would be refused as re-entry.
        let next = election.clone().campaign().ttl(LONG_TTL).wait(PATIENCE).await.unwrap();
        assert!(next.term() > old.term(), "terms did not increase over a failover");
        assert!(!old.is_leader(), "the deposed leader still believes it leads");
        s.storage.write(&resource, next.fence(), b"new").await.unwrap();
        assert_stale(s.storage.write(&resource, old.fence(), b"stale").await, old.fence(), next.fence());
        let info = election.leader().await.unwrap();
        assert_eq!(
            info.holder,
            Some(next.fence()),
            "the election does not name the leader after the failover"
        );
        assert!(
            !old.resign().await.unwrap(),
            "the deposed leader's resign answered true (still leading)"
        );
        assert!(
            next.resign().await.unwrap(),
            "resign of the new leader answered false (not leading)"
        );
    }
});
