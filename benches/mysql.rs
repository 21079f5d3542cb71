//! fencelock's `GET_LOCK` backend and storage table next to raw `GET_LOCK` + `RELEASE_LOCK` on
//! the same server, every scenario of `fencelock-bench` in one run, from the MySQL crate's
//! own bench kit.
//!
//! `cargo bench --features mysql --bench mysql` (server: `FENCELOCK_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`). Groups are named `mysql/<scenario>`.

use fencelock::mysql::MySqlConfig;
use fencelock_bench::Suite;

fencelock_bench::define_bench!(mysql => async {
    let url = std::env::var("FENCELOCK_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    Ok((Suite::connect(&MySqlConfig::from_url(&url)?).await?, ()))
});
