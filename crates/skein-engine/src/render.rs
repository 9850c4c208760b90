/*!
Rendering prompts: every message template and session-id template of the
catalog is compiled once, when the engine is built; rendering checks the
request's variables against the prompt's declarations, reads the prompt's
artifact files, carries each message's cache hint onto its text part, and
fails on any undefined value (a template that uses an
undeclared variable is an error, not an empty string).
*/

use crate::config::{Catalog, PromptDef};
use crate::error::{EngineError, Result};
use crate::request::RequestMessage;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};
use skein_core::{Annotation, Message};
use std::path::Path;

/// The compiled templates of a catalog.
pub(crate) struct Renderer {
    env: Environment<'static>,
}

fn message_key(prompt: &PromptDef, index: usize) -> String {
    format!("{}@{}#{index}", prompt.id, prompt.version)
}

fn session_key(prompt: &PromptDef) -> String {
    format!("{}@{}#session", prompt.id, prompt.version)
}

impl Renderer {
    /// Compile every template; a syntax error names the prompt and message.
    pub(crate) fn new(catalog: &Catalog) -> Result<Renderer> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        for versions in catalog.prompts.values() {
            for prompt in versions.values() {
                let load_error = |what: String, error: minijinja::Error| EngineError::PromptLoad {
                    file: catalog.prompt_dir(&prompt.id, prompt.version).cloned(),
                    key: Some(format!("{}@{}: {what}", prompt.id, prompt.version)),
                    problem: error.to_string(),
                };
                for (index, message) in prompt.messages.iter().enumerate() {
                    env.add_template_owned(message_key(prompt, index), message.template.clone())
                        .map_err(|error| load_error(format!("messages[{index}]"), error))?;
                }
                if let Some(template) = &prompt.session_id {
                    env.add_template_owned(session_key(prompt), template.clone())
                        .map_err(|error| load_error("session_id".into(), error))?;
                }
            }
        }
        Ok(Renderer { env })
    }

    /// The prompt's messages, rendered with `variables` and its artifacts,
    /// each with the annotations of its one text part (a cache hint).
    pub(crate) fn messages(
        &self,
        prompt: &PromptDef,
        dir: Option<&Path>,
        variables: &Map<String, Value>,
    ) -> Result<Vec<RequestMessage>> {
        let context = self.context(prompt, dir, variables)?;
        prompt
            .messages
            .iter()
            .enumerate()
            .map(|(index, message)| {
                let text = self.render(&message_key(prompt, index), &context, || {
                    format!(
                        "message {index} of prompt `{}` (version {})",
                        prompt.id, prompt.version
                    )
                })?;
                Ok(RequestMessage {
                    message: Message::text(message.role, text),
                    annotations: message
                        .cache
                        .map(|hint| (0, Annotation::CacheHint(hint)))
                        .into_iter()
                        .collect(),
                })
            })
            .collect()
    }

    /// The session id the prompt's template gives, if it has one.
    pub(crate) fn session_id(
        &self,
        prompt: &PromptDef,
        variables: &Map<String, Value>,
    ) -> Result<Option<String>> {
        if prompt.session_id.is_none() {
            return Ok(None);
        }
        let context = variable_values(prompt, variables)?;
        let context = Value::Object(context);
        self.render(&session_key(prompt), &context, || {
            format!("the session id of prompt `{}`", prompt.id)
        })
        .map(Some)
    }

    fn context(
        &self,
        prompt: &PromptDef,
        dir: Option<&Path>,
        variables: &Map<String, Value>,
    ) -> Result<Value> {
        let mut context = variable_values(prompt, variables)?;
        let mut artifacts = Map::new();
        for (name, path) in &prompt.artifacts {
            let path = match dir {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            };
            let text =
                std::fs::read_to_string(&path).map_err(|source| EngineError::ArtifactLoad {
                    prompt: prompt.id.clone(),
                    name: name.clone(),
                    path: path.clone(),
                    error: source,
                })?;
            artifacts.insert(name.clone(), Value::String(text));
        }
        context.insert("artifacts".into(), Value::Object(artifacts));
        Ok(Value::Object(context))
    }

    fn render(&self, key: &str, context: &Value, what: impl Fn() -> String) -> Result<String> {
        let render_error = |error: minijinja::Error| EngineError::Render {
            what: what(),
            message: describe(&error),
        };
        self.env
            .get_template(key)
            .map_err(render_error)?
            .render(minijinja::value::Serde(context))
            .map_err(render_error)
    }
}

/// Declared variables with their values: supplied, defaulted, or absent
/// (optional ones); unknown or missing required variables are errors.
fn variable_values(
    prompt: &PromptDef,
    variables: &Map<String, Value>,
) -> Result<Map<String, Value>> {
    let declared: Vec<&str> = prompt.variables.iter().map(|v| v.name.as_str()).collect();
    if let Some(unknown) = variables
        .keys()
        .find(|name| !declared.contains(&name.as_str()))
    {
        return Err(EngineError::InvalidRequest(format!(
            "prompt `{}` declares no variable `{unknown}` (declared: {})",
            prompt.id,
            if declared.is_empty() {
                "none".to_string()
            } else {
                declared.join(", ")
            }
        )));
    }
    let mut values = Map::new();
    for declaration in &prompt.variables {
        match variables
            .get(&declaration.name)
            .or(declaration.default.as_ref())
        {
            Some(value) => {
                values.insert(declaration.name.clone(), value.clone());
            }
            None if declaration.required => {
                return Err(EngineError::InvalidRequest(format!(
                    "prompt `{}` needs the variable `{}`",
                    prompt.id, declaration.name
                )));
            }
            None => {}
        }
    }
    Ok(values)
}

/// minijinja's message plus where in the template it happened.
fn describe(error: &minijinja::Error) -> String {
    let mut text = error.to_string();
    if error.kind() == minijinja::ErrorKind::UndefinedError {
        text.push_str(" (the template uses a variable the prompt does not declare, or one the request did not supply)");
    }
    text
}
