//! `EtcdServer`: real `etcd` processes (one member, or a cluster of several) on free ports of
//! 127.0.0.1, in a temporary directory, killed and removed on drop.
//!
//! The members themselves live in `fencelock-servers` (the chaos kill fault restarts the same
//! members); this wrapper gives tests shorthands that panic with a message saying what to
//! install instead of returning an error, and passes everything else on.
//!
//! ```no_run
//! use fencelock_testkit::etcd::EtcdServer;
//! let cluster = EtcdServer::spawn_cluster(3);
//! let url = cluster.url();   // etcd://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
//! cluster.kill(2);           // a minority is gone: the cluster still answers
//! cluster.restart(2);        // same ports and data: the member catches up
//! cluster.pause(0);          // SIGSTOP: connections stay open, nothing is answered
//! cluster.resume(0);
//! ```

use std::io;
use std::path::Path;

pub use fencelock_servers::etcd::{ETCD_BIN_VAR, free_port};

/// `etcd` processes owned by a test; see [`fencelock_servers::etcd::EtcdServer`]. Dropping it
/// kills every member and removes their directory.
#[derive(Debug)]
pub struct EtcdServer(fencelock_servers::etcd::EtcdServer);

impl EtcdServer {
    /// One member.
    ///
    /// # Panics
    /// If `etcd` is missing or does not start, with a message saying what to install.
    pub fn spawn() -> Self {
        Self::spawn_cluster(1)
    }

    /// A cluster of `members` members, started together and waited for until each reports
    /// itself healthy (a leader is elected).
    ///
    /// # Panics
    /// If `etcd` is missing or the cluster does not start, with a message saying what to
    /// install.
    pub fn spawn_cluster(members: usize) -> Self {
        match Self::try_spawn_cluster(members) {
            Ok(server) => server,
            Err(e) => panic!("cannot start etcd: {e}"),
        }
    }

    /// [`spawn_cluster`](Self::spawn_cluster), reporting failures. A missing `etcd` is an
    /// [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn_cluster(members: usize) -> io::Result<Self> {
        fencelock_servers::etcd::EtcdServer::try_spawn_cluster(members).map(EtcdServer)
    }

    /// `etcd://127.0.0.1:<port>,...`: every member, in order.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the cluster has no member (never: a cluster has at least one).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Member `index`'s client port on 127.0.0.1.
    pub fn client_port(&self, index: usize) -> u16 {
        self.0.client_port(index)
    }

    /// The directory holding every member's data and log.
    pub fn dir(&self) -> &Path {
        self.0.dir()
    }

    /// Whether member `index` runs (a paused one counts as running).
    pub fn is_running(&self, index: usize) -> bool {
        self.0.is_running(index)
    }

    /// Kills member `index` with SIGKILL and waits for it to exit. Its data stays for a
    /// restart.
    pub fn kill(&self, index: usize) {
        self.0.kill(index);
    }

    /// Starts member `index` again on the same ports and data (killing it first if it still
    /// runs), and waits until it reports itself healthy; that needs a quorum of members up.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn restart(&self, index: usize) {
        if let Err(e) = self.try_restart(index) {
            panic!("{e}");
        }
    }

    /// [`restart`](Self::restart), reporting a member that does not come back.
    pub fn try_restart(&self, index: usize) -> io::Result<()> {
        self.0.try_restart(index)
    }

    /// Restarts member `index` without waiting for it to be healthy (when no quorum is up,
    /// it cannot be).
    pub fn relaunch(&self, index: usize) -> io::Result<()> {
        self.0.relaunch(index)
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

    /// Whether member `index` answers its health check (`/health`: it sees a leader).
    pub fn is_healthy(&self, index: usize) -> bool {
        self.0.is_healthy(index)
    }

    /// The member that leads the cluster now, if any answers so.
    pub fn leader(&self) -> Option<usize> {
        self.0.leader()
    }

    /// The last lines of member `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        self.0.log_tail(index)
    }
}
