/*!
A stored conversation's settings restored against a *home* model (the model
the caller would use, whose engine knows the registered tools and
profiles): the model, the default tools by name, the chain limit.

A stored model name that names a file (`local:PATH`, `scripted:PATH`) is
opened only when it is the home model's own name, that is, when the user
named that file on the command line or in configuration: a database, or an
export imported from elsewhere, never chooses which local file is loaded.
*/

use crate::error::{Error, Result};
use crate::model::Model;
use skein_core::{ConversationId, ConversationSettings};
use skein_engine::Tool;
use std::sync::Arc;

/// The stored model: a profile of `home`'s engine, `home` itself when the
/// names agree (or none was stored), or the stored model name opened with
/// `home`'s tools.
pub(crate) fn model(
    settings: &ConversationSettings,
    conversation: &ConversationId,
    home: &Model,
) -> Result<Model> {
    if let Some(profile) = &settings.profile {
        let model = Model::from_profile(home.engine(), profile)?;
        return Ok(match &settings.model {
            Some(name) if name != profile => model.with_model(name.clone()),
            _ => model,
        });
    }
    match &settings.model {
        Some(name) if name != home.name() => {
            if skein_providers::names_a_file(name) {
                return Err(Error::StoredModelNamesAFile {
                    conversation: conversation.clone(),
                    model: name.clone(),
                });
            }
            Model::open_with_tools(name, home.engine().tools().iter().cloned())
        }
        _ => Ok(home.clone()),
    }
}

/// The stored tool names, looked up among `model`'s registered tools.
pub(crate) fn tools(
    settings: &ConversationSettings,
    model: &Model,
    conversation: &ConversationId,
) -> Result<Vec<Arc<dyn Tool>>> {
    settings
        .tools
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
