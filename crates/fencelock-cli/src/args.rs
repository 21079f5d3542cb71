//! The arguments several subcommands share: `--backend` in its two forms, and durations.

use std::time::Duration;

use crate::error::CliError;
use crate::spec::{BACKEND_ENV, Spec, SpecParser};

/// The `--backend` option of every subcommand but `chaos`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BackendArg {
    /// Backend spec, a URL (memory://, in-process, by default), or @FILE to read it from a
    /// file: a password in a spec on the command line is visible in the process list.
    #[arg(
        long,
        env = BACKEND_ENV,
        hide_env_values = true,
        default_value = "memory://",
        value_parser = SpecParser
    )]
    pub(crate) backend: Spec,
}

/// The `--backend` of subcommands whose lock must be shared between processes (`run`,
/// `inspect`, `advance-token`): no default, and never in-process.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SharedBackendArg {
    /// Backend spec, the URL of a lock shared between processes, or @FILE to read it from a
    /// file (a password on the command line is visible in the process list). Required here
    /// (memory:// lives inside one process and excludes nothing across processes).
    #[arg(
        long,
        env = BACKEND_ENV,
        hide_env_values = true,
        value_parser = SpecParser
    )]
    pub(crate) backend: Option<Spec>,
}

impl SharedBackendArg {
    /// The spec, if it names a backend shared between processes; `what` is the subcommand.
    pub(crate) fn shared(&self, what: &str) -> Result<&Spec, CliError> {
        let advice = format!(
            "pass --backend SPEC (`{what} --help` lists the URL forms this build reads) or \
             set {BACKEND_ENV}"
        );
        match &self.backend {
            Some(spec) if spec.spec().is_shared() => Ok(spec),
            Some(spec) => Err(CliError::Input(format!(
                "{what} needs a lock shared between processes, and {spec} lives inside this one \
                 process (it would exclude nothing): {advice}"
            ))),
            None => Err(CliError::Input(format!(
                "{what} needs a backend shared between processes: {advice}"
            ))),
        }
    }
}

/// The longest duration the command takes, 100 years (of 365.25 days, as humantime counts
/// them): a deadline this far ahead still fits the clock, where one of `u64::MAX` seconds
/// would overflow it.
const LONGEST: Duration = Duration::from_secs(100 * 31_557_600);

/// Parses a duration such as `500ms`, `2s` or `1m`, of at most [`LONGEST`].
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration =
        humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 500ms, 2s, 1m)"))?;
    at_most_longest(text, duration)
}

/// `duration`, unless it is longer than [`LONGEST`].
fn at_most_longest(text: &str, duration: Duration) -> Result<Duration, String> {
    if duration > LONGEST {
        return Err(format!(
            "{text} is longer than {}, the longest duration taken",
            crate::duration::shown(LONGEST)
        ));
    }
    Ok(duration)
}

/// Parses a wait: a duration, or a bare number of seconds as flock's `-w` takes it (`10`,
/// `0.5`).
pub(crate) fn parse_wait(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(seconds) => Duration::try_from_secs_f64(seconds)
            .map_err(|e| format!("invalid wait {text}: {e} (examples: 10, 0.5, 500ms, 1m)"))
            .and_then(|wait| at_most_longest(text, wait)),
        Err(_) => parse_duration(text),
    }
}

/// Parses a lease ttl: a duration of at least [`fencelock::MIN_TTL`]. A backend may ask for
/// more ([`fencelock::Capabilities::min_ttl`]); that is checked once it is connected.
pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse_duration(text)?;
    if ttl < fencelock::MIN_TTL {
        return Err(format!(
            "invalid ttl {text}: a lease ttl is at least {}",
            crate::duration::shown(fencelock::MIN_TTL)
        ));
    }
    Ok(ttl)
}
