//! A backend as one unit: [`BackendConfig`] (a parsed URL that prints itself back, names its
//! servers and connects), [`Scheme`] (how a URL scheme finds its config) and [`Schemes`] (the
//! registry every tool that takes a URL resolves it through).
//!
//! A backend crate implements [`BackendConfig`] for its config type and exports a [`Scheme`]
//! per URL scheme it owns; registering that scheme is the only line anything above the
//! backend needs. The tools above a backend (benchmarks, chaos runs) ask the config for what
//! they need through the optional methods of the trait, which return `None` by default: the
//! raw baseline ([`BackendConfig::bench_kit`]), a sweep of everything under a key prefix
//! (inside the kit), and server-side session faults ([`BackendConfig::session_faults`]).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::host::HostPort;
use crate::storage::FencedStorage;
use crate::storage_config::{BackendStorage, StorageConfig, StorageScheme};
use crate::tools::{BenchKit, SessionFaults};

/// A connected backend and the fenced storage that lives next to it.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The lock backend.
    pub backend: Arc<dyn LockBackend>,
    /// The fenced storage that lives next to it.
    pub storage: Arc<dyn FencedStorage>,
}

/// The parsed configuration of one backend: what a URL of one of its [`Scheme`]s says.
///
/// # Contract
///
/// - **Round trip.** [`to_url`](Self::to_url) gives the whole URL, credentials included, and
///   the scheme's [`parse`](Scheme::parse) reads it back as an equal config (same URL again).
///   [`redacted_url`](Self::redacted_url) is the same URL with every password replaced by
///   `***`; it is what `Display`, logs and errors show.
/// - **Hosts.** [`hosts`](Self::hosts) lists the servers the lock backend reaches, in URL
///   order (none for an in-process backend); [`with_hosts`](Self::with_hosts) points the same
///   config at other servers (a fault proxy), one per entry in the same order, and refuses a
///   different count with [`Error::InvalidConfig`]. Credentials, database and options stay.
/// - **Input.** Parsing and `with_hosts` check everything they can without a server; what is
///   wrong is an [`Error::InvalidConfig`] naming the setting, never showing a password.
/// - **Connect** opens the backend and its storage. A server that is down is
///   [`Error::Unavailable`]; refused credentials are [`Error::InvalidConfig`].
#[async_trait]
pub trait BackendConfig: Send + Sync + fmt::Debug + Any {
    /// The URL scheme this config prints (`redis`, `rediss`, `postgres`, ...).
    fn scheme(&self) -> &str;

    /// The whole URL, credentials included, that the scheme's parser reads back as `self`.
    fn to_url(&self) -> String;

    /// The URL with every password hidden.
    fn redacted_url(&self) -> String;

    /// The servers the lock backend reaches, in URL order.
    fn hosts(&self) -> Vec<HostPort>;

    /// The same config pointed at `hosts`, one per entry of [`hosts`](Self::hosts).
    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>>;

    /// A copy of this config.
    fn clone_config(&self) -> Box<dyn BackendConfig>;

    /// Whether other processes reach the same locks (false only for an in-process backend).
    fn is_shared(&self) -> bool {
        true
    }

    /// Connects to the backend and its storage.
    async fn connect(&self) -> Result<Connected>;

    /// What `fencelock bench` and the criterion benches measure on this backend: the fenced
    /// lock, the raw baseline a user would write on the same server, peers, and the sweep that
    /// removes a run's keys. `None` (the default) when the backend offers no baseline.
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        Ok(None)
    }

    /// The server-side session fault of chaos runs (PostgreSQL's `pg_terminate_backend`), for
    /// the sessions of configs [`tag`](SessionFaults::tag)ged with `run_tag`. `None` (the
    /// default) when the backend has no sessions a server can end.
    async fn session_faults(&self, run_tag: &str) -> Result<Option<Arc<dyn SessionFaults>>> {
        let _ = run_tag;
        Ok(None)
    }
}

impl dyn BackendConfig {
    /// The concrete config, when it is a `T`.
    pub fn downcast_ref<T: BackendConfig>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref::<T>()
    }
}

impl Clone for Box<dyn BackendConfig> {
    fn clone(&self) -> Self {
        self.clone_config()
    }
}

/// One URL scheme and the parser of the backend that owns it.
///
/// A backend crate exports one per scheme as a constant, and whoever assembles the tools
/// registers it in [`Schemes`]:
///
/// ```
/// use fencelock_core::{BackendConfig, Error, Result, Scheme};
///
/// fn parse(_url: &str) -> Result<Box<dyn BackendConfig>> {
///     Err(Error::config("not built yet"))
/// }
///
/// pub const SCHEMES: &[Scheme] = &[Scheme::new("lockdir", "lock files in a directory", parse)];
/// assert_eq!(SCHEMES[0].name, "lockdir");
/// assert!(SCHEMES[0].spawn.is_none());
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct Scheme {
    /// The scheme, lower case, without `://` (`redis`, `postgresql`, `redis+cluster`).
    pub name: &'static str,
    /// What it reaches, in a few words, for help texts (`one Redis server`).
    pub summary: &'static str,
    /// Parses a whole URL of this scheme.
    pub parse: fn(&str) -> Result<Box<dyn BackendConfig>>,
    /// Starts throwaway servers of this scheme for fault runs (`fencelock chaos --spawn`),
    /// when the backend can: see [`Spawn`](crate::tools::Spawn).
    pub spawn: Option<crate::tools::Spawn>,
    /// A whole URL of this scheme, for messages that show what a spec looks like
    /// (`redis://127.0.0.1:6379`); see [`with_example`](Self::with_example).
    pub example: Option<&'static str>,
}

impl Scheme {
    /// A scheme named `name` (lower case, without `://`), described by `summary`, whose URLs
    /// `parse` reads.
    pub const fn new(
        name: &'static str,
        summary: &'static str,
        parse: fn(&str) -> Result<Box<dyn BackendConfig>>,
    ) -> Self {
        Scheme {
            name,
            summary,
            parse,
            spawn: None,
            example: None,
        }
    }

    /// The same scheme, with `example` (a whole URL of it, no password) shown where a message
    /// says what a backend spec looks like. The first registered scheme with an example is
    /// the one shown.
    pub const fn with_example(mut self, example: &'static str) -> Self {
        self.example = Some(example);
        self
    }

    /// The same scheme, with `spawn` starting servers of it for fault runs.
    pub const fn with_spawn(mut self, spawn: crate::tools::Spawn) -> Self {
        self.spawn = Some(spawn);
        self
    }
}

impl fmt::Debug for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheme")
            .field("name", &self.name)
            .field("summary", &self.summary)
            .field("spawns", &self.spawn.is_some())
            .finish_non_exhaustive()
    }
}

/// A registry of [`Scheme`]s: every URL a tool takes is resolved through one.
///
/// ```
/// use fencelock_core::{Error, Schemes};
///
/// let schemes = Schemes::new();
/// let err = schemes.parse("nosuch://host").unwrap_err();
/// assert!(matches!(err, Error::InvalidConfig { .. }));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Schemes {
    list: Vec<Scheme>,
    storage: Vec<StorageScheme>,
}

impl Schemes {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `scheme`. A name that is taken, empty, or not a URL scheme (a letter, then
    /// letters, digits, `+`, `-`, `.`) is [`Error::InvalidConfig`] and changes nothing.
    pub fn register(&mut self, scheme: Scheme) -> Result<()> {
        self.check_name(scheme.name)?;
        self.list.push(scheme);
        Ok(())
    }

    /// Adds the storage scheme `scheme`, refused as [`register`](Self::register) refuses (a
    /// name a backend or another storage has is taken).
    pub fn register_storage(&mut self, scheme: StorageScheme) -> Result<()> {
        self.check_name(scheme.name)?;
        self.storage.push(scheme);
        Ok(())
    }

    /// Every storage scheme, in the order registered.
    pub fn storage_schemes(&self) -> impl Iterator<Item = &StorageScheme> {
        self.storage.iter()
    }

    /// Parses `url` as a fenced storage: a storage scheme's own config, or a backend's config
    /// read as its storage alone ([`BackendStorage`]). Refused as [`parse`](Self::parse)
    /// refuses, naming the schemes of both kinds.
    pub fn parse_storage(&self, url: &str) -> Result<Box<dyn StorageConfig>> {
        if let Some(scheme) = Self::scheme_of(url)
            && let Some(found) = self
                .storage
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(&scheme))
        {
            return (found.parse)(url);
        }
        match self.parse(url) {
            Ok(config) => Ok(Box::new(BackendStorage(config))),
            Err(Error::InvalidConfig { message, source }) if !self.storage.is_empty() => {
                let extra: Vec<String> = self
                    .storage
                    .iter()
                    .map(|s| format!("{}://", s.name))
                    .collect();
                Err(Error::InvalidConfig {
                    message: format!("{message}; storage only: {}", extra.join(", ")),
                    source,
                })
            }
            Err(e) => Err(e),
        }
    }

    fn check_name(&self, name: &str) -> Result<()> {
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && name.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.')
            });
        if !valid {
            return Err(Error::config(format!(
                "{name:?} is not a URL scheme (a lower-case letter, then letters, digits, +, - or .)"
            )));
        }
        let storage_taken = self
            .storage
            .iter()
            .any(|s| s.name.eq_ignore_ascii_case(name));
        if self.get(name).is_some() || storage_taken {
            return Err(Error::config(format!(
                "the scheme {name}:// is registered already"
            )));
        }
        Ok(())
    }

    /// Adds every scheme of `schemes`, stopping at the first refused.
    pub fn register_all(&mut self, schemes: &[Scheme]) -> Result<()> {
        schemes.iter().try_for_each(|scheme| self.register(*scheme))
    }

    /// The scheme registered as `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Scheme> {
        self.list
            .iter()
            .find(|scheme| scheme.name.eq_ignore_ascii_case(name))
    }

    /// Every scheme, in the order registered.
    pub fn iter(&self) -> impl Iterator<Item = &Scheme> {
        self.list.iter()
    }

    /// `redis://, postgres://, ...`: every scheme, for messages.
    pub fn list(&self) -> String {
        self.list
            .iter()
            .map(|scheme| format!("{}://", scheme.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The scheme of `url`, lower case: the part before `://`, or `None` when there is none.
    pub fn scheme_of(url: &str) -> Option<String> {
        url.split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
    }

    /// Parses `url` with the parser of its scheme. A URL without a scheme, or with one that
    /// is not registered, is [`Error::InvalidConfig`] listing the registered schemes; the
    /// message never repeats the URL (which may carry a password).
    pub fn parse(&self, url: &str) -> Result<Box<dyn BackendConfig>> {
        let Some(scheme) = Self::scheme_of(url) else {
            return Err(Error::config(format!(
                "a backend spec is a URL such as {} (schemes: {})",
                self.example(),
                self.list()
            )));
        };
        match self.get(&scheme) {
            Some(found) => (found.parse)(url),
            None => Err(Error::config(format!(
                "unknown backend scheme {scheme:?} (expected one of {})",
                self.list()
            ))),
        }
    }

    /// The example URL of the first scheme that gives one, else `<first scheme>://`.
    fn example(&self) -> String {
        match self.list.iter().find_map(|scheme| scheme.example) {
            Some(example) => example.to_owned(),
            None => match self.list.first() {
                Some(scheme) => format!("{}://", scheme.name),
                None => "scheme://host".to_owned(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refuse(_: &str) -> Result<Box<dyn BackendConfig>> {
        Err(Error::config("refused"))
    }

    const A: Scheme = Scheme::new("a+b", "a test scheme", refuse);

    fn refuse_storage(_: &str) -> Result<Box<dyn StorageConfig>> {
        Err(Error::config("storage refused"))
    }

    #[test]
    fn storage_schemes_share_the_names_and_backends_serve_as_storage() {
        let mut schemes = Schemes::new();
        schemes.register(A).unwrap();
        let store = StorageScheme::new("objects", "a test store", refuse_storage);
        schemes.register_storage(store).unwrap();
        assert!(schemes.register_storage(store).is_err(), "taken");
        let clash = StorageScheme::new("a+b", "named like a backend", refuse_storage);
        assert!(
            schemes.register_storage(clash).is_err(),
            "taken by a backend"
        );
        assert!(
            schemes
                .register(Scheme::new("objects", "x", refuse))
                .is_err()
        );
        let err = schemes.parse_storage("objects://x").unwrap_err();
        assert!(err.to_string().contains("storage refused"), "{err}");
        // A backend's URL goes to its own parser, as its storage.
        let err = schemes.parse_storage("a+b://x").unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
        let err = schemes.parse_storage("nosuch://x").unwrap_err();
        assert!(
            err.to_string().contains("storage only: objects://"),
            "{err}"
        );
        assert_eq!(schemes.storage_schemes().count(), 1);
    }

    #[test]
    fn a_registry_refuses_taken_and_malformed_names() {
        let mut schemes = Schemes::new();
        schemes.register(A).unwrap();
        assert!(schemes.register(A).is_err(), "taken");
        for name in ["", "1a", "A", "a b", "a:"] {
            let scheme = Scheme { name, ..A };
            assert!(schemes.register(scheme).is_err(), "{name:?}");
        }
        assert_eq!(schemes.iter().count(), 1);
        assert!(schemes.get("A+B").is_some());
        assert_eq!(schemes.list(), "a+b://");
    }

    #[test]
    fn the_example_shown_is_the_first_a_scheme_gives() {
        let message = |schemes: &Schemes| match schemes.parse("no scheme here") {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        let mut schemes = Schemes::new();
        assert!(message(&schemes).contains("such as scheme://host"));
        schemes
            .register(Scheme::new("plain", "no example", refuse))
            .unwrap();
        assert!(
            message(&schemes).contains("such as plain:// "),
            "{}",
            message(&schemes)
        );
        schemes
            .register(Scheme::new("shown", "an example", refuse).with_example("shown://h:1"))
            .unwrap();
        schemes
            .register(Scheme::new("later", "another", refuse).with_example("later://h:2"))
            .unwrap();
        assert!(
            message(&schemes).contains("such as shown://h:1 "),
            "{}",
            message(&schemes)
        );
    }

    #[test]
    fn unknown_schemes_are_named_and_urls_never_echoed() {
        let mut schemes = Schemes::new();
        schemes.register(A).unwrap();
        let err = schemes
            .parse("nosuch://u:secret@h")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"nosuch\"") && err.contains("a+b://"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
        let err = schemes.parse("u:secret@h").unwrap_err().to_string();
        assert!(err.contains("URL") && !err.contains("secret"), "{err}");
        assert!(
            schemes
                .parse("A+B://x")
                .unwrap_err()
                .to_string()
                .contains("refused")
        );
    }
}
