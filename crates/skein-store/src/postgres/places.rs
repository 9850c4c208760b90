/*!
The content places (crate::places) on PostgreSQL: how many rows of one hold a
text (`skein verify --find`), and the live schema's columns.
*/

use super::PgStore;
use crate::error::Result;
use crate::places::{Place, Places, Stored};

impl Places for PgStore {
    fn rows_holding(&self, place: &Place, text: &str) -> Result<Option<u64>> {
        if !place.postgres {
            return Ok(None);
        }
        let (table, column) = (place.table, place.column);
        let filter = match place.stored {
            Stored::Text => format!("strpos({column}, $1) > 0"),
            Stored::Bytes => format!("position(convert_to($1, 'UTF8') in {column}) > 0"),
            // The index's own query: the text's words, as a phrase.
            Stored::WordIndex => {
                format!("{column} @@ phraseto_tsquery('pg_catalog.simple', $1)")
            }
        };
        let sql = format!("SELECT count(*) FROM {table} WHERE {filter}");
        let rows: i64 =
            self.read(async |client| Ok(client.query_one(&sql, &[&text]).await?.get(0)))?;
        Ok(Some(rows as u64))
    }

    #[cfg(any(test, feature = "testkit"))]
    fn columns(&self) -> Result<Vec<(String, String)>> {
        let rows = self.read(async |client| {
            Ok(client
                .query(
                    "SELECT table_name::text, column_name::text FROM information_schema.columns
                     WHERE table_schema = current_schema() ORDER BY 1, 2",
                    &[],
                )
                .await?)
        })?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }
}
