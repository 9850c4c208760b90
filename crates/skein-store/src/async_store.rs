/*!
[`AsyncStore`], the store's async API, reached through
[`Store::nonblocking`]: the same operations as [`Store`]'s, awaited. Every
blocking method of [`Store`] waits for one of these.

On PostgreSQL each operation is one async function awaiting tokio-postgres
on the caller's task: no thread blocks, no blocking pool is involved, and
an idle pooled connection is taken there too. The store's own runtime is
used only to make a new connection (its I/O task must outlive the caller's
runtime), to wait for a free one when all are in use, to time a write's
retry, and to read a thread's rows (so the caller is woken once, not per
batch of rows). On SQLite, whose work happens on the calling thread, each
operation runs where [`Store::run_blocking`] runs work.

Export, import and verify (bulk work of the command line) have no async
form: run them with [`Store::run_blocking`].

This file holds only the struct. Its operations live with their concern:
each `impl AsyncStore` block sits in the module (graph.rs,
conversations.rs, runs.rs, search.rs, labels.rs, ...) whose backend trait
the operation calls, next to the blocking [`Store`] form that waits for it.
*/

use crate::store::Store;

/// The async API of a [`Store`], borrowed from it by
/// [`Store::nonblocking`]. Dropping one of its futures before it ends
/// rolls back whatever transaction it had open.
#[derive(Clone, Copy, Debug)]
pub struct AsyncStore<'s> {
    pub(crate) store: &'s Store,
}
