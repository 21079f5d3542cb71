//! Where fencelock keeps its znodes, under the chroot:
//!
//! - `/<prefix>/lock/<key>`: the key's node (persistent); its data is the last token handed
//!   out, in decimal, written only by a compare-and-set on the node's version.
//! - `/<prefix>/lock/<key>/lock-<owner>-<seq>`: a grant or a contender (ephemeral
//!   sequential); its data is `<token>:<ttl ms>`, or `<token>:waiting` for a queued waiter's
//!   place (the owner is then the waiter).
//! - `/<prefix>/data/<resource>`: a resource's last admitted fence `<token>:<owner>`
//!   (persistent), with its value in the child `v`.
//! - `/<prefix>/clock`: written by `inspect` to read the leader's clock (its mtime).
//!
//! Keys and resources are percent-encoded into one znode name.

use fencelock_core::{FencingToken, OwnerId};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Every byte but ASCII letters, digits, `-` and `_` is escaped, so no name is `.`, `..`,
/// holds a `/` or a character ZooKeeper refuses in paths.
const NAME: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The node name prefix of a grant's znode.
pub(crate) const LOCK_NODE: &str = "lock-";

#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: String,
}

impl Layout {
    pub(crate) fn new(prefix: &str) -> Self {
        Layout {
            root: format!("/{prefix}"),
        }
    }

    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn locks(&self) -> String {
        format!("{}/lock", self.root)
    }

    pub(crate) fn data(&self) -> String {
        format!("{}/data", self.root)
    }

    pub(crate) fn clock(&self) -> String {
        format!("{}/clock", self.root)
    }

    pub(crate) fn key_dir(&self, key: &str) -> String {
        format!("{}/lock/{}", self.root, encode(key))
    }

    pub(crate) fn fence(&self, resource: &str) -> String {
        format!("{}/data/{}", self.root, encode(resource))
    }

    pub(crate) fn value(&self, resource: &str) -> String {
        format!("{}/data/{}/v", self.root, encode(resource))
    }
}

pub(crate) fn encode(key: &str) -> String {
    utf8_percent_encode(key, NAME).to_string()
}

/// The key a node name under `lock/` or `data/` stands for.
pub(crate) fn decode(name: &str) -> Option<String> {
    percent_decode_str(name)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// The name prefix of `owner`'s grant nodes: `lock-<owner>-` (ZooKeeper appends the sequence).
pub(crate) fn lock_node_prefix(owner: OwnerId) -> String {
    format!("{LOCK_NODE}{owner}-")
}

/// A grant node's owner and sequence number, from its name.
pub(crate) fn parse_lock_node(name: &str) -> Option<(OwnerId, i64)> {
    let rest = name.strip_prefix(LOCK_NODE)?;
    let (owner, seq) = rest.split_once('-')?;
    Some((owner.parse().ok()?, seq.parse().ok()?))
}

/// A grant node's data: `<token>:<ttl ms>`.
pub(crate) fn grant_data(token: FencingToken, ttl_ms: u64) -> Vec<u8> {
    format!("{token}:{ttl_ms}").into_bytes()
}

/// The ttl field of a waiting place's data.
const WAITING: &str = "waiting";

/// A queued waiter's place: `<token>:waiting` (the token it will hold once granted).
pub(crate) fn waiting_data(token: FencingToken) -> Vec<u8> {
    format!("{token}:{WAITING}").into_bytes()
}

/// What a lock node's data says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeData {
    /// A grant (or a plain contender): its token and ttl, counted from the node's mtime.
    Grant { token: FencingToken, ttl_ms: u64 },
    /// A queued waiter's place, kept while its mtime is within the place ttl.
    Waiting { token: FencingToken },
}

pub(crate) fn parse_node_data(data: &[u8]) -> Option<NodeData> {
    let text = std::str::from_utf8(data).ok()?;
    let (token, ttl) = text.split_once(':')?;
    let token = FencingToken::new(token.parse().ok()?)?;
    if ttl == WAITING {
        return Some(NodeData::Waiting { token });
    }
    Some(NodeData::Grant {
        token,
        ttl_ms: ttl.parse().ok()?,
    })
}

/// The counter a key node holds (`0` before the first grant).
pub(crate) fn parse_counter(data: &[u8]) -> Option<u64> {
    if data.is_empty() {
        return Some(0);
    }
    std::str::from_utf8(data).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_round_trip_and_stay_one_node() {
        for key in ["a", "a/b", ".", "..", "ünï cødé", "zookeeper", "x%y"] {
            let name = encode(key);
            assert!(!name.contains('/') && name != "." && name != "..", "{name}");
            assert_eq!(decode(&name).unwrap(), key);
        }
        let owner = OwnerId::random();
        let name = format!("{}0000000042", lock_node_prefix(owner));
        assert_eq!(parse_lock_node(&name), Some((owner, 42)));
        let token = FencingToken::new(7).unwrap();
        assert_eq!(
            parse_node_data(&grant_data(token, 300)),
            Some(NodeData::Grant { token, ttl_ms: 300 })
        );
        assert_eq!(
            parse_node_data(&waiting_data(token)),
            Some(NodeData::Waiting { token })
        );
        assert_eq!(parse_node_data(b"7:soon"), None);
    }
}
