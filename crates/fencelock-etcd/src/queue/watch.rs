//! The watches a queued waiter waits on: deletions of the place ahead, the lock key or the
//! read phase, on one stream, from the current revision on.

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchStream};

use crate::cluster::Shared;

/// Whether the open watches (`open`) cover every one of `wanted`.
pub(super) fn covered(wanted: &[(Vec<u8>, bool)], open: &[(Vec<u8>, bool)]) -> bool {
    wanted.iter().all(|target| open.contains(target))
}

/// How a watch for one deletion ended.
pub(super) enum Watched {
    /// `key` was deleted at `revision`.
    Deleted { key: Vec<u8>, revision: i64 },
    /// The watch ended without one (its stream broke, or the server cancelled it): look
    /// again.
    Ended,
}

/// Opens, on one stream, a watch for deletions of each of `targets` (a key, or with its flag
/// every key under a prefix) from the current revision on; with the latest revision they
/// start after. `None` when they could not be opened. Dropping the stream ends the watches
/// on the server.
pub(super) async fn open_watches(
    shared: &Shared,
    targets: &[(Vec<u8>, bool)],
) -> Option<(WatchStream, i64)> {
    let options = |prefix: bool| {
        let options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        if prefix {
            options.with_prefix()
        } else {
            options
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

/// The next deletion the watches report.
pub(super) async fn next_delete(stream: &mut WatchStream) -> Watched {
    loop {
        match stream.message().await {
            Ok(Some(response)) if response.canceled() => return Watched::Ended,
            Ok(Some(response)) => {
                let deleted = response
                    .events()
                    .iter()
                    .find(|event| event.event_type() == EventType::Delete)
                    .and_then(|event| event.kv());
                if let Some(kv) = deleted {
                    return Watched::Deleted {
                        key: kv.key().to_vec(),
                        revision: kv.mod_revision(),
                    };
                }
            }
            Ok(None) | Err(_) => return Watched::Ended,
        }
    }
}
