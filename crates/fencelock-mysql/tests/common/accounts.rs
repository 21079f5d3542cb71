//! An installation deployed as DESIGN 8.3 says: made by an owner account that is not root,
//! used by an application account granted SELECT and EXECUTE on the database and DML on the
//! lease, queue and reader tables alone.

use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_core::OwnerId;
use fencelock_mysql::sqlx;
use fencelock_mysql::{MySqlConfig, MySqlDatabase};

use super::{Cleanup, admin, config, conformance_setup as common_setup, on_own_runtime, url};

/// The tables an application account writes itself (DESIGN 8.3's recipe).
pub(crate) const APP_WRITES: [&str; 3] = ["leases", "queue", "readers"];

/// The password of every account made here.
const PASSWORD: &str = "account-pass";

/// An owner and an application account of one installation, dropped with it.
pub(crate) struct Deployed {
    /// The owner account, which installed the prefix.
    pub(crate) owner: String,
    /// The application account.
    pub(crate) app: String,
    /// The installation's prefix.
    pub(crate) prefix: String,
    // Fields drop in order: the installation (as root), then the accounts.
    _cleanup: Cleanup,
    _accounts: Accounts,
}

impl Deployed {
    /// The config of `account` on the installation.
    pub(crate) fn config(&self, account: &str) -> MySqlConfig {
        let base = MySqlConfig::from_url(&url()).unwrap();
        let options = base.connect_options().unwrap();
        let host = options.get_host().to_owned();
        let port = options.get_port();
        let database = options.get_database().unwrap_or("test").to_owned();
        MySqlConfig::from_url(&format!(
            "mysql://{account}:{PASSWORD}@{host}:{port}/{database}"
        ))
        .unwrap()
        .prefix(&self.prefix)
    }

    /// The application account's config.
    pub(crate) fn app_config(&self) -> MySqlConfig {
        self.config(&self.app)
    }

    /// The owner's config.
    pub(crate) fn owner_config(&self) -> MySqlConfig {
        self.config(&self.owner)
    }
}

/// Accounts dropped when the guard is.
struct Accounts(Vec<String>);

impl Drop for Accounts {
    fn drop(&mut self) {
        let accounts = std::mem::take(&mut self.0);
        on_own_runtime(async move {
            let mut admin = admin().await;
            for account in accounts {
                for host in ["%", "localhost"] {
                    let drop = format!("DROP USER IF EXISTS '{account}'@'{host}'");
                    let _ = sqlx::query(&drop).execute(&mut admin).await;
                }
            }
            Some(())
        });
    }
}

async fn run(statements: &[String]) {
    let mut admin = admin().await;
    for sql in statements {
        sqlx::query(sql)
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// DESIGN 8.3's application recipe for `account` on the installation of `prefix`.
pub(crate) fn app_recipe(database: &str, prefix: &str, account: &str, host: &str) -> Vec<String> {
    let writes = APP_WRITES
        .iter()
        .map(|table| format!("{database}.{prefix}{table}"))
        .collect::<Vec<_>>();
    let mut recipe = vec![format!(
        "GRANT SELECT, EXECUTE ON {database}.* TO '{account}'@'{host}'"
    )];
    for table in writes {
        recipe.push(format!(
            "GRANT INSERT, UPDATE, DELETE ON {table} TO '{account}'@'{host}'"
        ));
    }
    recipe
}

/// A fresh installation made by a new owner account, and a new application account granted
/// [`app_recipe`].
pub(crate) async fn deployed(tag: &str) -> Deployed {
    let suffix = format!("{:08x}", OwnerId::random().as_u128() as u32);
    let (owner, app) = (format!("fl_own_{suffix}"), format!("fl_app_{suffix}"));
    let accounts = Accounts(vec![owner.clone(), app.clone()]);
    let root = config(tag);
    let prefix = root.prefix_name().to_owned();
    let database = root
        .connect_options()
        .unwrap()
        .get_database()
        .unwrap_or("test")
        .to_owned();
    let mut grants = Vec::new();
    for host in ["%", "localhost"] {
        grants.push(format!(
            "CREATE USER '{owner}'@'{host}' IDENTIFIED BY '{PASSWORD}'"
        ));
        grants.push(format!(
            "GRANT ALL PRIVILEGES ON {database}.* TO '{owner}'@'{host}'"
        ));
        grants.push(format!(
            "CREATE USER '{app}'@'{host}' IDENTIFIED BY '{PASSWORD}'"
        ));
    }
    run(&grants).await;
    let deployed = Deployed {
        owner,
        app,
        prefix,
        _cleanup: Cleanup::new(root),
        _accounts: accounts,
    };
    deployed
        .owner_config()
        .connect()
        .await
        .expect("the owner installs")
        .close()
        .await;
    let mut recipe = Vec::new();
    for host in ["%", "localhost"] {
        recipe.extend(app_recipe(&database, &deployed.prefix, &deployed.app, host));
    }
    run(&recipe).await;
    deployed
}

/// The conformance setup on the application account: the operator's `advance_token` goes
/// through the owner.
pub(crate) async fn app_setup() -> Setup {
    let deployed = deployed("a").await;
    let db: MySqlDatabase = deployed
        .app_config()
        .connect()
        .await
        .expect("the application account connects");
    let owner = deployed
        .owner_config()
        .connect()
        .await
        .expect("the owner connects");
    let reopen = deployed.app_config();
    common_setup(&db, reopen, deployed).with_operator(Arc::new(owner.lock_backend()))
}
