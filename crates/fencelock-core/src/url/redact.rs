//! Showing URLs a user typed without ever showing their password.
//!
//! A parsed config renders its own URL with `***` in place of the password; these functions
//! are for text that may not parse, shown in error messages.

use percent_encoding::percent_decode_str;

/// What [`redact`] shows of text that may be all secret.
const HIDDEN: &str = "<URL hidden: it may hold a password>";

/// How many rounds of percent-decoding are looked through for a nested URL's `@` (a URL in
/// an option of a URL in an option is encoded twice).
const DECODE_ROUNDS: usize = 4;

/// `input` with any password replaced by `***`, for messages about a URL that may not parse.
///
/// The password in the standard place (`scheme://user:password@host`) becomes `***`. When
/// the text has an `@` that is not the end of the credentials (a password holding an
/// unescaped `/`, `?` or `#`), everything after the scheme is hidden. A query that may carry
/// a nested URL with credentials (an `@`, plain or percent-encoded any number of times, as in
/// `?storage=redis%3A%2F%2Fu%3Apw%40d`) is hidden as `?<options hidden>`, and the value of an
/// option whose name says it is a secret (`password`, `pwd`, `secret`) as `***`. Text without
/// `://` is shown as it is unless it may hold credentials; then none of it is shown.
///
/// ```
/// use fencelock_core::url::redact;
/// assert_eq!(redact("redis://u:secret@h:6379/0"), "redis://u:***@h:6379/0");
/// assert_eq!(redact("redis://u:pa/secret@h"), "redis://***");
/// assert_eq!(
///     redact("redlock://h1?storage=redis%3A%2F%2F%3Asecret%40h2"),
///     "redlock://h1?<options hidden>"
/// );
/// ```
pub fn redact(input: &str) -> String {
    let Some((scheme, rest)) = input.split_once("://") else {
        return if may_hold_credentials(input) {
            HIDDEN.to_owned()
        } else {
            input.to_owned()
        };
    };
    let scheme_is_plain = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_is_plain {
        return HIDDEN.to_owned();
    }
    if !safe_to_echo(input) {
        return format!("{scheme}://***");
    }
    let (authority, tail) = split_authority(rest);
    let tail = match tail.split_once('?') {
        Some((path, query)) if may_hold_credentials(query) => format!("{path}?<options hidden>"),
        Some((path, query)) => format!("{path}?{}", hide_secret_options(query)),
        None => tail.to_owned(),
    };
    match authority.rsplit_once('@') {
        None => format!("{scheme}://{authority}{tail}"),
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{hosts}{tail}"),
            None => format!("{scheme}://{userinfo}@{hosts}{tail}"),
        },
    }
}

/// Whether parts of `input` after its credentials (host, port, path, option names) can be
/// quoted in a message without quoting part of a password.
///
/// They cannot when an `@` follows the first `/`, `?` or `#` after the scheme: then the
/// credentials may hold one of those characters unescaped, and what looks like a port or an
/// option may really be a piece of the password. (A nested URL in an option is expected
/// percent-encoded, so its `@` is `%40`.) Text without `://` is safe only without an `@`.
pub fn safe_to_echo(input: &str) -> bool {
    let Some((_, rest)) = input.split_once("://") else {
        return !input.contains('@');
    };
    let (_, tail) = split_authority(rest);
    !tail.contains('@')
}

/// Every password `text` may carry, as written and percent-decoded, including those of URLs
/// nested in its query (`redlock://...?storage=redis%3A%2F%2Fu%3Apw%40d`), longest first.
///
/// The fallback for scrubbing a message about text no parser accepted (so there is no
/// parsed config whose redacted URL could be shown instead): every `***` that [`redact`]
/// would write stands for one of these. It errs on the side of finding too much: where an
/// `@` follows a `/`, `?` or `#`, both readings of the credentials are listed.
pub fn passwords(text: &str) -> Vec<String> {
    let mut texts = vec![text.to_owned()];
    for _ in 0..2 {
        let last = texts.last().map(String::as_str).unwrap_or_default();
        let decoded = percent_decode_str(last).decode_utf8_lossy().into_owned();
        texts.push(decoded);
    }
    let mut found = Vec::new();
    for text in &texts {
        let starts: Vec<usize> = text.match_indices("://").map(|(at, _)| at + 3).collect();
        if starts.is_empty() {
            // `scheme:user:password@host`: whatever follows a `:` before the last `@`.
            if let Some((userinfo, _)) = text.rsplit_once('@') {
                for (at, _) in userinfo.match_indices(':') {
                    found.push(userinfo[at + 1..].to_owned());
                }
            }
        }
        for (index, start) in starts.iter().enumerate() {
            let end = starts.get(index + 1).map_or(text.len(), |next| next - 3);
            let rest = &text[*start..end];
            let (authority, _) = split_authority(rest);
            // The standard reading, and the one where the password holds `/`, `?` or `#`.
            for candidate in [authority, rest] {
                if let Some((userinfo, _)) = candidate.rsplit_once('@')
                    && let Some((_, password)) = userinfo.split_once(':')
                {
                    found.push(password.to_owned());
                }
            }
        }
    }
    let mut secrets = Vec::new();
    for password in found {
        let decoded = percent_decode_str(&password)
            .decode_utf8_lossy()
            .into_owned();
        secrets.push(decoded);
        secrets.push(password);
    }
    secrets.retain(|s| !s.is_empty());
    // Longest first, so that no part of a longer secret is left behind when replacing.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

/// `rest` (what follows `://`) split before its first `/`, `?` or `#`.
fn split_authority(rest: &str) -> (&str, &str) {
    rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()))
}

/// Whether `text` may carry a URL with credentials: an `@`, plain or percent-encoded up to
/// [`DECODE_ROUNDS`] times.
fn may_hold_credentials(text: &str) -> bool {
    let mut text = text.to_owned();
    for _ in 0..=DECODE_ROUNDS {
        if text.contains('@') {
            return true;
        }
        let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
        if decoded == text {
            return false;
        }
        text = decoded;
    }
    // Encoded more deeply than anyone writes by hand: assume the worst.
    true
}

/// `query` with the value of every option whose name says it is a secret replaced by `***`.
fn hide_secret_options(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_name(name) => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn is_secret_name(name: &str) -> bool {
    let name = percent_decode_str(name)
        .decode_utf8_lossy()
        .to_ascii_lowercase();
    ["pass", "pwd", "secret"]
        .iter()
        .any(|word| name.contains(word))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hides_passwords_and_keeps_the_rest() {
        for (input, shown) in [
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("redis://u:secret@h:6379/0", "redis://u:***@h:6379/0"),
            ("redis://:secret@h", "redis://:***@h"),
            ("redis://u@h", "redis://u@h"),
            ("redis://u:p@ss@secret@h", "redis://u:***@h"),
            ("redis://u:pa/secret@h", "redis://***"),
            ("redis://u:pa?secret@h", "redis://***"),
            ("redis://u:pa#secret@h", "redis://***"),
            ("redis:u:secret@h", HIDDEN),
            ("u:secret@h://x", HIDDEN),
            ("redis%3A%2F%2Fu%3Asecret%40h", HIDDEN),
            (
                "redlock://u:secret@h1,h2/0?storage=redis%3A%2F%2Fu%3Asecret%40d",
                "redlock://u:***@h1,h2/0?<options hidden>",
            ),
            (
                // Encoded twice: `%2540` is `%40` is `@`.
                "redlock://h1?storage=redis%253A%252F%252Fu%253Asecret%2540d",
                "redlock://h1?<options hidden>",
            ),
            ("redlock://h1?storage=redis://:secret@d", "redlock://***"),
            (
                "redis://h?allow_eviction=true",
                "redis://h?allow_eviction=true",
            ),
            (
                "mysql://u@h/db?password=secret&prefix=x_",
                "mysql://u@h/db?password=***&prefix=x_",
            ),
            ("mysql://u:secret@h:99999/x", "mysql://u:***@h:99999/x"),
            ("not a url", "not a url"),
            ("", ""),
        ] {
            assert_eq!(redact(input), shown, "{input}");
            assert!(!redact(input).contains("secret"), "{input}");
        }
    }

    #[test]
    fn echo_is_refused_when_the_password_holds_a_reserved_character() {
        assert!(safe_to_echo("redis://u:pw@h:99999/0"));
        assert!(safe_to_echo(
            "redlock://h1?storage=redis%3A%2F%2Fu%3Apw%40d"
        ));
        assert!(!safe_to_echo("redlock://h1?storage=redis://u:pw@d"));
        assert!(!safe_to_echo("redis://u:pa?ss@h"));
        assert!(!safe_to_echo("redis://u:pa/ss@h"));
        assert!(!safe_to_echo("redis://u:pa#ss@h"));
        assert!(!safe_to_echo("redis:u:pw@h"));
    }

    #[test]
    fn passwords_are_found_in_every_form() {
        assert_eq!(passwords("redis://:s3cret@h:1"), ["s3cret"]);
        assert_eq!(passwords("postgres://u:p%40ss@h/db"), ["p%40ss", "p@ss"]);
        let nested = "redlock://a:1,b:2?storage=redis%3A%2F%2F%3Ainner%40c%3A3";
        assert!(passwords(nested).contains(&"inner".to_owned()));
        let plain = "redlock://a:1?storage=redis://:inner@c";
        assert!(passwords(plain).contains(&"inner".to_owned()));
        assert!(passwords("redis://u:pa/ss@h").contains(&"pa/ss".to_owned()));
        assert!(passwords("redis:u:s3cret@h").contains(&"s3cret".to_owned()));
        assert!(passwords("redis://user@h:1").is_empty());
        assert!(passwords("memory://").is_empty());
    }

    /// Whatever `redact` shows, no password `passwords` finds is in it.
    #[test]
    fn redact_hides_what_passwords_finds() {
        for input in [
            "redis://u:s3cret@h",
            "redis://u:s3/cret@h",
            "redlock://h?storage=redis%3A%2F%2F%3As3cret%40d",
            "etcd://u:s%3Fcret@h?prefix=x",
        ] {
            let shown = redact(input);
            for secret in passwords(input) {
                assert!(!shown.contains(&secret), "{input}: {shown} shows {secret}");
            }
        }
    }
}
