//! `ZkServer`: real ZooKeeper servers (one standalone server, or an ensemble of several) on
//! free ports of 127.0.0.1, in a temporary directory, killed and removed on drop.
//!
//! The servers are the members of `fencelock-servers`, as a test's [`Spawned`] group: its
//! shorthands panic with a message saying what to install (run `scripts/test-deps`) instead
//! of returning an error.
//!
//! ```no_run
//! use fencelock_testkit::zookeeper::ZkServer;
//! let ensemble = ZkServer::spawn_ensemble(3);
//! let url = ensemble.url();  // zookeeper://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
//! ensemble.kill(2);          // a minority is gone: the ensemble still answers
//! ensemble.restart(2);       // same ports and data: the member catches up
//! ensemble.pause(0);         // SIGSTOP: connections stay open, nothing is answered
//! ensemble.resume(0);
//! ```

use std::io;
use std::path::Path;

pub use fencelock_servers::zookeeper::{
    JAVA_BIN_VAR, ZOOKEEPER_CLASSPATH_VAR, ZkTlsFiles, ZooKeeper, free_port,
};

use crate::members::{Members, Spawned};
use crate::tls::TestCerts;

/// ZooKeeper processes owned by a test. Dropping it kills every member and removes their
/// directory.
pub type ZkServer = Spawned<ZooKeeper>;

impl Spawned<ZooKeeper> {
    /// One standalone server.
    ///
    /// # Panics
    /// If ZooKeeper or Java is missing or the server does not start, with a message saying
    /// what to install.
    pub fn spawn() -> Self {
        Self::spawn_ensemble(1)
    }

    /// An ensemble of `members` members, started together and waited for until each serves
    /// requests (a leader is elected).
    ///
    /// # Panics
    /// If ZooKeeper or Java is missing or the ensemble does not start, with a message saying
    /// what to install.
    pub fn spawn_ensemble(members: usize) -> Self {
        Self::spawn_with(ZooKeeper::plain(), members)
    }

    /// [`spawn_ensemble`](Self::spawn_ensemble), reporting failures.
    pub fn try_spawn_ensemble(members: usize) -> io::Result<Self> {
        Self::try_spawn_with(ZooKeeper::plain(), members)
    }

    /// One standalone server that also serves TLS with `certs`' server certificate;
    /// clients need not show one.
    ///
    /// # Panics
    /// If it does not start.
    pub fn spawn_tls(certs: &TestCerts) -> Self {
        let files = ZkTlsFiles {
            cert: certs.server_cert(),
            key: certs.server_key(),
            ca: certs.ca(),
        };
        Self::spawn_with(ZooKeeper::tls(files), 1)
    }

    /// `zookeeper://localhost:<secure port>,...?tls=true&tls_ca=<ca>`: every member's TLS
    /// port.
    ///
    /// # Panics
    /// If the servers serve no TLS port.
    pub fn tls_url(&self, ca: &Path) -> String {
        match Members::tls_url(self, ca) {
            Some(url) => url,
            None => panic!("this ZooKeeper serves no TLS port"),
        }
    }
}
