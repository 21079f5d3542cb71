//! Redis Cluster hash slots, computed on the client: CRC16 (XMODEM) of a key's hash tag, modulo
//! 16384, as the Redis Cluster specification defines them. The `redis` crate has the same
//! function only behind its `cluster` feature, which brings a cluster client along.

/// The number of hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// The part of `name` Redis Cluster hashes: the text between the first `{` and the next `}`
/// when that is not empty, else the whole name.
pub(crate) fn hashed_part(name: &[u8]) -> &[u8] {
    if let Some(open) = name.iter().position(|&b| b == b'{')
        && let Some(len) = name[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &name[open + 1..open + 1 + len];
    }
    name
}

/// The hash slot of the key `name`.
pub(crate) fn slot(name: &[u8]) -> u16 {
    crc16_xmodem(hashed_part(name)) % SLOTS
}

/// CRC16-CCITT in its XMODEM variant (polynomial 0x1021, initial value 0), bit by bit: keys
/// are short, and this runs once per key of a batch.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_cluster_specification() {
        // The check value the Redis Cluster specification gives for its CRC16.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(crc16_xmodem(b""), 0);
    }

    /// What `CLUSTER KEYSLOT` answered for these names on a `redis-server --cluster-enabled
    /// yes` (7.x).
    #[test]
    fn slots_match_the_server() {
        for (name, expected) in [
            ("somekey", 11058),
            ("foo{hash_tag}", 2515),
            ("123456789", 12739),
            ("balance:{account:42}", 2116),
            ("fencelock:{account:42}:fence", 2116),
            ("{}", 15257),
            ("a{}b{c}", 7353),
        ] {
            assert_eq!(slot(name.as_bytes()), expected, "{name}");
        }
    }

    #[test]
    fn hash_tags_pick_the_hashed_part() {
        assert_eq!(hashed_part(b"{user1000}.following"), b"user1000");
        assert_eq!(hashed_part(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hashed_part(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashed_part(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hashed_part(b"plain"), b"plain");
        assert_eq!(hashed_part(b"open{only"), b"open{only");
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
    }
}
