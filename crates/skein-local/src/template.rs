/*!
Rendering a request into the model's prompt text with the chat template
stored in the GGUF metadata (`tokenizer.chat_template`), evaluated by
minijinja with Python-compatible string methods, as Hugging Face templates
expect. A model without a template gets ChatML.

Parts become text the template can carry: tool calls as
`<tool_call>{"name": …, "arguments": …}</tool_call>` with the arguments'
raw text, tool results as their content (prefixed `error: ` when marked as
errors), attachments as a one-line placeholder.
*/

use minijinja::{Environment, Error, ErrorKind, context};
use serde::Serialize;
use skein_core::{Message, Part};

/// ChatML, for models whose GGUF carries no template.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

/// One message as templates see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateMessage {
    pub role: &'static str,
    pub content: String,
}

impl ChatTemplate {
    /// Compile `source`; `bos` and `eos` are the token texts templates may use.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, Error> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned("chat", source.to_string())?;
        Ok(ChatTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// The prompt for `messages`, ending where the assistant's reply begins.
    pub fn render(&self, messages: &[&Message]) -> Result<String, Error> {
        let messages: Vec<TemplateMessage> = messages.iter().map(|m| template_message(m)).collect();
        self.env.get_template("chat")?.render(context! {
            messages => minijinja::value::Serde(&messages),
            add_generation_prompt => true,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        })
    }
}

/// The text a message's parts become.
pub fn template_message(message: &Message) -> TemplateMessage {
    let pieces: Vec<String> = message
        .parts
        .iter()
        .map(|part| match part {
            Part::Text { text } => text.clone(),
            Part::ToolCall(call) => format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
                serde_json::Value::String(call.name.clone()),
                call.arguments
            ),
            Part::ToolResult(result) if result.is_error => format!("error: {}", result.content),
            Part::ToolResult(result) => result.content.clone(),
            Part::Attachment(a) => {
                format!("[attachment: {}, {} bytes]", a.media_type, a.data.len())
            }
            _ => String::new(),
        })
        .collect();
    TemplateMessage {
        role: message.role.as_str(),
        content: pieces.join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Role, ToolCall, ToolResult};

    #[test]
    fn chatml_renders_roles_in_order_and_opens_the_reply() {
        let template = ChatTemplate::new(CHATML, "", "").unwrap();
        let system = Message::system("be brief");
        let user = Message::user("hi");
        let text = template.render(&[&system, &user]).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn python_string_methods_and_raise_exception_work() {
        let source = "{% for m in messages %}{{ m['content'].strip() | upper }}{% endfor %}{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}";
        let template = ChatTemplate::new(source, "", "").unwrap();
        let one = Message::user("  padded  ");
        assert_eq!(template.render(&[&one]).unwrap(), "PADDED");
        let error = template.render(&[&one, &one]).unwrap_err();
        assert!(error.to_string().contains("one message only"), "{error}");
    }

    #[test]
    fn tool_parts_become_text_with_raw_arguments() {
        let call = Message::new(
            Role::Assistant,
            vec![Part::ToolCall(ToolCall {
                id: "c".into(),
                name: "search".into(),
                arguments: "{\"q\":  1}".into(),
            })],
        );
        assert_eq!(
            template_message(&call).content,
            "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\":  1}}\n</tool_call>"
        );
        let result = Message::tool_results([ToolResult {
            call_id: "c".into(),
            content: "boom".into(),
            is_error: true,
        }]);
        assert_eq!(template_message(&result).content, "error: boom");
        assert_eq!(template_message(&result).role, "tool");
    }
}
