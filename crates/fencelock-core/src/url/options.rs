//! A URL's query string, read strictly: every option known, given once, UTF-8, without NUL.

use percent_encoding::percent_decode;

use crate::error::{Error, Result};

/// The longest part of an unknown option name a message quotes.
const SHOWN_NAME_LEN: usize = 32;

/// One setting a URL's query may carry: its name, and other spellings of the same setting
/// (`ssl-mode` for `sslmode`). Giving the setting twice, under any of its spellings, is
/// refused: a driver would silently keep one of the two.
///
/// An [`indexed`](Self::indexed) setting is a family of settings written `name[index]`
/// (`options[statement_timeout]=5s`): each index is a setting of its own, given once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// The name, as messages and [`Options::get`] use it.
    pub name: &'static str,
    /// Other spellings of the same setting.
    pub aliases: &'static [&'static str],
    /// Whether the setting is written `name[index]`.
    indexed: bool,
}

impl Known {
    /// A setting with one spelling.
    pub const fn new(name: &'static str) -> Self {
        Known {
            name,
            aliases: &[],
            indexed: false,
        }
    }

    /// A setting that may also be spelled as each of `aliases`.
    pub const fn with_aliases(name: &'static str, aliases: &'static [&'static str]) -> Self {
        Known {
            name,
            aliases,
            indexed: false,
        }
    }

    /// The settings written `name[index]`, one per non-empty `index` (which holds no `[` or
    /// `]`); messages list them as `name[...]`. Read them with [`Options::indexed`]. Each
    /// index is given once: `name[a]=1&name[a]=2` is refused, `name[a]=1&name[b]=2` is not.
    /// A plain `name` is another setting, known only if listed with [`new`](Self::new).
    pub const fn indexed(name: &'static str) -> Self {
        Known {
            name,
            aliases: &[],
            indexed: true,
        }
    }

    /// Whether this setting is written `name[index]`.
    pub const fn is_indexed(&self) -> bool {
        self.indexed
    }

    /// The index `written` gives this setting (`None` for a plain setting), if it spells it.
    fn spells(&self, written: &str) -> Option<Option<String>> {
        if !self.indexed {
            let plain = self.name == written || self.aliases.contains(&written);
            return plain.then_some(None);
        }
        let (base, rest) = written.split_once('[')?;
        let index = rest.strip_suffix(']')?;
        let spelled = self.name == base || self.aliases.contains(&base);
        let well_formed = !index.is_empty() && !index.contains(['[', ']']);
        (spelled && well_formed).then(|| Some(index.to_owned()))
    }
}

/// One option as read: the setting it names, the spelling it was given under, and its
/// percent-decoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionEntry {
    /// The setting's [`Known::name`].
    pub name: &'static str,
    /// The index of an [`indexed`](Known::indexed) setting (`statement_timeout` in
    /// `options[statement_timeout]`); `None` for a plain one.
    pub index: Option<String>,
    /// The name as the URL writes it (an alias, perhaps), decoded.
    pub written: String,
    /// The value, percent-decoded (`+` is a space).
    pub value: String,
}

/// The options of a URL's query string (`a=1&b=2`, `application/x-www-form-urlencoded`),
/// each a [`Known`] setting given once.
///
/// [`parse`](Self::parse) refuses, with [`Error::InvalidConfig`] naming the option: a name
/// that is not one of the known settings (the message lists them); a setting given twice,
/// under the same or another spelling; a name or value that is not UTF-8 once
/// percent-decoded (a lenient decoding would put U+FFFD where the user wrote something
/// else); a NUL (`%00`), which the protocols end strings with. Values are never quoted.
///
/// Parse only the query of a URL whose option names may be quoted, that is one for which
/// [`safe_to_echo`](crate::url::safe_to_echo) holds: otherwise an "option" may be a piece
/// of a password.
///
/// ```
/// use fencelock_core::url::{Known, Options};
/// const KNOWN: &[Known] = &[Known::new("prefix"), Known::with_aliases("sslmode", &["ssl-mode"])];
/// let options = Options::parse("prefix=a%2Fb&ssl-mode=require", KNOWN)?;
/// assert_eq!(options.get("prefix"), Some("a/b"));
/// assert_eq!(options.get("sslmode"), Some("require"));
/// assert!(Options::parse("sslmode=disable&ssl-mode=require", KNOWN).is_err());
/// assert!(Options::parse("prefx=a", KNOWN).is_err());
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    entries: Vec<OptionEntry>,
}

impl Options {
    /// Reads `query` (without its `?`) against the settings `known`; see the type's docs.
    pub fn parse(query: &str, known: &[Known]) -> Result<Self> {
        let mut entries: Vec<OptionEntry> = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            let written =
                decode(raw_name).map_err(|what| Error::config(format!("an option name {what}")))?;
            let Some((setting, index)) = known
                .iter()
                .find_map(|k| k.spells(&written).map(|index| (k, index)))
            else {
                let shown: String = written.chars().take(SHOWN_NAME_LEN).collect();
                return Err(Error::config(format!(
                    "unknown option `{shown}` ({})",
                    list_known(known)
                )));
            };
            if let Some(first) = entries
                .iter()
                .find(|e| e.name == setting.name && e.index == index)
            {
                let also = if first.written == written {
                    String::new()
                } else {
                    format!(" (also given as `{}`)", first.written)
                };
                return Err(Error::config(format!(
                    "repeats the option `{written}`{also}"
                )));
            }
            let value = decode(raw_value)
                .map_err(|what| Error::config(format!("option `{written}` {what}")))?;
            entries.push(OptionEntry {
                name: setting.name,
                index,
                written,
                value,
            });
        }
        Ok(Options { entries })
    }

    /// The value of the setting `name` (its [`Known::name`], whatever spelling the URL used).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entry(name).map(|e| e.value.as_str())
    }

    /// The entry of the plain (not [`indexed`](Known::indexed)) setting `name`.
    pub fn entry(&self, name: &str) -> Option<&OptionEntry> {
        self.entries
            .iter()
            .find(|e| e.name == name && e.index.is_none())
    }

    /// The `(index, value)` pairs of the [`indexed`](Known::indexed) setting `name`, in URL
    /// order.
    pub fn indexed<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.entries
            .iter()
            .filter(move |e| e.name == name)
            .filter_map(|e| Some((e.index.as_deref()?, e.value.as_str())))
    }

    /// Every option, in URL order.
    pub fn entries(&self) -> &[OptionEntry] {
        &self.entries
    }

    /// Whether the query set nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A name or value of a form-encoded query: `+` is a space, then percent-decoded, refused
/// (as the end of a message) when not UTF-8 or holding a NUL.
fn decode(raw: &str) -> std::result::Result<String, &'static str> {
    let spaced = raw.replace('+', " ");
    let bytes: Vec<u8> = percent_decode(spaced.as_bytes()).collect();
    let text = String::from_utf8(bytes).map_err(|_| "is not UTF-8 once percent-decoded")?;
    if text.contains('\0') {
        return Err("holds a NUL character (%00)");
    }
    Ok(text)
}

/// `the only option is `a``, `the options are `a`, `b` and `c``, for messages.
fn list_known(known: &[Known]) -> String {
    let names: Vec<String> = known
        .iter()
        .map(|k| match k.indexed {
            true => format!("`{}[...]`", k.name),
            false => format!("`{}`", k.name),
        })
        .collect();
    match names.as_slice() {
        [] => "this URL takes no options".to_owned(),
        [one] => format!("the only option is {one}"),
        [init @ .., last] => format!("the options are {} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    const KNOWN: &[Known] = &[
        Known::new("prefix"),
        Known::new("allow_eviction"),
        Known::with_aliases("sslmode", &["ssl-mode"]),
    ];

    fn refusal(query: &str) -> String {
        match Options::parse(query, KNOWN) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{query:?}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn reads_known_options_decoded() {
        let options =
            Options::parse("prefix=a%2Fb+c&&ssl-mode=require&allow_eviction", KNOWN).unwrap();
        assert_eq!(options.get("prefix"), Some("a/b c"));
        assert_eq!(options.get("sslmode"), Some("require"));
        assert_eq!(options.entry("sslmode").unwrap().written, "ssl-mode");
        assert_eq!(options.get("allow_eviction"), Some(""));
        assert_eq!(options.entries().len(), 3);
        assert!(Options::parse("", KNOWN).unwrap().is_empty());
        let unicode = Options::parse("prefix=%C3%BC%F0%9F%94%92", KNOWN).unwrap();
        assert_eq!(unicode.get("prefix"), Some("ü🔒"));
    }

    /// The bug class fixed one backend at a time: duplicates (PostgreSQL only), non-UTF-8
    /// (etcd only), NUL.
    #[test]
    fn refuses_duplicates_unknown_names_non_utf8_and_nul() {
        for (query, expected) in [
            ("prefix=a&prefix=b", "repeats the option `prefix`"),
            ("prefix=a&prefix=a", "repeats the option `prefix`"),
            (
                "sslmode=require&ssl-mode=disable",
                "repeats the option `ssl-mode` (also given as `sslmode`)",
            ),
            (
                "foo=1",
                "unknown option `foo` (the options are `prefix`, `allow_eviction` and `sslmode`)",
            ),
            (
                "prefix=a%ffb",
                "option `prefix` is not UTF-8 once percent-decoded",
            ),
            ("prefix=a%00b", "option `prefix` holds a NUL character"),
            ("pre%ff=1", "an option name is not UTF-8"),
            ("pre%00fix=1", "an option name holds a NUL"),
        ] {
            let message = refusal(query);
            assert!(message.contains(expected), "{query:?}: {message}");
        }
        let long = format!("{}=1", "n".repeat(100));
        assert!(!refusal(&long).contains(&"n".repeat(33)));
        let only = Options::parse("x=1", &[Known::new("prefix")]).unwrap_err();
        assert!(only.to_string().contains("the only option is `prefix`"));
        let none = Options::parse("x=1", &[]).unwrap_err();
        assert!(none.to_string().contains("takes no options"));
    }

    #[test]
    fn indexed_settings_are_one_per_index() {
        const WITH_INDEXED: &[Known] = &[Known::new("options"), Known::indexed("options")];
        let options = Options::parse(
            "options=-c%20a&options%5Bwork_mem%5D=4MB&options[statement_timeout]=5s",
            WITH_INDEXED,
        )
        .unwrap();
        assert_eq!(options.get("options"), Some("-c a"));
        assert_eq!(
            options.indexed("options").collect::<Vec<_>>(),
            [("work_mem", "4MB"), ("statement_timeout", "5s")]
        );
        assert_eq!(options.entries()[1].written, "options[work_mem]");
        assert!(Known::indexed("options").is_indexed());
        assert!(!Known::new("options").is_indexed());
        for (query, expected) in [
            (
                "options[a]=1&options[a]=2",
                "repeats the option `options[a]`",
            ),
            ("options=1&options=2", "repeats the option `options`"),
            ("options[]=1", "unknown option `options[]`"),
            ("options[a=1", "unknown option `options[a`"),
            ("options[a]]=1", "unknown option `options[a]]`"),
            ("options[a][b]=1", "unknown option `options[a][b]`"),
            ("other[a]=1", "the options are `options` and `options[...]`"),
        ] {
            let message = Options::parse(query, WITH_INDEXED).unwrap_err().to_string();
            assert!(message.contains(expected), "{query:?}: {message}");
        }
        let plain_only = Options::parse("options[a]=1", &[Known::new("options")]).unwrap_err();
        assert!(plain_only.to_string().contains("unknown option"));
        let indexed_only = Options::parse("options=1", &[Known::indexed("options")]).unwrap_err();
        assert!(
            indexed_only
                .to_string()
                .contains("the only option is `options[...]`")
        );
    }

    #[test]
    fn values_are_never_quoted() {
        for query in [
            "prefix=s3cret%ff",
            "prefix=s3cret%00",
            "prefix=1&prefix=s3cret",
        ] {
            assert!(!refusal(query).contains("s3cret"), "{query}");
        }
    }
}
