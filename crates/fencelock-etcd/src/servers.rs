//! Real `etcd` members for tests and fault runs (feature `servers`): one member, or a
//! cluster of several, on free ports of 127.0.0.1, in a temporary directory, killed and
//! removed on drop.
//!
//! The chaos run starts its etcd members with it and kills and restarts them (the member comes
//! back on its ports and data directory and catches up); this crate's tests spawn them through
//! the testkit's generic `Spawned`.
//!
//! Members can be killed (SIGKILL), restarted on the same ports and data, paused (SIGSTOP)
//! and resumed. They run with a 50 ms heartbeat and a 500 ms election timeout, so leader
//! elections after a kill take well under a second and the cluster's shortest lease is one
//! second (etcd's minimum is 1.5 election timeouts, rounded up to whole seconds). Data lives
//! in `/dev/shm` when it exists, so the fsync of every write costs little.
//!
//! The process handling is `fencelock-servers`' [`Members`]; this module is the etcd part
//! ([`Etcd`]): the command line of a member, its health probe, and who leads.
//!
//! [`EtcdTls`] members serve their client port with TLS only (`https://`), with a PEM
//! certificate and key, and optionally ask clients for a certificate (`--client-cert-auth`);
//! a plain metrics port (`--listen-metrics-urls`) serves the health probe, since the client
//! port speaks TLS. Peers talk plain HTTP on 127.0.0.1.
//!
//! ```no_run
//! # fn demo() -> std::io::Result<()> {
//! use fencelock_etcd::servers::{Etcd, EtcdMembers, EtcdServer};
//! let cluster = EtcdServer::start(Etcd, 3)?;
//! let url = cluster.url();   // etcd://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
//! cluster.kill(2);           // a minority is gone: the cluster still answers
//! cluster.try_restart(2)?;   // same ports and data: the member catches up
//! cluster.pause(0)?;         // SIGSTOP: connections stay open, nothing is answered
//! cluster.resume(0)?;
//! # let _ = url; Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fencelock_servers::members::{Member, Members, Service, ask};

/// The variable that names the `etcd` binary (default: `etcd` on `PATH`).
pub const ETCD_BIN_VAR: &str = "FENCELOCK_ETCD";

fn etcd_bin() -> String {
    std::env::var(ETCD_BIN_VAR).unwrap_or_else(|_| "etcd".to_owned())
}

/// `etcd` members owned by their creator: one member, or a cluster. Dropping it kills every
/// member and removes their directory.
pub type EtcdServer = Members<Etcd>;

/// etcd as a [`Service`]: a member's client and peer ports (in that order), its command line
/// and its health probe.
#[derive(Debug, Clone, Copy, Default)]
pub struct Etcd;

impl Service for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn install_hint(&self) -> &'static str {
        "install etcd: run scripts/test-deps (Debian package etcd-server), put `etcd` on PATH, \
         or set FENCELOCK_ETCD"
    }

    fn ports(&self, _count: usize) -> usize {
        2
    }

    fn start_timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn command(&self, members: &[Member], index: usize) -> Command {
        member_command(members, index, "http")
    }

    fn serving(&self, member: &Member) -> bool {
        healthy(member.client_port())
    }

    /// The member whose status (`/v3/maintenance/status`) names itself as the leader.
    fn leader(&self, members: &[Member]) -> Option<usize> {
        members
            .iter()
            .position(|m| status(m.client_port()).is_some_and(|(member, leader)| member == leader))
    }
}

/// The command line of `members[index]`, its client URL with `scheme` (`http`, `https`).
fn member_command(members: &[Member], index: usize, scheme: &str) -> Command {
    let member = &members[index];
    let client = format!("{scheme}://127.0.0.1:{}", member.ports[0]);
    let peer = format!("http://127.0.0.1:{}", member.ports[1]);
    let initial_cluster = members
        .iter()
        .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.ports[1]))
        .collect::<Vec<_>>()
        .join(",");
    // The group's directory names the cluster apart from any other on this host.
    let token = member
        .dir
        .parent()
        .and_then(|dir| dir.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "fencelock".to_owned());
    let mut command = Command::new(etcd_bin());
    command
        .arg("--name")
        .arg(&member.name)
        .arg("--data-dir")
        .arg(&member.dir)
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &initial_cluster])
        .args(["--initial-cluster-state", "new"])
        .args(["--initial-cluster-token", &token])
        .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
        .args(["--logger", "zap", "--log-level", "warn"])
        .args(["--log-outputs", "stderr"]);
    command
}

/// The PEM files of members serving TLS: the server certificate and its private key, and
/// the CA certificates client certificates are checked against (`--trusted-ca-file`, given
/// only with client certificate authentication).
#[derive(Debug, Clone)]
pub struct EtcdTlsFiles {
    /// The server certificate (PEM), made out to `localhost` and `127.0.0.1`.
    pub cert: PathBuf,
    /// Its private key (PEM, unencrypted).
    pub key: PathBuf,
    /// The CA certificates (PEM).
    pub ca: PathBuf,
}

/// etcd members whose client port speaks TLS only, as a [`Service`]. A member's ports are its
/// client port, its peer port and its plain metrics port (`/health`, `/metrics`), in that
/// order.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    files: EtcdTlsFiles,
    client_cert_auth: bool,
}

impl EtcdTls {
    /// Members serving TLS with `files`; with `client_cert_auth`, a client must show a
    /// certificate the CA signed (`--client-cert-auth`), else none is asked for.
    pub fn new(files: EtcdTlsFiles, client_cert_auth: bool) -> Self {
        EtcdTls {
            files,
            client_cert_auth,
        }
    }

    /// The PEM files the members serve with.
    pub fn files(&self) -> &EtcdTlsFiles {
        &self.files
    }
}

impl Service for EtcdTls {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn install_hint(&self) -> &'static str {
        Etcd.install_hint()
    }

    fn ports(&self, _count: usize) -> usize {
        3
    }

    fn start_timeout(&self) -> Duration {
        Etcd.start_timeout()
    }

    fn command(&self, members: &[Member], index: usize) -> Command {
        let metrics = format!("http://127.0.0.1:{}", members[index].ports[2]);
        let mut command = member_command(members, index, "https");
        command
            .arg("--cert-file")
            .arg(&self.files.cert)
            .arg("--key-file")
            .arg(&self.files.key)
            .args(["--listen-metrics-urls", &metrics]);
        // A trusted CA alone already makes etcd ask every client for a certificate, whatever
        // `--client-cert-auth` says: it is given only when clients must show one.
        if self.client_cert_auth {
            command
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&self.files.ca);
        }
        command
    }

    /// `/health` on the plain metrics port says it sees a leader.
    fn serving(&self, member: &Member) -> bool {
        healthy(member.ports[2])
    }

    /// The member whose metrics say it leads (`etcd_server_is_leader 1`).
    fn leader(&self, members: &[Member]) -> Option<usize> {
        members.iter().position(|m| {
            let request = format!(
                "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                m.ports[2]
            );
            ask(m.ports[2], &request)
                .is_some_and(|reply| reply.lines().any(|l| l == "etcd_server_is_leader 1"))
        })
    }
}

/// What only a group of plain etcd members answers.
pub trait EtcdMembers {
    /// `etcd://127.0.0.1:<port>,...`: every member, in order.
    fn url(&self) -> String;
}

impl EtcdMembers for Members<Etcd> {
    fn url(&self) -> String {
        format!("etcd://{}", self.hosts())
    }
}

/// What only a group of TLS-serving etcd members answers.
pub trait EtcdTlsMembers {
    /// `etcd://localhost:<port>,...?tls=true&tls_ca=<ca>`: every member, by the name the
    /// test certificates are made out to, trusting the CA certificates in `ca`.
    fn tls_url(&self, ca: &Path) -> String;
}

impl EtcdTlsMembers for Members<EtcdTls> {
    fn tls_url(&self, ca: &Path) -> String {
        let hosts: Vec<String> = self
            .members()
            .iter()
            .map(|m| format!("localhost:{}", m.client_port()))
            .collect();
        let mut encoded = String::new();
        for c in ca.to_string_lossy().chars() {
            match c {
                '%' | '&' | '+' | '#' | ' ' | '=' => {
                    encoded.push_str(&format!("%{:02X}", c as u32))
                }
                c => encoded.push(c),
            }
        }
        format!("etcd://{}?tls=true&tls_ca={encoded}", hosts.join(","))
    }
}

/// Whether the member on `port` answers `GET /health` with `"health":"true"`.
fn healthy(port: u16) -> bool {
    let request =
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    ask(port, &request).is_some_and(|reply| reply.contains("\"health\":\"true\""))
}

/// The member id and the leader's id the member on `port` reports in its status, as the
/// decimal strings of etcd's JSON gateway.
fn status(port: u16) -> Option<(String, String)> {
    let reply = ask(
        port,
        &format!(
            "POST /v3/maintenance/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    )?;
    let field = |name: &str| {
        let start = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
        let len = reply[start..].find('"')?;
        Some(reply[start..start + len].to_owned())
    };
    Some((field("member_id")?, field("leader")?))
}
