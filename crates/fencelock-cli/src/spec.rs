//! A backend spec from `--backend` or `FENCELOCK_BACKEND`: parsed by a value parser whose
//! errors never show the password, which is kept aside so that no later error shows it either.

use std::ffi::OsStr;
use std::fmt;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use fencelock::spec::BackendSpec;
use percent_encoding::percent_decode_str;

/// The environment variable read when `--backend` is not given.
pub const BACKEND_ENV: &str = "FENCELOCK_BACKEND";

/// A parsed backend spec and the secrets its text carries. `Debug` and `Display` show the
/// spec with its password hidden.
#[derive(Clone)]
pub struct Spec {
    spec: BackendSpec,
    secrets: Vec<String>,
}

impl Spec {
    /// Parses `text`; the error names what is wrong, with the password hidden.
    pub fn parse(text: &str) -> Result<Self, String> {
        let secrets = secrets_of(text);
        match BackendSpec::parse(text) {
            Ok(spec) => Ok(Spec { spec, secrets }),
            Err(e) => Err(redact(&e.to_string(), &secrets)),
        }
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
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Spec, clap::Error> {
        let parsed = match value.to_str() {
            Some(text) => Spec::parse(text),
            None => Err("the backend spec is not valid UTF-8".to_owned()),
        };
        parsed.map_err(|reason| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("invalid backend spec (--backend or {BACKEND_ENV}): {reason}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// Every password `url` carries, as written and percent-decoded, including those of URLs
/// nested in its query (`redlock://...?storage=redis%3A%2F%2F...`).
pub(crate) fn secrets_of(url: &str) -> Vec<String> {
    let mut texts = vec![url.to_owned()];
    for _ in 0..2 {
        let last = texts.last().map(String::as_str).unwrap_or_default();
        let decoded = percent_decode_str(last).decode_utf8_lossy().into_owned();
        texts.push(decoded);
    }
    let mut secrets = Vec::new();
    for text in &texts {
        for (at, _) in text.match_indices("://") {
            let rest = &text[at + 3..];
            let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
            let Some((userinfo, _)) = authority.rsplit_once('@') else {
                continue;
            };
            let Some((_, password)) = userinfo.split_once(':') else {
                continue;
            };
            let decoded = percent_decode_str(password).decode_utf8_lossy();
            secrets.push(password.to_owned());
            secrets.push(decoded.into_owned());
        }
    }
    secrets.retain(|s| !s.is_empty());
    // Longest first, so that no part of a longer secret is left behind.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
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

    #[test]
    fn passwords_are_found_in_every_form() {
        assert_eq!(secrets_of("redis://:s3cret@h:1"), ["s3cret"]);
        assert_eq!(secrets_of("postgres://u:p%40ss@h/db"), ["p%40ss", "p@ss"]);
        let nested = "redlock://a:1,b:2?storage=redis%3A%2F%2F%3Ainner%40c%3A3";
        assert!(secrets_of(nested).contains(&"inner".to_owned()));
        assert!(secrets_of("redis://user@h:1").is_empty());
        assert!(secrets_of("memory://").is_empty());
    }

    #[test]
    fn parse_errors_never_show_the_password() {
        for text in [
            "redis://:s3cret@127.0.0.1:99999",
            "redis://:s3cret@",
            "nosuch://u:s3cret@h",
            "postgres://u:s3cret@h/db?backend=leese",
            "redlock://u:s3cret@a:1,,b:2",
        ] {
            let err = Spec::parse(text).unwrap_err();
            assert!(!err.contains("s3cret"), "{text}: {err}");
        }
    }

    #[test]
    fn redaction_replaces_every_occurrence() {
        let secrets = secrets_of("redis://:pw@h");
        assert_eq!(redact("a pw b pw", &secrets), "a *** b ***");
    }
}
