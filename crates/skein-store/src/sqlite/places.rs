/*!
The content places (crate::places) on SQLite: how many rows of one hold a
text (`skein verify --find`), and the live schema's columns.
*/

use super::SqliteStore;
use crate::error::Result;
use crate::places::{Place, Places, Stored};

impl Places for SqliteStore {
    fn rows_holding(&self, place: &Place, text: &str) -> Result<Option<u64>> {
        if !place.sqlite {
            return Ok(None);
        }
        let (table, column) = (place.table, place.column);
        let (sql, needle) = match place.stored {
            // The index's own query: the text's words, as a phrase.
            Stored::WordIndex => (
                format!("SELECT count(*) FROM {table} WHERE {table} MATCH ?1"),
                format!("\"{}\"", text.replace('"', "\"\"")),
            ),
            Stored::Text | Stored::Bytes => (
                format!(
                    "SELECT count(*) FROM {table}
                     WHERE instr(CAST({column} AS BLOB), CAST(?1 AS BLOB)) > 0"
                ),
                text.to_string(),
            ),
        };
        self.read(|conn| {
            Ok(Some(
                conn.query_row(&sql, [&needle], |row| row.get::<_, i64>(0))? as u64,
            ))
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    fn columns(&self) -> Result<Vec<(String, String)>> {
        self.read(|conn| {
            Ok(conn
                .prepare(
                    "SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c
                     WHERE m.type = 'table' ORDER BY 1, 2",
                )?
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?)
        })
    }
}
