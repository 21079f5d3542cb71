//! `fencelock run`: hold a lock while a command runs.
//!
//! The command runs in a process group of its own (as `timeout` runs it), so it does not read
//! from the terminal. SIGHUP, SIGINT and SIGTERM sent to fencelock are passed on to that group;
//! fencelock waits until the command and the rest of its group have exited (SIGKILL to the
//! group after `--grace`), releases the lock, and only then exits with 128 + N. So a job
//! stopped by `kill`, a closed terminal or `timeout` never outlives its lock, and the next
//! holder gets the lock as soon as the job is gone. A fencelock that dies without a chance to
//! act (SIGKILL) takes the command with it: see [`tether`](crate::tether).

use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use fencelock::{
    CompositeGuard, Error, FencedStorage, HolderInfo, LockGuard, LockKey, LockOptions, Locker,
    LostReason, RwLocker, Semaphore, holder_resource,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::args::{SharedBackendArg, parse_duration, parse_ttl, parse_wait};
use crate::child::{status_exit, stop};
use crate::error::CliError;
use crate::exit::{self, Exit};
use crate::signals::Signals;
use crate::spec::Spec;
use crate::tether;
pub(crate) use crate::wait_budget::WaitBudget;

pub(crate) const EXAMPLES: &str = "  # a cron job that runs once across hosts
  fencelock run --backend redis://redis.example:6379 --key nightly-report -- ./report.sh
  # wait up to a minute for the lock, with a 10 s lease renewed while the job runs
  export FENCELOCK_BACKEND=postgres://app@db.example/app
  fencelock run --key migrate --wait 1m --ttl 10s -- ./migrate
  # a spec with a password: from a file only you can read, never on the command line
  fencelock run --backend @$HOME/.config/fencelock/backend --key nightly -- ./report.sh
  # readers side by side, every writer (a plain run) kept out while they run
  fencelock run --key catalog --shared -- ./export-catalog.sh
  # at most 4 transcoders at once across hosts
  fencelock run --key transcode --permits 4 --wait 10m -- ./transcode.sh
  # flock(1) spellings: try once, exit 1 (not 75) when held, a shell string, no message
  fencelock run -n -E 1 -q --key backup -c 'pg_dump app > app.sql'
  # the grant for a script, one JSON line in a file of its own
  fencelock run --key deploy --grant-file grant.json -- ./deploy.sh
  # two locks held together, all or none (FENCELOCK_KEY_0, FENCELOCK_TOKEN_0, ... per key)
  fencelock run --key accounts/alice --key accounts/bob -- ./transfer.sh
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// The lock's key. Given more than once (--key a --key b), every key's lock is held
    /// together, all or none, taken in one order whatever the order given; the command then
    /// gets FENCELOCK_KEY_COUNT and, for each key i in sorted order from 0,
    /// FENCELOCK_KEY_<i>, FENCELOCK_TOKEN_<i> and FENCELOCK_OWNER_<i> (each key's own fence)
    /// instead of FENCELOCK_KEY, FENCELOCK_TOKEN and FENCELOCK_OWNER.
    #[arg(long, required = true, value_name = "KEY")]
    key: Vec<String>,
    /// Lease ttl; the lease is renewed at about a third of it while the command runs.
    /// Default 30s, or the backend's longest lease when that is shorter (a ZooKeeper session).
    #[arg(long, value_parser = parse_ttl)]
    ttl: Option<Duration>,
    /// How long to wait for the lock, connecting included (a bare number is seconds, as for
    /// flock -w); 0 connects (within 5s) and tries once.
    #[arg(short, long, default_value = "0s", value_parser = parse_wait)]
    wait: Duration,
    #[command(flatten)]
    pub(crate) once: TryOnce,
    /// How long the command has between SIGTERM (or the signal fencelock received) and SIGKILL,
    /// when its lease is lost or fencelock is asked to stop.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    grace: Duration,
    /// Hold a reader's lock: readers of the key run side by side, sharing one read fence
    /// (FENCELOCK_TOKEN, FENCELOCK_OWNER), and exclude every writer (a plain `run`). The
    /// backend must offer shared locks (`fencelock inspect` lists its kinds).
    #[arg(long, conflicts_with = "permits")]
    shared: bool,
    /// Hold one of N permits of the key instead of the lock: at most N commands run at once.
    /// Permit i is the lock on <key>/permit/<i>; FENCELOCK_KEY is that slot's key,
    /// FENCELOCK_SLOT its number, and the token fences that slot's data. Every user of the key
    /// must pass the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    permits: Option<u32>,
    /// While waiting, do not queue: try again at each release, and whoever tries first after
    /// it gets the lock (faster on a hot key, with a longer tail). The default waits its turn
    /// in arrival order where the backend queues. Readers, permits and sets never queue.
    #[arg(long)]
    no_fair: bool,
    /// Write the grant as one JSON line on stderr before the command starts: {"key", "token",
    /// "owner", "backend"} (and "slot" or "reader"). Nothing the command writes comes before
    /// it; fencelock's own stdout stays the command's.
    #[arg(long)]
    json: bool,
    /// Write the grant, the same JSON line as --json, to PATH before the command starts (a new
    /// file renamed over PATH: a file or symlink there is replaced, never written through):
    /// a way to read it that mixes with nothing.
    #[arg(long, value_name = "PATH")]
    grant_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) verbosity: Verbosity,
    #[command(flatten)]
    pub(crate) command: CommandArgs,
}

/// flock's `-n` and `-E`, for `run` and `elect`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct TryOnce {
    /// Do not wait: connect (within 5s) and try once, the same as --wait 0.
    #[arg(short, long, conflicts_with = "wait")]
    pub(crate) nonblock: bool,
    /// The exit code when the lock (or leadership) is not obtained (default 75, EX_TEMPFAIL),
    /// as flock -E: a script can then tell "held by someone else" from the command's own
    /// codes.
    #[arg(
        short = 'E',
        long,
        value_name = "CODE",
        default_value_t = exit::NOT_OBTAINED
    )]
    pub(crate) conflict_exit_code: u8,
}

/// How much fencelock itself says on stderr (errors are always said).
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct Verbosity {
    /// Say nothing when the lock is not obtained (the exit code tells), as flock -q.
    #[arg(short, long, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    /// Say on stderr when the lock is obtained (key, token, owner, time waited) and when it is
    /// released.
    #[arg(short, long)]
    pub(crate) verbose: bool,
}

/// The command a subcommand runs while it holds a lock: `-c STRING` for `sh -c`, or the
/// command and its arguments (after `--`, or starting at the first word that is not an
/// option: the options of fencelock come before it).
#[derive(Debug, clap::Args)]
pub(crate) struct CommandArgs {
    /// Run this shell command line with `sh -c`, as flock -c.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "command"
    )]
    shell: Option<OsString>,
    /// The command and its arguments.
    #[arg(
        required_unless_present = "shell",
        trailing_var_arg = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
    /// What the lock is held for, recorded with this host's name and fencelock's pid beside
    /// the lock, where `fencelock inspect` shows it (default: the command's program name; the
    /// arguments are never recorded, as they may hold secrets).
    #[arg(long, value_name = "TEXT")]
    purpose: Option<String>,
}

impl CommandArgs {
    /// The holder record to write once the lock is held: checked before any lock is taken.
    pub(crate) fn holder(&self) -> Result<HolderInfo, CliError> {
        let purpose = match (&self.purpose, &self.shell) {
            (Some(purpose), _) => purpose.clone(),
            (None, Some(_)) => "sh -c".to_owned(),
            (None, None) => self
                .command
                .first()
                .map(|program| {
                    let program = std::path::Path::new(program);
                    program
                        .file_name()
                        .unwrap_or(program.as_os_str())
                        .to_string_lossy()
                        .chars()
                        .filter(|c| !c.is_control())
                        .take(64)
                        .collect()
                })
                .unwrap_or_default(),
        };
        HolderInfo::this_process(purpose).map_err(|e| CliError::Input(format!("--purpose: {e}")))
    }

    /// The program and its arguments.
    fn argv(&self) -> Option<(&OsStr, Vec<&OsStr>)> {
        match &self.shell {
            Some(line) => Some((OsStr::new("sh"), vec![OsStr::new("-c"), line.as_os_str()])),
            None => {
                let (program, rest) = self.command.split_first()?;
                Some((program, rest.iter().map(OsString::as_os_str).collect()))
            }
        }
    }
}

/// A lock `run` obtained: its guard and the environment variables its kind adds.
type Obtained = (HeldLocks, Vec<(&'static str, String)>);

/// What a command runs under: one lock, or the locks of several keys held together.
pub(crate) enum HeldLocks {
    One(LockGuard),
    All(CompositeGuard),
}

impl HeldLocks {
    /// One guard per key, sorted by key when there are several.
    fn members(&self) -> &[LockGuard] {
        match self {
            HeldLocks::One(guard) => std::slice::from_ref(guard),
            HeldLocks::All(set) => set.members(),
        }
    }

    /// The variables naming the grants: FENCELOCK_KEY, FENCELOCK_TOKEN and FENCELOCK_OWNER
    /// for one lock; FENCELOCK_KEY_COUNT and FENCELOCK_KEY_<i>, FENCELOCK_TOKEN_<i>,
    /// FENCELOCK_OWNER_<i> for each of several.
    fn env(&self) -> Vec<(String, String)> {
        let grant = |guard: &LockGuard, suffix: &str| {
            let lease = guard.lease();
            [
                (format!("FENCELOCK_KEY{suffix}"), lease.key.to_string()),
                (format!("FENCELOCK_TOKEN{suffix}"), lease.token.to_string()),
                (format!("FENCELOCK_OWNER{suffix}"), lease.owner.to_string()),
            ]
        };
        match self {
            HeldLocks::One(guard) => grant(guard, "").into(),
            HeldLocks::All(set) => {
                let mut env = vec![(
                    "FENCELOCK_KEY_COUNT".to_owned(),
                    set.members().len().to_string(),
                )];
                for (i, member) in set.members().iter().enumerate() {
                    env.extend(grant(member, &format!("_{i}")));
                }
                env
            }
        }
    }

    /// Completes when a lock is lost, with its key and the reason.
    fn lost(&self) -> Pin<Box<dyn Future<Output = (LockKey, LostReason)> + Send>> {
        match self {
            HeldLocks::One(guard) => {
                let (key, lost) = (guard.lease().key, guard.lost());
                Box::pin(async move { (key, lost.await) })
            }
            HeldLocks::All(set) => {
                let lost = set.lost();
                Box::pin(async move {
                    let member = lost.await;
                    (member.key, member.reason)
                })
            }
        }
    }

    /// Releases every lock: whether all were still held.
    async fn release(self) -> fencelock::Result<bool> {
        match self {
            HeldLocks::One(guard) => guard.release().await,
            HeldLocks::All(set) => set.release().await,
        }
    }
}

/// What `run` holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Exclusive,
    Shared,
    Permits(usize),
    /// The exclusive locks of several keys, all or none.
    All,
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.shared("fencelock run")?;
    let mut keys = args
        .key
        .iter()
        .map(LockKey::new)
        .collect::<Result<Vec<_>, _>>()?;
    keys.sort();
    if let Some(twice) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(CliError::Input(format!(
            "--key {} is given more than once: give each key once",
            twice[0]
        )));
    }
    let kind = match (keys.len(), args.shared, args.permits) {
        (2.., true, _) | (2.., _, Some(_)) => {
            return Err(CliError::Input(
                "--shared and --permits take one --key; several keys are exclusive locks".into(),
            ));
        }
        (2.., false, None) => Kind::All,
        (_, true, _) => Kind::Shared,
        (_, false, Some(n)) => Kind::Permits(n as usize),
        (_, false, None) => Kind::Exclusive,
    };
    let wait = if args.once.nonblock {
        Duration::ZERO
    } else {
        args.wait
    };
    let holder = args.command.holder()?;
    // From here on a signal is ours to handle, so the lock is never left behind by one.
    let mut signals = Signals::install()?;
    let started = Instant::now();
    let budget = WaitBudget::start(spec, wait);
    let connected = tokio::select! {
        connected = budget.connect() => connected?,
        signal = signals.recv() => return Ok(not_started(signal)),
    };
    let locker = Locker::new(connected.backend);
    let defaults = locker.options();
    let locker = locker.with_options(LockOptions {
        fair: !args.no_fair,
        ..defaults
    });
    let ttl = args.ttl.unwrap_or(defaults.ttl);
    let storage = connected.storage;
    let outcome = async {
        let (guard, extra_env) = tokio::select! {
            obtained = obtain(&locker, &budget, &keys, kind, ttl, args.verbosity) => {
                match obtained? {
                    Some(held) => held,
                    None => return Ok(Exit::NotObtained(args.once.conflict_exit_code)),
                }
            }
            signal = signals.recv() => return Ok(not_started(signal)),
        };
        for member in guard.members() {
            record_holder(member, &*storage, &holder, spec).await;
        }
        run_granted(guard, &args, spec, &extra_env, started, &mut signals).await
    }
    .await;
    settle_backend(&locker).await;
    outcome
}

/// What a signal before the command started ends `run` with.
fn not_started(signal: Signal) -> Exit {
    eprintln!("fencelock: {signal} while waiting for the lock; the command was not started");
    Exit::Signal(signal as i32)
}

/// Waits, before fencelock exits, for what the backend still does in the background (a
/// Redlock's calls to the nodes past a quorum: a release's, a failed acquisition's undo), each
/// bounded by the backend's own time-outs. A process that exited at once would drop them, and
/// a node they never reached would keep the lock for its ttl.
pub(crate) async fn settle_backend(locker: &Locker) {
    // Every guard was released or dropped by now, and a failed release was said where it
    // happened: what is left here is the backend's own work, with nothing more to say.
    let _ = locker.shutdown().await;
}

/// Runs the command under the granted `guard`: the grant file and line, then the command
/// until it ends, then the release.
async fn run_granted(
    guard: HeldLocks,
    args: &Args,
    spec: &Spec,
    extra_env: &[(&'static str, String)],
    started: Instant,
    signals: &mut Signals,
) -> Result<Exit, CliError> {
    let talk = args.verbosity;
    let grant = grant_json(&guard, spec, extra_env);
    if let Some(path) = &args.grant_file
        && let Err(e) = write_replacing(path, format!("{grant}\n").as_bytes())
    {
        guard.release().await?;
        return Err(CliError::io(
            format!("writing the grant to {}", path.display()),
            e,
        ));
    }
    if args.json {
        eprintln!("{grant}");
    }
    if talk.verbose {
        for member in guard.members() {
            let lease = member.lease();
            eprintln!(
                "fencelock: obtained {:?} with token {} (owner {}) after {}",
                lease.key.as_str(),
                lease.token,
                lease.owner,
                crate::duration::shown(started.elapsed())
            );
        }
    }
    let key_names = args.key.join(", ");
    let exit = hold_locks_while_running(
        guard,
        &key_names,
        spec,
        &args.command,
        extra_env,
        args.grace,
        signals,
    )
    .await?;
    // A lost lease has been said already, and there was nothing left to release.
    if talk.verbose && exit != Exit::LeaseLost {
        eprintln!(
            "fencelock: released {:?}; the command ended with {}",
            key_names,
            exit.code()
        );
    }
    Ok(exit)
}

/// The grant as one JSON object: key, token, owner, backend (the spec, password hidden, and
/// the backend's name), and the variables the kind adds (`slot`, `reader`); for several keys,
/// `keys`: one {"key", "token", "owner"} per key, sorted by key, and the backend.
fn grant_json(guard: &HeldLocks, spec: &Spec, extra_env: &[(&str, String)]) -> serde_json::Value {
    let one = |guard: &LockGuard| {
        let lease = guard.lease();
        serde_json::json!({
            "key": lease.key.as_str(),
            "token": lease.token.get(),
            "owner": lease.owner.to_string(),
        })
    };
    let mut grant = match guard {
        HeldLocks::One(guard) => one(guard),
        HeldLocks::All(set) => serde_json::json!({
            "keys": set.members().iter().map(one).collect::<Vec<_>>(),
        }),
    };
    grant["backend"] = serde_json::json!(spec.to_string());
    for (name, value) in extra_env {
        let field = name.trim_start_matches("FENCELOCK_").to_ascii_lowercase();
        let value = value
            .parse::<u64>()
            .map_or_else(|_| serde_json::json!(value), |n| serde_json::json!(n));
        grant[field] = value;
    }
    grant
}

/// Runs the command while `guard` is held (with FENCELOCK_KEY, FENCELOCK_TOKEN,
/// FENCELOCK_OWNER and `extra_env` in its environment), stops it when the lease is lost or a
/// signal comes, and releases the lock when it is over. A lease the release finds lost is
/// [`Exit::LeaseLost`] whatever the command's own code: the command may have run without it.
pub(crate) async fn hold_while_running(
    guard: LockGuard,
    key_name: &str,
    server: &Spec,
    command: &CommandArgs,
    extra_env: &[(&str, String)],
    grace: Duration,
    signals: &mut Signals,
) -> Result<Exit, CliError> {
    hold_locks_while_running(
        HeldLocks::One(guard),
        key_name,
        server,
        command,
        extra_env,
        grace,
        signals,
    )
    .await
}

/// [`hold_while_running`] for one lock or several held together ([`HeldLocks::env`] names
/// their variables); the command is stopped when any of them is lost.
async fn hold_locks_while_running(
    guard: HeldLocks,
    key_name: &str,
    server: &Spec,
    command: &CommandArgs,
    extra_env: &[(&str, String)],
    grace: Duration,
    signals: &mut Signals,
) -> Result<Exit, CliError> {
    let (program, rest) = command
        .argv()
        .ok_or_else(|| CliError::Input("no command given".into()))?;
    let mut to_start = tether::command(program, &rest);
    to_start
        // The spec may carry a password, which the command has no need of.
        .env_remove(crate::spec::BACKEND_ENV)
        .envs(guard.env())
        .envs(extra_env.iter().map(|(name, value)| (name, value)))
        .process_group(0)
        .kill_on_drop(true);
    let spawned = tether::spawn(to_start).await;
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            guard.release().await?;
            let exit = if e.kind() == ErrorKind::NotFound {
                Exit::CommandNotFound
            } else {
                Exit::CannotExecute
            };
            eprintln!("fencelock: cannot run {program:?}: {e}");
            return Ok(exit);
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let lost = guard.lost();
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| CliError::io("waiting for the command", e))?;
            let exit = status_exit(status);
            if release(guard, key_name, server, exit).await? {
                Ok(exit)
            } else {
                Ok(Exit::LeaseLost)
            }
        }
        (lost_key, reason) = lost => {
            eprintln!(
                "fencelock: lease on {:?} at {server} lost ({reason}); sending SIGTERM \
                 to the command",
                lost_key.as_str()
            );
            stop(&mut child, group, Signal::SIGTERM, grace, signals).await?;
            Ok(Exit::LeaseLost)
        }
        signal = signals.recv() => {
            eprintln!(
                "fencelock: {signal}: passing it to the command, then releasing the lock"
            );
            stop(&mut child, group, signal, grace, signals).await?;
            release(guard, key_name, server, Exit::Signal(signal as i32)).await?;
            Ok(Exit::Signal(signal as i32))
        }
    }
}

/// Takes the lock of `kind` within what is left of `--wait`, with the environment variables
/// the kind adds. `None` when other owners held it all along; an error when the server did
/// not answer in time.
async fn obtain(
    locker: &Locker,
    budget: &WaitBudget<'_>,
    keys: &[LockKey],
    kind: Kind,
    ttl: Duration,
    talk: Verbosity,
) -> Result<Option<Obtained>, CliError> {
    let left = budget.left();
    let key = keys
        .first()
        .ok_or_else(|| CliError::Input("no --key given".into()))?;
    let request = async {
        match kind {
            Kind::Exclusive => {
                let guard = locker.lock(key.as_str()).ttl(ttl).wait(left).await?;
                Ok::<_, Error>((HeldLocks::One(guard), vec![]))
            }
            Kind::All => {
                let set = locker
                    .lock_all(keys.iter().map(LockKey::as_str))
                    .ttl(ttl)
                    .wait(left)
                    .await?;
                Ok((HeldLocks::All(set), vec![]))
            }
            Kind::Shared => {
                let reader = RwLocker::new(locker.clone())
                    .read(key.as_str())
                    .ttl(ttl)
                    .wait(left)
                    .await?;
                let id = reader.reader().to_string();
                Ok((
                    HeldLocks::One(reader.into_guard()),
                    vec![("FENCELOCK_READER", id)],
                ))
            }
            Kind::Permits(permits) => {
                let permit = Semaphore::new(locker, key.as_str(), permits)?
                    .acquire()
                    .ttl(ttl)
                    .wait(left)
                    .await?;
                let slot = permit.slot().to_string();
                Ok((
                    HeldLocks::One(permit.into_guard()),
                    vec![("FENCELOCK_SLOT", slot)],
                ))
            }
        }
    };
    match budget.answer(request).await? {
        Ok(held) => Ok(Some(held)),
        Err(Error::Timeout { key, waited }) => {
            if !talk.quiet {
                eprintln!(
                    "fencelock: lock {key:?} is held by another owner; not obtained within {}",
                    crate::duration::shown(waited)
                );
            }
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// How long writing the holder record may take before the command starts without it.
const RECORD_WITHIN: Duration = Duration::from_secs(5);

/// Records `holder` beside the lock `guard` holds, under its fence (on a permit's slot key,
/// a reader under the phase's fence). The record is informational: nothing decides on it, so
/// a write that fails or does not answer within [`RECORD_WITHIN`] is a warning on stderr and
/// the command runs all the same (a key too long to have a record goes without one, silently).
/// A refusal as stale says the storage has seen this token from another owner already, which
/// the command's own fenced writes will meet too; the warning says how to heal it.
pub(crate) async fn record_holder(
    guard: &LockGuard,
    storage: &dyn FencedStorage,
    holder: &HolderInfo,
    server: &Spec,
) {
    let lease = guard.lease();
    if holder_resource(&lease.key).is_err() {
        return;
    }
    let write = fencelock::record_holder(storage, &lease.key, lease.fence(), holder);
    let problem = match tokio::time::timeout(RECORD_WITHIN, write).await {
        Ok(Ok(())) => return,
        Ok(Err(e @ Error::Stale { .. })) => format!(
            "{e}; the storage has seen token {} from another owner, so the command's fenced \
             writes may be refused too (`fencelock advance-token` raises the counter past it)",
            lease.token
        ),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!(
            "the storage did not answer within {}",
            crate::duration::shown(RECORD_WITHIN)
        ),
    };
    eprintln!(
        "fencelock: warning: recording the lock's holder: {}; the command runs without a \
         holder record",
        server.redact(&problem)
    );
}

/// Releases the lock once the command, which ended with `ended`, is over: whether the lease
/// was still held (when not, it says so, naming the server as every lost-lease message
/// does). An error names what was being done, so that a server gone at the end does not read
/// as the command's failure.
async fn release(
    guard: HeldLocks,
    key: &str,
    server: &Spec,
    ended: Exit,
) -> Result<bool, CliError> {
    let held = guard.release().await.map_err(|e| {
        e.in_context(&format!(
            "releasing {key:?} after the command ended with {}",
            ended.code()
        ))
    })?;
    if !held {
        eprintln!("fencelock: the lease on {key:?} at {server} was lost before the command exited");
    }
    Ok(held)
}

/// Writes `contents` to a new file beside `path` (created, never opened if it exists) and
/// renames it over `path`. A symlink at `path` is replaced, not followed, so a link planted
/// there (to a file of the user's, or of another user's in a shared directory) cannot turn the
/// write against its target; a reader of `path` never sees half a grant.
fn write_replacing(path: &std::path::Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "the path names no file"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(
        ".fencelock-{}-{:08x}",
        std::process::id(),
        fencelock::OwnerId::random().as_u128() as u32
    ));
    let temp = dir.join(temp_name);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .and_then(|mut file| file.write_all(contents))
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}
