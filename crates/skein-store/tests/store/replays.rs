//! Replays (schema migration 13), on both backends: a replay's record and
//! turns round trip (a replay comparing models with its rows keyed by
//! model, schema 24); workers claim turns under a lease, a passed lease
//! frees a turn for another worker (never for the worker holding it, whose
//! renewals keep it; a turn taken over says from whom), and a turn finishes (threads, runs and
//! row together) only while its worker holds it; totals and lookups by the
//! original turn; three workers on threads share a 300-turn replay after
//! one died holding turns, and every turn is finished exactly once; a
//! replay is found by a unique prefix of its id; replays are listed newest
//! first, a page at a time, each with its own totals.

use crate::common::{Backend, TempStore};
use skein_core::{Message, Thread};
use skein_store::{
    ConversationId, NewReplayTurn, Relation, ReplayId, ReplayRecord, ReplayState, ReplayStatus,
    ReplayTurnFinish, RunRecord, StoreError,
};

for_each_backend!(
    a_replay_and_its_turns_round_trip_and_start_pending,
    workers_claim_distinct_turns_and_a_passed_lease_frees_one,
    a_turn_finishes_with_its_threads_and_runs_only_while_held,
    a_worker_renews_its_leases_and_is_never_handed_back_its_own_turn,
    totals_count_statuses_and_decisions,
    three_workers_share_a_replay_and_a_dead_ones_turns_are_taken_over,
    a_replay_is_found_by_a_unique_prefix_of_its_id,
    replays_are_listed_newest_first_a_page_at_a_time_with_their_totals,
    a_conversations_replayed_answers_are_found_newest_first,
);

/// An original turn: a prompt and its answer, stored.
fn original(store: &skein_store::Store, n: usize) -> Thread {
    let thread = Thread::from_messages([
        Message::user(format!("question {n}")),
        Message::assistant(format!("answer {n}")),
    ]);
    store.append(&thread).unwrap();
    thread
}

fn new_turn(thread: &Thread) -> NewReplayTurn {
    NewReplayTurn {
        conversation: Some(ConversationId("c1".into())),
        turn_node: thread.head_id().unwrap(),
        request_node: thread.parent().head_id().unwrap(),
        compare: Vec::new(),
        model: None,
    }
}

/// A replay of `n` stored turns: its record and the original threads.
fn replay(store: &skein_store::Store, n: usize) -> (ReplayRecord, Vec<Thread>) {
    let originals: Vec<Thread> = (0..n).map(|i| original(store, i)).collect();
    let record = ReplayRecord {
        id: ReplayId::random(),
        selection: serde_json::json!({"conversations": ["c1"]}),
        change: serde_json::json!({"model": "other"}),
        model: "other".into(),
        settings: serde_json::json!({"compare": ["specifics"]}),
        turns: n as u64,
        created_ms: 5,
    };
    let turns: Vec<NewReplayTurn> = originals.iter().map(new_turn).collect();
    store.create_replay(&record, &turns).unwrap();
    (record, originals)
}

/// The model of the row `seq` of a replay comparing models `a` and `b`.
fn model_of(seq: usize) -> String {
    ["a", "b"][seq % 2].to_string()
}

fn a_replay_and_its_turns_round_trip_and_start_pending(backend: Backend) {
    let db = TempStore::new(backend);
    let (record, originals) = replay(&db.store, 3);
    // A replay comparing models: its rows keyed by model too, read back
    // and claimed with it.
    let originals_compared: Vec<Thread> = (3..5).map(|i| original(&db.store, i)).collect();
    let compared = ReplayRecord {
        id: ReplayId::random(),
        turns: 2,
        ..record.clone()
    };
    let rows: Vec<NewReplayTurn> = originals_compared
        .iter()
        .enumerate()
        .map(|(seq, thread)| NewReplayTurn {
            model: Some(model_of(seq)),
            ..new_turn(thread)
        })
        .collect();
    db.store.create_replay(&compared, &rows).unwrap();
    let read = db.store.replay_turns(&compared.id, None, 10).unwrap();
    let claimed = db
        .store
        .claim_replay_turns(&compared.id, "w", 10, 60_000)
        .unwrap();
    for turns in [&read, &claimed] {
        let models: Vec<Option<String>> = turns.iter().map(|t| t.model.clone()).collect();
        assert_eq!(models, [Some(model_of(0)), Some(model_of(1))]);
    }
    assert_eq!(db.store.replay(&record.id).unwrap(), record);
    let all = db.store.all_replays().unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.contains(&record) && all.contains(&compared));
    let turns = db.store.replay_turns(&record.id, None, 10).unwrap();
    assert_eq!(turns.len(), 3);
    for (seq, (turn, original)) in turns.iter().zip(&originals).enumerate() {
        assert_eq!(turn.seq, seq as u64);
        assert_eq!(turn.status, ReplayStatus::Pending);
        assert_eq!(turn.turn_node, original.head_id().unwrap());
        assert_eq!(turn.request_node, original.parent().head_id().unwrap());
        assert_eq!(turn.conversation, Some(ConversationId("c1".into())));
        assert_eq!(turn.model, None, "a replay on one model");
    }
    // Paged by seq.
    let rest = db.store.replay_turns(&record.id, Some(0), 1).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].seq, 1);
    assert!(matches!(
        db.store.replay(&ReplayId::random()),
        Err(StoreError::ReplayNotFound(_))
    ));
}

fn workers_claim_distinct_turns_and_a_passed_lease_frees_one(backend: Backend) {
    let db = TempStore::new(backend);
    let (record, _) = replay(&db.store, 3);
    let first = db
        .store
        .claim_replay_turns(&record.id, "w1", 2, 60_000)
        .unwrap();
    assert_eq!(first.iter().map(|t| t.seq).collect::<Vec<_>>(), vec![0, 1]);
    assert!(first.iter().all(|t| t.status == ReplayStatus::Running));
    assert!(first.iter().all(|t| t.worker.as_deref() == Some("w1")));
    // The second worker gets what is left, and then nothing.
    let second = db
        .store
        .claim_replay_turns(&record.id, "w2", 5, 60_000)
        .unwrap();
    assert_eq!(second.iter().map(|t| t.seq).collect::<Vec<_>>(), vec![2]);
    assert!(
        db.store
            .claim_replay_turns(&record.id, "w3", 5, 60_000)
            .unwrap()
            .is_empty()
    );
    // A claim whose lease has passed (a dead worker) goes to the next one.
    let (record2, _) = replay(&db.store, 1);
    let dead = db
        .store
        .claim_replay_turns(&record2.id, "dead", 1, -1)
        .unwrap();
    assert_eq!(dead.len(), 1);
    let taken = db
        .store
        .claim_replay_turns(&record2.id, "alive", 1, 60_000)
        .unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].worker.as_deref(), Some("alive"));
}

fn a_turn_finishes_with_its_threads_and_runs_only_while_held(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (record, originals) = replay(store, 1);
    // The first worker's lease passes; another claims the turn.
    store.claim_replay_turns(&record.id, "slow", 1, -1).unwrap();
    store
        .claim_replay_turns(&record.id, "fast", 1, 60_000)
        .unwrap();
    let answer = originals[0].parent().push(Message::assistant("replayed"));
    let mut run = RunRecord::new("other", "scripted");
    run.input_head = answer.parent().head_id();
    run.output_head = answer.head_id();
    run.relations.push(Relation::Replay(record.id.clone()));
    let mut judge = RunRecord::new("judge", "scripted");
    judge.input_head = answer.parent().head_id();
    let detail = serde_json::json!({"why": "a number changed"});
    let finish = |worker| ReplayTurnFinish {
        replay: &record.id,
        seq: 0,
        worker,
        status: ReplayStatus::Done,
        answer_head: answer.head_id(),
        decision: Some("changed"),
        comparator: Some("specifics"),
        detail: &detail,
        threads: std::slice::from_ref(&answer),
        runs: std::slice::from_ref(&run),
        other_runs: std::slice::from_ref(&judge),
    };
    // The worker that lost its claim writes nothing.
    assert!(matches!(
        store.finish_replay_turn(&finish("slow")),
        Err(StoreError::ReplayTurnLost { seq: 0, .. })
    ));
    assert!(!store.contains(answer.head_id().unwrap()).unwrap());
    for id in [&run.id, &judge.id] {
        assert!(matches!(
            store.run_record(id),
            Err(StoreError::RunNotFound(_))
        ));
    }
    // The one holding it writes the turn, its thread and its run together.
    store.finish_replay_turn(&finish("fast")).unwrap();
    assert!(store.contains(answer.head_id().unwrap()).unwrap());
    assert_eq!(
        store.run_record(&run.id).unwrap().relations,
        vec![Relation::Replay(record.id.clone())]
    );
    let turn = &store.replay_turns(&record.id, None, 1).unwrap()[0];
    assert_eq!(turn.status, ReplayStatus::Done);
    assert_eq!(turn.answer_head, answer.head_id());
    // The judge's run is stored with the turn, not among its runs.
    assert_eq!(turn.runs, vec![run.id.clone()]);
    assert!(store.run_record(&judge.id).is_ok());
    assert_eq!(turn.decision.as_deref(), Some("changed"));
    assert_eq!(turn.comparator.as_deref(), Some("specifics"));
    assert_eq!(turn.detail, detail);
    assert!(turn.finished_ms.is_some());
    assert_eq!(turn.lease_until_ms, None);
    // Found from the original turn.
    assert_eq!(
        store
            .replay_turns_of_node(originals[0].head_id().unwrap())
            .unwrap(),
        vec![turn.clone()]
    );
    // Finished is final: no worker claims it again, nor finishes it twice.
    assert!(
        store
            .claim_replay_turns(&record.id, "late", 1, -1)
            .unwrap()
            .is_empty()
    );
    let mut again = run.clone();
    again.id = skein_store::RunId::random();
    assert!(matches!(
        store.finish_replay_turn(&ReplayTurnFinish {
            runs: std::slice::from_ref(&again),
            other_runs: &[],
            ..finish("fast")
        }),
        Err(StoreError::ReplayTurnLost { .. })
    ));
    assert!(matches!(
        store.finish_replay_turn(&ReplayTurnFinish {
            status: ReplayStatus::Running,
            ..finish("fast")
        }),
        Err(StoreError::ReplayTurnNotFinal("running"))
    ));
    assert!(store.verify().unwrap().is_ok());
}

fn a_worker_renews_its_leases_and_is_never_handed_back_its_own_turn(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (record, _) = replay(store, 4);
    let id = &record.id;
    let seqs = |turns: &[skein_store::ReplayTurn]| turns.iter().map(|t| t.seq).collect::<Vec<_>>();
    // w1's leases on two turns have passed: it is still working on them,
    // so claiming again gives it only the others.
    assert_eq!(
        seqs(&store.claim_replay_turns(id, "w1", 2, -1).unwrap()),
        [0, 1]
    );
    assert_eq!(
        seqs(&store.claim_replay_turns(id, "w1", 1, -1).unwrap()),
        [2]
    );
    // One statement renews every turn w1 holds, and no other row.
    let before = skein_core::now_ms();
    assert_eq!(store.renew_replay_leases(id, "w1", 60_000).unwrap(), 3);
    let turns = store.replay_turns(id, None, 10).unwrap();
    for turn in &turns[..3] {
        assert_eq!(turn.status, ReplayStatus::Running);
        assert!(turn.lease_until_ms.unwrap() >= before + 60_000);
    }
    assert_eq!(turns[3].status, ReplayStatus::Pending);
    assert_eq!(turns[3].lease_until_ms, None);
    // Renewed, they are not another worker's to take either; a pending turn
    // claimed was taken from no one.
    let pending = store.claim_replay_turns(id, "w2", 5, 60_000).unwrap();
    assert_eq!(seqs(&pending), [3]);
    assert_eq!(pending[0].detail.get("reclaimed_from"), None);
    assert_eq!(store.renew_replay_leases(id, "nobody", 60_000).unwrap(), 0);
    // w1 stops renewing (its leases pass): w2 takes its turns over, and each
    // says from whom and how often it was taken.
    store.renew_replay_leases(id, "w1", -1).unwrap();
    let taken = store.claim_replay_turns(id, "w2", 5, 60_000).unwrap();
    assert_eq!(seqs(&taken), [0, 1, 2]);
    for turn in &taken {
        assert_eq!(turn.worker.as_deref(), Some("w2"));
        assert_eq!(turn.detail["reclaimed_from"], "w1");
        assert_eq!(turn.detail["reclaims"], 1);
    }
    // w1 renews nothing now, and w2's leases stay as w2 set them.
    assert_eq!(store.renew_replay_leases(id, "w1", 600_000).unwrap(), 0);
    let turns = store.replay_turns(id, None, 10).unwrap();
    assert!(
        turns
            .iter()
            .all(|t| t.lease_until_ms.unwrap() < before + 600_000)
    );
    // Taken over again: counted, from the last holder.
    store.renew_replay_leases(id, "w2", -1).unwrap();
    let again = store.claim_replay_turns(id, "w3", 1, 60_000).unwrap();
    assert_eq!(again[0].detail["reclaimed_from"], "w2");
    assert_eq!(again[0].detail["reclaims"], 2);
    // A finished turn is no longer renewed.
    store
        .finish_replay_turn(&ReplayTurnFinish {
            replay: id,
            seq: 0,
            worker: "w3",
            status: ReplayStatus::Failed,
            answer_head: None,
            decision: None,
            comparator: None,
            detail: &serde_json::json!({}),
            threads: &[],
            runs: &[],
            other_runs: &[],
        })
        .unwrap();
    assert_eq!(store.renew_replay_leases(id, "w3", 60_000).unwrap(), 0);
    assert_eq!(store.renew_replay_leases(id, "w2", 60_000).unwrap(), 3);
}

fn totals_count_statuses_and_decisions(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (record, originals) = replay(store, 4);
    let claimed = store
        .claim_replay_turns(&record.id, "w", 3, 60_000)
        .unwrap();
    let detail = serde_json::json!({});
    let outcomes = [
        (ReplayStatus::Done, Some("changed")),
        (ReplayStatus::Done, Some("held")),
        (ReplayStatus::Diverged, None),
    ];
    for (turn, (status, decision)) in claimed.iter().zip(outcomes) {
        store
            .finish_replay_turn(&ReplayTurnFinish {
                replay: &record.id,
                seq: turn.seq,
                worker: "w",
                status,
                answer_head: originals[turn.seq as usize].head_id(),
                decision,
                comparator: None,
                detail: &detail,
                threads: &[],
                runs: &[],
                other_runs: &[],
            })
            .unwrap();
    }
    let totals = store.replay_totals(&record.id).unwrap();
    assert_eq!(
        (totals.done, totals.changed, totals.held, totals.diverged),
        (2, 1, 1, 1)
    );
    assert_eq!((totals.pending, totals.running, totals.failed), (1, 0, 0));
    assert!(!totals.finished());
    // No worker holds the pending turn: stopped, waiting to be resumed.
    let now = skein_core::now_ms();
    assert_eq!(totals.state(now), ReplayState::Stopped);
    // Claimed, it runs while its lease holds, then is stopped again.
    store
        .claim_replay_turns(&record.id, "w", 1, 60_000)
        .unwrap();
    let totals = store.replay_totals(&record.id).unwrap();
    assert!(totals.lease_until_ms.unwrap() >= now + 60_000);
    assert_eq!(totals.state(now), ReplayState::Running);
    assert_eq!(totals.state(now + 120_000), ReplayState::Stopped);
    let listed = store.list_replays(None, 1).unwrap();
    assert_eq!(listed[0].totals, totals);
    store
        .finish_replay_turn(&ReplayTurnFinish {
            replay: &record.id,
            seq: 3,
            worker: "w",
            status: ReplayStatus::Failed,
            answer_head: None,
            decision: None,
            comparator: None,
            detail: &detail,
            threads: &[],
            runs: &[],
            other_runs: &[],
        })
        .unwrap();
    let totals = store.replay_totals(&record.id).unwrap();
    assert_eq!(totals.state(now), ReplayState::Finished);
}

/// Workers, turns, and how many turns the dying worker claims.
const WORKERS: usize = 3;
const SHARED_TURNS: usize = 300;
const DYING_CLAIMS: usize = 7;

/// Claim and finish turns one at a time until none is left, as `me`;
/// a worker that is to die claims `DYING_CLAIMS` turns (with a lease that
/// passes at once) and stops without finishing them. The seqs it finished.
fn work(store: &skein_store::Store, id: &ReplayId, me: String, dies: bool) -> Vec<u64> {
    let mut finished = Vec::new();
    let detail = serde_json::json!({});
    if dies {
        for _ in 0..DYING_CLAIMS {
            store.claim_replay_turns(id, &me, 1, -1).unwrap();
        }
        return finished;
    }
    loop {
        let claimed = store.claim_replay_turns(id, &me, 1, 60_000).unwrap();
        let Some(turn) = claimed.first() else {
            return finished;
        };
        let answer = Thread::from_messages([
            Message::user(format!("question {}", turn.seq)),
            Message::assistant(format!("replayed {}", turn.seq)),
        ]);
        let mut run = RunRecord::new("other", "scripted");
        run.input_head = answer.parent().head_id();
        run.output_head = answer.head_id();
        store
            .finish_replay_turn(&ReplayTurnFinish {
                replay: id,
                seq: turn.seq,
                worker: &me,
                status: ReplayStatus::Done,
                answer_head: answer.head_id(),
                decision: Some("held"),
                comparator: None,
                detail: &detail,
                threads: std::slice::from_ref(&answer),
                runs: std::slice::from_ref(&run),
                other_runs: &[],
            })
            .unwrap();
        finished.push(turn.seq);
    }
}

fn three_workers_share_a_replay_and_a_dead_ones_turns_are_taken_over(backend: Backend) {
    let db = TempStore::new(backend);
    let (record, _) = replay(&db.store, SHARED_TURNS);
    // A worker claims turns and dies before finishing them.
    assert!(work(&db.store, &record.id, "dead".into(), true).is_empty());
    let finished: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|n| {
                let store = db.reopen();
                let id = record.id.clone();
                scope.spawn(move || work(&store, &id, format!("w{n}"), false))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = finished.concat();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..SHARED_TURNS as u64).collect::<Vec<_>>(),
        "each turn once"
    );
    // The dead worker's turns (the first claimed) went to the others.
    assert!((0..DYING_CLAIMS as u64).all(|seq| all.contains(&seq)));
    let totals = db.store.replay_totals(&record.id).unwrap();
    assert_eq!(totals.done, SHARED_TURNS as u64);
    assert!(totals.finished());
    assert_eq!(
        db.count("runs"),
        SHARED_TURNS as i64,
        "one run per turn, none twice"
    );
}

fn a_replay_is_found_by_a_unique_prefix_of_its_id(backend: Backend) {
    let db = TempStore::new(backend);
    let originals = [original(&db.store, 0)];
    let template = ReplayRecord {
        id: ReplayId("0123".repeat(8)),
        selection: serde_json::json!({}),
        change: serde_json::json!({}),
        model: "other".into(),
        settings: serde_json::json!({}),
        turns: 1,
        created_ms: 5,
    };
    let ids = ["abc1".repeat(8), "abc2".repeat(8), template.id.0.clone()];
    for id in &ids {
        let record = ReplayRecord {
            id: ReplayId(id.clone()),
            ..template.clone()
        };
        db.store
            .create_replay(&record, &[new_turn(&originals[0])])
            .unwrap();
    }
    assert_eq!(db.store.resolve_replay("abc1").unwrap().0, ids[0]);
    assert_eq!(db.store.resolve_replay("ABC2ABC2").unwrap().0, ids[1]);
    assert_eq!(
        db.store.resolve_replay(template.id.short()).unwrap(),
        template.id
    );
    match db.store.resolve_replay("abc") {
        Err(StoreError::AmbiguousPrefix {
            kind: "replay",
            candidates,
            ..
        }) => assert_eq!(candidates, vec!["abc1abc1abc1", "abc2abc2abc2"]),
        other => panic!("expected an ambiguity, got {other:?}"),
    }
    assert!(matches!(
        db.store.resolve_replay("abc3"),
        Err(StoreError::UnknownPrefix { kind: "replay", .. })
    ));
    assert!(matches!(
        db.store.resolve_replay("not-hex"),
        Err(StoreError::NotAnId(_))
    ));
}

fn replays_are_listed_newest_first_a_page_at_a_time_with_their_totals(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    assert!(store.list_replays(None, 10).unwrap().is_empty());
    // Five replays of 1..=5 turns; two share a creation time (the id
    // breaks the tie), and the first turn of each is finished changed.
    let mut made = Vec::new();
    for (n, created_ms) in [(1, 10), (2, 20), (3, 20), (4, 30), (5, 40)] {
        let originals: Vec<Thread> = (0..n).map(|i| original(store, 10 * n + i)).collect();
        let record = ReplayRecord {
            id: ReplayId::random(),
            selection: serde_json::json!({}),
            change: serde_json::json!({}),
            model: "other".into(),
            settings: serde_json::json!({}),
            turns: n as u64,
            created_ms,
        };
        let turns: Vec<NewReplayTurn> = originals.iter().map(new_turn).collect();
        store.create_replay(&record, &turns).unwrap();
        let claimed = store
            .claim_replay_turns(&record.id, "w", 1, 60_000)
            .unwrap();
        store
            .finish_replay_turn(&ReplayTurnFinish {
                replay: &record.id,
                seq: claimed[0].seq,
                worker: "w",
                status: ReplayStatus::Done,
                answer_head: originals[0].head_id(),
                decision: Some("changed"),
                comparator: None,
                detail: &serde_json::json!({}),
                threads: &[],
                runs: &[],
                other_runs: &[],
            })
            .unwrap();
        made.push(record);
    }
    let mut expected: Vec<&ReplayRecord> = made.iter().collect();
    expected.sort_by(|a, b| (b.created_ms, &b.id.0).cmp(&(a.created_ms, &a.id.0)));
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_replays(after.as_ref(), 2).unwrap();
        assert!(page.len() <= 2);
        for listed in &page {
            let n = listed.record.turns;
            assert_eq!(
                (listed.totals.changed, listed.totals.pending),
                (1, n - 1),
                "replay of {n} turns: its own totals"
            );
            seen.push(listed.record.id.clone());
        }
        match page.last() {
            Some(last) if page.len() == 2 => after = Some(last.position()),
            _ => break,
        }
    }
    assert_eq!(
        seen,
        expected.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        "every replay once, newest first"
    );
}

fn a_conversations_replayed_answers_are_found_newest_first(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (record, originals) = replay(store, 3);
    let c1 = ConversationId("c1".into());
    assert!(
        store
            .replayed_in(std::slice::from_ref(&c1), 10)
            .unwrap()
            .is_empty(),
        "none answered yet"
    );
    let claimed = store
        .claim_replay_turns(&record.id, "w", 2, 60_000)
        .unwrap();
    for turn in &claimed {
        store
            .finish_replay_turn(&ReplayTurnFinish {
                replay: &record.id,
                seq: turn.seq,
                worker: "w",
                status: ReplayStatus::Done,
                answer_head: originals[turn.seq as usize].head_id(),
                decision: Some("held"),
                comparator: None,
                detail: &serde_json::json!({}),
                threads: &[],
                runs: &[],
                other_runs: &[],
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let found = store
        .replayed_in(&[c1.clone(), ConversationId("c9".into())], 10)
        .unwrap();
    assert_eq!(
        found.iter().map(|t| t.seq).collect::<Vec<_>>(),
        [claimed[1].seq, claimed[0].seq],
        "answered turns only, newest first"
    );
    assert_eq!(
        store
            .replayed_in(std::slice::from_ref(&c1), 1)
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .replayed_in(&[ConversationId("c9".into())], 10)
            .unwrap()
            .is_empty()
    );
    assert!(store.replayed_in(&[], 10).unwrap().is_empty());
}
