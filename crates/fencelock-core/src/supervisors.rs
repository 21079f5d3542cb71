//! The watchdogs of one locker's guards, driven together: one task per locker and runtime
//! rather than one per guard, so a thousand held locks cost a thousand small futures in one
//! task, not a thousand tasks.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::runtime::{self, Handle};
use tokio::sync::mpsc;

/// One guard's supervision: completes when the lease is lost or the guard stops watching.
pub(crate) type Watch = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The drivers of one locker (and its clones), one per runtime its guards were made on.
#[derive(Default)]
pub(crate) struct Supervisors {
    drivers: Mutex<Vec<Driver>>,
}

struct Driver {
    runtime: runtime::Id,
    watches: mpsc::UnboundedSender<Watch>,
}

impl fmt::Debug for Supervisors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let drivers = self.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Supervisors")
            .field("drivers", &drivers.len())
            .finish()
    }
}

impl Supervisors {
    /// Hands `watch` to this locker's driver on the current runtime, starting one if there is
    /// none (or the one there was ended with its runtime). Like `tokio::spawn`, it must be called
    /// within a runtime.
    pub(crate) fn watch(&self, watch: Watch) {
        let runtime = Handle::current().id();
        let mut drivers = self.drivers.lock().unwrap_or_else(PoisonError::into_inner);
        drivers.retain(|driver| !driver.watches.is_closed());
        let mut watch = watch;
        if let Some(driver) = drivers.iter().find(|driver| driver.runtime == runtime) {
            match driver.watches.send(watch) {
                Ok(()) => return,
                // The driver ended between the check and the send: start another.
                Err(mpsc::error::SendError(back)) => watch = back,
            }
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        // A fresh channel's receiver is alive, so the send cannot fail.
        let _ = sender.send(watch);
        tokio::spawn(drive(receiver));
        drivers.retain(|driver| driver.runtime != runtime);
        drivers.push(Driver {
            runtime,
            watches: sender,
        });
    }
}

/// Polls every watch handed to it until each completes. When the locker (and every clone) is
/// gone, no new watch can come, and the driver ends with the last one.
async fn drive(mut incoming: mpsc::UnboundedReceiver<Watch>) {
    let mut watches = FuturesUnordered::new();
    loop {
        tokio::select! {
            next = incoming.recv() => match next {
                Some(watch) => watches.push(watch),
                None => break,
            },
            Some(()) = watches.next(), if !watches.is_empty() => {}
        }
    }
    while watches.next().await.is_some() {}
}
