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

    /// Whether this spec can be offered to a model: a name that is not
    /// empty and holds no whitespace or control characters, and an input
    /// schema that is a JSON object describing an object (its `type`, when
    /// given, is `"object"`). Every surface that takes a tool definition
    /// from a person (`skein replay --add-tool`, the web view's
    /// `add_tools`) checks it here.
    pub fn check(&self) -> Result<(), InvalidToolSpec> {
        if self.name.is_empty() {
            return Err(InvalidToolSpec::EmptyName);
        }
        if self
            .name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(InvalidToolSpec::BadName {
                name: self.name.clone(),
            });
        }
        let Value::Object(schema) = &self.input_schema else {
            return Err(InvalidToolSpec::SchemaNotObject {
                name: self.name.clone(),
                found: json_kind(&self.input_schema),
            });
        };
        match schema.get("type") {
            None => Ok(()),
            Some(Value::String(kind)) if kind == "object" => Ok(()),
            Some(other) => Err(InvalidToolSpec::SchemaTypeNotObject {
                name: self.name.clone(),
                found: canonical_json_string(other),
            }),
        }
    }
}

/// Why a tool spec cannot be offered ([`ToolSpec::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidToolSpec {
    #[error("the tool has an empty name: give it a name")]
    EmptyName,
    #[error(
        "the tool name {name:?} holds whitespace or control characters: use letters, digits, `_` or `-`"
    )]
    BadName { name: String },
    #[error(
        "the input_schema of tool `{name}` is {found}, not a JSON object: give a JSON Schema object such as {{\"type\": \"object\", \"properties\": {{…}}}}"
    )]
    SchemaNotObject { name: String, found: &'static str },
    #[error(
        "the input_schema of tool `{name}` has type {found}: a tool's arguments are an object, so its type is \"object\""
    )]
    SchemaTypeNotObject { name: String, found: String },
}

/// What kind of JSON value `value` is, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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
    fn check_refuses_empty_names_and_schemas_that_are_not_objects() {
        let schema = json!({"type": "object"});
        assert_eq!(ToolSpec::new("t", "d", schema.clone()).check(), Ok(()));
        assert_eq!(ToolSpec::new("t", "d", json!({})).check(), Ok(()));
        assert_eq!(
            ToolSpec::new("", "d", schema.clone()).check(),
            Err(InvalidToolSpec::EmptyName)
        );
        assert!(matches!(
            ToolSpec::new(" ", "d", schema).check(),
            Err(InvalidToolSpec::BadName { .. })
        ));
        assert!(matches!(
            ToolSpec::new("t", "d", json!("object")).check(),
            Err(InvalidToolSpec::SchemaNotObject {
                found: "a string",
                ..
            })
        ));
        assert!(matches!(
            ToolSpec::new("t", "d", json!({"type": "string"})).check(),
            Err(InvalidToolSpec::SchemaTypeNotObject { .. })
        ));
    }

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
