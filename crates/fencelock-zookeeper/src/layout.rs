//! Where fencelock keeps its znodes, under the chroot:
//!
//! - `/<prefix>/lock/<key>`: the key's node (persistent); its data is the last token handed
//!   out, in decimal, written only by a compare-and-set on the node's version.
//! - `/<prefix>/lock/<key>/write-<owner>-<seq>`: an exclusive grant or a contender
//!   (ephemeral sequential); its data is `<token>:<ttl ms>`, or `<token>:waiting` for a queued
//!   waiter's place (the owner is then the waiter).
//! - `/<prefix>/lock/<key>/read-<reader>-<seq>`: a granted reader (ephemeral sequential); its
//!   data is `<phase token>:<ttl ms>:<phase owner>`, the read phase's fence.
//! - `/<prefix>/data/<resource>`: a resource's last admitted fence `<token>:<owner>`
//!   (persistent), with its value in the child `v`.
//! - `/<prefix>/clock`: written by `inspect` to read the leader's clock (its mtime).
//!
//! Keys and resources are percent-encoded into one znode name.

use fencelock_core::{Fence, FencingToken, OwnerId};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Every byte but ASCII letters, digits, `-` and `_` is escaped, so no name is `.`, `..`,
/// holds a `/` or a character ZooKeeper refuses in paths.
const NAME: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The node name prefix of an exclusive grant's (a writer's) znode.
pub(crate) const LOCK_NODE: &str = "write-";

/// The node name prefix of a reader's znode.
pub(crate) const READ_NODE: &str = "read-";

/// Which kind of lock a node of a key's queue stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// An exclusive grant, a contender or a queued waiter's place.
    Write,
    /// A reader of the read phase.
    Read,
}

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

/// The name prefix of `owner`'s grant nodes: `write-<owner>-` (ZooKeeper appends the
/// sequence).
pub(crate) fn lock_node_prefix(owner: OwnerId) -> String {
    format!("{LOCK_NODE}{owner}-")
}

/// The name prefix of `reader`'s nodes: `read-<reader>-`.
pub(crate) fn read_node_prefix(reader: OwnerId) -> String {
    format!("{READ_NODE}{reader}-")
}

/// A queue node's kind, owner (a reader's id for a reader) and sequence number, from its
/// name; `None` for a name that is not a queue node.
pub(crate) fn parse_queue_node(name: &str) -> Option<(NodeKind, OwnerId, i64)> {
    let (kind, rest) = if let Some(rest) = name.strip_prefix(LOCK_NODE) {
        (NodeKind::Write, rest)
    } else {
        (NodeKind::Read, name.strip_prefix(READ_NODE)?)
    };
    let (owner, seq) = rest.split_once('-')?;
    Some((kind, owner.parse().ok()?, seq.parse().ok()?))
}

/// A grant node's data: `<token>:<ttl ms>`.
pub(crate) fn grant_data(token: FencingToken, ttl_ms: u64) -> Vec<u8> {
    format!("{token}:{ttl_ms}").into_bytes()
}

/// A reader node's data: `<phase token>:<ttl ms>:<phase owner>`.
pub(crate) fn reader_data(fence: Fence, ttl_ms: u64) -> Vec<u8> {
    format!("{}:{ttl_ms}:{}", fence.token, fence.owner).into_bytes()
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
    /// A reader: the read phase's fence, and the reader's ttl counted from the node's mtime.
    Reader { fence: Fence, ttl_ms: u64 },
}

pub(crate) fn parse_node_data(data: &[u8]) -> Option<NodeData> {
    let text = std::str::from_utf8(data).ok()?;
    let (token, ttl) = text.split_once(':')?;
    let token = FencingToken::new(token.parse().ok()?)?;
    if ttl == WAITING {
        return Some(NodeData::Waiting { token });
    }
    if let Some((ttl, owner)) = ttl.split_once(':') {
        return Some(NodeData::Reader {
            fence: Fence::new(token, owner.parse().ok()?),
            ttl_ms: ttl.parse().ok()?,
        });
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
        assert_eq!(parse_queue_node(&name), Some((NodeKind::Write, owner, 42)));
        let name = format!("{}0000000043", read_node_prefix(owner));
        assert_eq!(parse_queue_node(&name), Some((NodeKind::Read, owner, 43)));
        assert_eq!(parse_queue_node("lock-0000000001"), None);
        let token = FencingToken::new(7).unwrap();
        assert_eq!(
            parse_node_data(&grant_data(token, 300)),
            Some(NodeData::Grant { token, ttl_ms: 300 })
        );
        assert_eq!(
            parse_node_data(&waiting_data(token)),
            Some(NodeData::Waiting { token })
        );
        let fence = Fence::new(token, owner);
        assert_eq!(
            parse_node_data(&reader_data(fence, 250)),
            Some(NodeData::Reader { fence, ttl_ms: 250 })
        );
        assert_eq!(parse_node_data(b"7:soon"), None);
        assert_eq!(parse_node_data(b"7:250:nobody"), None);
    }
}
