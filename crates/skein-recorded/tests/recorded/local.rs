//! The local-model example end to end: SmolLM2 (greedy) and the MiniLM
//! embedder. Needs `skein models pull smollm2` and `skein models pull
//! minilm` (the setup script fetches both).

#[path = "../../examples/local_advisor.rs"]
mod local_advisor;

use skein_recorded::Verdict;

#[tokio::test]
async fn the_local_example_records_reruns_and_forks_deterministically() {
    let outcome = local_advisor::run().await.unwrap_or_else(|error| {
        panic!("{error} (fetch the models with `skein models pull smollm2` and `skein models pull minilm`)")
    });
    assert_eq!(outcome.chat.turns().len(), 2);
    assert!(outcome.explained.contains("minilm:all-MiniLM-L6-v2"));
    let rerun = &outcome.rerun;
    let removed = &rerun.removed[0];
    // Greedy decoding: the baseline repeats the recorded reply exactly, and
    // the probe's samples coincide, so the verdict is never inconclusive.
    let baseline = rerun.baseline.as_ref().unwrap();
    assert!(baseline.stable);
    assert!(baseline.samples.iter().all(|s| s.answer == rerun.original));
    assert!(
        rerun
            .samples
            .iter()
            .all(|s| s.answer == rerun.samples[0].answer)
    );
    assert!(matches!(
        rerun.verdict,
        Some(Verdict::Confirmed | Verdict::NotConfirmed)
    ));
    let system = rerun.samples[0].request.messages()[0].joined_text();
    let turn = outcome.chat.turn(1).unwrap();
    let source = turn.request().messages()[0]
        .parts
        .iter()
        .enumerate()
        .find(|(i, _)| {
            turn.annotations()
                .source_of(turn.request().nodes()[0].id(), *i as u32)
                == Some(removed.as_str())
        })
        .map(|(_, part)| part.as_text().unwrap().to_string())
        .unwrap();
    assert!(
        !system.contains(&source),
        "the probe lacks the removed source"
    );
    assert!(!outcome.fork_reply.is_empty());
}
