//! `BackendSpec` end to end: a spec parsed by the facade connects the backend and the storage
//! its URL names, on real servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_spec_keeps_data_on_its_storage_server() {
    use fencelock::spec::BackendSpec;
    use fencelock_redis::servers::RedisServer;

    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::spawn()).collect();
    let data = RedisServer::spawn();
    let hosts: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let storage: String = url::form_urlencoded::byte_serialize(data.url().as_bytes()).collect();
    let spec = format!("redlock://{}?storage={storage}", hosts.join(","));
    let connected = BackendSpec::parse(&spec).unwrap().connect().await.unwrap();
    assert_eq!(connected.backend.name(), "redlock");
    let key = fencelock::LockKey::new("spec/redlock").unwrap();
    let lease = connected
        .backend
        .try_acquire(&key, std::time::Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    connected
        .storage
        .write(&key, lease.fence(), b"v")
        .await
        .unwrap();
    assert!(connected.backend.release(&lease).await.unwrap());
    // The value went to the storage server, not to a lock node.
    let mut conn = redis::Client::open(data.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stored: Option<String> = redis::cmd("HGET")
        .arg("fencelock:{spec/redlock}:data")
        .arg("value")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Some("v"));
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_spec_connects_a_cluster() {
    use fencelock::spec::BackendSpec;
    use fencelock_redis::servers::RedisCluster;

    let cluster = tokio::task::spawn_blocking(|| RedisCluster::spawn(3, 0))
        .await
        .unwrap();
    let spec = BackendSpec::parse(&cluster.url()).unwrap();
    assert_eq!(spec.hosts().len(), 3);
    let connected = spec.connect().await.unwrap();
    assert_eq!(connected.backend.name(), "redis-cluster");
    // Keys spread over the masters; each one's lock, token and data share a slot.
    for name in ["spec/a", "spec/b", "spec/c", "spec/d"] {
        let key = fencelock::LockKey::new(name).unwrap();
        let lease = connected
            .backend
            .try_acquire(&key, std::time::Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        connected
            .storage
            .write(&key, lease.fence(), name.as_bytes())
            .await
            .unwrap();
        assert!(connected.backend.release(&lease).await.unwrap());
        let snapshot = connected.storage.peek(&key).await.unwrap().unwrap();
        assert_eq!(snapshot.value.as_deref(), Some(name.as_bytes()));
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_spec_connects_the_backend_it_names() {
    use fencelock::spec::BackendSpec;

    let base = std::env::var("FENCELOCK_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!("fl_spec_{:08x}", rand_suffix());
    for (kind, name) in [("lease", "pg-lease"), ("advisory", "pg-advisory")] {
        let spec = format!("{base}?backend={kind}&schema={schema}");
        let connected = BackendSpec::parse(&spec)
            .unwrap()
            .connect()
            .await
            .unwrap_or_else(|e| {
                panic!("connect to PostgreSQL at {base} (set FENCELOCK_PG_URL): {e}")
            });
        assert_eq!(connected.backend.name(), name);
    }
    let pool = sqlx::PgPool::connect(&base).await.unwrap();
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
}

#[cfg(feature = "postgres")]
fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ std::process::id())
        .unwrap_or_default()
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_spec_connects_lock_and_storage() {
    use fencelock::spec::BackendSpec;

    let url = std::env::var("FENCELOCK_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let connected = BackendSpec::parse(&url)
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connect to MariaDB/MySQL at {url} (start mariadbd or set FENCELOCK_MYSQL_URL): {e}"
            )
        });
    let key =
        fencelock::LockKey::new(format!("spec/mysql/{}", fencelock::OwnerId::random())).unwrap();
    let lease = connected
        .backend
        .try_acquire(&key, std::time::Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key is granted");
    connected
        .storage
        .write(&key, lease.fence(), b"v")
        .await
        .unwrap();
    assert!(connected.backend.release(&lease).await.unwrap());
    let snapshot = connected.storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"v"[..]));
}
