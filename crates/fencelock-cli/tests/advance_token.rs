//! `fencelock advance-token` heals a lock server that lost its counters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;
use fencelock::redis::servers::RedisServer;

/// The token a `fencelock run` on `key` was granted.
fn token_of_a_run(url: &str, key: &str) -> u64 {
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        url,
        "--key",
        key,
        "--",
        "sh",
        "-c",
        "echo $FENCELOCK_TOKEN",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    out.trim().parse().unwrap()
}

/// The lock service moved to: the PostgreSQL lease backend on a schema of its own (dropped
/// with the returned guard), its spec, and its storage.
fn lease_service(
    runtime: &tokio::runtime::Runtime,
) -> (
    fencelock_testkit::postgres::PgSchema,
    String,
    std::sync::Arc<dyn fencelock::FencedStorage>,
) {
    let schema = runtime.block_on(fencelock_testkit::postgres::PgSchema::create());
    let url = schema.url();
    let sep = if url.contains('?') { '&' } else { '?' };
    let pg = format!("{url}{sep}backend=lease&schema={}", schema.name());
    let storage = runtime
        .block_on(async { fencelock::spec::BackendSpec::parse(&pg)?.connect().await })
        .unwrap()
        .storage;
    (schema, pg, storage)
}

#[test]
fn advance_token_heals_a_counter_lost_in_a_restart() {
    // No persistence: a restart loses the counters, so tokens start again at 1.
    let server = RedisServer::spawn();
    let url = server.url();
    let tokens: Vec<u64> = (0..3).map(|_| token_of_a_run(&url, "job")).collect();
    assert_eq!(tokens, [1, 2, 3]);
    server.restart();
    assert_eq!(token_of_a_run(&url, "job"), 1, "the counter was lost");

    let (code, out, err) = fencelock(&[
        "advance-token",
        "--backend",
        &url,
        "--key",
        "job",
        "--to",
        "3",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("above 3"), "{out}");
    assert_eq!(token_of_a_run(&url, "job"), 4);

    // The counter never goes down.
    let (code, _, err) = fencelock(&[
        "advance-token",
        "--backend",
        &url,
        "--key",
        "job",
        "--to",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(token_of_a_run(&url, "job"), 5);
}

// Catches: a move from one lock service to another over the same data that leaves every
// grant of the new service refused with nothing saying why. The data lives in the PostgreSQL
// storage, fenced first under a Redis lock (the old service, whose tokens are ahead), then the
// lease backend on the same schema takes over: `inspect` must show the storage's fence ahead of
// the new counter, and `advance-token --to-fence-of` must lift the counter past it, after which
// a grant of the new service is admitted.
#[test]
fn moving_to_another_lock_service_is_healed_from_the_storage_fence() {
    use fencelock::{Fence, FencedStorageExt, FencingToken, OwnerId};

    let redis = RedisServer::spawn();
    let old_token = (0..5)
        .map(|_| token_of_a_run(&redis.url(), "ledger"))
        .max()
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_schema, pg, storage) = lease_service(&runtime);
    // The old service's holder wrote the data with its token.
    let old = Fence::new(FencingToken::new(old_token).unwrap(), OwnerId::random());
    runtime
        .block_on(storage.write_key("ledger", old, b"balance=10"))
        .unwrap();

    // The new service grants token 1, which the storage would refuse; inspect says so.
    assert_eq!(token_of_a_run(&pg, "ledger"), 1);
    let (code, out, err) = fencelock(&["inspect", "--backend", &pg, "--json", "ledger"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["storage_fence"]["token"], old_token, "{shown:#}");
    assert_eq!(shown["storage_fence"]["ahead"], true, "{shown:#}");
    let (_, text, _) = fencelock(&["inspect", "--backend", &pg, "ledger"]);
    assert!(text.contains("--to-fence-of ledger"), "{text}");

    let (code, out, err) = fencelock(&[
        "advance-token",
        "--backend",
        &pg,
        "--key",
        "ledger",
        "--to-fence-of",
        "ledger",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let new_token = token_of_a_run(&pg, "ledger");
    assert!(new_token > old_token, "{new_token} <= {old_token}");
    let new = Fence::new(FencingToken::new(new_token).unwrap(), OwnerId::random());
    runtime
        .block_on(storage.write_key("ledger", new, b"balance=12"))
        .unwrap();
    let (_, text, _) = fencelock(&["inspect", "--backend", &pg, "ledger"]);
    assert!(!text.contains("--to-fence-of"), "{text}");

    // A resource the storage never saw has nothing to lift past: refused, nothing changed.
    let (code, _, err) = fencelock(&[
        "advance-token",
        "--backend",
        &pg,
        "--key",
        "ledger",
        "--to-fence-of",
        "never-written",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds no fence for never-written"), "{err}");
}

// Catches: a move between lock services that lets a holder of the old one write after the
// new one's holder. Tokens 1-5 granted by Redis, the storage at 3: lifting the new counter
// only past the storage's fence (3) let the old holder of token 5, which had not written yet,
// write after the new holder's token 4 (and with the same resource it was refused as a
// configuration error, not as stale). `--past` reads the old service's last grant and goes
// past it, so the old holder is refused as stale.
#[test]
fn moving_past_the_old_services_last_grant_leaves_its_holders_stale() {
    use fencelock::{Error, Fence, FencedStorageExt, FencingToken, OwnerId};

    let redis = RedisServer::spawn();
    let tokens: Vec<u64> = (0..5)
        .map(|_| token_of_a_run(&redis.url(), "ledger"))
        .collect();
    assert_eq!(tokens, [1, 2, 3, 4, 5]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_schema, pg, storage) = lease_service(&runtime);
    // The old service's holder of token 3 wrote; the holder of token 5 has not yet.
    let third = Fence::new(FencingToken::new(3).unwrap(), OwnerId::random());
    runtime
        .block_on(storage.write_key("ledger", third, b"balance=10"))
        .unwrap();

    // Refused, changing nothing: the service being advanced, an in-process one, a key the
    // old service never granted.
    for (past, key, says) in [
        (pg.as_str(), "ledger", "the service this command advances"),
        ("memory://", "ledger", "lives inside one process"),
        (
            redis.url().as_str(),
            "never-locked",
            "never granted never-locked",
        ),
    ] {
        let (code, out, err) = fencelock(&[
            "advance-token",
            "--backend",
            &pg,
            "--key",
            key,
            "--past",
            past,
        ]);
        assert_eq!(code, 2, "--past {past}: {out}\n{err}");
        assert!(err.contains(says), "--past {past}: {err}");
    }

    let (code, out, err) = fencelock(&[
        "advance-token",
        "--backend",
        &pg,
        "--key",
        "ledger",
        "--past",
        &redis.url(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("above 5"), "{out}");
    let new_token = token_of_a_run(&pg, "ledger");
    assert_eq!(new_token, 6, "the new service's first grant");
    let new = Fence::new(FencingToken::new(new_token).unwrap(), OwnerId::random());
    runtime
        .block_on(storage.write_key("ledger", new, b"balance=12"))
        .unwrap();

    // The old service's last holder writes late: stale, both fences named.
    let fifth = Fence::new(FencingToken::new(5).unwrap(), OwnerId::random());
    match runtime.block_on(storage.write_key("ledger", fifth, b"balance=0")) {
        Err(Error::Stale { .. }) => {}
        other => panic!("the old service's holder of token 5 was not refused as stale: {other:?}"),
    }
}

/// One call cannot use up a key's counter by accident: a floor that leaves fewer than 2^32
/// grants before 2^63 - 1 is refused (exit 2, saying so and changing nothing) unless
/// `--force`, which warns.
#[test]
fn a_floor_that_would_use_up_the_counter_needs_force() {
    let server = RedisServer::spawn();
    let url = server.url();
    assert_eq!(token_of_a_run(&url, "near-end"), 1);
    let near_end = (i64::MAX - 1).to_string();
    let advance = |extra: &[&str]| {
        let mut args = vec![
            "advance-token",
            "--backend",
            &url,
            "--key",
            "near-end",
            "--to",
            &near_end,
        ];
        args.extend(extra);
        fencelock(&args)
    };
    let (code, out, err) = advance(&[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("fewer than 2^32 more grants") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        token_of_a_run(&url, "near-end"),
        2,
        "the refused floor moved the counter"
    );
    let last_safe = (i64::MAX.unsigned_abs() - (1 << 32)).to_string();
    let (code, _, err) = fencelock(&[
        "advance-token",
        "--backend",
        &url,
        "--key",
        "near-end",
        "--to",
        &last_safe,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    let (code, out, err) = advance(&["--force"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("warning"), "{err}");
}
