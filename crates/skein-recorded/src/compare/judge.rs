//! `judge` or `judge:MODEL`: a model asked, with a rubric, whether the
//! answers differ in a way that matters. Its call is a run of its own, kept
//! apart from the compared turn's usage; the model is always the caller's
//! ([`super::Comparison::judge`]).

use super::{Compare, Finding, Judgement, Kind, Means};
use crate::error::{RecordedError, Result};
use skein_conversation::Model;
use skein_conversation::service::TurnRequest;
use skein_core::{BoxFuture, Message, RunRecord, Thread};
use skein_engine::Request;
use std::sync::Arc;

/// The rubric a judge uses unless given one.
pub const DEFAULT_RUBRIC: &str = "Two answers to the same request are compared. They differ when \
     they state different facts, names, numbers, dates or conclusions, or when one does what was \
     asked and the other does not. Wording, tone and order do not matter.";

pub(super) const KIND: Kind = Kind {
    name: "judge",
    aliases: &[],
    usage: "judge[:MODEL]",
    about: "a model (the replay's judge, or MODEL) says the answers differ in a way that matters",
    parse: |argument| {
        let model = match argument {
            None => None,
            Some("") => {
                return Err("name the judging model: judge:MODEL".into());
            }
            Some(model) => Some(model.to_string()),
        };
        Ok(Arc::new(Judge {
            model,
            rubric: DEFAULT_RUBRIC.to_string(),
        }))
    },
};

/// A model judging with `rubric`: the one the comparison holds, which
/// `model` names when the spec did (`judge:MODEL`; `None` for `judge`, the
/// replay's judge).
struct Judge {
    model: Option<String>,
    rubric: String,
}

impl Compare for Judge {
    fn argument(&self) -> Option<String> {
        self.model.clone()
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn check(&self, spec: &str, means: &Means<'_>) -> Result<()> {
        match means.judge {
            Some(_) => Ok(()),
            None => Err(RecordedError::BadComparator {
                spec: spec.to_string(),
                why: "no judging model was given (the replay's judge: `--judge MODEL`, \
                      `ReplayPlan::judge`; or `judge:MODEL`)"
                    .into(),
            }),
        }
    }

    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        means: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        Box::pin(async move {
            let model = means.judge.expect("checked");
            let (judgement, call) = judge_answers(model, &self.rubric, original, candidate).await?;
            Ok(Finding {
                judge: Some(call),
                ..Finding::from(judgement)
            })
        })
    }
}

/// Ask `model` whether the answers differ, by `rubric`: its call is made
/// through the turn service and recorded by the caller, apart from the
/// compared turn.
async fn judge_answers(
    judge: &Model,
    rubric: &str,
    original: &str,
    candidate: &str,
) -> Result<(Judgement, (Thread, RunRecord))> {
    let prompt = format!(
        "{rubric}\n\nOriginal answer:\n<<<\n{original}\n>>>\n\nNew answer:\n<<<\n{candidate}\n>>>\n\n\
         Reply with CHANGED or HELD on the first line, then one sentence saying why."
    );
    let request = judge.bind(Request::messages([Message::user(prompt)]).capture());
    let done = TurnRequest::new(judge.engine(), request).call().await?;
    let model = judge.name();
    let text = done.output.text();
    let first = text.trim_start().to_ascii_uppercase();
    let changed = if first.starts_with("CHANGED") {
        true
    } else if first.starts_with("HELD") {
        false
    } else {
        return Err(RecordedError::JudgeUnclear {
            model: model.to_string(),
            answer: text.chars().take(200).collect(),
        });
    };
    let why = text
        .trim_start()
        .split_once('\n')
        .map_or("", |(_, rest)| rest)
        .trim()
        .to_string();
    let thread = done
        .output
        .exchange
        .as_ref()
        .map(|exchange| exchange.thread().clone())
        .unwrap_or_default();
    let record = done.output.record(None);
    Ok((
        Judgement {
            changed,
            why: if why.is_empty() {
                format!("the judge ({model}) said so")
            } else {
                format!("the judge ({model}): {why}")
            },
        },
        (thread, record),
    ))
}

