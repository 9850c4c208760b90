//! Where each embedder stands under the default comparison (`specifics`,
//! then `embedding` at the default threshold), as a table of answer pairs:
//! a paraphrase with the same facts holds; a changed name, number, date or
//! a negation changes. The lexical embedder sees words, so a paraphrase
//! may read as changed where MiniLM, which sees meaning, holds it: that is
//! why `embed::choose` prefers MiniLM wherever it is on the machine (the
//! setup script fetches it for the tests, as `skein models pull minilm`
//! does for users).

use skein_recorded::compare::Comparison;
use skein_recorded::embed::{self, Embedder};
use std::sync::Arc;

/// (original, replayed, changed?, held by the lexical embedder as well?)
const PAIRS: &[(&str, &str, bool, bool)] = &[
    (
        "In Paris it is sunny, 21 C.",
        "Paris weather: sunny, 21 C.",
        false,
        false,
    ),
    (
        "The meeting with Alice is on 2026-03-04 at the office.",
        "Alice's meeting takes place at the office on 2026-03-04.",
        false,
        false,
    ),
    (
        "The invoice total is 420 euros.",
        "The invoice total is 420 euros.",
        false,
        true,
    ),
    (
        "The invoice total is 420 euros.",
        "The invoice total is 240 euros.",
        true,
        true,
    ),
    (
        "Ship it to Alice in Lyon.",
        "Ship it to Bob in Lyon.",
        true,
        true,
    ),
    (
        "The deadline is 2026-03-04.",
        "The deadline is 2026-04-03.",
        true,
        true,
    ),
    (
        "Yes, the flight is refundable.",
        "No, the flight is not refundable.",
        true,
        true,
    ),
];

async fn verdicts(embedder: Arc<dyn Embedder>) -> Vec<(bool, String)> {
    let comparison = Comparison::default_for(Some(embedder));
    let mut out = Vec::new();
    for (original, replayed, _, _) in PAIRS {
        let decision = comparison.decide(original, replayed).await.unwrap();
        out.push((decision.changed, decision.why));
    }
    out
}

#[tokio::test]
async fn minilm_holds_paraphrases_and_changes_names_numbers_dates_and_negations() {
    let chosen = embed::choose(None).unwrap();
    assert!(
        chosen.fallback.is_none(),
        "MiniLM is not on this machine (`skein models pull minilm`): {:?}",
        chosen.fallback
    );
    for ((original, replayed, changed, _), (decided, why)) in
        PAIRS.iter().zip(verdicts(chosen.embedder).await)
    {
        assert_eq!(decided, *changed, "{original:?} → {replayed:?}: {why}");
    }
}

#[tokio::test]
async fn the_lexical_embedder_changes_what_changed_but_may_miss_a_paraphrase() {
    let lexical = embed::choose(Some("lexical")).unwrap().embedder;
    let mut paraphrases_missed = 0;
    for ((original, replayed, changed, lexical_holds), (decided, why)) in
        PAIRS.iter().zip(verdicts(lexical).await)
    {
        if *changed {
            assert!(decided, "{original:?} → {replayed:?}: {why}");
        } else if *lexical_holds {
            assert!(!decided, "{original:?} → {replayed:?}: {why}");
        } else if decided {
            assert!(
                why.contains("lexical"),
                "the reason names the embedder: {why}"
            );
            paraphrases_missed += 1;
        }
    }
    assert!(
        paraphrases_missed > 0,
        "the table should show where the lexical embedder stands"
    );
}

#[test]
fn an_unknown_embedder_is_refused_by_name() {
    let error = embed::choose(Some("bert")).err().unwrap();
    assert_eq!(
        error.to_string(),
        "unknown embedder `bert`: use `minilm` or `lexical`"
    );
}
