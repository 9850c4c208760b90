/*!
Output contracts: a JSON Schema the final reply must satisfy. The reply text
must parse as JSON and validate; when it does not, the engine sends a
corrective follow-up quoting the errors (a repair), up to the profile's
number of attempts. Validators are compiled once per distinct schema.
*/

use crate::error::{EngineError, Result};
use serde_json::Value;
use skein_core::Message;
use skein_core::tool::canonical_json_string;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A compiled output contract.
pub(crate) struct Contract {
    pub(crate) schema: Value,
    validator: jsonschema::Validator,
}

/// Compiled contracts, by the canonical text of their schema.
#[derive(Default)]
pub(crate) struct Contracts {
    compiled: Mutex<HashMap<String, Arc<Contract>>>,
}

impl Contracts {
    pub(crate) fn get(&self, schema: &Value) -> Result<Arc<Contract>> {
        let key = canonical_json_string(schema);
        let mut compiled = self
            .compiled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(contract) = compiled.get(&key) {
            return Ok(contract.clone());
        }
        let validator = jsonschema::validator_for(schema)
            .map_err(|error| EngineError::InvalidContract(error.to_string()))?;
        let contract = Arc::new(Contract {
            schema: schema.clone(),
            validator,
        });
        compiled.insert(key, contract.clone());
        Ok(contract)
    }
}

impl Contract {
    /// The parsed value, or every reason the text fails the contract.
    pub(crate) fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let value: Value = serde_json::from_str(text.trim())
            .map_err(|error| vec![format!("the reply is not JSON: {error}")])?;
        self.check_value(&value)?;
        Ok(value)
    }

    /// Every reason `value` fails the schema.
    pub(crate) fn check_value(&self, value: &Value) -> Result<(), Vec<String>> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(value)
            .map(|error| {
                let path = error.instance_path().to_string();
                if path.is_empty() {
                    error.to_string()
                } else {
                    format!("at {path}: {error}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// The follow-up that asks for a corrected reply.
pub(crate) fn corrective_message(errors: &[String]) -> Message {
    let mut text = String::from("Your previous reply did not match the schema:\n");
    for error in errors {
        text.push_str("- ");
        text.push_str(error);
        text.push('\n');
    }
    text.push_str("Reply again with only a JSON value that satisfies the schema.");
    Message::user(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_replies_parse_and_invalid_ones_list_their_errors() {
        let contracts = Contracts::default();
        let schema = json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}});
        let contract = contracts.get(&schema).unwrap();
        assert_eq!(contract.check(" {\"answer\": 4} ").unwrap()["answer"], 4);
        let errors = contract.check("{\"answer\": \"four\"}").unwrap_err();
        assert!(errors[0].contains("/answer"), "{errors:?}");
        assert!(contract.check("four").unwrap_err()[0].contains("not JSON"));
        assert!(
            Arc::ptr_eq(&contract, &contracts.get(&schema).unwrap()),
            "compiled once"
        );
    }

    #[test]
    fn an_invalid_schema_is_a_typed_error() {
        let error = Contracts::default()
            .get(&json!({"type": "no-such-type"}))
            .err()
            .unwrap();
        assert!(matches!(error, EngineError::InvalidContract(_)), "{error}");
    }

    #[test]
    fn the_corrective_message_quotes_every_error() {
        let message = corrective_message(&["a".into(), "b".into()]);
        let text = message.joined_text();
        assert!(text.contains("did not match the schema") && text.contains("- a\n- b"));
    }
}
