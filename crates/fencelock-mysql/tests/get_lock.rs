//! The `GET_LOCK` backend against the real server and other clients: sessions ended by an
//! operator or by the server itself, a paused holder, and plain `GET_LOCK` callers (through
//! the driver and through the `mariadb`/`mysql` command-line client).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker, LostReason, OwnerId};
use fencelock_mysql::lock_name;
use fencelock_mysql::sqlx;
use tokio::time::{Instant, sleep, timeout};

fn key(name: &str) -> LockKey {
    LockKey::new(format!("get-lock/{name}/{}", OwnerId::random())).unwrap()
}

/// Whether connection `id` still exists on the server.
async fn session_exists(id: u64) -> bool {
    let mut admin = common::admin().await;
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?")
            .bind(id)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    n == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_frees_the_lock_and_the_guard_reports_it_lost() {
    let (db, _cleanup) = common::database("kill").await;
    let backend = db.lock_backend();
    let locker = Locker::new(backend.clone());
    let key = key("killed");
    let name = lock_name(&key);
    let guard = locker.lock(&key).ttl(Duration::from_secs(3)).await.unwrap();
    let [session] = backend.session_ids()[..] else {
        panic!(
            "expected one holding session, got {:?}",
            backend.session_ids()
        );
    };
    let mut admin = common::admin().await;
    assert_eq!(
        common::holder_of(&mut admin, &name).await,
        Some(session),
        "IS_USED_LOCK does not name the holding session"
    );

    sqlx::query(&format!("KILL {session}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 10)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(got, Some(1), "the killed session's lock was not freed");

    let reason = timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() did not fire after the session was killed");
    assert_eq!(reason, LostReason::SessionEnded);
    assert!(!guard.is_held());
    assert!(
        !guard.release().await.unwrap(),
        "the release of a killed session's lease returned true"
    );
    assert_eq!(backend.held_count(), 0);

    // The plain client holds the lock now: fencelock waits for it, never kills it.
    let token_before = backend.inspect(&key).await.unwrap().last_token.unwrap();
    assert!(
        backend
            .try_acquire(&key, Duration::from_millis(20))
            .await
            .unwrap()
            .is_none()
    );
    let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let next = locker
        .lock(&key)
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(next.token() > token_before);
    assert!(next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_get_lock_holder_excludes_fencelock_and_is_never_ended() {
    let (db, _cleanup) = common::database("plain").await;
    let backend = db.lock_backend();
    let locker = Locker::new(backend.clone());
    let key = key("plain");
    let name = lock_name(&key);
    assert_eq!(name, key.as_str(), "a short key is not its own lock name");
    let mut admin = common::admin().await;
    let admin_id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let admin_id = u64::try_from(admin_id).unwrap();
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(got, Some(1));

    // Tries with a ttl far shorter than the time spent: a plain holder has no lease to run
    // out, so it is never ended.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert!(
            backend
                .try_acquire(&key, Duration::from_millis(20))
                .await
                .unwrap()
                .is_none(),
            "fencelock granted a lock a plain client holds"
        );
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(common::holder_of(&mut admin, &name).await, Some(admin_id));

    // A waiter is woken by the plain client's RELEASE_LOCK.
    let waiter = tokio::spawn(
        locker
            .lock(&key)
            .wait(Duration::from_secs(20))
            .into_future(),
    );
    sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let guard = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not woken by RELEASE_LOCK")
        .unwrap()
        .unwrap();

    // And the other way round: the plain client cannot take fencelock's lock.
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(got, Some(0), "a plain client took a lock fencelock holds");
    assert_eq!(
        common::holder_of(&mut admin, &name).await,
        Some(backend.session_ids()[0])
    );
    assert!(guard.release().await.unwrap());
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(got, Some(1), "fencelock's release did not free the lock");
}

/// The `mariadb` (or `mysql`) command-line client, as an operator runs it.
fn cli() -> std::process::Command {
    let program = ["mariadb", "mysql"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("neither `mariadb` nor `mysql` is on PATH: install the MariaDB or MySQL client");
    let config = fencelock_mysql::MySqlConfig::from_url(&common::url()).unwrap();
    let options = config.connect_options().unwrap();
    let url = url::Url::parse(&config.to_url()).unwrap();
    let mut command = std::process::Command::new(program);
    command
        .arg("--protocol=TCP")
        .arg(format!("--host={}", options.get_host()))
        .arg(format!("--port={}", options.get_port()))
        .arg(format!("--user={}", options.get_username()))
        .arg("--batch")
        .arg("--skip-column-names")
        .arg(config.database_name());
    // The password goes through the environment, never the command line.
    command.env(
        "MYSQL_PWD",
        common::percent_decode(url.password().unwrap_or("")),
    );
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_client_and_fencelock_exclude_each_other() {
    let (db, _cleanup) = common::database("cli").await;
    let backend = db.lock_backend();
    let key = key("cli");
    let name = lock_name(&key);
    assert!(!name.contains('\''), "the key would need quoting");

    // fencelock holds: the client's GET_LOCK times out.
    let lease = backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let output = cli()
        .arg("-e")
        .arg(format!(
            "SELECT GET_LOCK('{name}', 0), IS_USED_LOCK('{name}')"
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let answer = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        answer.split_whitespace().collect::<Vec<_>>(),
        ["0", &backend.session_ids()[0].to_string()],
        "the client took fencelock's lock"
    );
    assert!(backend.release(&lease).await.unwrap());

    // The client holds for two seconds: fencelock cannot grant, then can.
    let mut client = cli()
        .arg("-e")
        .arg(format!("SELECT GET_LOCK('{name}', 0), SLEEP(2)"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut admin = common::admin().await;
    assert!(
        common::holder_becomes(&mut admin, &name, |h| h.is_some(), Duration::from_secs(10)).await,
        "the client never took the lock"
    );
    assert!(
        backend
            .try_acquire(&key, Duration::from_secs(30))
            .await
            .unwrap()
            .is_none(),
        "fencelock granted a lock the command-line client holds"
    );
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock(&key)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    let status = client.wait().unwrap();
    assert!(status.success());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_ended_refused_and_told() {
    let (db, _cleanup) = common::database("paused").await;
    let backend = db.lock_backend();
    let storage = db.storage();
    let locker = Locker::new(backend.clone());
    let key = key("paused");
    let ttl = Duration::from_millis(800);

    // A takes the lock without a watchdog, reads, and pauses past its lease.
    let a = locker.lock(&key).ttl(ttl).watchdog(false).await.unwrap();
    let a_session = backend.session_ids()[0];
    assert_eq!(storage.read(&key, a.fence()).await.unwrap(), None);
    let reason = timeout(Duration::from_secs(10), a.lost())
        .await
        .expect("A's lost() did not fire at its deadline");
    assert_eq!(reason, LostReason::DeadlinePassed);
    sleep(ttl).await;

    // B gets the lock: its acquire ended A's expired session on the server's clock.
    let b = locker
        .lock(&key)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(b.token() > a.token());
    let mut admin = common::admin().await;
    assert_ne!(
        common::holder_of(&mut admin, &lock_name(&key)).await,
        Some(a_session)
    );
    assert!(
        common::eventually(Duration::from_secs(10), || async move {
            !session_exists(a_session).await
        })
        .await,
        "A's session is still alive after B took the lock"
    );
    storage.read(&key, b.fence()).await.unwrap();
    storage.write(&key, b.fence(), b"B").await.unwrap();

    // A wakes and writes: refused, and B's data stays.
    match storage.write(&key, a.fence(), b"A").await {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!(presented, a.fence());
            assert_eq!(current, b.fence());
        }
        other => panic!("A's write after the pause: expected Stale, got {other:?}"),
    }
    assert!(matches!(a.extend(ttl).await, Err(Error::LeaseLost { .. })));
    assert!(!a.release().await.unwrap());
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"B"[..]));
    assert_eq!(snapshot.fence, b.fence());
    assert!(b.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_ends_a_silent_holders_session_without_any_contender() {
    let (db, _cleanup) = common::database("silent").await;
    let backend = db.lock_backend();
    let key = key("silent");
    let name = lock_name(&key);
    // wait_timeout becomes 1 s: the server ends the session after a second of silence.
    let lease = backend
        .try_acquire(&key, Duration::from_millis(700))
        .await
        .unwrap()
        .unwrap();
    let session = backend.session_ids()[0];
    let mut admin = common::admin().await;
    let freed =
        common::holder_becomes(&mut admin, &name, |h| h.is_none(), Duration::from_secs(15)).await;
    assert!(freed, "the server never ended the silent holder's session");
    assert!(!session_exists(session).await);
    assert!(matches!(
        backend.extend(&lease, Duration::from_secs(1)).await,
        Err(Error::LeaseLost {
            reason: LostReason::SessionEnded,
            ..
        })
    ));
    assert!(!backend.release(&lease).await.unwrap());
    let next = backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the lock is free, yet not granted");
    assert!(next.token > lease.token);
    assert!(backend.release(&next).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_keeps_renewing_is_never_ended() {
    let (db, _cleanup) = common::database("renew").await;
    let backend: Arc<dyn LockBackend> = Arc::new(db.lock_backend());
    let locker = Locker::new(backend.clone());
    let key = key("renew");
    // 400 ms leases, renewed by the watchdog, for three seconds: past wait_timeout (1 s) and
    // many ttls, with a contender trying all along.
    let guard = locker
        .lock(&key)
        .ttl(Duration::from_millis(400))
        .await
        .unwrap();
    let lost = guard.lost_token();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(
            backend
                .try_acquire(&key, Duration::from_secs(1))
                .await
                .unwrap()
                .is_none(),
            "a contender took a lock that was being renewed"
        );
        sleep(Duration::from_millis(100)).await;
    }
    assert!(!lost.is_cancelled(), "the renewed lease was lost");
    assert!(guard.release().await.unwrap());
}

/// A plain `GET_LOCK` client holding the key's name is reported by `inspect` with its
/// connection id (the lock is not free), and the key is free again once it lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_a_plain_get_lock_holder_by_connection_id() {
    let (db, _cleanup) = common::database("plain_holder").await;
    let backend = db.lock_backend();
    for key in [key("plain-never-used"), key("plain-after-use")] {
        if key.as_str().contains("after-use") {
            let lease = backend
                .try_acquire(&key, Duration::from_secs(10))
                .await
                .unwrap()
                .unwrap();
            assert!(backend.release(&lease).await.unwrap());
        }
        let mut plain = common::admin().await;
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 10)")
            .bind(lock_name(&key))
            .fetch_one(&mut plain)
            .await
            .unwrap();
        assert_eq!(got, Some(1));
        let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
            .fetch_one(&mut plain)
            .await
            .unwrap();
        let info = backend.inspect(&key).await.unwrap();
        assert_eq!(info.holder, None);
        assert!(info.is_held(), "{info:?}");
        let described = info.unfenced_holder.unwrap();
        assert!(
            described.contains(&format!("MySQL connection id {id}")),
            "{described}"
        );
        let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
            .bind(lock_name(&key))
            .fetch_one(&mut plain)
            .await
            .unwrap();
        let info = backend.inspect(&key).await.unwrap();
        assert!(!info.is_held(), "{info:?}");
    }
}
