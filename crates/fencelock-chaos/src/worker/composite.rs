//! The composite workload's cycle: one `Locker::lock_all` of the worker's set of keys, then a
//! fenced read-modify-write of each member's counter with that member's own fence.
//!
//! Each member's work is reported as a grant of its own (`acquired <member fence> <counter>`,
//! then its read and write), so the checker and the history checker see, per counter, the
//! same history as the lock workload's: a counter is written only under the fence of its own
//! key, whose tokens come from that key's counter alone.

use fencelock::{Error, LockKey};

use super::{Worker, bounded};
use crate::error::{ChaosError, Result};
use crate::events::Event;

/// The member keys of worker `index` under the base key `key`: `key/<j>` for the `members`
/// counters `j` from `index` on (modulo `members + 1`), each with its counter's index. Odd
/// workers list them backwards, so that callers give overlapping sets in different orders
/// and the lock's own canonical order is what keeps them from deadlocking.
pub(super) fn member_keys(
    key: &LockKey,
    members: u16,
    index: usize,
) -> Result<Vec<(LockKey, usize)>> {
    let members = usize::from(members);
    if members < 2 {
        return Err(ChaosError::config(format!(
            "a composite set of {members} keys: at least 2 are needed"
        )));
    }
    let counters = members + 1;
    let mut set = (0..members)
        .map(|j| {
            let counter = (index + j) % counters;
            Ok((LockKey::new(format!("{key}/{counter}"))?, counter))
        })
        .collect::<Result<Vec<_>>>()?;
    if !index.is_multiple_of(2) {
        set.reverse();
    }
    Ok(set)
}

impl Worker {
    /// One composite cycle: the set, each member's increment in key order, the release.
    pub(super) async fn composite_cycle(&self, members: &[(LockKey, usize)]) {
        let granted = self
            .locker
            .lock_all(members.iter().map(|(key, _)| key.as_str()))
            .ttl(self.ttl)
            .wait(self.wait())
            .watchdog(false)
            .backoff(self.backoff())
            .await;
        let set = match granted {
            Ok(set) => set,
            Err(Error::Timeout { .. }) => return,
            Err(e) => {
                self.emit(Event::Error {
                    reason: format!("lock_all: {e}"),
                });
                tokio::time::sleep(self.ttl / 4).await;
                return;
            }
        };
        let mut last = None;
        for member in set.members() {
            let lease = member.lease();
            let Some(&(_, counter)) = members.iter().find(|(key, _)| *key == lease.key) else {
                continue;
            };
            let Some(resource) = self.resources.get(counter) else {
                continue;
            };
            let fence = member.fence();
            self.emit(Event::Acquired {
                fence,
                resource: counter,
            });
            last = Some(fence);
            // A member already lapsed (a pause) still tries: its fenced operations must be
            // refused once the member's successor has touched the counter.
            self.increment(resource, fence, &lease.key, self.mode).await;
        }
        let released = match bounded(self.op_timeout, set.release()).await {
            Ok(Ok(released)) => released,
            Ok(Err(_)) | Err(_) => false,
        };
        if let Some(fence) = last {
            self.emit(Event::Released { fence, released });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_two_sets_overlap_and_odd_workers_ask_backwards() {
        let key = LockKey::new("chaos/t/lock").unwrap();
        let sets: Vec<Vec<usize>> = (0..6)
            .map(|index| {
                member_keys(&key, 2, index)
                    .unwrap()
                    .into_iter()
                    .map(|(_, counter)| counter)
                    .collect()
            })
            .collect();
        assert_eq!(sets[0], [0, 1]);
        assert_eq!(sets[1], [2, 1]);
        assert_eq!(sets[2], [2, 0]);
        for a in &sets {
            for b in &sets {
                assert!(a.iter().any(|c| b.contains(c)), "{a:?} and {b:?}");
            }
        }
        let (first, _) = &member_keys(&key, 2, 0).unwrap()[0];
        assert_eq!(first.as_str(), "chaos/t/lock/0");
        assert!(member_keys(&key, 1, 0).unwrap_err().is_input());
    }
}
