//! A worker that holds a Redis lock while it works, stops the moment the lease is lost, and
//! fences every write, so even a write racing the loss cannot overwrite a newer holder's work.
//!
//! ```text
//! cargo run --example worker_until_lost --features redis [-- redis://127.0.0.1:6379]
//! ```

use std::sync::Arc;
use std::time::Duration;

use fencelock::redis::RedisConfig;
use fencelock::{Error, FencedStorageExt, Locker, Result};

#[tokio::main]
async fn main() -> Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let backend = RedisConfig::new(url).prefix("example").connect().await?;
    let storage = backend.storage();
    let locker = Locker::new(Arc::new(backend));
    let job = "reports/nightly";

    // The watchdog renews the 5 s lease every ~1.7 s while the guard lives.
    let guard = locker
        .lock(job)
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(30))
        .await?;
    let fence = guard.fence();
    let lost = guard.lost();
    let work = async {
        for step in 1..=5u32 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            // Refused with Error::Stale if a newer holder has written since.
            storage
                .write_key(job, fence, format!("step {step}").as_bytes())
                .await?;
            show(&format!("step {step} written under token {}", fence.token));
        }
        Ok::<_, Error>(())
    };
    tokio::select! {
        done = work => {
            done?;
            guard.release().await?;
            show("done, lock released");
        }
        reason = lost => show(&format!("stopped: lease lost ({reason})")),
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn show(line: &str) {
    println!("{line}");
}
