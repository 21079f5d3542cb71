//! `fencelock advance-token`: raise a key's token counter past a floor, the way to heal a lock
//! server that lost its counters.

use fencelock::{FencingToken, LockBackend, LockKey, MovedPast, move_past};

use crate::args::SharedBackendArg;
use crate::error::CliError;
use crate::exit::Exit;
use crate::spec::{Spec, SpecParser};

pub(crate) const EXAMPLES: &str =
    "  # after a Redis restart without persistence, the storage is at token 41
  fencelock advance-token --backend redis://127.0.0.1:6379 --key nightly-report --to 41
  # moving from Redis: once no client takes the lock there, go past its last grant
  fencelock advance-token --backend 'postgres://app@db/app?backend=lease' --key nightly-report --past redis://cache:6379
  # moved from another lock service: lift the counter past the fence the storage holds
  fencelock advance-token --backend 'postgres://app@db/app?backend=lease' --key nightly-report --to-fence-of nightly-report
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// The lock's key.
    #[arg(long)]
    key: String,
    /// The floor: the next grant carries a token greater than N (at least 1).
    #[arg(
        long,
        value_name = "N",
        required_unless_present_any = ["to_fence_of", "past"],
        conflicts_with_all = ["to_fence_of", "past"],
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    to: Option<u64>,
    /// The floor is the fence this backend's storage last admitted for RESOURCE (the key, for
    /// data written with `write_key`): after moving to this lock service from another, whose
    /// tokens the storage already holds, the next grant is admitted again.
    #[arg(long, value_name = "RESOURCE", conflicts_with = "past")]
    to_fence_of: Option<String>,
    /// The floor is the last token the lock service SPEC (the one you move from) granted for
    /// the key: every token it handed out is then below every token this one grants, so its
    /// holders' writes are refused as stale once the new service's holder writes. Stop every
    /// client of SPEC from taking the lock first: a grant there after this step is not
    /// covered. SPEC may be @FILE.
    #[arg(long, value_name = "SPEC", value_parser = SpecParser)]
    past: Option<Spec>,
    /// Raise the counter even when the floor leaves the key fewer than 2^32 further grants
    /// before its counter runs out (at 2^63 - 1): a key whose counter is used up can never be
    /// locked again.
    #[arg(long)]
    force: bool,
}

/// Moves `key` from the lock service `old` to `new` ([`move_past`]): the new counter goes
/// past the last token `old` granted, with a note on stderr when a holder of it is live.
async fn move_from(
    old: &Spec,
    new: &Spec,
    to: &dyn LockBackend,
    key: &LockKey,
) -> Result<Exit, CliError> {
    if !old.spec().is_shared() {
        return Err(CliError::Input(format!(
            "--past needs the lock service you move from, and {old} lives inside one process: \
             it granted nothing another process could hold"
        )));
    }
    if old.to_string() == new.to_string() {
        return Err(CliError::Input(format!(
            "--past names {old}, the service this command advances: name the lock service you \
             move from"
        )));
    }
    let from = old.spec().connect().await?.backend;
    match move_past(from.as_ref(), to, key).await? {
        MovedPast::Moved {
            last_grant,
            counter,
            still_held,
        } => {
            if let Some(token) = still_held {
                eprintln!(
                    "fencelock: note: {key} is held on {old} with token {token}: its holder's \
                     writes are refused once a holder of {new} writes"
                );
            }
            println!(
                "token counter of {key} is at {counter}: the next grant carries a token above \
                 {last_grant}"
            );
            Ok(Exit::Success)
        }
        MovedPast::NeverGranted => Err(CliError::Input(format!(
            "{old} never granted {key}: nothing to move past (check the key, and the prefix or \
             schema in the URL; or give --to N)"
        ))),
        other => Err(CliError::Input(format!("unexpected outcome {other:?}"))),
    }
}

/// How many grants a floor must leave a key, unless `--force`: one call, by a typo or on
/// purpose, cannot use up a key's counter.
const HEADROOM: u64 = 1 << 32;

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.shared("fencelock advance-token")?;
    let key = LockKey::new(&args.key)?;
    let connected = spec.spec().connect().await?;
    let floor = match (&args.past, &args.to_fence_of, args.to) {
        (Some(old), _, _) => {
            return move_from(old, spec, connected.backend.as_ref(), &key).await;
        }
        (None, Some(resource), _) => {
            let resource = LockKey::new(resource)?;
            match connected.storage.peek(&resource).await? {
                Some(snapshot) => snapshot.fence.token,
                None => {
                    return Err(CliError::Input(format!(
                        "the storage of {spec} holds no fence for {resource}: nothing to lift \
                         the counter past (give --to N)"
                    )));
                }
            }
        }
        (None, None, Some(to)) => FencingToken::new(to)
            .ok_or_else(|| CliError::Input("--to must be at least 1".into()))?,
        (None, None, None) => {
            return Err(CliError::Input(
                "give --to N, --to-fence-of RESOURCE or --past SPEC".into(),
            ));
        }
    };
    // A floor at 2^63 - 1 or above leaves no token at all: the backend refuses it, saying so.
    let last_safe = i64::MAX.unsigned_abs() - HEADROOM;
    if floor.get() > last_safe && floor.get() < i64::MAX.unsigned_abs() {
        if !args.force {
            return Err(CliError::Input(format!(
                "a floor of {floor} leaves {key} fewer than 2^32 more grants before its token \
                 counter runs out at 2^63 - 1, after which the key can never be locked again; \
                 floors up to {last_safe} leave room (pass --force to raise it all the same)"
            )));
        }
        eprintln!(
            "fencelock: warning: a floor of {floor} leaves {key} fewer than 2^32 more grants \
             before its token counter runs out"
        );
    }
    let counter = connected.backend.advance_token(&key, floor).await?;
    println!(
        "token counter of {key} is at {counter}: the next grant carries a token above {floor}"
    );
    Ok(Exit::Success)
}
