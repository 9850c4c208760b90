//! Leases of a replay's turns: two workers share a replay on a model whose
//! every turn outlasts the lease its worker claimed it under, and each
//! turn is sent once (its worker renews the leases of the turns it holds,
//! the one running and those waiting their turn, so the other worker never
//! takes one over, and no worker takes back its own).

use crate::replay::{Desk, JUDGE, REPLACEMENT, scripted};
use futures_util::StreamExt;
use skein_core::{BoxStream, ModelRequest, NodeId, Provider, ProviderError, ReplayId, StreamEvent};
use skein_providers::Scripted;
use skein_recorded::replay::{ReplayPlan, Selection};
use skein_store::Store;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The lease the workers claim turns under: long enough that a heartbeat
/// (every third of it) late by a second on a loaded machine still renews
/// in time; each turn's first call waits about one lease.
const LEASE_MS: i64 = 3000;

/// The replacement model, slow: the first call of each replayed turn
/// answers only once the turn's lease was renewed past when it was due to
/// pass as the call started (the call outlasted that lease), or once the
/// turn changed hands, or once that lease has been over for a whole lease
/// without being renewed (without renewals, two workers' first calls would
/// otherwise wait on each other for ever). It counts the calls made on
/// each request.
struct Slow {
    inner: Scripted,
    /// The replay whose turns' leases it watches, once started.
    replay: OnceLock<(Store, ReplayId)>,
    /// Calls by the request's last message.
    calls: Mutex<HashMap<Option<NodeId>, usize>>,
    /// First calls that outlasted their turn's lease, the turn still held
    /// by the worker that sent them.
    outlasted: Arc<AtomicUsize>,
}

impl Slow {
    fn new() -> Arc<Slow> {
        Arc::new(Slow {
            inner: Scripted::from_toml_str(REPLACEMENT).unwrap(),
            replay: OnceLock::new(),
            calls: Mutex::new(HashMap::new()),
            outlasted: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn calls(&self) -> HashMap<Option<NodeId>, usize> {
        self.calls.lock().unwrap().clone()
    }
}

impl Provider for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let head = request.thread.head_id();
        let first = {
            let mut calls = self.calls.lock().unwrap();
            let count = calls.entry(head).or_default();
            *count += 1;
            *count == 1
        };
        let answer = self.inner.stream(request);
        let Some((store, id)) = self.replay.get().cloned().filter(|_| first) else {
            return answer;
        };
        let outlasted = self.outlasted.clone();
        Box::pin(
            futures_util::stream::once(async move {
                if outlast_lease(&store, &id, head).await {
                    outlasted.fetch_add(1, Ordering::SeqCst);
                }
                answer
            })
            .flatten(),
        )
    }
}

/// Wait until the lease of the turn of `id` whose request ends at `head`
/// (if any) is renewed past when it was due now, or the turn changes
/// hands, or that lease has been over for a lease; whether it was renewed
/// with the same worker holding the turn.
async fn outlast_lease(store: &Store, id: &ReplayId, head: Option<NodeId>) -> bool {
    let turn = || async {
        let turns = store
            .nonblocking()
            .replay_turns(id, None, 100)
            .await
            .unwrap();
        turns
            .into_iter()
            .find(|turn| Some(turn.request_node) == head)
    };
    let Some(claimed) = turn().await else {
        return false;
    };
    let due = claimed.lease_until_ms.expect("a running turn has a lease");
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = turn().await.expect("the turn is still there");
        if now.worker != claimed.worker {
            return false;
        }
        if now
            .lease_until_ms
            .is_none_or(|until| until >= due + LEASE_MS)
        {
            return now.lease_until_ms.is_some();
        }
        if skein_core::now_ms() >= due + 2 * LEASE_MS {
            return false;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_send_each_turn_once_on_a_model_slower_than_the_lease() {
    let slow = Slow::new();
    let desk = Desk::with(slow.clone(), scripted(JUDGE));
    let conversation = desk.record().await;
    // One turn at a time each, so a worker's other claimed turns wait
    // under lease while the first runs.
    let worker = || {
        desk.replayer()
            .lease(Duration::from_millis(LEASE_MS as u64))
            .concurrency(1)
    };
    let (first, second) = (worker(), worker());
    let id = first
        .start(
            &Selection::new().conversation(conversation),
            &ReplayPlan::new("new"),
        )
        .await
        .unwrap();
    slow.replay.set((desk.store.clone(), id.clone())).unwrap();
    let (a, b) = tokio::join!(first.run(&id, |_| {}), second.run(&id, |_| {}));
    let totals = a.unwrap();
    assert!(totals.finished() && b.unwrap().finished());
    assert_eq!((totals.done, totals.diverged), (2, 1), "{totals:?}");
    // No call was sent twice: the hotel's two calls, the weather's and the
    // flight's, though every turn's first call outlasted its lease.
    let calls = slow.calls();
    assert!(
        calls.values().all(|n| *n == 1),
        "a call sent again: {calls:?}"
    );
    assert_eq!(calls.len(), 4);
    assert_eq!(slow.outlasted.load(Ordering::SeqCst), 3);
    for turn in desk.turns(&id) {
        assert_eq!(turn.detail.get("reclaimed_from"), None, "{turn:?}");
    }
}
