//! `EtcdServer`: real `etcd` processes (one member, or a cluster of several) on free ports of
//! 127.0.0.1, in a temporary directory, killed and removed on drop: the members of
//! `fencelock-servers` (the chaos kill fault restarts the same members) as a test's
//! [`Spawned`] group.
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
//!
//! [`EtcdTlsServer`] is a member whose client port speaks TLS only, with the certificates of
//! a [`TestCerts`].

use std::io;

pub use fencelock_servers::etcd::{ETCD_BIN_VAR, Etcd, EtcdTls, EtcdTlsFiles, free_port};

use crate::members::Spawned;
use crate::tls::TestCerts;

/// `etcd` members owned by a test. Dropping it kills every member and removes their
/// directory.
pub type EtcdServer = Spawned<Etcd>;

/// `etcd` members whose client port speaks TLS only, owned by a test (see [`EtcdTls`]);
/// `tls_url(&certs.ca())` reaches them.
pub type EtcdTlsServer = Spawned<EtcdTls>;

impl Spawned<EtcdTls> {
    /// One member serving TLS with `certs`' server certificate; clients need not show one.
    ///
    /// # Panics
    /// If `etcd` is missing or does not start, with a message saying what to install.
    pub fn spawn_tls(certs: &TestCerts) -> Self {
        Self::spawn_with(EtcdTls::new(files(certs), false), 1)
    }

    /// One member serving TLS with `certs`' server certificate that asks every client for a
    /// certificate `certs`' CA signed (`--client-cert-auth`; see
    /// [`TestCerts::client_cert`]).
    ///
    /// # Panics
    /// As [`spawn_tls`](Self::spawn_tls).
    pub fn spawn_tls_client_auth(certs: &TestCerts) -> Self {
        Self::spawn_with(EtcdTls::new(files(certs), true), 1)
    }
}

/// The server's PEM files of `certs`, with its CA as the one client certificates must chain to.
fn files(certs: &TestCerts) -> EtcdTlsFiles {
    EtcdTlsFiles {
        cert: certs.server_cert(),
        key: certs.server_key(),
        ca: certs.ca(),
    }
}

impl Spawned<Etcd> {
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
        Self::spawn_with(Etcd, members)
    }

    /// [`spawn_cluster`](Self::spawn_cluster), reporting failures. A missing `etcd` is an
    /// [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn_cluster(members: usize) -> io::Result<Self> {
        Self::try_spawn_with(Etcd, members)
    }
}
