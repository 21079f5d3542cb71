//! A MariaDB server of a test's own (`mariadb-install-db` + `mariadbd` on a free port, in a
//! directory of its own), which the test may kill with SIGKILL and start again: the shared
//! server is never touched.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fencelock_core::OwnerId;
use fencelock_mysql::MySqlConfig;

/// A MariaDB server of the test's own.
pub(crate) struct PrivateServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Server options beyond the test's defaults (`--autocommit=0`).
    extra: Vec<String>,
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
         mariadb-server`) to run the restart tests"
    )
}

impl PrivateServer {
    pub(crate) fn start() -> Self {
        Self::start_with(Vec::<String>::new())
    }

    pub(crate) fn start_with(extra: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let extra: Vec<String> = extra.into_iter().map(Into::into).collect();
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

    pub(crate) fn run(&mut self) {
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
    pub(crate) fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub(crate) fn url(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// Waits until the server answers, and makes sure database `t` exists.
    pub(crate) async fn ready(&self) {
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

impl PrivateServer {
    /// A plain connection to database `t`, as an operator's client.
    pub(crate) async fn admin(&self) -> fencelock_mysql::sqlx::mysql::MySqlConnection {
        use fencelock_mysql::sqlx::Connection;
        let options = MySqlConfig::from_url(&self.url("t"))
            .unwrap()
            .connect_options()
            .unwrap();
        fencelock_mysql::sqlx::mysql::MySqlConnection::connect_with(&options)
            .await
            .unwrap()
    }
}
