//! Forks: from a reply or from a rerun, with provenance enforced, and
//! first-class turns.

use crate::common::{Recording, advisor, advisor_chat, decision_changed, record_three};
use skein_recorded::{ReasonOptions, RecordedError, RerunId, RerunOptions, Verdict};

fn ignore_sentiment() -> RerunOptions {
    RerunOptions::ignore(["social-sentiment"])
        .comparator(decision_changed)
        .check_baseline()
}

#[tokio::test]
async fn a_fork_from_a_rerun_continues_the_counterfactual_and_carries_its_removals() {
    let model = Recording::new(advisor::model());
    let mut chat = advisor_chat(model.clone()).await;
    let before = (chat.history().head_id(), chat.turns().len());
    let rerun = chat.rerun_turn(1, ignore_sentiment()).await.unwrap();
    let mut fork = chat.fork(1, Some(&rerun)).await.unwrap();
    // History: the rerun's request then its answer; earlier turns intact.
    assert_eq!(fork.history(), &rerun.samples[0].thread);
    assert!(
        fork.history()
            .head()
            .unwrap()
            .message()
            .joined_text()
            .starts_with("HOLD")
    );
    let messages = fork.history().messages();
    assert_eq!(messages[1].joined_text(), chat.turn(0).unwrap().user_text());
    assert_eq!(messages[2], chat.turn(0).unwrap().reply());
    assert!(fork.removed().contains("social-sentiment"));
    assert_eq!(fork.origin().unwrap().rerun.as_ref(), Some(&rerun.id));
    assert!(
        fork.turns().is_empty(),
        "a fork's own turns are numbered from 0"
    );

    model.take();
    let turn = fork
        .send("How much should we allocate?")
        .await
        .unwrap()
        .clone();
    assert!(turn.text().starts_with("KEEP"));
    let sent = &model.take()[0];
    assert!(
        !sent.thread.messages()[0]
            .joined_text()
            .contains("social-sentiment"),
        "the removal carries into the fork's turns"
    );
    // The original chat never changed.
    assert_eq!((chat.history().head_id(), chat.turns().len()), before);
    assert!(chat.turn(2).unwrap().text().starts_with("ADD"));
}

#[tokio::test]
async fn a_fork_without_a_rerun_branches_from_the_original_reply() {
    let chat = advisor_chat(advisor::model()).await;
    let mut fork = chat.fork(1, None).await.unwrap();
    assert_eq!(fork.history(), chat.turn(1).unwrap().thread());
    assert!(fork.removed().is_empty());
    assert_eq!(fork.origin().unwrap().rerun, None);
    assert_eq!(
        fork.origin().unwrap().node,
        Some(chat.turn(1).unwrap().node())
    );
    let turn = fork.send("How much should we allocate?").await.unwrap();
    assert!(turn.text().starts_with("ADD"), "same history, same answer");
    assert_eq!(
        turn.request(),
        chat.turn(2).unwrap().request(),
        "equal histories, equal nodes"
    );
    assert!(matches!(
        chat.fork(5, None).await,
        Err(RecordedError::TurnOutOfRange { .. })
    ));
}

#[tokio::test]
async fn provenance_rejects_another_chats_another_turns_and_fabricated_reruns() {
    let mut chat = advisor_chat(advisor::model()).await;
    let mut other = advisor_chat(advisor::model()).await;
    let theirs = other.rerun_turn(1, ignore_sentiment()).await.unwrap();
    let error = chat.fork(1, Some(&theirs)).await.unwrap_err();
    assert!(matches!(error, RecordedError::Provenance { .. }));
    assert!(error.to_string().contains("another chat"), "{error}");

    let ours = chat.rerun_turn(1, ignore_sentiment()).await.unwrap();
    let error = chat.fork(0, Some(&ours)).await.unwrap_err();
    assert!(
        error.to_string().contains("re-ran turn 1, not turn 0"),
        "{error}"
    );

    let mut fabricated = ours.clone();
    fabricated.id = RerunId::random();
    let error = chat.fork(1, Some(&fabricated)).await.unwrap_err();
    assert!(error.to_string().contains("never produced it"), "{error}");

    // Same id, another answer swapped in: refused too.
    let mut tampered = ours.clone();
    tampered.samples[0] = chat
        .rerun_turn(1, RerunOptions::ignore(["analyst-note"]))
        .await
        .unwrap()
        .samples[0]
        .clone();
    let error = chat.fork(1, Some(&tampered)).await.unwrap_err();
    assert!(
        error.to_string().contains("not the one this chat recorded"),
        "{error}"
    );

    // A relabelled turn number is caught by the chat's own record.
    let mut relabelled = chat
        .rerun_turn(0, RerunOptions::ignore(["analyst-note"]))
        .await
        .unwrap();
    relabelled.turn = 1;
    let error = chat.fork(1, Some(&relabelled)).await.unwrap_err();
    assert!(matches!(error, RecordedError::Provenance { .. }), "{error}");

    chat.fork(1, Some(&ours)).await.unwrap();
}

#[tokio::test]
async fn fork_turns_are_first_class() {
    let mut chat = advisor_chat(advisor::model()).await;
    let rerun = chat.rerun_turn(1, ignore_sentiment()).await.unwrap();
    let mut fork = chat.fork(1, Some(&rerun)).await.unwrap();
    fork.send("How much should we allocate?").await.unwrap();
    fork.send("Should we BUY or HOLD this position?")
        .await
        .unwrap();
    let report = fork.reason(1, ReasonOptions::new()).await.unwrap();
    assert!(
        !report.removable().contains(&"social-sentiment"),
        "a removed source is not in the fork's requests"
    );
    let rerun = fork
        .rerun_turn(
            1,
            RerunOptions::ignore(["fundamentals"])
                .comparator(decision_changed)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert_eq!(rerun.verdict, Some(Verdict::NotConfirmed));
    assert_eq!(rerun.chat, fork.id());
    let mut grandchild = fork.fork(1, Some(&rerun)).await.unwrap();
    assert_eq!(
        grandchild.removed().iter().cloned().collect::<Vec<_>>(),
        ["fundamentals", "social-sentiment"]
    );
    let turn = grandchild
        .send("Should we BUY or HOLD this position?")
        .await
        .unwrap();
    let system = turn.request().messages()[0].joined_text();
    assert!(!system.contains("fundamentals:") && !system.contains("social-sentiment:"));
    assert!(system.contains("analyst-note:"));
}

#[tokio::test]
async fn a_seed_plus_removals_rehydrates_by_hand() {
    let chat = advisor_chat(advisor::model()).await;
    let model = Recording::new(advisor::model());
    let mut rehydrated = advisor::builder(model.clone())
        .seed(chat.turn(1).unwrap().thread().clone())
        .removed(["social-sentiment"])
        .build()
        .await
        .unwrap();
    let turn = rehydrated
        .send("Should we BUY or HOLD this position?")
        .await
        .unwrap();
    assert!(turn.text().starts_with("HOLD"));
    let system = model.take()[0].thread.messages()[0].joined_text();
    assert!(!system.contains("social-sentiment"));
    assert!(system.contains("fundamentals"));
}

/// A fork from a rerun keeps the system message (the system text and the
/// sources the rerun kept) for its later turns, whether the chat that forks
/// is the one that recorded the turn or one loaded back from the store
/// without its builder's layout (what `skein fork --from-rerun` does).
#[tokio::test]
async fn a_fork_from_a_rerun_keeps_the_system_message_less_the_removed_sources() {
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let model = Recording::new(advisor::model());
    let mut chat = advisor::builder(model.clone())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    record_three(&mut chat).await;
    let rerun = chat.rerun_turn(1, ignore_sentiment()).await.unwrap();
    let system_of_last_request = || {
        model
            .last()
            .thread
            .messages()
            .first()
            .map(|message| (message.role, message.joined_text()))
            .unwrap()
    };
    let check = |(role, text): (skein_core::Role, String)| {
        assert_eq!(role, skein_core::Role::System, "{text}");
        assert!(text.contains("You are an investment advisor."), "{text}");
        assert!(text.contains("fundamentals: revenue flat"), "{text}");
        assert!(!text.contains("social-sentiment"), "{text}");
    };

    let mut fork = chat.fork(1, Some(&rerun)).await.unwrap();
    fork.send("And now?").await.unwrap();
    check(system_of_last_request());

    let loaded =
        skein_recorded::RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
            .store(store.clone())
            .load(chat.conversation().unwrap())
            .await
            .unwrap();
    let mut fork = loaded.fork_from_rerun(&rerun.id).await.unwrap();
    fork.send("And now?").await.unwrap();
    check(system_of_last_request());
}

/// A `RerunResult` is plain data: a fork from one whose `removed` was
/// edited, emptied or widened would carry removals its rerun never made.
/// Refused in memory, and against the stored record after a restart.
#[tokio::test]
async fn provenance_checks_what_the_rerun_actually_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let in_memory = advisor_chat(advisor::model()).await;
    let mut stored = advisor::builder(advisor::model())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    record_three(&mut stored).await;
    let loaded = |store: skein_store::Store, cid| async move {
        advisor::builder(advisor::model())
            .store(store)
            .load(&cid)
            .await
            .unwrap()
    };
    let cid = stored.conversation().unwrap().clone();
    for (mut chat, restart) in [(in_memory, false), (stored, true)] {
        let rerun = chat.rerun_turn(1, ignore_sentiment()).await.unwrap();
        assert_eq!(rerun.removed, ["social-sentiment"]);
        // After a restart only the stored record knows what it removed.
        let chat = if restart {
            loaded(store.clone(), cid.clone()).await
        } else {
            chat
        };
        for (what, removed) in [
            ("edited", vec!["analyst-note"]),
            ("emptied", vec![]),
            ("widened", vec!["analyst-note", "social-sentiment"]),
        ] {
            let mut tampered = rerun.clone();
            tampered.removed = removed.into_iter().map(String::from).collect();
            let error = chat.fork(1, Some(&tampered)).await.unwrap_err();
            assert!(
                matches!(error, RecordedError::Provenance { .. }),
                "{what}: {error}"
            );
            assert!(
                error
                    .to_string()
                    .contains("but it removed [social-sentiment]"),
                "{what}: {error}"
            );
        }
        let fork = chat.fork(1, Some(&rerun)).await.unwrap();
        assert_eq!(
            fork.removed().iter().cloned().collect::<Vec<_>>(),
            ["social-sentiment"]
        );
    }
}
