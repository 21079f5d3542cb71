//! Tokens survive a crash of the server; held locks do not. On a private MariaDB server this
//! test starts itself (`mariadb-install-db` + `mariadbd` on a free port, in a directory of its
//! own), kills with SIGKILL and starts again: the shared server is never touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, OwnerId, TokenGuarantee};
use fencelock_mysql::MySqlConfig;

/// A MariaDB server of the test's own.
struct PrivateServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Server options beyond the test's defaults (`--autocommit=0`).
    extra: Vec<&'static str>,
}

fn program(names: &[&str]) -> String {
    for name in names {
        for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
            let path = format!("{dir}/{name}");
            if std::path::Path::new(&path).exists() {
                return path;
            }
        }
    }
    panic!(
        "none of {names:?} found: install the MariaDB server (Debian: `apt-get install \
         mariadb-server`) to run the restart test"
    )
}

impl PrivateServer {
    fn start() -> Self {
        Self::start_with(Vec::new())
    }

    fn start_with(extra: Vec<&'static str>) -> Self {
        // Two installs at once trip over each other; the servers themselves run side by side.
        static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("fencelock-mysql-{}", OwnerId::random()));
        std::fs::create_dir_all(&dir).unwrap();
        let install = Command::new(program(&["mariadb-install-db", "mysql_install_db"]))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg("--user=root")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(
            install.success(),
            "mariadb-install-db failed in {}",
            dir.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = PrivateServer {
            dir,
            port,
            child: None,
            extra,
        };
        server.run();
        server
    }

    fn run(&mut self) {
        let child = Command::new(program(&["mariadbd", "mysqld"]))
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!(
                "--log-error={}",
                self.dir.join("error.log").display()
            ))
            .arg("--user=root")
            .arg("--skip-name-resolve")
            .arg("--innodb-buffer-pool-size=16M")
            .arg("--innodb-flush-log-at-trx-commit=1")
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Kills the server with SIGKILL: a crash, nothing flushed on the way out.
    fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Waits until the server answers, and makes sure database `t` exists.
    async fn ready(&self) {
        use fencelock_mysql::sqlx::{self, Connection};
        let options = MySqlConfig::from_url(&self.url("mysql"))
            .unwrap()
            .connect_options()
            .unwrap();
        for _ in 0..300 {
            if let Ok(mut conn) = sqlx::mysql::MySqlConnection::connect_with(&options).await {
                sqlx::query("CREATE DATABASE IF NOT EXISTS t")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the private MariaDB server did not come up; see {}",
            self.dir.join("error.log").display()
        );
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_fences_survive_a_crash_and_held_locks_do_not() {
    let mut server = PrivateServer::start();
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let db = config.connect().await.unwrap();
    let backend = db.lock_backend();
    assert_eq!(backend.capabilities().tokens, TokenGuarantee::Durable);
    let storage = db.storage();
    let key = LockKey::new("restart/ledger").unwrap();

    let first = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    storage.write(&key, first.fence(), b"before").await.unwrap();
    assert!(backend.release(&first).await.unwrap());
    let held = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    storage.write(&key, held.fence(), b"held").await.unwrap();

    server.crash();
    server.run();
    server.ready().await;

    // A fresh process on the restarted server.
    let db = config.connect().await.unwrap();
    let backend = db.lock_backend();
    let storage = db.storage();
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.last_token,
        Some(held.token),
        "the token counter was lost"
    );
    assert_eq!(info.holder, None, "a lock survived the crash");
    let after = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the lock held before the crash is still taken");
    assert!(after.token > held.token, "a token repeated after the crash");
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"held"[..]));
    assert_eq!(snapshot.fence, held.fence());
    assert!(matches!(
        storage.write(&key, first.fence(), b"stale").await,
        Err(Error::Stale { .. })
    ));
    storage.write(&key, after.fence(), b"after").await.unwrap();
    assert!(backend.release(&after).await.unwrap());
    db.close().await;
}

/// A server whose sessions start with autocommit off (`--autocommit=0`): fencelock's own
/// sessions must still commit each grant's counter bump, or another process sees no last
/// token, the next grant waits on the row the first one left locked, and a killed holder's
/// session rolls its token back so that it is handed out again. Fails without fencelock setting
/// autocommit on its sessions: the second process's inspect shows no last token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_commit_their_tokens_on_a_server_with_autocommit_off() {
    let server = PrivateServer::start_with(vec!["--autocommit=0"]);
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let first = config.connect().await.unwrap();
    let holder = first.lock_backend();
    let key = LockKey::new("autocommit/ledger").unwrap();
    let lease = holder
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();

    // Another process sees the token while the lock is held.
    let second = config.connect().await.unwrap();
    let other = second.lock_backend();
    let info = other.inspect(&key).await.unwrap();
    assert_eq!(
        info.last_token,
        Some(lease.token),
        "the grant's token was not committed: another session cannot see it"
    );
    assert!(holder.release(&lease).await.unwrap());

    // The next grant, in the other process, neither waits on a row left locked nor repeats
    // the token.
    let next = tokio::time::timeout(
        Duration::from_secs(20),
        other.try_acquire(&key, Duration::from_secs(60)),
    )
    .await
    .expect("the next grant waited on the counter row the first grant left locked")
    .unwrap()
    .unwrap();
    assert!(
        next.token > lease.token,
        "token {} after {}",
        next.token,
        lease.token
    );
    assert!(other.release(&next).await.unwrap());
    first.close().await;
    let again = other
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert!(
        again.token > next.token,
        "a token repeated after a session closed"
    );
    assert!(other.release(&again).await.unwrap());
}
