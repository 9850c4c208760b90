/*!
What the database did for the calls made through a store, counted rather
than timed: statements run and rows they returned. Tests state what a load,
a turn or a fork may cost as functions of depth and history with these
counts, which do not depend on how busy the machine is
([`crate::Store::meter`]).

SQLite counts through its trace hook (`sqlite3_trace_v2`: a statement's
start, each row it returns) on every connection of the store, counting the
statements skein runs and leaving out those SQLite runs inside them (its
reads of the schema on a connection's first use, the full-text index's
periodic segment merges), so the counts of an operation do not depend on
which pooled connection ran it or on when the index last merged.
PostgreSQL offers no per-connection equivalent here; its operations run the
same statements, so the counts taken on SQLite stand for both.
*/

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of one store's database work, from when it was metered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Statements started (a statement stepped through its rows counts
    /// once; triggers count as statements of their own).
    pub statements: u64,
    /// Rows statements returned.
    pub rows: u64,
}

impl std::ops::Sub for Costs {
    type Output = Costs;

    fn sub(self, earlier: Costs) -> Costs {
        Costs {
            statements: self.statements - earlier.statements,
            rows: self.rows - earlier.rows,
        }
    }
}

impl fmt::Display for Costs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} statements, {} rows", self.statements, self.rows)
    }
}

/// The running counts of a metered store. Cheap to clone; every clone
/// reads the same counts.
#[derive(Clone, Debug, Default)]
pub struct CostMeter {
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    statements: AtomicU64,
    rows: AtomicU64,
}

impl CostMeter {
    /// The counts so far.
    pub fn read(&self) -> Costs {
        Costs {
            statements: self.counts.statements.load(Ordering::Relaxed),
            rows: self.counts.rows.load(Ordering::Relaxed),
        }
    }

    /// Run `work` and return what it cost with its result. Only meaningful
    /// while nothing else uses the store.
    pub fn measure<T>(&self, work: impl FnOnce() -> T) -> (T, Costs) {
        let before = self.read();
        let value = work();
        (value, self.read() - before)
    }

    /// [`CostMeter::measure`] for async work.
    pub async fn measure_async<T>(&self, work: impl Future<Output = T>) -> (T, Costs) {
        let before = self.read();
        let value = work.await;
        (value, self.read() - before)
    }

    pub(crate) fn statement(&self) {
        self.counts.statements.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn row(&self) {
        self.counts.rows.fetch_add(1, Ordering::Relaxed);
    }
}
