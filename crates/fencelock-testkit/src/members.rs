//! [`Spawned`]: a group of servers ([`Members`] of `fencelock-servers`) owned by a test, with
//! shorthands that panic, saying what to install, instead of returning errors. Everything
//! else is the group's own, through `Deref`.

use std::io;
use std::ops::Deref;

pub use fencelock_servers::members::{Member, Members, Service};

/// A group of servers owned by a test. Dropping it kills every member and removes their
/// directory.
#[derive(Debug)]
pub struct Spawned<S: Service>(Members<S>);

impl<S: Service> Spawned<S> {
    /// `count` members of `service`, started and serving.
    ///
    /// # Panics
    /// If the server is missing or the group does not start, with a message saying what to
    /// install.
    pub fn spawn_with(service: S, count: usize) -> Self {
        let name = service.name();
        match Self::try_spawn_with(service, count) {
            Ok(group) => group,
            Err(e) => panic!("cannot start {name}: {e}"),
        }
    }

    /// [`spawn_with`](Self::spawn_with), reporting failures. A missing server is an
    /// [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn_with(service: S, count: usize) -> io::Result<Self> {
        Members::start(service, count).map(Spawned)
    }

    /// Starts member `index` again on the same ports and data (killing it first if it still
    /// runs), and waits until it serves; in a group of several that needs a quorum up.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn restart(&self, index: usize) {
        if let Err(e) = self.0.try_restart(index) {
            panic!("{e}");
        }
    }

    /// Freezes member `index` with SIGSTOP: its connections stay open, nothing is answered,
    /// and the others elect a leader without it.
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn pause(&self, index: usize) {
        if let Err(e) = self.0.pause(index) {
            panic!("{e}");
        }
    }

    /// Resumes member `index` after [`pause`](Self::pause).
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn resume(&self, index: usize) {
        if let Err(e) = self.0.resume(index) {
            panic!("{e}");
        }
    }
}

impl<S: Service> Deref for Spawned<S> {
    type Target = Members<S>;

    fn deref(&self) -> &Members<S> {
        &self.0
    }
}
