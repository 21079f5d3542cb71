//! A backend spec from `--backend` or `FENCELOCK_BACKEND`: parsed by a value parser whose
//! errors never show the password, which is kept aside so that no later error shows it either.
//!
//! The passwords come from the parsed config itself: its [`to_url`](BackendConfig::to_url)
//! and [`redacted_url`](BackendConfig::redacted_url) differ exactly where a password stands
//! (the contract of the trait), those of URLs nested in options included. Only text that no
//! parser accepted, or a config whose two URLs do not line up that way, falls back to
//! [`fencelock::url::passwords`], which reads them off the text.

use std::ffi::OsStr;
use std::fmt;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use fencelock::spec::{BackendConfig, BackendSpec, StorageSpec};
use percent_encoding::percent_decode_str;

/// The environment variable read when `--backend` is not given.
pub const BACKEND_ENV: &str = "FENCELOCK_BACKEND";

/// What a spec's URL must carry to reach the locks of an application that chose where its
/// keys live, said where a key turns out never used under the spec.
pub(crate) const NAMESPACE_HINT: &str = "locks taken under another key prefix, schema or \
    chroot are not seen: give the application's in the URL (?prefix=, ?schema=, /chroot)";

/// A parsed backend spec and the secrets its text carries. `Debug` and `Display` show the
/// spec with its password hidden.
#[derive(Clone)]
pub struct Spec {
    spec: BackendSpec,
    secrets: Vec<String>,
    /// Read from a file (`@PATH`): the text of the spec was never on a command line or in an
    /// environment variable.
    from_file: bool,
}

impl Spec {
    /// Parses `text`; the error names what is wrong, with the password hidden.
    pub fn parse(text: &str) -> Result<Self, String> {
        match BackendSpec::parse(text) {
            Ok(spec) => {
                let secrets = secrets_of(spec.config())
                    .filter(|found| !found.is_empty() || fencelock::url::passwords(text).is_empty())
                    // The config cannot say (or says nothing while the text has a password):
                    // read the text, so that no form the user typed slips through.
                    .unwrap_or_else(|| fallback(text, spec.config()));
                Ok(Spec {
                    spec,
                    secrets,
                    from_file: false,
                })
            }
            // No config exists to ask: the text is all there is.
            Err(e) => Err(redact(&e.to_string(), &fencelock::url::passwords(text))),
        }
    }

    /// Parses `value`: a spec, or `@PATH`, the spec read from the file at PATH (its first
    /// line, surrounding whitespace dropped), so that a password is never in the process's
    /// arguments or environment, where other users and the command of `run` could read it.
    /// The error names the file, never what it holds.
    pub fn parse_value(value: &str) -> Result<Self, String> {
        let Some(path) = value.strip_prefix('@') else {
            return Spec::parse(value);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the backend spec from the file {path:?}: {e}"))?;
        let line = text.lines().next().unwrap_or_default().trim();
        if line.is_empty() {
            return Err(format!(
                "the file {path:?} holds no backend spec (its first line is empty)"
            ));
        }
        let mut spec = Spec::parse(line).map_err(|e| format!("in the file {path:?}: {e}"))?;
        spec.from_file = true;
        Ok(spec)
    }

    /// Whether the spec's own text carries a password (not read from a file).
    pub fn password_in_text(&self) -> bool {
        !self.from_file && !self.secrets.is_empty()
    }

    /// The parsed spec.
    pub fn spec(&self) -> &BackendSpec {
        &self.spec
    }

    /// `text` with this spec's password replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        redact(text, &self.secrets)
    }
}

impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Spec").field(&self.spec).finish()
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.spec, f)
    }
}

/// The value parser of `--backend`. Unlike a plain function parser, whose error clap prints
/// after echoing the value (password included), its error is only the redacted reason.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpecParser;

impl TypedValueParser for SpecParser {
    type Value = Spec;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Spec, clap::Error> {
        let parsed = match value.to_str() {
            Some(text) => Spec::parse_value(text),
            None => Err("the backend spec is not valid UTF-8".to_owned()),
        };
        let option = match arg.and_then(clap::Arg::get_long) {
            Some("backend") | None => format!("--backend or {BACKEND_ENV}"),
            Some(long) => format!("--{long}"),
        };
        parsed.map_err(|reason| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid backend spec ({option}): {reason}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// The value parser of `--storage`: a storage spec (a storage scheme's, or any backend's
/// storage half), whose error is only the redacted reason.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StorageParser;

impl TypedValueParser for StorageParser {
    type Value = StorageSpec;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<StorageSpec, clap::Error> {
        let parsed = match value.to_str() {
            Some(text) => StorageSpec::parse(text)
                .map_err(|e| redact(&e.to_string(), &fencelock::url::passwords(text))),
            None => Err("the storage spec is not valid UTF-8".to_owned()),
        };
        parsed.map_err(|reason| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid storage spec (--storage): {reason}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// Every password `config` holds, as its URL writes it and percent-decoded (twice, for a URL
/// nested in an option): the parts of [`to_url`](BackendConfig::to_url) that
/// [`redacted_url`](BackendConfig::redacted_url) shows as `***`. `None` when the two do not
/// line up that way.
pub(crate) fn secrets_of(config: &dyn BackendConfig) -> Option<Vec<String>> {
    let hidden = hidden_parts(&config.to_url(), &config.redacted_url())?;
    Some(with_decoded(hidden))
}

/// The parts of `full` that stand where `redacted` has `***`, in order.
fn hidden_parts(full: &str, redacted: &str) -> Option<Vec<String>> {
    let pieces: Vec<&str> = redacted.split("***").collect();
    let (first, rest) = pieces.split_first()?;
    let Some((last, middle)) = rest.split_last() else {
        return (full == redacted).then(Vec::new);
    };
    let mut left = full.strip_prefix(first)?;
    let mut hidden = Vec::new();
    for piece in middle {
        // Two `***` side by side cannot be told apart.
        if piece.is_empty() {
            return None;
        }
        let at = left.find(piece)?;
        hidden.push(left[..at].to_owned());
        left = &left[at + piece.len()..];
    }
    hidden.push(left.strip_suffix(last)?.to_owned());
    Some(hidden)
}

/// The fallback: the passwords of the text the user typed and of the config's URL.
fn fallback(text: &str, config: &dyn BackendConfig) -> Vec<String> {
    let mut secrets = fencelock::url::passwords(text);
    secrets.extend(fencelock::url::passwords(&config.to_url()));
    with_decoded(secrets)
}

/// `secrets` and their percent-decoded forms (once and twice), without empty ones, longest
/// first so that no part of a longer secret is left behind.
fn with_decoded(secrets: Vec<String>) -> Vec<String> {
    let mut all = Vec::new();
    for secret in secrets {
        let once = percent_decode_str(&secret).decode_utf8_lossy().into_owned();
        let twice = percent_decode_str(&once).decode_utf8_lossy().into_owned();
        all.extend([secret, once, twice]);
    }
    all.retain(|s| !s.is_empty());
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
    all.dedup();
    all
}

/// `text` with every secret replaced by `***`.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret.as_str(), "***")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(text: &str) -> Vec<String> {
        Spec::parse(text).unwrap().secrets
    }

    #[test]
    fn passwords_come_from_the_parsed_config() {
        assert_eq!(secrets("redis://:s3cret@h:1"), ["s3cret"]);
        assert_eq!(secrets("postgres://u:p%40ss@h/db"), ["p%40ss", "p@ss"]);
        let nested = "redlock://a:1,b:2?storage=redis%3A%2F%2F%3Ainner%40c%3A3";
        assert_eq!(secrets(nested), ["inner"]);
        let both = "redlock://:outer@a:1,b:2?storage=redis%3A%2F%2F%3Ain%2540ner%40c%3A3";
        let found = secrets(both);
        for secret in ["outer", "in%40ner", "in@ner"] {
            assert!(found.contains(&secret.to_owned()), "{found:?}");
        }
        if cfg!(feature = "etcd") {
            // etcd renders the decoded password again: `-` needs no escape.
            assert_eq!(secrets("etcd://u:pw%2Dx@h"), ["pw-x"]);
        }
        assert!(secrets("redis://user@h:1").is_empty());
        assert!(secrets("memory://").is_empty());
    }

    #[test]
    fn the_two_urls_line_up_or_nothing_is_claimed() {
        let parts = |full, redacted| hidden_parts(full, redacted);
        assert_eq!(
            parts("a://:pw@h", "a://:***@h"),
            Some(vec!["pw".to_owned()])
        );
        assert_eq!(
            parts(
                "a://:x@h?s=b%3A%2F%2F%3Ay%40d",
                "a://:***@h?s=b%3A%2F%2F%3A***%40d"
            ),
            Some(vec!["x".to_owned(), "y".to_owned()])
        );
        assert_eq!(parts("a://h", "a://h"), Some(vec![]));
        assert_eq!(parts("a://h", "b://h"), None);
        assert_eq!(parts("a://:pw@h", "a://:***@g"), None);
        assert_eq!(parts("a://:pw@h", "a://:******@h"), None);
    }

    #[test]
    fn parse_errors_never_show_the_password() {
        for text in [
            "redis://:s3cret@127.0.0.1:99999",
            "redis://:s3cret@",
            "nosuch://u:s3cret@h",
            "postgres://u:s3cret@h/db?backend=leese",
            "redlock://u:s3cret@a:1,,b:2",
            "redlock://a:1?storage=redis%3A%2F%2F%3As3cret%40c%3A99999",
        ] {
            let err = Spec::parse(text).unwrap_err();
            assert!(!err.contains("s3cret"), "{text}: {err}");
        }
    }

    #[test]
    fn redaction_replaces_every_occurrence() {
        let spec = Spec::parse("redis://:pw@h").unwrap();
        assert_eq!(spec.redact("a pw b pw"), "a *** b ***");
    }
}
