//! Redaction: URLs as messages, `Display` and `Debug` show them, never with a password.

use url::Url;

/// A raw (possibly unparsable) URL with the password of its authority replaced by `***` and
/// without its query.
pub(super) fn redact_raw(raw: &str) -> String {
    let Some((start, authority)) = raw_authority(raw) else {
        // Not URL-shaped: show nothing of it, it may be all secret.
        return "the given text".to_owned();
    };
    // The path, without query or fragment: an option value may be a secret.
    let rest = &raw[start + authority.len()..];
    let path = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let password = if userinfo.contains(':') { ":***" } else { "" };
            format!("{}{user}{password}@{host}{path}", &raw[..start])
        }
        None => format!("{}{authority}{path}", &raw[..start]),
    }
}

/// A parsed URL as error messages show it: password replaced by `***`, no query (an option
/// value may be a secret; messages name the option at fault).
pub(super) fn shown(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    redact(&url)
}

/// A parsed URL with its password replaced by `***`.
pub(crate) fn redact(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.into()
}

/// The authority part of a raw URL: between `://` and the first `/`, `?` or `#`.
pub(super) fn raw_authority(raw: &str) -> Option<(usize, &str)> {
    let start = raw.find("://")? + 3;
    let rest = &raw[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((start, &rest[..end]))
}
