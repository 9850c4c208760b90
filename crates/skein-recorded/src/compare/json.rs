//! `json[:FIELD,FIELD]`: the JSON values differ, whole or at dotted paths
//! (the first JSON object or array in each answer, so fenced output works).

use super::{Compare, Finding, Judgement, Kind, Means, text_only};
use crate::error::Result;
use serde_json::Value;
use skein_core::BoxFuture;
use std::sync::Arc;

pub(super) const KIND: Kind = Kind {
    name: "json",
    aliases: &[],
    usage: "json[:FIELD,FIELD]",
    about: "the JSON values differ, whole or at the dotted paths named",
    parse: |argument| {
        let fields = argument
            .map(|fields| {
                fields
                    .split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Arc::new(Json { fields }))
    },
};

/// JSON values, whole (`fields` empty) or at dotted paths.
struct Json {
    fields: Vec<String>,
}

impl Compare for Json {
    fn argument(&self) -> Option<String> {
        (!self.fields.is_empty()).then(|| self.fields.join(","))
    }

    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        text_only(compare_json(&self.fields, original, candidate))
    }
}

fn compare_json(fields: &[String], original: &str, candidate: &str) -> Judgement {
    let (Some(a), Some(b)) = (json_in(original), json_in(candidate)) else {
        let which = match (json_in(original).is_some(), json_in(candidate).is_some()) {
            (false, false) => {
                return Judgement {
                    changed: original != candidate,
                    why: "neither answer holds JSON; compared as text".into(),
                };
            }
            (true, false) => "the replay holds no JSON",
            _ => "the original holds no JSON",
        };
        return Judgement {
            changed: true,
            why: which.into(),
        };
    };
    if fields.is_empty() {
        return Judgement {
            changed: a != b,
            why: if a == b {
                "equal JSON values".into()
            } else {
                "the JSON values differ".into()
            },
        };
    }
    let differing: Vec<&str> = fields
        .iter()
        .filter(|field| at_path(&a, field) != at_path(&b, field))
        .map(String::as_str)
        .collect();
    Judgement {
        changed: !differing.is_empty(),
        why: if differing.is_empty() {
            format!("equal at {}", fields.join(", "))
        } else {
            format!("differs at {}", differing.join(", "))
        },
    }
}

/// The JSON an answer holds: all of it, else its first object or array
/// (a fenced block, or JSON after a sentence).
fn json_in(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str(text.trim()) {
        return Some(value);
    }
    let start = text.find(['{', '['])?;
    let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    values.next()?.ok()
}

/// The value at a dotted path (`a.b.0`).
fn at_path<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |at, key| match at {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

