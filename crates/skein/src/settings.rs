/*!
A stored conversation's settings (its `meta`): the model by name (and the
profile, when it came from one), the default tools by name, and the chain
limit; and how they are restored against the engine of a home model.
*/

use crate::error::{Error, Result};
use crate::model::Model;
use serde::Deserialize;
use skein_engine::Tool;
use skein_store::{Conversation as StoredConversation, ConversationId};
use std::sync::Arc;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Settings {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    pub(crate) chain_limit: Option<u32>,
}

impl Settings {
    pub(crate) fn read(conversation: &StoredConversation) -> Result<Settings> {
        if conversation.meta.is_null() {
            return Ok(Settings::default());
        }
        serde_json::from_value(conversation.meta.clone()).map_err(|error| Error::BadSettings {
            conversation: conversation.id.clone(),
            problem: error.to_string(),
        })
    }

    /// The stored model: a profile of `home`'s engine, `home` itself when
    /// the names agree (or none was stored), or the stored model name
    /// opened with `home`'s tools.
    pub(crate) fn model(&self, home: &Model) -> Result<Model> {
        if let Some(profile) = &self.profile {
            let model = Model::from_profile(home.engine(), profile)?;
            return Ok(match &self.model {
                Some(name) if name != profile => model.with_model(name.clone()),
                _ => model,
            });
        }
        match &self.model {
            Some(name) if name != home.name() => {
                Model::open_with_tools(name, home.engine().tools().iter().cloned())
            }
            _ => Ok(home.clone()),
        }
    }

    /// The stored tool names, looked up among `model`'s registered tools.
    pub(crate) fn tools(
        &self,
        model: &Model,
        conversation: &ConversationId,
    ) -> Result<Vec<Arc<dyn Tool>>> {
        self.tools
            .iter()
            .map(|name| {
                model.engine().tool(name).ok_or_else(|| Error::UnknownTool {
                    conversation: conversation.clone(),
                    tool: name.clone(),
                    registered: model
                        .engine()
                        .tools()
                        .iter()
                        .map(|tool| tool.spec().name.clone())
                        .collect(),
                })
            })
            .collect()
    }
}
