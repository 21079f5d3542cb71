//! `PgBouncer`: a real PgBouncer in **transaction mode** in front of the Postgres test server
//! (`FENCELOCK_PG_URL`), on a free port of 127.0.0.1, in a temporary directory with its own
//! ini file and user list, killed and removed on drop.
//!
//! Configured the way sqlx and JDBC clients are usually put behind PgBouncer:
//! `ignore_startup_parameters = extra_float_digits` (sqlx sends that parameter at connect, and
//! PgBouncer refuses any startup parameter it does not know). `options` is deliberately **not**
//! ignored: fencelock sends no startup options, and a client that relied on them (a
//! `search_path` given at connect) would silently lose them behind a transaction pooler, so it
//! had better fail at connect. Authentication is `trust`, as on the test server.
//!
//! ```no_run
//! use fencelock_testkit::pgbouncer::PgBouncer;
//! let bouncer = PgBouncer::spawn(); // fails loudly if pgbouncer is not installed
//! let url = bouncer.url();          // postgres://postgres@127.0.0.1:<port>/test
//! bouncer.kill();                   // the pooler is gone: connections are refused
//! ```

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fencelock_servers::port::free_port;
use sqlx::postgres::PgConnectOptions;

use crate::postgres::{pg_addr, pg_options};

/// The variable that names the `pgbouncer` binary (default: `/usr/sbin/pgbouncer`, then
/// `pgbouncer` on `PATH`).
pub const PGBOUNCER_BIN_VAR: &str = "FENCELOCK_PGBOUNCER";

/// Where Debian's package puts the binary.
const DEBIAN_BIN: &str = "/usr/sbin/pgbouncer";

const INSTALL_HINT: &str = "run scripts/test-deps, or install PgBouncer yourself \
     (Debian: apt-get install pgbouncer), or set FENCELOCK_PGBOUNCER to its binary";

const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The server connections PgBouncer keeps per database and user, unless told otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 4;

fn pgbouncer_bin() -> PathBuf {
    if let Ok(bin) = std::env::var(PGBOUNCER_BIN_VAR) {
        return PathBuf::from(bin);
    }
    if Path::new(DEBIAN_BIN).exists() {
        return PathBuf::from(DEBIAN_BIN);
    }
    PathBuf::from("pgbouncer")
}

/// A PgBouncer process owned by a test. Dropping it kills the process and removes its
/// directory.
pub struct PgBouncer {
    port: u16,
    pool_size: u32,
    dir: tempfile::TempDir,
    child: Mutex<Option<Child>>,
}

impl fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBouncer")
            .field("port", &self.port)
            .field("pool_size", &self.pool_size)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PgBouncer {
    /// PgBouncer in transaction mode in front of the test server, [`DEFAULT_POOL_SIZE`] server
    /// connections.
    ///
    /// # Panics
    /// If `pgbouncer` is missing or does not start, with a message saying what to install.
    pub fn spawn() -> Self {
        Self::spawn_with_pool_size(DEFAULT_POOL_SIZE)
    }

    /// [`spawn`](Self::spawn) with `pool_size` server connections (`default_pool_size`).
    ///
    /// # Panics
    /// As [`spawn`](Self::spawn).
    pub fn spawn_with_pool_size(pool_size: u32) -> Self {
        match Self::try_spawn(pool_size) {
            Ok(bouncer) => bouncer,
            Err(e) => panic!("cannot start PgBouncer: {e}"),
        }
    }

    /// [`spawn_with_pool_size`](Self::spawn_with_pool_size), reporting failures. A missing
    /// binary is an [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn(pool_size: u32) -> io::Result<Self> {
        let mut last_error = None;
        // A free port can be taken between probing and binding; try a few times.
        let bin = pgbouncer_bin();
        for _ in 0..5 {
            match Self::start(pool_size, &bin) {
                Ok(bouncer) => return Ok(bouncer),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("pgbouncer did not start")))
    }

    fn start(pool_size: u32, bin: &Path) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("fl-pgbouncer-").tempdir()?;
        let port = free_port()?;
        let upstream = pg_addr();
        let user = pg_options().get_username().to_owned();
        let ini = dir.path().join("pgbouncer.ini");
        let userlist = dir.path().join("userlist.txt");
        let log = dir.path().join("pgbouncer.log");
        fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host={host} port={upstream_port}\n\
                 \n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {userlist}\n\
                 pool_mode = transaction\n\
                 ignore_startup_parameters = extra_float_digits\n\
                 default_pool_size = {pool_size}\n\
                 max_client_conn = 1000\n\
                 logfile = {log}\n",
                host = upstream.ip(),
                upstream_port = upstream.port(),
                userlist = userlist.display(),
                log = log.display(),
            ),
        )?;
        fs::write(&userlist, format!("\"{user}\" \"\"\n"))?;
        let mut command = Command::new(bin);
        // PgBouncer refuses to run as root: drop to the server's own account, which must be
        // able to write the log into the directory.
        if running_as_root() {
            let account = "postgres";
            let (uid, gid) = account_ids(account).ok_or_else(|| {
                io::Error::other(format!(
                    "running as root, PgBouncer needs an unprivileged account `{account}` \
                     (the postgresql package creates it)"
                ))
            })?;
            for path in [dir.path(), &ini, &userlist] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
            }
            command.arg("-u").arg(account);
        }
        command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = command.spawn().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} not found: {INSTALL_HINT}", bin.display()),
                )
            } else {
                io::Error::new(e.kind(), format!("cannot run {}: {e}", bin.display()))
            }
        })?;
        let bouncer = PgBouncer {
            port,
            pool_size,
            dir,
            child: Mutex::new(Some(child)),
        };
        bouncer.await_listening()?;
        Ok(bouncer)
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn await_listening(&self) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child().as_mut()
                && let Some(status) = child.try_wait()?
            {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Err(io::Error::other(format!(
                    "pgbouncer exited ({status}) on port {}: {}{}",
                    self.port,
                    stderr.trim(),
                    self.log_tail()
                )));
            }
            if TcpStream::connect_timeout(
                &([127, 0, 0, 1], self.port).into(),
                Duration::from_millis(200),
            )
            .is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(io::Error::other(format!(
                    "pgbouncer did not listen on port {} within {START_TIMEOUT:?}{}",
                    self.port,
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port PgBouncer listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its `default_pool_size`: the server connections it opens per database and user.
    pub fn pool_size(&self) -> u32 {
        self.pool_size
    }

    /// The test server's connect options with host and port replaced by PgBouncer's.
    pub fn options(&self) -> PgConnectOptions {
        pg_options().host("127.0.0.1").port(self.port)
    }

    /// `postgres://<user>@127.0.0.1:<port>/<database>` of the test server's user and database,
    /// through PgBouncer. No password: PgBouncer authenticates with `trust`.
    pub fn url(&self) -> String {
        let options = pg_options();
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            options.get_username(),
            self.port,
            options.get_database().unwrap_or("test")
        )
    }

    /// The directory holding the ini file, the user list and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the process still runs.
    pub fn is_running(&self) -> bool {
        self.child()
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills PgBouncer (SIGKILL): new connections are refused, open ones are reset.
    pub fn kill(&self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The last lines of PgBouncer's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(20)..];
        if tail.is_empty() {
            String::new()
        } else {
            format!("\npgbouncer log:\n{}", tail.join("\n"))
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn account_ids(name: &str) -> Option<(u32, u32)> {
    let user = nix::unistd::User::from_name(name).ok()??;
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_says_what_to_install() {
        let error = PgBouncer::start(1, Path::new("/nonexistent/pgbouncer"))
            .err()
            .map(|e| (e.kind(), e.to_string()));
        let Some((kind, message)) = error else {
            panic!("a missing pgbouncer binary started");
        };
        assert_eq!(kind, io::ErrorKind::NotFound);
        assert!(message.contains("scripts/test-deps"), "{message}");
        assert!(message.contains("apt-get install pgbouncer"), "{message}");
    }
}
