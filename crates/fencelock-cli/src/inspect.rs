//! `fencelock inspect`: who holds a lock, with which token, for how long; and what the backend
//! guarantees. As aligned text, or as one JSON object (`--json`) for scripts.

use std::time::Duration;

use fencelock::{
    Capabilities, Fence, FencedStorage, FencingToken, HolderInfo, LockKey, Locker, QueueEntry,
    QueueRole, Semaphore, TimeAuthority, TokenGuarantee, WakeUp, holder_resource, read_holder,
};
use serde_json::{Value, json};

use crate::args::SharedBackendArg;
use crate::error::CliError;
use crate::exit::Exit;

pub(crate) const EXAMPLES: &str =
    "  fencelock inspect --backend redis://127.0.0.1:6379 nightly-report
  FENCELOCK_BACKEND=postgres://postgres@127.0.0.1:5432/test fencelock inspect migrate
  # the 4 permits of a semaphore (fencelock run --permits 4 --key transcode)
  fencelock inspect --permits 4 transcode
  # the holder's token for a script
  fencelock inspect --json nightly-report | jq '.holder.token'
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// Also show the N permits of the semaphore on this key (`fencelock run --permits N`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    permits: Option<u32>,
    /// Print one JSON object instead of the text: key, backend, holder (owner, token,
    /// remaining_ms) or null, last_token, granted_at_most (when the last token is unknown
    /// because the server lost its counters: the largest token that may have been granted),
    /// never_granted (true when the key was never granted under the spec's prefix, schema or
    /// chroot), readers, queue (role, owner, token,
    /// remaining_ms, in grant order) where the backend lists one (all but Redlock and Redis
    /// Cluster), permits when asked for, and capabilities in words.
    #[arg(long)]
    json: bool,
    /// The storage resource whose fence to show next to the lock's last token [default: the
    /// key itself, as `write_key` names it].
    #[arg(long, value_name = "RESOURCE")]
    resource: Option<String>,
    /// The lock's key (an election's key shows its leader: the holder, whose token is the
    /// term).
    key: String,
}

/// What `inspect` prints, as label and value rows for the text and as JSON.
struct Shown {
    rows: Vec<(String, String)>,
    json: Value,
}

impl Shown {
    fn row(&mut self, label: impl Into<String>, value: impl Into<String>) {
        self.rows.push((label.into(), value.into()));
    }

    /// The rows with the values in one column, whatever the labels' widths.
    fn text(&self) -> String {
        let width = self
            .rows
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(label, _)| label.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (label, value) in &self.rows {
            let line = if value.is_empty() {
                label.clone()
            } else {
                format!("{label:<width$}  {value}")
            };
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.shared("fencelock inspect")?;
    let key = LockKey::new(&args.key)?;
    let connected = spec.spec().connect().await?;
    let backend = connected.backend;
    let storage = connected.storage;
    let info = backend.inspect(&key).await?;
    let mut shown = Shown {
        rows: Vec::new(),
        json: json!({
            "key": key.as_str(),
            "backend": spec.to_string(),
            "backend_name": backend.name(),
        }),
    };
    shown.row("key", key.as_str());
    shown.row("backend", format!("{spec} ({})", backend.name()));
    match (&info.holder, info.remaining) {
        (Some(holder), remaining) => {
            shown.row("holder", format!("owner {}", holder.owner));
            shown.row("token", holder.token.to_string());
            shown.row(
                "time left",
                remaining.map_or("unknown".into(), crate::duration::shown),
            );
            shown.json["holder"] = fence_json(holder, remaining);
            if let Some(who) = described(&*storage, &key, *holder).await? {
                shown.row("held by", who.to_string());
                shown.json["holder"]["described"] = holder_json(&who);
            }
        }
        (None, _) => {
            shown.json["holder"] = Value::Null;
            match &info.unfenced_holder {
                Some(who) => shown.row("holder", format!("held without a fence by {who}")),
                None if info.last_token.is_none() && info.granted_at_most.is_none() => {
                    shown.row("holder", format!("none (never granted under {spec})"));
                }
                None => shown.row("holder", "none (the lock is free)"),
            }
        }
    }
    shown.json["unfenced_holder"] = json!(info.unfenced_holder);
    let last = match (info.last_token, info.granted_at_most) {
        (Some(token), _) => token.to_string(),
        (None, Some(bound)) => format!(
            "unknown: the server lost its record of this key's tokens (a crash, a promotion or \
             a restore); tokens up to {bound} may have been granted, and the next grant is \
             above them"
        ),
        (None, None) => format!(
            "none (never granted under {spec}; {})",
            crate::spec::NAMESPACE_HINT
        ),
    };
    shown.row("last token", last);
    shown.json["last_token"] = json!(info.last_token.map(|token| token.get()));
    shown.json["granted_at_most"] = json!(info.granted_at_most.map(|token| token.get()));
    shown.json["never_granted"] =
        json!(info.holder.is_none() && info.last_token.is_none() && info.granted_at_most.is_none());
    storage_fence(
        &mut shown,
        &*storage,
        &key,
        args.resource.as_deref(),
        info.last_token.or(info.granted_at_most),
    )
    .await?;
    let caps = backend.capabilities();
    if caps.kinds.shared {
        match backend.inspect_shared(&key).await? {
            Some(phase) => {
                shown.row(
                    "readers",
                    format!(
                        "{} sharing token {} owner {} ({} left)",
                        phase.readers,
                        phase.fence.token,
                        phase.fence.owner,
                        crate::duration::shown(phase.remaining)
                    ),
                );
                let mut readers = fence_json(&phase.fence, Some(phase.remaining));
                readers["count"] = json!(phase.readers);
                if let Some(who) = described(&*storage, &key, phase.fence).await? {
                    shown.row("  last reader", who.to_string());
                    readers["described"] = holder_json(&who);
                }
                shown.json["readers"] = readers;
            }
            None => {
                shown.row("readers", "none");
                shown.json["readers"] = Value::Null;
            }
        }
    }
    if let Some(entries) = backend.inspect_queue(&key).await? {
        queue(&mut shown, &entries);
    }
    if let Some(permits) = args.permits {
        let locker = Locker::new(backend.clone());
        let semaphore = Semaphore::new(&locker, key.as_str(), permits as usize)?;
        let slots = semaphore.inspect().await?;
        let held = slots.iter().filter(|slot| slot.holder.is_some()).count();
        shown.row("permits", format!("{held} of {permits} held"));
        let mut listed = Vec::with_capacity(slots.len());
        for (slot, info) in slots.iter().enumerate() {
            let label = format!("  permit {slot}");
            match &info.holder {
                Some(holder) => {
                    let who = described(&*storage, &info.key, *holder).await?;
                    let by = who.as_ref().map(|w| format!(", held by {w}"));
                    shown.row(
                        label,
                        format!(
                            "token {} owner {} ({} left){}",
                            holder.token,
                            holder.owner,
                            info.remaining
                                .map_or("unknown".into(), crate::duration::shown),
                            by.unwrap_or_default()
                        ),
                    );
                    let mut entry = json!({
                        "slot": slot,
                        "holder": fence_json(holder, info.remaining),
                    });
                    if let Some(who) = &who {
                        entry["holder"]["described"] = holder_json(who);
                    }
                    listed.push(entry);
                }
                None => {
                    shown.row(label, "free");
                    listed.push(json!({ "slot": slot, "holder": null }));
                }
            }
        }
        shown.json["permits"] = json!({ "count": permits, "held": held, "slots": listed });
    }
    capabilities(&mut shown, &caps);
    if args.json {
        println!("{}", shown.json);
    } else {
        print!("{}", shown.text());
    }
    Ok(Exit::Success)
}

/// The key's queue, where the backend keeps one it can list: the holder or readers first,
/// then the waiters in the order they will be granted.
fn queue(shown: &mut Shown, entries: &[QueueEntry]) {
    let waiting = entries
        .iter()
        .filter(|entry| entry.role == QueueRole::Waiting)
        .count();
    shown.row(
        "queue",
        match entries.len() {
            0 => "empty".to_string(),
            n => format!("{n} in order ({waiting} waiting)"),
        },
    );
    let mut listed = Vec::with_capacity(entries.len());
    for (position, entry) in entries.iter().enumerate() {
        shown.row(
            format!("  {}. {}", position + 1, entry.role.as_str()),
            format!(
                "token {} owner {} ({} left)",
                entry
                    .token
                    .map_or_else(|| "drawn at its grant".to_string(), |t| t.to_string()),
                entry.owner,
                crate::duration::shown(entry.remaining)
            ),
        );
        listed.push(json!({
            "role": entry.role.as_str(),
            "owner": entry.owner.to_string(),
            "token": entry.token.map(FencingToken::get),
            "remaining_ms": u64::try_from(entry.remaining.as_millis()).unwrap_or(u64::MAX),
        }));
    }
    shown.json["queue"] = Value::Array(listed);
}

/// The fence the storage last admitted for `resource` (the key by default), and, when it is
/// ahead of the lock's counter, the command that lifts the counter past it: what a move from
/// another lock service, or a counter a server lost, looks like.
async fn storage_fence(
    shown: &mut Shown,
    storage: &dyn FencedStorage,
    key: &LockKey,
    resource: Option<&str>,
    last_token: Option<fencelock::FencingToken>,
) -> Result<(), CliError> {
    let resource = match resource {
        Some(name) => LockKey::new(name)?,
        None => key.clone(),
    };
    let fence = storage
        .peek(&resource)
        .await?
        .map(|snapshot| snapshot.fence);
    match fence {
        Some(fence) => {
            shown.row(
                "storage fence",
                format!(
                    "token {} owner {} (on {resource})",
                    fence.token, fence.owner
                ),
            );
            shown.json["storage_fence"] = json!({
                "resource": resource.as_str(),
                "token": fence.token.get(),
                "owner": fence.owner.to_string(),
            });
            if last_token.is_none_or(|last| last < fence.token) {
                shown.row(
                    "  ahead",
                    format!(
                        "the storage holds a newer token than this lock has granted, so its \
                         next grant is refused there: fencelock advance-token --key {key} \
                         --to-fence-of {resource}"
                    ),
                );
                shown.json["storage_fence"]["ahead"] = json!(true);
            }
        }
        None => {
            shown.row(
                "storage fence",
                format!("none (no fenced operation on {resource})"),
            );
            shown.json["storage_fence"] = Value::Null;
        }
    }
    Ok(())
}

/// The holder record of `key` written under `fence`, if any (a key too long for a record has
/// none).
async fn described(
    storage: &dyn FencedStorage,
    key: &LockKey,
    fence: Fence,
) -> Result<Option<HolderInfo>, CliError> {
    if holder_resource(key).is_err() {
        return Ok(None);
    }
    Ok(read_holder(storage, key, fence).await?)
}

/// A holder record as JSON: host, pid, purpose.
fn holder_json(who: &HolderInfo) -> Value {
    json!({ "host": who.host(), "pid": who.pid(), "purpose": who.purpose() })
}

/// A holder as JSON: owner, token, remaining_ms (null when unknown).
fn fence_json(fence: &Fence, remaining: Option<Duration>) -> Value {
    json!({
        "owner": fence.owner.to_string(),
        "token": fence.token.get(),
        "remaining_ms": remaining.map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
    })
}

/// The backend's capabilities in words: a sentence each in the text, a short word in JSON.
fn capabilities(shown: &mut Shown, caps: &Capabilities) {
    let (tokens_word, tokens_text, persists) = match caps.tokens {
        TokenGuarantee::Durable => (
            "durable",
            "durable (the counters survive a restart of the server)".to_owned(),
            None,
        ),
        TokenGuarantee::DurableIfServerPersists { server_persists } => (
            "durable-if-server-persists",
            format!(
                "durable if the server persists its data ({})",
                match server_persists {
                    Some(true) => "it does",
                    Some(false) => "it does not: a restart starts the tokens again",
                    None => "it could not be asked",
                }
            ),
            server_persists,
        ),
        TokenGuarantee::None => (
            "in-process",
            "in-process (the counters live as long as the backend)".to_owned(),
            None,
        ),
        _ => ("unknown", "unknown".to_owned(), None),
    };
    let (clock_word, clock_text) = match caps.time_authority {
        TimeAuthority::Server => ("server", "the server's clock expires leases"),
        TimeAuthority::Client => ("client", "this process's clock expires leases"),
        TimeAuthority::Host => ("host", "this host's clock expires leases (one host only)"),
        _ => ("unknown", "unknown"),
    };
    let (wake_word, wake_text) = match caps.wake_up {
        WakeUp::Notify => ("notify", "waiters are notified of a release at once"),
        WakeUp::Poll => ("poll", "waiters poll with backoff"),
        _ => ("unknown", "unknown"),
    };
    let kinds: Vec<&str> = [
        ("exclusive", caps.kinds.exclusive),
        ("shared", caps.kinds.shared),
        ("semaphore", caps.kinds.semaphore),
        ("election", caps.kinds.election),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(name, _)| *name)
    .collect();
    shown.row("capabilities", "");
    shown.row("  tokens", tokens_text);
    shown.row("  time authority", clock_text);
    shown.row("  wake-up", wake_text);
    shown.row(
        "  ttl",
        format!(
            "{} to {}",
            crate::duration::shown(caps.min_ttl),
            crate::duration::shown(caps.max_ttl)
        ),
    );
    shown.row(
        "  locks survive restart",
        if caps.locks_survive_restart {
            "yes"
        } else {
            "no"
        },
    );
    shown.row("  kinds", kinds.join(", "));
    shown.row(
        "  waiters",
        if caps.fair {
            "granted in arrival order"
        } else {
            "race for each release"
        },
    );
    shown.row(
        "  sets (lock_all)",
        if caps.atomic_sets {
            "granted in one step when every key is free"
        } else {
            "taken key by key in one order"
        },
    );
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    shown.json["capabilities"] = json!({
        "tokens": tokens_word,
        "server_persists": persists,
        "time_authority": clock_word,
        "wake_up": wake_word,
        "min_ttl_ms": millis(caps.min_ttl),
        "max_ttl_ms": millis(caps.max_ttl),
        "locks_survive_restart": caps.locks_survive_restart,
        "kinds": kinds,
        "fair": caps.fair,
        "atomic_sets": caps.atomic_sets,
    });
}
