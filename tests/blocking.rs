//! `fencelock::blocking` on a real redis-server (spawned for the test), from plain threads: no
//! async runtime of the test's own. And the one misuse it must refuse, not deadlock on: a call
//! from inside an async runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock::Error;
use fencelock::blocking::Locker;
use fencelock_redis::servers::RedisServer;

#[test]
fn locks_and_fences_from_a_program_without_a_runtime() {
    let server = RedisServer::spawn();
    let (locker, storage) = Locker::connect(&server.url()).unwrap();

    let first = locker
        .lock("blocking-key")
        .ttl(Duration::from_secs(5))
        .acquire()
        .unwrap();
    assert!(first.is_held());
    storage
        .write("blocking-data", first.fence(), b"one")
        .unwrap();
    assert_eq!(
        storage
            .read("blocking-data", first.fence())
            .unwrap()
            .as_deref(),
        Some(&b"one"[..])
    );

    // Held: another locker of the same service cannot take it now.
    let (other, _) = Locker::connect(&server.url()).unwrap();
    assert!(other.try_lock("blocking-key").unwrap().is_none());
    let stale = first.fence();
    assert!(first.release().unwrap());

    // The next holder's token is greater, and the storage then refuses the old fence.
    let second = other.lock("blocking-key").acquire().unwrap();
    assert!(second.token() > stale.token);
    storage
        .write("blocking-data", second.fence(), b"two")
        .unwrap();
    let refused = storage.write("blocking-data", stale, b"late");
    assert!(matches!(refused, Err(Error::Stale { .. })), "{refused:?}");
    assert_eq!(
        storage.peek("blocking-data").unwrap().and_then(|s| s.value),
        Some(b"two".to_vec())
    );

    // Dropping a guard releases the lock before the drop returns.
    drop(second);
    let third = locker.try_lock("blocking-key").unwrap();
    assert!(third.is_some(), "a dropped guard left the lock held");

    // Bad input is the async API's typed error.
    assert!(matches!(locker.try_lock(""), Err(Error::InvalidKey { .. })));
    assert!(matches!(
        Locker::connect("redis://127.0.0.1:99999"),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn guards_renew_in_the_background_while_the_caller_blocks_elsewhere() {
    let server = RedisServer::spawn();
    let (locker, _) = Locker::connect(&server.url()).unwrap();
    let (other, _) = Locker::connect(&server.url()).unwrap();
    let guard = locker
        .lock("renewed")
        .ttl(Duration::from_millis(300))
        .acquire()
        .unwrap();
    // Several ttls pass with the calling thread asleep: the watchdog runs on the locker's
    // own runtime and keeps the lease.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(guard.is_held());
    assert!(other.try_lock("renewed").unwrap().is_none());
    assert!(guard.release().unwrap());
}

#[tokio::test]
async fn inside_an_async_runtime_it_refuses_instead_of_blocking() {
    let refused = Locker::connect("memory://");
    match refused {
        Err(Error::Unsupported { what, .. }) => {
            assert!(what.contains("async runtime"), "{what}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}
