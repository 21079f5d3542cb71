//! The watches a queued waiter waits on: deletions of the place ahead or the read phase, and
//! every change of the lock key (its deletion, or a put that hands the lock to the waiter), on
//! one stream, from the current revision on.

use etcd_client::{EventType, KeyValue, WatchFilterType, WatchOptions, WatchStream};

use crate::cluster::Shared;

/// Whether the open watches (`open`) cover every one of `wanted`.
pub(super) fn covered(wanted: &[(Vec<u8>, bool)], open: &[(Vec<u8>, bool)]) -> bool {
    wanted.iter().all(|target| open.contains(target))
}

/// What the watches reported.
pub(super) enum Watched {
    /// `key` was deleted at `revision`.
    Deleted { key: Vec<u8>, revision: i64 },
    /// A key watched whole (the lock key, a place) was put: the lock key when the release of
    /// its holder handed the lock to a waiter.
    Put(KeyValue),
    /// The watch ended without one (its stream broke, or the server cancelled it): look
    /// again.
    Ended,
}

/// Opens, on one stream, a watch of each of `targets`: a whole key (every change), or with its
/// flag every key under a prefix (deletions only), from the current revision on; with the
/// latest revision they start after. `None` when they could not be opened. Dropping the
/// stream ends the watches on the server.
pub(super) async fn open_watches(
    shared: &Shared,
    targets: &[(Vec<u8>, bool)],
) -> Option<(WatchStream, i64)> {
    let options = |prefix: bool| {
        if prefix {
            WatchOptions::new()
                .with_filters([WatchFilterType::NoPut])
                .with_prefix()
        } else {
            WatchOptions::new()
        }
    };
    let opened = async {
        let ((first, prefix), rest) = targets.split_first()?;
        let mut client = shared.client.watch_client();
        let mut stream = client
            .watch(first.clone(), Some(options(*prefix)))
            .await
            .ok()?;
        for (key, prefix) in rest {
            stream
                .watch(key.clone(), Some(options(*prefix)))
                .await
                .ok()?;
        }
        let (mut revision, mut created) = (0, 0);
        while created < targets.len() {
            let response = stream.message().await.ok()??;
            if response.canceled() {
                return None;
            }
            if response.created() {
                created += 1;
                revision = revision.max(response.header()?.revision());
            } else {
                // Events of a watch opened first, before the others were: the caller looks
                // again, whatever they were.
                revision = i64::MAX;
            }
        }
        Some((stream, revision))
    };
    tokio::time::timeout(shared.operation_timeout, opened)
        .await
        .ok()
        .flatten()
}

/// The next events the watches report, in order (`[Ended]` when the watch ended).
pub(super) async fn next_events(stream: &mut WatchStream) -> Vec<Watched> {
    loop {
        match stream.message().await {
            Ok(Some(response)) if response.canceled() => return vec![Watched::Ended],
            Ok(Some(response)) => {
                let events: Vec<Watched> = response
                    .events()
                    .iter()
                    .filter_map(|event| {
                        let kv = event.kv()?;
                        Some(match event.event_type() {
                            EventType::Delete => Watched::Deleted {
                                key: kv.key().to_vec(),
                                revision: kv.mod_revision(),
                            },
                            EventType::Put => Watched::Put(kv.clone()),
                        })
                    })
                    .collect();
                if !events.is_empty() {
                    return events;
                }
            }
            Ok(None) | Err(_) => return vec![Watched::Ended],
        }
    }
}
