//! `FencedStorage` adapters over the application's own tables, fenced by `fencelock_admit` and
//! by the row guard, so the storage properties of the conformance suite check both.

use fencelock_core::{
    Fence, FencedStorage, LockKey, Result, Snapshot, async_trait, validate_value,
};
use fencelock_postgres::{FenceParams, PgFence, map_sqlx_error};
use sqlx::PgPool;

/// Values up to 16 MiB, as `PgStorage` accepts.
const MAX_VALUE: usize = 16 << 20;

fn sql(e: sqlx::Error) -> fencelock_core::Error {
    map_sqlx_error("app", e)
}

/// The application's table `admit_values (resource, value)` fenced per resource: every
/// operation is one transaction that calls `fencelock_admit` first.
#[derive(Debug, Clone)]
pub struct AdmitStorage {
    pool: PgPool,
    fence: PgFence,
}

impl AdmitStorage {
    /// Creates the table in the pool's `search_path` schema.
    pub async fn create(pool: PgPool, fence: PgFence) -> Self {
        sqlx::query("CREATE TABLE admit_values (resource text PRIMARY KEY, value bytea)")
            .execute(&pool)
            .await
            .unwrap();
        AdmitStorage { pool, fence }
    }
}

#[async_trait]
impl FencedStorage for AdmitStorage {
    fn name(&self) -> &'static str {
        "app-admit"
    }

    fn max_value_len(&self) -> usize {
        MAX_VALUE
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let mut tx = self.pool.begin().await.map_err(sql)?;
        self.fence.admit(&mut *tx, resource, fence).await?;
        let value: Option<Option<Vec<u8>>> =
            sqlx::query_scalar("SELECT value FROM admit_values WHERE resource = $1")
                .bind(resource.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(sql)?;
        tx.commit().await.map_err(sql)?;
        Ok(value.flatten())
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, MAX_VALUE)?;
        let mut tx = self.pool.begin().await.map_err(sql)?;
        self.fence.admit(&mut *tx, resource, fence).await?;
        sqlx::query(
            "INSERT INTO admit_values (resource, value) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(resource.as_str())
        .bind(value)
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
        tx.commit().await.map_err(sql)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let Some(fence) = self.fence.current(&self.pool, resource).await? else {
            return Ok(None);
        };
        let value: Option<Option<Vec<u8>>> =
            sqlx::query_scalar("SELECT value FROM admit_values WHERE resource = $1")
                .bind(resource.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(sql)?;
        Ok(Some(Snapshot {
            value: value.flatten(),
            fence,
        }))
    }
}

/// The application's table `guarded_values (resource, value, fence_token, fence_owner)` under
/// the row guard: every operation is one plain statement that sets the fence columns.
#[derive(Debug, Clone)]
pub struct RowGuardStorage {
    pool: PgPool,
}

impl RowGuardStorage {
    /// Creates the table in the pool's `search_path` schema and guards it.
    pub async fn create(pool: PgPool, fence: &PgFence) -> Self {
        sqlx::query(
            "CREATE TABLE guarded_values (resource text PRIMARY KEY, value bytea, \
             fence_token bigint, fence_owner bytea)",
        )
        .execute(&pool)
        .await
        .unwrap();
        fence.guard_table(&pool, "guarded_values").await.unwrap();
        RowGuardStorage { pool }
    }
}

#[async_trait]
impl FencedStorage for RowGuardStorage {
    fn name(&self) -> &'static str {
        "app-row-guard"
    }

    fn max_value_len(&self) -> usize {
        MAX_VALUE
    }

    /// The fenced read of a guarded row: a statement that only advances the row's fence and
    /// returns the row (creating it, value NULL, when it does not exist yet).
    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let p = FenceParams::try_from(fence)?;
        let value: Option<Vec<u8>> = sqlx::query_scalar(
            "INSERT INTO guarded_values (resource, fence_token, fence_owner) VALUES ($1, $2, $3) \
             ON CONFLICT (resource) DO UPDATE \
             SET fence_token = EXCLUDED.fence_token, fence_owner = EXCLUDED.fence_owner \
             RETURNING value",
        )
        .bind(resource.as_str())
        .bind(p.token)
        .bind(p.owner)
        .fetch_one(&self.pool)
        .await
        .map_err(sql)?;
        Ok(value)
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, MAX_VALUE)?;
        let p = FenceParams::try_from(fence)?;
        sqlx::query(
            "INSERT INTO guarded_values (resource, value, fence_token, fence_owner) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, \
             fence_token = EXCLUDED.fence_token, fence_owner = EXCLUDED.fence_owner",
        )
        .bind(resource.as_str())
        .bind(value)
        .bind(p.token)
        .bind(p.owner)
        .execute(&self.pool)
        .await
        .map_err(sql)
        .map(drop)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let row: Option<(Option<Vec<u8>>, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT value, fence_token, fence_owner FROM guarded_values WHERE resource = $1",
        )
        .bind(resource.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(sql)?;
        row.map(|(value, token, owner)| {
            Ok(Snapshot {
                value,
                fence: FenceParams::from_columns(token, &owner)?,
            })
        })
        .transpose()
    }
}
