/*!
Importing other tools' conversation data into a [`Store`](crate::Store).
An importer reads its source whole, checks it, maps it onto skein's records
and writes them in one transaction with `Store::import_records` (the batch
write JSONL import uses), so an import is all or nothing on both backends
and, with ids derived from the source's own, changes nothing when repeated.

- [`llm`]: the `llm` command-line tool's `logs.db` (0.3x).

```no_run
let store = skein::Store::open("skein.db")?;
let report = skein::import::llm::import(&store, std::path::Path::new("logs.db"))?;
println!("{} conversations", report.conversations);
# Ok::<(), skein::store::StoreError>(())
```
*/

pub mod llm;

pub use llm::LlmImportReport;
