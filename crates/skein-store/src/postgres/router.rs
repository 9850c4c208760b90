/*!
Where a read goes: the primary (the store's URL) or a standby (its
`read_url`), with read-your-writes.

A store opened with a `read_url` hands out two kinds of handle
([`Route`]): the one it opens reads from the primary, as a store without a
standby does (a turn's own reads: the thread it continues, the head it
moves from); [`crate::Store::reads`] gives one whose reads go to the
standby, for listings, families, search and the web view's pages and event
stream, where a view a moment old is acceptable. Writes go to the primary
from either.

Read-your-writes: after each commit the primary's WAL position
(`pg_current_wal_lsn()`) is kept, the newest of this process's commits. A
standby read first makes sure the standby has replayed that far
(`pg_last_wal_replay_lsn()`), waiting up to [`REPLAY_WAIT`] while it
catches up, and otherwise reads from the primary (later reads needing no
more than a position already waited for in vain ask once, without
waiting). So a process sees its own
writes on either handle; another process's writes reach its standby reads
as fast as replication carries them (docs/postgres.md says how fast).
A server behind the read URL that is not in recovery (a primary, e.g. a
promoted standby, or a `prefer-standby` URL that fell back to one) has
everything it committed and is always caught up.
*/

use super::{Connection, Shared};
use crate::error::Result;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a standby read waits for the standby to replay this process's
/// last commit before reading from the primary instead.
pub(super) const REPLAY_WAIT: Duration = Duration::from_secs(2);
/// How often the standby's replay position is checked while waiting.
const REPLAY_POLL: Duration = Duration::from_millis(5);

/// Which server a handle's reads go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    Primary,
    Standby,
}

/// The standby (the `read_url`'s pool) and what is known of its progress.
pub(super) struct Standby {
    pub(super) connection: Connection,
    /// The WAL position the standby is known to have replayed.
    replayed: AtomicU64,
    /// The furthest position a read waited for in vain: reads needing no
    /// more than it check the standby once and do not wait again, so a
    /// standby far behind costs each read one question, not a wait.
    waited_for: AtomicU64,
}

/// The primary, the optional standby, and the WAL position of this
/// process's newest commit.
pub(super) struct Router {
    pub(super) primary: Connection,
    pub(super) standby: Option<Standby>,
    written: AtomicU64,
}

impl Router {
    pub(super) fn new(primary: Connection, standby: Option<Connection>) -> Router {
        Router {
            primary,
            standby: standby.map(|connection| Standby {
                connection,
                replayed: AtomicU64::new(0),
                waited_for: AtomicU64::new(0),
            }),
            written: AtomicU64::new(0),
        }
    }

    /// Whether commits must report their WAL position
    /// ([`Router::committed_at`]): only a standby reads it.
    pub(super) fn tracks_commits(&self) -> bool {
        self.standby.is_some()
    }

    /// A commit of this process ended at `lsn` on the primary.
    pub(super) fn committed_at(&self, lsn: u64) {
        self.written.fetch_max(lsn, Ordering::Relaxed);
    }

    /// The pool of `route`: the standby's when there is one.
    pub(super) fn connection(&self, route: Route) -> &Connection {
        match (&self.standby, route) {
            (Some(standby), Route::Standby) => &standby.connection,
            _ => &self.primary,
        }
    }
}

/// Where a read by a handle of `route` goes: the standby once it has
/// replayed this process's commits (waiting up to [`REPLAY_WAIT`]), else
/// the primary.
pub(super) async fn read_route(shared: &Arc<Shared>, route: Route) -> Route {
    let router = &shared.router;
    let Some(standby) = router.standby.as_ref().filter(|_| route == Route::Standby) else {
        return Route::Primary;
    };
    let needed = router.written.load(Ordering::Relaxed);
    if standby.replayed.load(Ordering::Relaxed) >= needed {
        return Route::Standby;
    }
    let waited_before = needed <= standby.waited_for.load(Ordering::Relaxed);
    let give_up = Instant::now()
        + if waited_before {
            Duration::ZERO
        } else {
            REPLAY_WAIT
        };
    loop {
        match replay_position(shared).await {
            Ok(replayed) => {
                standby.replayed.fetch_max(replayed, Ordering::Relaxed);
                if replayed >= needed {
                    return Route::Standby;
                }
            }
            // The standby cannot say: the primary can answer.
            Err(_) => return Route::Primary,
        }
        if Instant::now() >= give_up || super::sleep_anywhere(REPLAY_POLL).await.is_err() {
            standby.waited_for.fetch_max(needed, Ordering::Relaxed);
            return Route::Primary;
        }
    }
}

/// How far the server behind `connection` has replayed the primary's WAL;
/// `u64::MAX` for a server not in recovery, which has all it committed.
async fn replay_position(shared: &Arc<Shared>) -> Result<u64> {
    let client = super::checkout_anywhere(shared, Route::Standby).await?;
    let statement = client
        .prepare_cached("SELECT pg_last_wal_replay_lsn()::text")
        .await?;
    let row = client.query_one(&statement, &[]).await?;
    Ok(match row.get::<_, Option<&str>>(0) {
        Some(lsn) => parse_lsn(lsn).unwrap_or(0),
        None => u64::MAX,
    })
}

/// The primary's WAL position now, after a commit on `client`.
pub(super) async fn wal_position(client: &deadpool_postgres::Client) -> Result<u64> {
    let statement = client
        .prepare_cached("SELECT pg_current_wal_lsn()::text")
        .await?;
    let row = client.query_one(&statement, &[]).await?;
    Ok(parse_lsn(row.get(0)).unwrap_or(0))
}

/// A `pg_lsn` as text (`16/B374D848`: the high and low 32 bits in hex).
pub(super) fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    (high <= u64::from(u32::MAX) && low <= u64::from(u32::MAX)).then_some(high << 32 | low)
}

#[cfg(test)]
mod tests {
    use super::parse_lsn;

    #[test]
    fn wal_positions_compare_as_numbers() {
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert!(parse_lsn("1/0").unwrap() > parse_lsn("0/FFFFFFFF").unwrap());
        assert_eq!(parse_lsn("16B374D848"), None);
        assert_eq!(parse_lsn("x/1"), None);
    }
}
