//! One URL toolkit for every backend: the rules a backend's URL parser shares with the
//! others, so that a bug class is fixed once.
//!
//! - [`redact`] shows text that may not parse as a URL without ever showing a password
//!   (those of URLs nested in the query included); [`safe_to_echo`] says whether parts of it
//!   may be quoted at all, and [`passwords`] lists what [`redact`] hides, for scrubbing
//!   messages that were not built from a parsed config.
//! - [`parse_host`] and [`parse_hosts`] read `host[:port]` lists with a default port and
//!   refuse the same server twice ([`distinct`]); [`port_problem`] words a refused port.
//! - [`Options`] reads a query string, refusing repeated settings (alias spellings
//!   included), unknown names (listing the known ones), values that are not UTF-8 once
//!   percent-decoded, and NUL; a [`Known::indexed`] setting is a family written
//!   `name[index]`, each index given once.
//! - [`decode_part`] decodes a user name, password or database name, refusing NUL and text
//!   that is not UTF-8.
//!
//! Every refusal is [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the setting
//! and never showing a password; backends put their own context in front with
//! [`Error::in_context`](crate::Error::in_context).

mod hosts;
mod options;
mod redact;
mod text;

pub use hosts::{distinct, parse_host, parse_hosts, port_problem};
pub use options::{Known, OptionEntry, Options};
pub use redact::{passwords, redact, safe_to_echo};
pub use text::decode_part;
