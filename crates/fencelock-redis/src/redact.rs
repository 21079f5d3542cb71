//! Showing URLs a user typed without ever showing their password.
//!
//! A parsed config renders its own URL with `***` in place of the password; this module is
//! for text that may not parse, shown in error messages.

/// `input` with any password replaced by `***`, for messages about a URL that may not parse.
///
/// Only the standard place of a password is rewritten (`scheme://user:password@host`). When
/// the text has an `@` that is not the end of the credentials (a password holding an unescaped
/// `/`, `?` or `#`), everything after the scheme is hidden, and a query that may carry a nested
/// URL with credentials (`?storage=redis://u:pw@...`) is hidden too.
pub(crate) fn redact(input: &str) -> String {
    let Some((scheme, rest)) = input.split_once("://") else {
        return if input.contains('@') {
            "<URL hidden: it may hold a password>".to_owned()
        } else {
            input.to_owned()
        };
    };
    let scheme_is_plain = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_is_plain {
        return "<URL hidden: it may hold a password>".to_owned();
    }
    if !safe_to_echo(input) {
        return format!("{scheme}://***");
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = match tail.split_once('?') {
        Some((path, query)) if may_hold_credentials(query) => format!("{path}?<options hidden>"),
        _ => tail.to_owned(),
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
/// percent-encoded, so its `@` is `%40`.)
pub(crate) fn safe_to_echo(input: &str) -> bool {
    let Some((_, rest)) = input.split_once("://") else {
        return !input.contains('@');
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    !rest[end..].contains('@')
}

/// A query that may carry a URL with credentials: an `@`, plain or percent-encoded.
fn may_hold_credentials(query: &str) -> bool {
    query.contains('@') || query.to_ascii_lowercase().contains("%40")
}

#[cfg(test)]
mod tests {
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
            ("redis:u:secret@h", "<URL hidden: it may hold a password>"),
            ("u:secret@h://x", "<URL hidden: it may hold a password>"),
            (
                "redlock://u:secret@h1,h2/0?storage=redis%3A%2F%2Fu%3Asecret%40d",
                "redlock://u:***@h1,h2/0?<options hidden>",
            ),
            ("redlock://h1?storage=redis://:secret@d", "redlock://***"),
            (
                "redis://h?allow_eviction=true",
                "redis://h?allow_eviction=true",
            ),
            ("not a url", "not a url"),
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
}
