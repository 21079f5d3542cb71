//! A real S3-compatible server: moto's standalone server (PyPI `moto[server]`) on a free
//! port of 127.0.0.1, with a bucket made for it. It lives as long as the process that started
//! it: a small shell watcher ends it once that process is gone, so a server kept in a static
//! (one per test binary) never outlives the tests.

use std::io::{self, Read, Write};
use std::net::TcpStream;

use crate::port::free_port;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to install when moto is missing: the version whose conditional writes were checked.
pub const INSTALL: &str = "pip install 'moto[server]==5.2.1'";

/// The bucket every test uses; each test works under a prefix of its own.
pub const BUCKET: &str = "fencelock-tests";

/// A running moto server.
#[derive(Debug)]
pub struct Moto {
    /// The port it listens on.
    pub port: u16,
    _log: tempfile::TempDir,
}

impl Moto {
    /// Starts a server on a free port and creates [`BUCKET`]. A missing `moto_server` is an
    /// [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_start() -> io::Result<Self> {
        start(program()?)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An `s3://` URL of [`BUCKET`] under `prefix`, with moto's accepted credentials.
    pub fn url(&self, prefix: &str) -> String {
        self.url_via(self.port, prefix)
    }

    /// The same, reaching the server through another port of 127.0.0.1 (a fault proxy).
    pub fn url_via(&self, port: u16, prefix: &str) -> String {
        format!(
            "s3://{BUCKET}/{prefix}?endpoint=http://127.0.0.1:{port}&region=us-east-1&access_key_id=test&secret_access_key=test"
        )
    }
}

fn program() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("FENCELOCK_MOTO_SERVER") {
        return Ok(PathBuf::from(path));
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("moto_server"))
            .find(|candidate| candidate.is_file())
    });
    found.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "moto_server, the S3-compatible test server, is not installed: run `{INSTALL}` \
                 (scripts/test-deps does), or set FENCELOCK_MOTO_SERVER to its path"
            ),
        )
    })
}

fn start(program: PathBuf) -> io::Result<Moto> {
    let log = tempfile::tempdir()?;
    for _ in 0..3 {
        let port = free_port()?;
        let log_file = log.path().join(format!("moto-{port}.log"));
        // The watcher ends moto once this test process is gone, as statics never drop.
        let script = r#"
            "$1" -H 127.0.0.1 -p "$2" >"$3" 2>&1 &
            m=$!
            trap 'kill $m 2>/dev/null' EXIT
            while kill -0 "$4" 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done
        "#;
        let mut watcher = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(&program)
            .arg(port.to_string())
            .arg(&log_file)
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // Reaped when it ends; it outlives this process only to end moto after it.
        std::thread::spawn(move || watcher.wait());
        if wait_ready(port, &log_file) {
            create_bucket(port)?;
            return Ok(Moto { port, _log: log });
        }
    }
    Err(io::Error::other(format!(
        "moto_server ({}) did not start on a free port of 127.0.0.1 in three tries; \
         install it with `{INSTALL}`",
        program.display()
    )))
}

/// Waits (generously: the machine is loaded) until the server answers HTTP, or its log shows
/// it failed.
fn wait_ready(port: u16, log: &std::path::Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if http(port, "GET /moto-api/ HTTP/1.1").is_some() {
            return true;
        }
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("Address already in use") || text.contains("Traceback") {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

fn create_bucket(port: u16) -> io::Result<()> {
    let status = http(port, &format!("PUT /{BUCKET} HTTP/1.1")).ok_or_else(|| {
        io::Error::other("moto_server stopped answering while the test bucket was created")
    })?;
    if !status.contains(" 200 ") {
        return Err(io::Error::other(format!(
            "moto_server refused to create the test bucket: {status}"
        )));
    }
    Ok(())
}

/// Sends `request_line` with no body; the response's status line.
fn http(port: u16, request_line: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let request = format!(
        "{request_line}\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    let status = text.lines().next()?.to_owned();
    status.starts_with("HTTP/").then_some(status)
}
