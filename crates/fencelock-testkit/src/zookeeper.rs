//! `ZkServer`: real ZooKeeper servers (one standalone server, or an ensemble of several) on
//! free ports of 127.0.0.1, in a temporary directory, killed and removed on drop.
//!
//! The servers themselves live in `fencelock-servers`; this wrapper gives tests shorthands
//! that panic with a message saying what to install (run `scripts/test-deps`) instead of
//! returning an error, and passes everything else on.
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

pub use fencelock_servers::zookeeper::{JAVA_BIN_VAR, ZOOKEEPER_CLASSPATH_VAR, free_port};

use crate::tls::TestCerts;

/// ZooKeeper processes owned by a test; see [`fencelock_servers::zookeeper::ZkServer`].
/// Dropping it kills every member and removes their directory.
#[derive(Debug)]
pub struct ZkServer(fencelock_servers::zookeeper::ZkServer);

impl ZkServer {
    /// One standalone server.
    ///
    /// # Panics
    /// If ZooKeeper or Java is missing or the server does not start, with a message saying
    /// what to install.
    pub fn spawn() -> Self {
        Self::spawn_ensemble(1)
    }

    /// An ensemble of `members` members, started together and waited for until each serves.
    ///
    /// # Panics
    /// If ZooKeeper or Java is missing or the ensemble does not start, with a message saying
    /// what to install.
    pub fn spawn_ensemble(members: usize) -> Self {
        match Self::try_spawn_ensemble(members) {
            Ok(server) => server,
            Err(e) => panic!("cannot start ZooKeeper: {e}"),
        }
    }

    /// [`spawn_ensemble`](Self::spawn_ensemble), reporting failures. A missing ZooKeeper is
    /// an [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn_ensemble(members: usize) -> io::Result<Self> {
        fencelock_servers::zookeeper::ZkServer::try_spawn_ensemble(members).map(ZkServer)
    }

    /// One standalone server that also serves TLS with the server certificate of `certs`
    /// (made out to `localhost` and `127.0.0.1`), on [`secure_port`](Self::secure_port).
    ///
    /// # Panics
    /// As [`spawn`](Self::spawn).
    pub fn spawn_tls(certs: &TestCerts) -> Self {
        let files = fencelock_servers::zookeeper::ZkTlsFiles {
            cert: certs.server_cert(),
            key: certs.server_key(),
            ca: certs.ca(),
        };
        match fencelock_servers::zookeeper::ZkServer::try_spawn_tls(&files) {
            Ok(server) => ZkServer(server),
            Err(e) => panic!("cannot start ZooKeeper with TLS: {e}"),
        }
    }

    /// `zookeeper://localhost:<secure port>?tls=true&tls_ca=<ca>`, trusting `ca`.
    ///
    /// # Panics
    /// On a server spawned without TLS.
    pub fn tls_url(&self, ca: &Path) -> String {
        match self.0.tls_url(ca) {
            Some(url) => url,
            None => panic!("this ZooKeeper serves no TLS port"),
        }
    }

    /// Member `index`'s TLS client port, when it serves one.
    pub fn secure_port(&self, index: usize) -> Option<u16> {
        self.0.secure_port(index)
    }

    /// `zookeeper://127.0.0.1:<port>,...`: every member, in order.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// `127.0.0.1:<port>,...`: every member, as ZooKeeper's own clients write it.
    pub fn connect_string(&self) -> String {
        self.0.connect_string()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the ensemble has no member (never).
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

    /// Kills member `index` with SIGKILL and waits for it to exit. Its data stays.
    pub fn kill(&self, index: usize) {
        self.0.kill(index);
    }

    /// Starts member `index` again on the same ports and data and waits until it serves.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn restart(&self, index: usize) {
        if let Err(e) = self.0.try_restart(index) {
            panic!("{e}");
        }
    }

    /// [`restart`](Self::restart), reporting a member that does not come back.
    pub fn try_restart(&self, index: usize) -> io::Result<()> {
        self.0.try_restart(index)
    }

    /// Freezes member `index` with SIGSTOP.
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

    /// Member `index`'s mode (`standalone`, `leader`, `follower`), `None` when not serving.
    pub fn mode(&self, index: usize) -> Option<String> {
        self.0.mode(index)
    }

    /// The member that leads the ensemble now, if any answers so.
    pub fn leader(&self) -> Option<usize> {
        self.0.leader()
    }

    /// The last lines of member `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        self.0.log_tail(index)
    }
}
