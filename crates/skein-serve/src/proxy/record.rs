/*!
What the proxy adds to the turns it records: the client's evidence. Each
run keeps the exact request body, the model the client asked for and which
client asked (`x-skein-client`, else OpenAI's `user` or Anthropic's
`metadata.user_id`), and a
conversation the proxy starts is named by the request's
`x-skein-conversation-name` header and remembers the model that answered.
Where a turn lands is the turn service's landing rule for a request that
carries its whole history ([`Landing::Found`]: see
`skein_conversation::landing`); a failed model call is kept by the failure
rule, its run belonging to the conversation the request went on with (none
for a first turn). Nothing is written for a request that asked not to be
stored.
*/

use skein::conversation::service::{Finding, Landing, RunMark};
use skein::core::{ConversationId, ConversationSettings, NodeId, RunRecord};
use std::sync::Arc;

/// Where an exchange was recorded.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub conversation: ConversationId,
    pub node: NodeId,
}

/// What the client sent besides its messages.
#[derive(Clone, Debug)]
pub struct Meta {
    /// The exact request body.
    pub body: Arc<str>,
    /// The model the client asked for.
    pub requested: Option<String>,
    /// The `x-skein-conversation-name` header.
    pub name: Option<String>,
    /// The session the client named: the `x-skein-session` header, else
    /// the request's own fields.
    pub session: Option<String>,
    /// The skein model that answered (a new conversation's model).
    pub model: String,
    /// The client that made the request: its key's client, else the
    /// `x-skein-client` header, else the request's own fields.
    pub client: Option<String>,
    /// The keyed client that made the request (see `super::clients`): it
    /// reaches only its own conversations, and owns those it starts.
    pub keyed: Option<String>,
}

impl Meta {
    /// Where the exchange lands: found from its history, by its name.
    pub fn landing(&self) -> Landing {
        Landing::Found(Finding {
            name: self.name.clone(),
            session: self.session.clone(),
            settings: ConversationSettings {
                model: Some(self.model.clone()),
                proxy: true,
                client: self.keyed.clone(),
                ..ConversationSettings::default()
            },
            client: self.keyed.clone(),
        })
    }

    /// Each run keeps the exact request body, the model asked for and the
    /// client that asked.
    pub fn mark(&self) -> RunMark {
        let body = self.body.clone();
        let requested = self.requested.clone();
        let client = self.client.clone();
        Arc::new(move |_, run: &mut RunRecord| {
            run.request = Some(body.to_string());
            run.requested_model = requested.clone();
            run.client = client.clone();
        })
    }
}
