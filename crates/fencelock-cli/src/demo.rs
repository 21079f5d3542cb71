//! `fencelock demo`: the paused-client story of DESIGN section 1, on a real backend.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fencelock::spec::Connected;
use fencelock::{Error, Fence, FencedStorage, LockKey, Locker, OwnerId, Result};
use tokio::time::{Instant, sleep};

use crate::args::{BackendArg, parse_ttl};
use crate::error::CliError;
use crate::exit::Exit;

pub(crate) const EXAMPLES: &str = "  fencelock demo
  fencelock demo --backend redis://127.0.0.1:6379 --ttl 500ms
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Lease ttl of client 1; it pauses for twice as long.
    #[arg(long, default_value = "1s", value_parser = parse_ttl)]
    ttl: Duration,
}

const OPENING_BALANCE: i64 = 100;
const DEBIT: i64 = 30;
const DEPOSIT: i64 = 50;

/// Where the two clients keep the balance: the fenced storage, or a plain store that takes
/// every write (what a lock without fencing gives you).
enum Store<'a> {
    Fenced(&'a dyn FencedStorage),
    Plain(Mutex<HashMap<LockKey, Vec<u8>>>),
}

impl Store<'_> {
    async fn read(&self, key: &LockKey, fence: Fence) -> Result<i64> {
        let bytes = match self {
            Store::Fenced(storage) => storage.read(key, fence).await?,
            Store::Plain(map) => lock(map).get(key).cloned(),
        };
        Ok(balance(bytes))
    }

    /// The final balance, read without a fence.
    async fn peek(&self, key: &LockKey) -> Result<i64> {
        let bytes = match self {
            Store::Fenced(storage) => storage.peek(key).await?.and_then(|s| s.value),
            Store::Plain(map) => lock(map).get(key).cloned(),
        };
        Ok(balance(bytes))
    }

    async fn write(&self, key: &LockKey, fence: Fence, balance: i64) -> Result<()> {
        let bytes = balance.to_string().into_bytes();
        match self {
            Store::Fenced(storage) => storage.write(key, fence, &bytes).await,
            Store::Plain(map) => {
                lock(map).insert(key.clone(), bytes);
                Ok(())
            }
        }
    }
}

fn balance(bytes: Option<Vec<u8>>) -> i64 {
    bytes
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(OPENING_BALANCE)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Clock(Instant);

impl Clock {
    fn say(&self, who: &str, what: impl std::fmt::Display) {
        println!("  {:>6} ms  {who:<9} {what}", self.0.elapsed().as_millis());
    }
    fn note(&self, what: impl std::fmt::Display) {
        println!("  {:>6}     {:<9} {what}", "", "");
    }
}

/// What one run of the story ended with.
struct Outcome {
    final_balance: i64,
    stale_write_refused: bool,
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.backend;
    let connected = spec.spec().connect().await?;
    fencelock::validate_ttl(args.ttl, &connected.backend.capabilities())?;
    println!("fencelock demo on {spec}: client 1 pauses past its lease, client 2 takes over.\n");

    println!(
        "With fencing (fenced storage: {})",
        connected.storage.name()
    );
    let fenced = story(&connected, &Store::Fenced(&*connected.storage), args.ttl).await?;
    let expected = OPENING_BALANCE + DEPOSIT;
    let fenced_ok = fenced.stale_write_refused && fenced.final_balance == expected;
    if fenced_ok {
        println!(
            "  final balance {}: correct. The deposit is kept; client 1's stale debit was refused, so it can retry under a fresh lock.\n",
            fenced.final_balance
        );
    } else {
        println!(
            "  final balance {}: WRONG, expected {expected}. The fenced storage admitted a stale write.\n",
            fenced.final_balance
        );
    }

    println!("Without fencing (the same locks, a plain store that takes every write)");
    let plain = story(
        &connected,
        &Store::Plain(Mutex::new(HashMap::new())),
        args.ttl,
    )
    .await?;
    let lost = plain.final_balance != expected;
    if lost {
        println!(
            "  final balance {}: CORRUPTED. Client 2's deposit of {DEPOSIT} is lost: client 1 wrote a balance computed from a read made before its pause.\n",
            plain.final_balance
        );
    } else {
        println!(
            "  final balance {}: the stale write happened to do no harm.\n",
            plain.final_balance
        );
    }

    println!(
        "Summary: with fencing, {} stale write refused and the data is correct; without, {} lost update.",
        u8::from(fenced.stale_write_refused),
        u8::from(lost)
    );
    Ok(if fenced_ok {
        Exit::Success
    } else {
        Exit::Failure
    })
}

/// Client 1 locks, reads, pauses past its ttl; client 2 locks, deposits, releases; client 1
/// wakes and writes its debit computed from the stale read.
async fn story(connected: &Connected, store: &Store<'_>, ttl: Duration) -> Result<Outcome> {
    let locker = Locker::new(connected.backend.clone());
    let key = LockKey::new(format!("demo/account/{}", OwnerId::random()))?;
    let clock = Clock(Instant::now());
    let pause = ttl * 2;

    // Client 1 cannot renew while paused, so its watchdog is off: a paused process renews nothing.
    let client1 = locker
        .lock(key.as_str())
        .ttl(ttl)
        .wait(Duration::ZERO)
        .watchdog(false)
        .await?;
    clock.say(
        "client 1",
        format_args!("acquires the lock, token {}", client1.token()),
    );
    let seen = store.read(&key, client1.fence()).await?;
    clock.say("client 1", format_args!("reads balance = {seen}"));
    clock.say(
        "client 1",
        format_args!(
            "checks is_held() = {}, computes {seen} - {DEBIT} = {}, and is about to write it",
            client1.is_held(),
            seen - DEBIT
        ),
    );
    clock.say(
        "client 1",
        format_args!(
            "pauses for {} ms (a GC pause, a page fault, a throttled VM); its lease ends after {} ms",
            pause.as_millis(),
            ttl.as_millis()
        ),
    );
    let woke_at = Instant::now() + pause;

    // Another client: a `Locker` value of its own (one value refuses to re-enter a key).
    let other = locker.clone();
    let client2 = other.lock(key.as_str()).ttl(ttl * 10).wait(pause).await?;
    clock.say(
        "client 2",
        format_args!(
            "acquires the lock after client 1's lease expired, token {}",
            client2.token()
        ),
    );
    let balance = store.read(&key, client2.fence()).await?;
    store
        .write(&key, client2.fence(), balance + DEPOSIT)
        .await?;
    clock.say(
        "client 2",
        format_args!(
            "reads {balance}, deposits {DEPOSIT}, writes {}",
            balance + DEPOSIT
        ),
    );
    client2.release().await?;
    clock.say("client 2", "releases the lock");

    sleep(woke_at.saturating_duration_since(Instant::now())).await;
    clock.say(
        "client 1",
        format_args!(
            "wakes and writes {}: it checked its lease before the pause, not after",
            seen - DEBIT
        ),
    );
    let stale_write_refused = match store.write(&key, client1.fence(), seen - DEBIT).await {
        Ok(()) => {
            clock.note("ACCEPTED: nothing checks the fence");
            false
        }
        Err(Error::Stale {
            presented, current, ..
        }) => {
            clock.note(format_args!("REFUSED: stale fence {presented}"));
            clock.note(format_args!("         storage is at {current}"));
            true
        }
        Err(e) => return Err(e),
    };
    let _ = client1.release().await?;
    let final_balance = store.peek(&key).await?;
    Ok(Outcome {
        final_balance,
        stale_write_refused,
    })
}
