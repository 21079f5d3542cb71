//! The rule of DESIGN section 2, checked on `Setup::storage`: an operation is admitted when its
//! fence is newer than the resource's, or equal and of the same owner; a refused operation is
//! `Error::Stale` and changes nothing. The lock backend only supplies tokens, so
//! [`storage_suite!`](crate::storage_suite) runs this group against any `FencedStorage` with
//! any honest backend.

use fencelock_core::{
    Error, Fence, HolderInfo, OwnerId, Snapshot, read_holder, record_holder,
};
use tokio::time::sleep;

use super::support::{
    LONG_TTL, assert_stale, grant, grant_after_expiry, key, peek, successive_fences,
};
use crate::Setup;

declare_properties!(__fencelock_conformance_storage, {
    /// Holder metadata follows the holder: a record is shown only under the fence it was
    /// recorded with, and a superseded holder cannot overwrite its successor's record.
    pub async fn holder_record_follows_the_holder(s: &Setup) {
        let (b, st) = (&*s.backend, &*s.storage);
        let key = key("described");
        let first_info = HolderInfo::new("host-a", 11, "first").unwrap();
        let second_info = HolderInfo::new("host-b", 22, "second").unwrap();
        let first = grant(b, &key, s.short_ttl()).await;
        record_holder(st, &key, first.fence(), &first_info).await.unwrap();
        assert_eq!(
            read_holder(st, &key, first.fence()).await.unwrap(),
            Some(first_info.clone()),
            "the holder record does not read back under its own fence"
        );
        sleep(s.past_short_ttl()).await; // the first holder's lease ends
        let second = grant_after_expiry(b, &key, LONG_TTL).await;
        assert_eq!(
            read_holder(st, &key, second.fence()).await.unwrap(),
            None,
            "an earlier holder's record shown as the current holder's"
        );
        record_holder(st, &key, second.fence(), &second_info).await.unwrap();
        assert_stale(
            record_holder(st, &key, first.fence(), &first_info).await,
            first.fence(),
            second.fence(),
        );
        assert_eq!(
            read_holder(st, &key, second.fence()).await.unwrap(),
            Some(second_info),
            "a refused stale overwrite changed the successor's holder record"
        );
        b.release(&second).await.unwrap();
    }

    /// The story of DESIGN section 1: a client pauses past its ttl, another takes the lock and
    /// writes, the first wakes and writes: its write is refused and the data stays the second's.
    pub async fn paused_client_is_refused(s: &Setup) {
        let (b, st) = (&*s.backend, &*s.storage);
        let key = key("paused");
        let first = grant(b, &key, s.short_ttl()).await;
        assert_eq!(
            st.read(&key, first.fence()).await.unwrap(),
            None,
            "a never-written resource reads back a value"
        );
        sleep(s.past_short_ttl()).await; // the pause
        let second = grant_after_expiry(b, &key, LONG_TTL).await;
        st.read(&key, second.fence()).await.unwrap();
        st.write(&key, second.fence(), b"second").await.unwrap();
        assert_stale(
            st.write(&key, first.fence(), b"first").await,
            first.fence(),
            second.fence(),
        );
        let snapshot = peek(st, &key).await.unwrap();
        assert_eq!(
            snapshot.value.as_deref(),
            Some(&b"second"[..]),
            "a refused stale write changed the value"
        );
        assert_eq!(
            snapshot.fence,
            second.fence(),
            "the resource's fence is not the second holder's"
        );
        b.release(&second).await.unwrap();
    }

    /// A newer token is admitted and becomes the resource's fence.
    pub async fn storage_admits_newer_token(s: &Setup) {
        let st = &*s.storage;
        let key = key("newer");
        let (old, new) = successive_fences(&*s.backend, &key).await;
        st.write(&key, old, b"old").await.unwrap();
        st.write(&key, new, b"new").await.unwrap();
        let snapshot = peek(st, &key).await.unwrap();
        assert_eq!(
            snapshot,
            Snapshot {
                value: Some(b"new".to_vec()),
                fence: new
            },
            "the newer fence's write is not the resource's value and fence"
        );
    }

    /// An older token is refused, for reads and writes.
    pub async fn storage_refuses_older_token(s: &Setup) {
        let st = &*s.storage;
        let key = key("older");
        let (old, new) = successive_fences(&*s.backend, &key).await;
        st.write(&key, new, b"new").await.unwrap();
        assert_stale(st.write(&key, old, b"old").await, old, new);
        assert_stale(st.read(&key, old).await, old, new);
    }

    /// The same fence is admitted again and again: read, write, write, read.
    pub async fn storage_admits_same_token_same_owner(s: &Setup) {
        let st = &*s.storage;
        let key = key("same");
        let (_, fence) = successive_fences(&*s.backend, &key).await;
        assert_eq!(
            st.read(&key, fence).await.unwrap(),
            None,
            "a never-written resource reads back a value"
        );
        st.write(&key, fence, b"1").await.unwrap();
        st.write(&key, fence, b"2").await.unwrap();
        assert_eq!(
            st.read(&key, fence).await.unwrap().as_deref(),
            Some(&b"2"[..]),
            "a read under the same fence does not see its own last write"
        );
    }

    /// The same token from another owner is refused: equal tokens only pass for their owner.
    pub async fn storage_refuses_equal_token_other_owner(s: &Setup) {
        let st = &*s.storage;
        let key = key("equal");
        let (_, fence) = successive_fences(&*s.backend, &key).await;
        st.write(&key, fence, b"mine").await.unwrap();
        let impostor = Fence::new(fence.token, OwnerId::random());
        assert_stale(st.write(&key, impostor, b"theirs").await, impostor, fence);
        assert_stale(st.read(&key, impostor).await, impostor, fence);
    }

    /// Fenced reads close the lost-update window: A reads, B reads, A's write is refused.
    pub async fn fenced_reads_prevent_lost_update(s: &Setup) {
        let st = &*s.storage;
        let key = key("lost-update");
        let (a, b) = successive_fences(&*s.backend, &key).await;
        st.read(&key, a).await.unwrap();
        st.read(&key, b).await.unwrap();
        assert_stale(st.write(&key, a, b"a").await, a, b);
        st.write(&key, b, b"b").await.unwrap();
        assert_eq!(
            peek(st, &key).await.unwrap().value.as_deref(),
            Some(&b"b"[..]),
            "the admitted write is not the resource's value"
        );
    }

    /// A fenced read of a resource without a value still records the fence.
    pub async fn fenced_read_of_empty_resource_records_fence(s: &Setup) {
        let st = &*s.storage;
        let key = key("empty-read");
        let (old, new) = successive_fences(&*s.backend, &key).await;
        assert_eq!(
            peek(st, &key).await,
            None,
            "a never-touched resource has a snapshot"
        );
        assert_eq!(
            st.read(&key, new).await.unwrap(),
            None,
            "a never-written resource reads back a value"
        );
        assert_eq!(
            peek(st, &key).await,
            Some(Snapshot {
                value: None,
                fence: new
            }),
            "the fenced read did not record its fence"
        );
        assert_stale(st.write(&key, old, b"old").await, old, new);
    }

    /// A refused operation leaves value and fence exactly as they were.
    pub async fn refused_operation_changes_nothing(s: &Setup) {
        let st = &*s.storage;
        let key = key("unchanged");
        let (old, new) = successive_fences(&*s.backend, &key).await;
        st.write(&key, new, b"kept").await.unwrap();
        let before = peek(st, &key).await;
        assert!(
            st.write(&key, old, b"overwritten").await.is_err(),
            "a write with an older fence was admitted"
        );
        assert!(
            st.read(&key, old).await.is_err(),
            "a read with an older fence was admitted"
        );
        let impostor = Fence::new(new.token, OwnerId::random());
        assert!(
            st.write(&key, impostor, b"overwritten").await.is_err(),
            "a write with the current token from another owner was admitted"
        );
        assert_eq!(
            peek(st, &key).await,
            before,
            "a refused operation changed the resource"
        );
    }

    /// Values from 0 bytes to 1 MiB, with every byte value, round-trip unchanged.
    pub async fn values_from_empty_to_one_mib(s: &Setup) {
        let st = &*s.storage;
        let key = key("values");
        let (_, fence) = successive_fences(&*s.backend, &key).await;
        for len in [0usize, 1, 2, 255, 256, 4096, 65_537, 1 << 20] {
            let value: Vec<u8> = (0..len).map(|i| (i * 31 % 256) as u8).collect();
            st.write(&key, fence, &value).await.unwrap();
            assert_eq!(
                st.read(&key, fence).await.unwrap().as_deref(),
                Some(&value[..]),
                "len {len}"
            );
            assert_eq!(
                peek(st, &key).await.unwrap().value.as_deref(),
                Some(&value[..]),
                "peek does not show the {len}-byte value just written"
            );
        }
    }

    /// A value over the storage's maximum is `ValueTooLarge` and changes nothing.
    pub async fn oversized_value_is_refused(s: &Setup) {
        let st = &*s.storage;
        let key = key("oversized");
        let (_, fence) = successive_fences(&*s.backend, &key).await;
        let max = st.max_value_len();
        assert!(max >= 1 << 20, "the storage must accept at least 1 MiB");
        assert!(
            max <= 1 << 30,
            "max_value_len {max} is larger than any test can allocate"
        );
        match st.write(&key, fence, &vec![7u8; max + 1]).await {
            Err(Error::ValueTooLarge { size, max: m }) => assert_eq!(
                (size, m),
                (max + 1, max),
                "ValueTooLarge reports the wrong (size, max)"
            ),
            other => panic!("expected ValueTooLarge, got {other:?}"),
        }
        assert_eq!(
            peek(st, &key).await,
            None,
            "a refused write changed the resource"
        );
    }
});
