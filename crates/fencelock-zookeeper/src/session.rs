//! The ZooKeeper session a backend and its storage share, and a new one after it ends.
//!
//! A connection loss within the session is the client's business: it reconnects (to another
//! member if need be) and the session, its ephemeral znodes and its watches live on. A session
//! that expires or is closed is gone for good: its `lost` token is cancelled at once (every
//! lease it carried is lost), and the next operation opens a new session.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Result};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::config::ZkConfig;
use crate::error::{BACKEND, mapped, within};
use crate::layout::Layout;

/// One ZooKeeper session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    /// Cancelled when the session expires or is closed.
    pub(crate) lost: CancellationToken,
}

impl Session {
    pub(crate) fn id(&self) -> i64 {
        self.client.session_id().0
    }

    /// The session timeout the server negotiated.
    pub(crate) fn timeout(&self) -> Duration {
        self.client.session_timeout()
    }
}

/// The current session of a config, replaced when it ends.
#[derive(Debug)]
pub(crate) struct Sessions {
    config: ZkConfig,
    pub(crate) layout: Layout,
    current: tokio::sync::Mutex<Arc<Session>>,
    /// The negotiated session timeout of the first session: the longest ttl.
    pub(crate) negotiated: Duration,
    /// How long one request may take before it is `Unavailable`.
    pub(crate) op_timeout: Duration,
}

impl Sessions {
    pub(crate) async fn open(config: ZkConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let layout = Layout::new(config.prefix_name());
        let session = connect(&config, &layout).await?;
        let negotiated = session.timeout();
        Ok(Arc::new(Sessions {
            op_timeout: op_timeout(config.session_timeout_value()),
            config,
            layout,
            current: tokio::sync::Mutex::new(session),
            negotiated,
        }))
    }

    pub(crate) fn config(&self) -> &ZkConfig {
        &self.config
    }

    /// The live session, a new one when the last ended.
    pub(crate) async fn get(&self) -> Result<Arc<Session>> {
        let mut current = self.current.lock().await;
        if current.lost.is_cancelled() {
            *current = connect(&self.config, &self.layout).await?;
        }
        Ok(current.clone())
    }

    /// The ACL of the znodes fencelock creates: creator-only with credentials, else open.
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        acls(&self.config)
    }
}

fn acls(config: &ZkConfig) -> zk::Acls<'static> {
    if config.digest().is_some() {
        zk::Acls::creator_all()
    } else {
        zk::Acls::anyone_all()
    }
}

/// With credentials, each node of fencelock's tree must be `user`'s alone: every entry of its
/// ACL the digest identity `user`. Otherwise (an entry for anyone, an address, another
/// identity: a tree created first without credentials, or by someone else) the refusal,
/// naming the node and the entry. Another identity's node could have its counters reset or
/// its fences lowered by that identity, so fencelock does not use it.
fn foreign_acl(path: &str, entries: &[zk::Acl], user: &str) -> Option<String> {
    let foreign = entries
        .iter()
        .find(|entry| entry.scheme() != "digest" || entry.id().split(':').next() != Some(user))?;
    Some(format!(
        "znode {path} lets {}:{} {} (its ACL), not only {user}: anyone it names could reset \
         tokens or lower fences under it. It was created without these credentials; delete \
         fencelock's tree, or set its ACL to digest:{user} only (setAcl -R), then connect again",
        foreign.scheme(),
        foreign.id(),
        foreign.permission()
    ))
}

/// A request answers within a third of the session timeout, between 1 s and 10 s: long
/// enough for the client to move to another member, short enough to say `Unavailable`
/// within a caller's wait.
fn op_timeout(session_timeout: Duration) -> Duration {
    (session_timeout / 3).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Connects over TLS when the config asks for it (every member), else over plain TCP.
#[cfg(feature = "tls")]
async fn connect_with(
    connector: zk::Connector,
    config: &ZkConfig,
) -> Result<zk::Client, zk::Error> {
    match config.tls_files() {
        Some(files) => {
            // Checked by `prepare_tls` before: the options build.
            let Ok(options) = crate::tls::options(files) else {
                return Err(zk::Error::BadArguments(&"TLS options"));
            };
            crate::tls::ensure_crypto_provider();
            connector
                .with_tls(options)
                .secure_connect(&config.connect_string())
                .await
        }
        None => connector.connect(&config.connect_string()).await,
    }
}

#[cfg(not(feature = "tls"))]
async fn connect_with(
    connector: zk::Connector,
    config: &ZkConfig,
) -> Result<zk::Client, zk::Error> {
    connector.connect(&config.connect_string()).await
}

/// Reads and checks the TLS files, so a bad one is `InvalidConfig` naming it.
fn prepare_tls(config: &ZkConfig) -> Result<()> {
    #[cfg(feature = "tls")]
    if let Some(files) = config.tls_files() {
        crate::tls::options(files)?;
    }
    let _ = config;
    Ok(())
}

async fn connect(config: &ZkConfig, layout: &Layout) -> Result<Arc<Session>> {
    config.validate()?;
    prepare_tls(config)?;
    let timeout = config.session_timeout_value();
    let mut connector = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_fail_eagerly();
    if let Some(digest) = config.digest() {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    let members = config.redacted_url();
    let limit = timeout.max(Duration::from_secs(2));
    let tls = config.tls_files().is_some();
    let client = within(limit, &format!("connect to {members}"), async {
        connect_with(connector, config).await
    })
    .await?
    .map_err(|e| match e {
        zk::Error::AuthFailed => {
            Error::config(format!("{BACKEND} refused the credentials of {members}"))
        }
        zk::Error::NoHosts | zk::Error::ConnectionLoss if tls => Error::Unavailable {
            backend: BACKEND,
            message: format!(
                "connect to {members}: no member completed a TLS handshake and a session \
                 ({e}): check that the ports serve TLS, that tls_ca signed the servers' \
                 certificates, and that these name the hosts of the URL"
            ),
            source: Some(Box::new(e)),
        },
        zk::Error::NoHosts => Error::Unavailable {
            backend: BACKEND,
            message: format!(
                "connect to {members}: no member opened a session ({e}): are they down, or \
                 are these TLS ports (then the URL needs tls=true&tls_ca=...)?"
            ),
            source: Some(Box::new(e)),
        },
        e => mapped(e, &format!("connect to {members}")),
    })?;
    if let Some(chroot) = config.chroot() {
        let exists = within(
            op_timeout(timeout),
            "check the chroot",
            client.check_stat("/"),
        )
        .await?
        .map_err(|e| mapped(e, "check the chroot"))?;
        if exists.is_none() {
            return Err(Error::config(format!(
                "the chroot {chroot} does not exist on {members}: create it first"
            )));
        }
    }
    let acls = acls(config);
    let options = zk::CreateMode::Persistent.with_acls(acls);
    let tree = [
        layout.root().to_owned(),
        layout.locks(),
        layout.data(),
        layout.clock(),
    ];
    for path in &tree {
        let created = within(op_timeout(timeout), "create fencelock's znodes", async {
            client.create(path, b"", &options).await
        })
        .await?;
        match created {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(mapped(e, &format!("create {path}"))),
        }
    }
    // With credentials, a node another identity created refuses us: say so at connect.
    within(
        op_timeout(timeout),
        "read fencelock's znodes",
        client.get_data(layout.root()),
    )
    .await?
    .map_err(|e| mapped(e, &format!("read {}", layout.root())))?;
    if config.password_exposed() {
        tracing::warn!(
            members = %members,
            "the ZooKeeper password crosses plain connections to members off this machine: \
             use tls=true&tls_ca=/path/ca.pem (DESIGN.md 8.5)"
        );
    }
    match config.digest_user() {
        Some(user) => {
            for path in &tree {
                let (entries, _) = within(
                    op_timeout(timeout),
                    "read the ACLs of fencelock's znodes",
                    client.get_acl(path),
                )
                .await?
                .map_err(|e| mapped(e, &format!("read the ACL of {path}")))?;
                if let Some(refusal) = foreign_acl(path, &entries, user) {
                    return Err(Error::config(format!("{refusal} on {members}")));
                }
            }
        }
        None => tracing::warn!(
            members = %members,
            "connected to ZooKeeper without credentials: the znodes fencelock creates are \
             world-writable, so anyone who reaches the ensemble can reset a key's tokens or \
             lower a fence; use zookeeper://user:password@... (DESIGN.md 8.5)"
        ),
    }
    let lost = CancellationToken::new();
    let mut states = client.state_watcher();
    let signal = lost.clone();
    tokio::spawn(async move {
        loop {
            if states.changed().await.is_terminated() {
                signal.cancel();
                return;
            }
        }
    });
    Ok(Arc::new(Session { client, lost }))
}
