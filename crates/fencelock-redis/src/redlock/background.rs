//! The node calls a Redlock leaves running after an operation is decided (the nodes past the
//! quorum of a release, a failed acquisition's undo), counted so that a program can wait for
//! them before it exits.
//!
//! An operation returns as soon as a quorum decided it, for latency; the other nodes' calls
//! go on in tasks. A runtime that shuts down drops those tasks, and a call dropped before it
//! reached its node leaves that node as it was: a grant released on a quorum only, or a
//! failed acquisition's grant on a minority, stays there for its ttl. Waiting for them here
//! costs at most the node timeouts they are bounded by.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// The tasks a Redlock spawned and that have not ended.
#[derive(Debug)]
pub(crate) struct Background {
    in_flight: watch::Sender<usize>,
}

/// Counts its task out when dropped: when the task ends, and when a runtime shutting down
/// drops it unfinished.
struct Running(watch::Sender<usize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Background {
    pub(crate) fn new() -> Self {
        Background {
            in_flight: watch::Sender::new(0),
        }
    }

    /// Spawns `task` on the current Tokio runtime, counted until it ends. Without a runtime (a
    /// caller outside any, where no call could have been made either) there is nothing to
    /// finish.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.in_flight.send_modify(|n| *n += 1);
        let running = Running(self.in_flight.clone());
        runtime.spawn(async move {
            let _running = running;
            task.await;
        });
    }

    /// How many tasks are running.
    pub(crate) fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Waits until no task is running, or `within` has passed (every task is bounded by node
    /// timeouts, so `within` is only a backstop); whether none is left.
    pub(crate) async fn finished(&self, within: Duration) -> bool {
        let mut in_flight = self.in_flight.subscribe();
        tokio::time::timeout(within, in_flight.wait_for(|n| *n == 0))
            .await
            .is_ok()
    }
}
