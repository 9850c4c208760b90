/*!
Throwaway schemas for tests and benchmarks: each gets a fresh, empty schema
in the database a base URL names, and a URL that opens a store inside it
(`options=-c search_path=...`). The schema is dropped with its handle, so a
developer's own server is left as it was found.
*/

use super::bridge;
use crate::error::{Result, StoreError};
use crate::location::redact;
use tokio_postgres::NoTls;

/// A schema that exists until this handle is dropped.
pub struct ScratchSchema {
    base: String,
    name: String,
    url: String,
}

impl ScratchSchema {
    /// Create a uniquely named empty schema in the database `base_url` names.
    pub fn create(base_url: &str) -> Result<ScratchSchema> {
        let name = format!("skein_test_{}", uuid::Uuid::new_v4().simple());
        execute(base_url, &format!("CREATE SCHEMA {name}"))?;
        let url = with_search_path(base_url, &name);
        Ok(ScratchSchema {
            base: base_url.to_string(),
            name,
            url,
        })
    }

    /// The URL a store opens to live in this schema.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `sql` inside the schema without opening a store there (which
    /// would create skein's tables), e.g. to plant another application's.
    pub fn execute(&self, sql: &str) -> Result<()> {
        execute(&self.url, sql)
    }

    /// Hold an `EXCLUSIVE` lock on `table` (reads go on, writes wait) in a
    /// transaction on a connection of its own, until the guard is dropped:
    /// for tests that pause a writer at a chosen statement.
    pub fn lock_table(&self, table: &str) -> Result<TableLock> {
        let sql = format!("BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE");
        bridge::block_on(|| async {
            let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await?;
            let driver = tokio::spawn(connection);
            client.batch_execute(&sql).await?;
            Ok(TableLock {
                client: Some(client),
                driver: Some(driver),
            })
        })
    }

    /// The tables in the schema, sorted.
    pub fn tables(&self) -> Result<Vec<String>> {
        let sql = format!(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = '{}' ORDER BY 1",
            self.name
        );
        bridge::block_on(|| async {
            let (client, connection) = tokio_postgres::connect(&self.base, NoTls).await?;
            let driver = tokio::spawn(connection);
            let rows = client.query(&sql, &[]).await;
            drop(client);
            let _ = driver.await;
            Ok(rows?.iter().map(|row| row.get(0)).collect())
        })
    }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
        if let Err(error) = execute(&self.base, &sql) {
            eprintln!("could not drop test schema {}: {error}", self.name);
        }
    }
}

/// A table lock held by [`ScratchSchema::lock_table`]; dropping it commits
/// the transaction and closes its connection.
pub struct TableLock {
    client: Option<tokio_postgres::Client>,
    driver: Option<tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>>,
}

impl Drop for TableLock {
    fn drop(&mut self) {
        let (Some(client), Some(driver)) = (self.client.take(), self.driver.take()) else {
            return;
        };
        let _ = bridge::block_on(|| async move {
            let result = client.batch_execute("COMMIT").await;
            drop(client);
            let _ = driver.await;
            Ok(result?)
        });
    }
}

/// `base_url` with `-c search_path=NAME` added to its server options (kept
/// beside any options it already sets, e.g. `-c synchronous_commit=off`).
fn with_search_path(base_url: &str, name: &str) -> String {
    let setting = format!("-c%20search_path%3D{name}");
    match base_url.find("options=") {
        Some(at) => {
            let (head, tail) = base_url.split_at(at + "options=".len());
            format!("{head}{setting}%20{tail}")
        }
        None => {
            let separator = if base_url.contains('?') { '&' } else { '?' };
            format!("{base_url}{separator}options={setting}")
        }
    }
}

/// Run `sql` on a connection of its own (not a store's pool).
fn execute(url: &str, sql: &str) -> Result<()> {
    bridge::block_on(|| async {
        let (client, connection) =
            tokio_postgres::connect(url, NoTls)
                .await
                .map_err(|error| StoreError::Unreachable {
                    location: redact(url),
                    reason: super::describe(&error),
                })?;
        let driver = tokio::spawn(connection);
        let result = client.batch_execute(sql).await;
        drop(client);
        let _ = driver.await;
        Ok(result?)
    })
}

#[cfg(test)]
mod tests {
    use super::with_search_path;

    #[test]
    fn the_schema_joins_the_url_s_own_options() {
        assert_eq!(
            with_search_path("postgres://h/db", "s1"),
            "postgres://h/db?options=-c%20search_path%3Ds1"
        );
        assert_eq!(
            with_search_path("postgres://h/db?connect_timeout=3", "s1"),
            "postgres://h/db?connect_timeout=3&options=-c%20search_path%3Ds1"
        );
        assert_eq!(
            with_search_path(
                "postgres://h/db?options=-c%20synchronous_commit%3Doff",
                "s1"
            ),
            "postgres://h/db?options=-c%20search_path%3Ds1%20-c%20synchronous_commit%3Doff"
        );
    }
}
