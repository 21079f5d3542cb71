//! A real S3-compatible server for the tests: moto's standalone server on a free port of
//! 127.0.0.1, one per test binary, with a bucket made for it. It goes away with the test
//! process (a small shell watcher ends it once that process is gone).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fencelock_core::OwnerId;

/// What to install when moto is missing: the version whose conditional writes were checked.
pub(crate) const INSTALL: &str = "pip install 'moto[server]==5.2.1'";

/// The bucket every test uses; each test works under a prefix of its own.
pub(crate) const BUCKET: &str = "fencelock-tests";

/// A running moto server.
#[derive(Debug)]
pub(crate) struct Moto {
    pub(crate) port: u16,
    _log: tempfile::TempDir,
}

impl Moto {
    /// `http://127.0.0.1:<port>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An `s3://` URL for a prefix no other test uses, with moto's accepted credentials.
    pub(crate) fn url(&self) -> String {
        self.url_via(self.port)
    }

    /// The same, reaching the server through another port of 127.0.0.1 (a fault proxy).
    pub(crate) fn url_via(&self, port: u16) -> String {
        format!(
            "s3://{BUCKET}/t-{}?endpoint=http://127.0.0.1:{port}&region=us-east-1&access_key_id=test&secret_access_key=test",
            OwnerId::random()
        )
    }
}

/// The moto server of this test binary, started on first use.
pub(crate) fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(start)
}

fn program() -> PathBuf {
    if let Some(path) = std::env::var_os("FENCELOCK_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("moto_server"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "moto_server, the S3-compatible test server, is not installed: run `{INSTALL}` \
             (scripts/test-deps does), or set FENCELOCK_MOTO_SERVER to its path"
        )
    })
}

fn start() -> Moto {
    let program = program();
    let log = tempfile::tempdir().unwrap();
    for _ in 0..3 {
        let port = free_port();
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
            .spawn()
            .expect("sh must be there to start moto_server");
        // Reaped when it ends; it outlives this process only to end moto after it.
        std::thread::spawn(move || watcher.wait());
        if wait_ready(port, &log_file) {
            create_bucket(port);
            return Moto { port, _log: log };
        }
    }
    panic!(
        "moto_server ({}) did not start on a free port of 127.0.0.1 in three tries; \
         install it with `{INSTALL}`",
        program.display()
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

fn create_bucket(port: u16) {
    let status = http(port, &format!("PUT /{BUCKET} HTTP/1.1"))
        .expect("moto_server stopped answering while the test bucket was created");
    assert!(
        status.contains(" 200 "),
        "moto_server refused to create the test bucket: {status}"
    );
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

/// The value of a connect to moto; a refusal names the version that implements conditional
/// writes, since an older moto ignores `If-Match` and fails the store check.
pub(crate) fn connected<T>(result: fencelock_core::Result<T>) -> T {
    result.unwrap_or_else(|error| {
        panic!("connecting to moto failed: {error}; the tests need moto with conditional writes: `{INSTALL}`")
    })
}
