//! The seed's advisor scenario, run through the example itself.

use crate::common::{Recording, advisor};
use skein_recorded::Verdict;

#[tokio::test]
async fn the_advisor_example_flips_buy_to_hold_and_the_fork_keeps() {
    let model = Recording::new(advisor::model());
    let outcome = advisor::run(model.clone(), None).await.unwrap();
    assert!(outcome.chat.turn(1).unwrap().text().starts_with("BUY"));
    assert!(
        outcome
            .rerun
            .samples
            .iter()
            .all(|s| s.answer.starts_with("HOLD"))
    );
    assert_eq!(outcome.rerun.answer(), outcome.rerun.answers()[0]);
    assert_eq!(outcome.rerun.verdict, Some(Verdict::Confirmed));
    assert!(outcome.rerun.what_changed.answer_flipped);
    assert_eq!(outcome.rerun.what_changed.flips, 3);
    assert!(outcome.rerun.baseline.as_ref().unwrap().stable);
    assert!(
        outcome.original_allocation.starts_with("ADD"),
        "{}",
        outcome.original_allocation
    );
    assert!(
        outcome.fork_allocation.starts_with("KEEP"),
        "{}",
        outcome.fork_allocation
    );
    assert!(outcome.explained.contains("correlational"));
    assert!(
        outcome
            .explained
            .lines()
            .nth(3)
            .unwrap()
            .contains("social-sentiment"),
        "social-sentiment ranks first:\n{}",
        outcome.explained
    );
    // 3 turns + 3 probes + 3 baselines + 1 fork turn.
    assert_eq!(model.count(), 10);
    // The original chat is untouched by the fork.
    assert_eq!(outcome.chat.turns().len(), 3);
    assert!(outcome.chat.turn(2).unwrap().text().starts_with("ADD"));
    assert!(outcome.chat.removed().is_empty());
    assert!(outcome.fork.removed().contains("social-sentiment"));
}
