//! A throwaway PostgreSQL cluster run with `pg_ctl`, which tests may crash (`pg_ctl stop -m
//! immediate`), stop cleanly and start again on the same data directory and port. Never the
//! shared server.
//!
//! ```no_run
//! use fencelock_testkit::pg_cluster::PgCluster;
//! let cluster = PgCluster::spawn(&["synchronous_commit = off"]);
//! let url = cluster.url();   // postgres://postgres@127.0.0.1:<port>/postgres
//! cluster.crash();           // pg_ctl stop -m immediate: crash recovery at the next start
//! cluster.start();
//! cluster.stop();            // pg_ctl stop -m fast: a clean shutdown
//! # let _ = url;
//! ```

use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fencelock_servers::port::free_port;

use crate::tls::{as_account, pg_bin, unprivileged};

/// How long `pg_ctl` may wait for a start or a stop (crash recovery included).
const PG_CTL_WAIT_SECS: &str = "60";

/// A PostgreSQL cluster in a temporary directory, listening on a free port of 127.0.0.1 only
/// (no Unix socket), trust authentication for the user `postgres`, database `postgres`.
/// Started and stopped with `pg_ctl`, as the `postgres` account when the test runs as root.
/// Stopped (immediate) and removed on drop.
pub struct PgCluster {
    port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    account: Option<(u32, u32)>,
}

impl fmt::Debug for PgCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgCluster")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PgCluster {
    /// `initdb`, then `pg_ctl start`, with `settings` (`postgresql.conf` lines such as
    /// `synchronous_commit = off`) added to the configuration.
    ///
    /// # Panics
    /// If PostgreSQL's server binaries are missing or the cluster does not start, saying what
    /// to install or set.
    pub fn spawn(settings: &[&str]) -> Self {
        match Self::try_spawn(settings) {
            Ok(cluster) => cluster,
            Err(e) => panic!("cannot start a throwaway PostgreSQL cluster: {e}"),
        }
    }

    /// [`spawn`](Self::spawn), reporting failures.
    pub fn try_spawn(settings: &[&str]) -> io::Result<Self> {
        let bin = pg_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("fl-pg-cluster-")
            .tempdir()?;
        let account = unprivileged()?;
        if let Some((uid, gid)) = account {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .stdin(Stdio::null());
        as_account(&mut initdb, account);
        let output = initdb.output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))?;
        writeln!(conf, "\nlisten_addresses = '127.0.0.1'")?;
        writeln!(conf, "unix_socket_directories = ''")?;
        for setting in settings {
            writeln!(conf, "{setting}")?;
        }
        let mut cluster = PgCluster {
            port: 0,
            dir,
            bin,
            account,
        };
        let mut last = None;
        for _ in 0..5 {
            cluster.port = free_port()?;
            match cluster.try_start() {
                Ok(()) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("postgres did not start")))
    }

    /// A streaming standby of this (running) cluster: `pg_basebackup -R` into a temporary
    /// directory, `settings` added to its configuration, started on a free port. Its
    /// `cluster_name` is `name`, the name its walreceiver reports, which the primary's
    /// `synchronous_standby_names` can list. Stopped (immediate) and removed on drop.
    ///
    /// # Panics
    /// If `pg_basebackup` fails or the standby does not start, with its log.
    pub fn spawn_standby(&self, name: &str, settings: &[&str]) -> PgCluster {
        match self.try_spawn_standby(name, settings) {
            Ok(standby) => standby,
            Err(e) => panic!("cannot start a standby of the throwaway PostgreSQL cluster: {e}"),
        }
    }

    fn try_spawn_standby(&self, name: &str, settings: &[&str]) -> io::Result<PgCluster> {
        let dir = tempfile::Builder::new()
            .prefix("fl-pg-standby-")
            .tempdir()?;
        if let Some((uid, gid)) = self.account {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        let mut backup = Command::new(self.bin.join("pg_basebackup"));
        backup
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-R", "-X", "stream", "--no-sync"])
            .stdin(Stdio::null());
        as_account(&mut backup, self.account);
        let output = backup.output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))?;
        writeln!(conf, "\ncluster_name = '{name}'")?;
        for setting in settings {
            writeln!(conf, "{setting}")?;
        }
        let mut standby = PgCluster {
            port: 0,
            dir,
            bin: self.bin.clone(),
            account: self.account,
        };
        let mut last = None;
        for _ in 0..5 {
            standby.port = free_port()?;
            match standby.try_start() {
                Ok(()) => return Ok(standby),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the standby did not start")))
    }

    /// Promotes a standby to a primary (`pg_ctl promote`, waiting until it accepts writes):
    /// it starts a new timeline.
    ///
    /// # Panics
    /// If `pg_ctl` fails, with the server's log.
    pub fn promote(&self) {
        let output = self.pg_ctl().arg("promote").output();
        match output {
            Ok(output) if output.status.success() => {}
            Ok(output) => panic!(
                "pg_ctl promote failed: {}\n{}",
                String::from_utf8_lossy(&output.stderr).trim(),
                tail(&self.log_path())
            ),
            Err(e) => panic!("running pg_ctl promote: {e}"),
        }
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far (`pg_ctl -l`).
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Crashes the server: `pg_ctl stop -m immediate`, every process ended without a
    /// checkpoint, so the next start runs crash recovery (which empties UNLOGGED tables).
    ///
    /// # Panics
    /// If `pg_ctl` fails.
    pub fn crash(&self) {
        self.pg_ctl_stop("immediate");
    }

    /// Stops the server cleanly: `pg_ctl stop -m fast` (a shutdown checkpoint).
    ///
    /// # Panics
    /// If `pg_ctl` fails.
    pub fn stop(&self) {
        self.pg_ctl_stop("fast");
    }

    /// Starts the server again on the same data directory and port.
    ///
    /// # Panics
    /// If it does not start, with the server's log.
    pub fn start(&self) {
        if let Err(e) = self.try_start() {
            panic!("restarting the throwaway PostgreSQL cluster: {e}");
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn pg_ctl(&self) -> Command {
        let mut command = Command::new(self.bin.join("pg_ctl"));
        command
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", PG_CTL_WAIT_SECS])
            .stdin(Stdio::null());
        as_account(&mut command, self.account);
        command
    }

    fn try_start(&self) -> io::Result<()> {
        let output = self
            .pg_ctl()
            .arg("-l")
            .arg(self.log_path())
            .arg("-o")
            .arg(format!("-p {}", self.port))
            .arg("start")
            .output()?;
        if output.status.success() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr).trim(),
            tail(&self.log_path())
        )))
    }

    fn pg_ctl_stop(&self, mode: &str) {
        let output = self.pg_ctl().args(["stop", "-m", mode]).output();
        match output {
            Ok(output) if output.status.success() => {}
            Ok(output) => panic!(
                "pg_ctl stop -m {mode} failed: {}\n{}",
                String::from_utf8_lossy(&output.stderr).trim(),
                tail(&self.log_path())
            ),
            Err(e) => panic!("running pg_ctl stop -m {mode}: {e}"),
        }
    }
}

/// The last lines of a log file.
fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Stopped already is fine: pg_ctl then fails, and there is nothing to do.
        let _ = self
            .pg_ctl()
            .args(["stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
