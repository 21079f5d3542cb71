//! TLS servers for tests: a throwaway certificate authority and server certificate made at test
//! time with the `openssl` command, and a throwaway PostgreSQL cluster (`initdb`, then
//! `postgres` with `ssl = on`) on a free port of 127.0.0.1 in a temporary directory, killed and
//! removed on drop. A backend's crate gives its own TLS servers, taking the PEM files of a
//! [`TestCerts`] (`fencelock_redis::servers::TlsRedis`).
//!
//! ```no_run
//! use fencelock_testkit::tls::{TestCerts, TlsPostgres};
//! let certs = TestCerts::generate();          // CA + server cert for localhost/127.0.0.1
//! let pg = TlsPostgres::spawn(Some(&certs));  // ssl = on; None: a cluster without TLS
//! let wrong = TestCerts::other_ca();          // a CA that signed nothing the servers show
//! let (cert, key) = certs.client_cert("app");  // a client certificate, CN=app
//! # let _ = (certs.server_cert(), pg.url(), wrong.ca());
//! ```

use std::fmt;
use std::fs;
use std::io;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use fencelock_servers::port::free_port;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The variable naming the directory of PostgreSQL's server binaries (`initdb`, `postgres`,
/// `pg_isready`); default: the newest `/usr/lib/postgresql/*/bin`.
pub const PG_BIN_VAR: &str = "FENCELOCK_PG_BIN";

/// A certificate authority and a server certificate it signed, for `localhost` and
/// `127.0.0.1`, as PEM files in a temporary directory removed on drop.
pub struct TestCerts {
    dir: tempfile::TempDir,
    server: bool,
}

impl fmt::Debug for TestCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCerts")
            .field("dir", &self.dir.path())
            .field("server", &self.server)
            .finish()
    }
}

impl TestCerts {
    /// A fresh CA and a server certificate it signed (EC P-256, valid for a day).
    ///
    /// # Panics
    /// If `openssl` is missing or fails, with a message saying what to install.
    pub fn generate() -> Self {
        match Self::try_generate(true) {
            Ok(certs) => certs,
            Err(e) => panic!("cannot make test certificates: {e}"),
        }
    }

    /// A fresh CA alone: one that signed none of the servers' certificates.
    ///
    /// # Panics
    /// As [`generate`](Self::generate).
    pub fn other_ca() -> Self {
        match Self::try_generate(false) {
            Ok(certs) => certs,
            Err(e) => panic!("cannot make test certificates: {e}"),
        }
    }

    /// A fresh CA and a server certificate it signed for the DNS name `name` alone (not for
    /// `localhost` or `127.0.0.1`): a trusted certificate that does not match the host a
    /// client connects to.
    ///
    /// # Panics
    /// As [`generate`](Self::generate).
    pub fn generate_for_name(name: &str) -> Self {
        match Self::try_generate_with(true, &format!("DNS:{name}")) {
            Ok(certs) => certs,
            Err(e) => panic!("cannot make test certificates: {e}"),
        }
    }

    /// [`generate`](Self::generate) (or [`other_ca`](Self::other_ca) without `server`),
    /// reporting failures.
    pub fn try_generate(server: bool) -> io::Result<Self> {
        Self::try_generate_with(server, "DNS:localhost, IP:127.0.0.1")
    }

    /// [`try_generate`](Self::try_generate) with the server certificate's `subjectAltName`.
    fn try_generate_with(server: bool, names: &str) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("fl-tls-").tempdir()?;
        let d = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let subject = if server {
            "/CN=fencelock test CA"
        } else {
            "/CN=fencelock other test CA"
        };
        openssl(
            d,
            &["req", "-x509", "-days", "1", "-subj", subject],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.crt"],
        )?;
        if server {
            openssl(
                d,
                &["req", "-subj", "/CN=localhost"],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr"],
            )?;
            fs::write(
                d.join("server.ext"),
                format!(
                    "subjectAltName = {names}\n\
                     basicConstraints = critical, CA:FALSE\n\
                     keyUsage = critical, digitalSignature, keyEncipherment\n\
                     extendedKeyUsage = serverAuth\n"
                ),
            )?;
            openssl(
                d,
                &["x509", "-req", "-in", "server.csr", "-days", "1"],
                &["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"],
                &["-extfile", "server.ext", "-out", "server.crt"],
            )?;
        }
        Ok(TestCerts { dir, server })
    }

    /// The CA's certificate (PEM): what a client trusts.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The server's certificate (PEM), for `localhost` and `127.0.0.1`.
    ///
    /// # Panics
    /// On a CA made by [`other_ca`](Self::other_ca), which has none.
    pub fn server_cert(&self) -> PathBuf {
        assert!(self.server, "this CA signed no server certificate");
        self.dir.path().join("server.crt")
    }

    /// The server's private key (PEM, unencrypted).
    ///
    /// # Panics
    /// As [`server_cert`](Self::server_cert).
    pub fn server_key(&self) -> PathBuf {
        assert!(self.server, "this CA signed no server certificate");
        self.dir.path().join("server.key")
    }

    /// A client certificate this CA signed for the common name `name` (etcd takes it as the
    /// user name), and its private key: PEM files `client-<name>.crt` and `.key` beside the
    /// CA's (EC P-256, valid for a day, `extendedKeyUsage = clientAuth`).
    ///
    /// # Panics
    /// If `name` is not letters, digits, `-` and `_`, or `openssl` fails.
    pub fn client_cert(&self, name: &str) -> (PathBuf, PathBuf) {
        match self.try_client_cert(name) {
            Ok(files) => files,
            Err(e) => panic!("cannot make a test client certificate: {e}"),
        }
    }

    /// [`client_cert`](Self::client_cert), reporting failures.
    pub fn try_client_cert(&self, name: &str) -> io::Result<(PathBuf, PathBuf)> {
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !plain {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("client name {name:?}: use letters, digits, - and _"),
            ));
        }
        let d = self.dir.path();
        let (key, csr, ext, cert) = (
            format!("client-{name}.key"),
            format!("client-{name}.csr"),
            format!("client-{name}.ext"),
            format!("client-{name}.crt"),
        );
        openssl(
            d,
            &["req", "-subj", &format!("/CN={name}")],
            &[
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ],
            &["-keyout", &key, "-out", &csr],
        )?;
        fs::write(
            d.join(&ext),
            "basicConstraints = critical, CA:FALSE\n\
             keyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = clientAuth\n",
        )?;
        openssl(
            d,
            &["x509", "-req", "-in", &csr, "-days", "1"],
            &["-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial"],
            &["-extfile", &ext, "-out", &cert],
        )?;
        Ok((d.join(cert), d.join(key)))
    }
}

/// Runs `openssl` with the argument groups in `dir`, reporting a missing binary or a failure
/// with what it printed.
fn openssl(dir: &Path, a: &[&str], b: &[&str], c: &[&str]) -> io::Result<()> {
    let output = Command::new("openssl")
        .args(a)
        .args(b)
        .args(c)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "the `openssl` command is not installed (Debian: apt-get install openssl)",
                )
            } else {
                io::Error::new(e.kind(), format!("cannot run openssl: {e}"))
            }
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {} failed: {}",
            a.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// A child process killed on drop (`signal`, then waited for).
struct Owned {
    child: Mutex<Option<Child>>,
    signal: Signal,
}

impl Owned {
    fn stop(&self) {
        let taken = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut child) = taken {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), self.signal);
            }
            let _ = child.wait();
        }
    }

    /// Whether the process has exited; its stderr, if so.
    fn exited(&self) -> Option<String> {
        let mut guard = self.child.lock().unwrap_or_else(PoisonError::into_inner);
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut said = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = io::Read::read_to_string(&mut err, &mut said);
                }
                Some(format!("{status}: {}", said.trim()))
            }
            _ => None,
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until `port` on 127.0.0.1 accepts connections and `ready` says yes, or the process
/// exits.
fn await_ready(what: &str, process: &Owned, port: u16, ready: impl Fn() -> bool) -> io::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(said) = process.exited() {
            return Err(io::Error::other(format!("{what} exited at start: {said}")));
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() && ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A throwaway PostgreSQL cluster: `initdb` into a temporary directory, then `postgres` on a
/// free port of 127.0.0.1, with `ssl = on` and the certificate of a [`TestCerts`] (or without
/// TLS). Trust authentication for the user `postgres`; databases `postgres` and `template1`.
/// Run as the `postgres` account when the test runs as root (PostgreSQL refuses root). Shut
/// down (immediate) and removed on drop.
pub struct TlsPostgres {
    port: u16,
    _dir: tempfile::TempDir,
    process: Owned,
}

impl fmt::Debug for TlsPostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPostgres")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl TlsPostgres {
    /// Starts a cluster, with TLS when `certs` is given.
    ///
    /// # Panics
    /// If PostgreSQL's server binaries are missing or the cluster does not start, saying what
    /// to install or set.
    pub fn spawn(certs: Option<&TestCerts>) -> Self {
        match Self::try_spawn(certs) {
            Ok(server) => server,
            Err(e) => panic!("cannot start a throwaway PostgreSQL cluster: {e}"),
        }
    }

    /// [`spawn`](Self::spawn), reporting failures.
    pub fn try_spawn(certs: Option<&TestCerts>) -> io::Result<Self> {
        let bin = pg_bin()?;
        let dir = tempfile::Builder::new().prefix("fl-pg-tls-").tempdir()?;
        let data = dir.path().join("data");
        let account = unprivileged()?;
        if let Some((uid, gid)) = account {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
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
        let mut settings = vec![
            "listen_addresses=127.0.0.1".to_owned(),
            "unix_socket_directories=".to_owned(),
            "fsync=off".to_owned(),
        ];
        if let Some(certs) = certs {
            // The key must belong to the server's account and be readable by it alone.
            for (from, to) in [
                (certs.server_cert(), "server.crt"),
                (certs.server_key(), "server.key"),
            ] {
                let path = data.join(to);
                fs::copy(from, &path)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600))?;
                if let Some((uid, gid)) = account {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
                }
            }
            settings.extend([
                "ssl=on".to_owned(),
                "ssl_cert_file=server.crt".to_owned(),
                "ssl_key_file=server.key".to_owned(),
            ]);
        }
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut postgres = Command::new(bin.join("postgres"));
            postgres
                .arg("-D")
                .arg(&data)
                .arg("-p")
                .arg(port.to_string());
            for setting in &settings {
                postgres.arg("-c").arg(setting);
            }
            postgres
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            as_account(&mut postgres, account);
            let child = postgres.spawn()?;
            let process = Owned {
                child: Mutex::new(Some(child)),
                // Immediate shutdown: the backends go with the postmaster.
                signal: Signal::SIGQUIT,
            };
            let isready = bin.join("pg_isready");
            let ready = || {
                Command::new(&isready)
                    .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                    .status()
                    .is_ok_and(|s| s.success())
            };
            match await_ready("postgres", &process, port, ready) {
                Ok(()) => {
                    return Ok(TlsPostgres {
                        port,
                        _dir: dir,
                        process,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("postgres did not start")))
    }

    /// `postgres://postgres@localhost:<port>/postgres`, without TLS options.
    pub fn url(&self) -> String {
        format!("postgres://postgres@localhost:{}/postgres", self.port)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server now (as dropping it does).
    pub fn stop(&self) {
        self.process.stop();
    }
}

/// PostgreSQL's server binaries: [`PG_BIN_VAR`], else the newest `/usr/lib/postgresql/*/bin`.
pub(crate) fn pg_bin() -> io::Result<PathBuf> {
    if let Ok(dir) = std::env::var(PG_BIN_VAR) {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no PostgreSQL server binaries (initdb) under /usr/lib/postgresql: install them \
                 (Debian: apt-get install postgresql) or set {PG_BIN_VAR} to their directory"
            ),
        )
    })
}

/// The `postgres` account's ids when running as root (PostgreSQL refuses to run as root).
pub(crate) fn unprivileged() -> io::Result<Option<(u32, u32)>> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .ok_or_else(|| {
            io::Error::other(
                "running as root, PostgreSQL needs an unprivileged account `postgres` (the \
                 postgresql package creates it)",
            )
        })?;
    Ok(Some((user.uid.as_raw(), user.gid.as_raw())))
}

pub(crate) fn as_account(command: &mut Command, account: Option<(u32, u32)>) {
    if let Some((uid, gid)) = account {
        command.uid(uid).gid(gid);
    }
}
