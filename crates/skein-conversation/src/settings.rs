/*!
A stored conversation's settings restored against a *home* model (the model
the caller would use, whose engine knows the registered tools and
profiles): the model, the default tools by name, the chain limit.

A model name that names a file (`local:PATH`, `scripted:PATH`) stored by an
*imported* conversation (from an export or an `llm` database) is opened only
when it is the home model's own name, that is, when the user named that
file on the command line or in configuration: data from elsewhere never
chooses which local file is loaded. A conversation recorded here keeps the
file its user named when it was created, by its absolute path (opening a
model makes a relative one absolute); one stored relative by an older skein
is read from the working directory, and refused with the path it leads to
when nothing is there ([`check_model_file`]).
*/

use crate::error::{Error, Result};
use crate::model::Model;
use skein_core::{ConversationId, ConversationSettings};
use skein_engine::Tool;
use skein_store::ConversationRecord as StoredConversation;
use std::sync::Arc;

/// The stored model: a profile of `home`'s engine, `home` itself when the
/// names agree (or none was stored), or the stored model name opened with
/// `home`'s tools.
pub(crate) fn model(conversation: &StoredConversation, home: &Model) -> Result<Model> {
    let settings = &conversation.settings;
    if let Some(profile) = &settings.profile {
        let model = Model::from_profile(home.engine(), profile)?;
        return Ok(match &settings.model {
            Some(name) if name != profile => model.with_model(name.clone()),
            _ => model,
        });
    }
    match &settings.model {
        Some(name) if name != home.name() => {
            if skein_providers::names_a_file(name) && conversation.imported {
                return Err(Error::StoredModelNamesAFile {
                    conversation: conversation.id.clone(),
                    model: name.clone(),
                });
            }
            check_model_file(conversation)?;
            Model::open_with_tools(name, home.engine().tools().iter().cloned())
        }
        _ => Ok(home.clone()),
    }
}

/// Refuse a stored model name that names a file by a relative path (an
/// older skein stored `scripted:PATH` and `local:PATH` as typed) when
/// nothing is at that path from the working directory, with
/// [`Error::StoredModelFileMissing`] naming where it leads. Any other
/// stored name passes (a missing absolute file is the provider's error,
/// which names it).
pub fn check_model_file(conversation: &StoredConversation) -> Result<()> {
    let Some(name) = &conversation.settings.model else {
        return Ok(());
    };
    match skein_providers::file_of(name) {
        Some(path) if path.is_relative() && !path.exists() => Err(Error::StoredModelFileMissing {
            conversation: conversation.id.clone(),
            model: name.clone(),
            path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        }),
        _ => Ok(()),
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
