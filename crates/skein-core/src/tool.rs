/*!
Tool specs: what a model is told about a tool it may call.

A spec's hash identifies the exact tool offered (name, description, input
schema); its schema hash identifies only the input schema, which is what
schema-drift detection compares (a changed description is not drift). Both
hash a canonical JSON form (object keys sorted by code point, no whitespace),
so the same schema written with keys in another order hashes the same.
*/

use crate::id::Digest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool as offered to a model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema for the call's arguments.
    pub input_schema: Value,
}

impl ToolSpec {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }

    /// Stable hash of the whole spec.
    pub fn hash(&self) -> Digest {
        let mut text = String::from("skein/tool\u{1}");
        canonical_json(&Value::String(self.name.clone()), &mut text);
        text.push('\u{1}');
        canonical_json(&Value::String(self.description.clone()), &mut text);
        text.push('\u{1}');
        canonical_json(&self.input_schema, &mut text);
        Digest::of(text.as_bytes())
    }

    /// Stable hash of the input schema alone.
    pub fn schema_hash(&self) -> Digest {
        Digest::of(canonical_json_string(&self.input_schema).as_bytes())
    }
}

/// The canonical JSON text of a value.
pub fn canonical_json_string(value: &Value) -> String {
    let mut out = String::new();
    canonical_json(value, &mut out);
    out
}

fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_hashes() {
        let a: Value = serde_json::from_str(
            r#"{"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(r#"{ "properties": {"n":{"type":"integer"}, "q":{"type":"string"}}, "type": "object" }"#).unwrap();
        let ta = ToolSpec::new("search", "Search", a);
        let tb = ToolSpec::new("search", "Search", b);
        assert_eq!(ta.hash(), tb.hash());
        assert_eq!(ta.schema_hash(), tb.schema_hash());
    }

    #[test]
    fn description_changes_the_spec_hash_but_not_the_schema_hash() {
        let schema = json!({"type": "object"});
        let a = ToolSpec::new("t", "one", schema.clone());
        let b = ToolSpec::new("t", "two", schema);
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.schema_hash(), b.schema_hash());
    }

    #[test]
    fn schema_changes_change_both_hashes() {
        let a = ToolSpec::new("t", "d", json!({"properties": {"q": {"type": "string"}}}));
        let b = ToolSpec::new(
            "t",
            "d",
            json!({"properties": {"query": {"type": "string"}}}),
        );
        assert_ne!(a.hash(), b.hash());
        assert_ne!(a.schema_hash(), b.schema_hash());
    }

    #[test]
    fn canonical_json_sorts_nested_keys_without_whitespace() {
        let value = json!({"b": [1, {"d": true, "c": null}], "a": "x"});
        assert_eq!(
            canonical_json_string(&value),
            r#"{"a":"x","b":[1,{"c":null,"d":true}]}"#
        );
    }
}
