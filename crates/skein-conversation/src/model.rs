/*!
[`Model`]: a handle on a model through the engine, and where a user's first
prompt, conversation or tool loop starts.

A model is either a configured profile of an [`Engine`] (optionally with
another model name on the profile's backend), or a model name such as
`smollm2`, `echo` or `openai:gpt-4o-mini` opened on an engine of its own
with one backend and one profile named after it. Stored conversations
remember the model by that name (and the profile, when there is one).
*/

use crate::conversation::{Conversation, ConversationBuilder};
use crate::error::{Error, Result};
use crate::input::TurnInput;
use crate::prompt::{ChainPrompt, Prompt};
use skein_engine::config::{BackendDef, Catalog, CredentialSource, Profile};
use skein_engine::{Engine, EngineBuilder, Tool};
use std::sync::Arc;

/// A model to prompt: a profile of an engine, or a model name. Cheap to
/// clone.
#[derive(Clone)]
pub struct Model {
    engine: Engine,
    profile: String,
    /// Another model on the profile's backend, when not the profile's own.
    model: Option<String>,
    /// Whether the engine was made for a model name by [`Model::open`].
    opened: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("profile", &self.profile)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// A model by name (see [`skein_providers::resolve`] for the names),
    /// on an engine of its own.
    ///
    /// ```
    /// let model = skein_conversation::Model::open("echo")?;
    /// assert_eq!(model.name(), "echo");
    /// # Ok::<(), skein_conversation::Error>(())
    /// ```
    pub fn open(name: &str) -> Result<Model> {
        Model::open_with_tools(name, Vec::new())
    }

    /// [`Model::open`], with tools registered on its engine so that stored
    /// conversations naming them can be restored.
    pub fn open_with_tools(
        name: &str,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<Model> {
        Model::open_on(Catalog::new(), name, tools)
    }

    /// A model name (as [`Model::open_with_tools`]) on an engine that also
    /// holds `catalog`'s prompts, profiles and backends, so a turn on it
    /// can render the catalog's configured prompts
    /// ([`TurnInput::configured`]) and a stored conversation recorded on
    /// one of its profiles can be continued from it. A name that is one of
    /// the catalog's profiles is that profile. A name that is also a
    /// backend of the catalog runs on that backend (its capacity) when the
    /// backend is of the kind the name stands for, and is refused
    /// ([`Error::ModelNameTaken`]) when it is of another.
    pub fn open_in(
        catalog: &Catalog,
        name: &str,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<Model> {
        if catalog.find_profile(name).is_some() {
            let engine = with_tools(Engine::builder(catalog.clone()), tools).build()?;
            return Model::from_profile(&engine, name);
        }
        Model::open_on(catalog.clone(), name, tools)
    }

    /// `name` opened as a profile of its own on a backend of its own (or
    /// the catalog's backend of that name and kind), added to `catalog`.
    fn open_on(
        catalog: Catalog,
        name: &str,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<Model> {
        // A file's path is kept absolute, so that a conversation recorded
        // with it can be continued from any directory.
        let name = &*skein_providers::with_absolute_path(name);
        let resolved = skein_providers::resolve(name)?;
        let catalog = match catalog.find_backend(name) {
            Some(backend) if backend.kind != resolved.kind => {
                return Err(Error::ModelNameTaken {
                    name: name.to_string(),
                });
            }
            Some(_) => catalog,
            None => catalog.backend(BackendDef::new(name, resolved.kind)),
        };
        let catalog = catalog
            // The provider carries its own credential (from the environment).
            .profile(Profile::new(name, name, resolved.model).credential(CredentialSource::None));
        let builder = Engine::builder(catalog).provider(name, resolved.provider);
        Model::opened(name, with_tools(builder, tools))
    }

    /// [`Model::open_with_tools`] for a server that passes each client's
    /// own key through: a model served over HTTP (`openai:MODEL`,
    /// `anthropic:MODEL`) is called only with the key a request carries
    /// ([`skein_engine::Request::credential`]; a request without one fails
    /// with [`skein_engine::EngineError::CredentialRequired`]), never with
    /// a key from this machine's environment, which need not be set. Any
    /// other model opens as with [`Model::open_with_tools`] and ignores
    /// keys.
    pub fn open_for_client_keys(
        name: &str,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<Model> {
        let (kind, sends) = skein_providers::kind_of(name)?;
        if kind.default_credential_variable().is_none() {
            return Model::open_with_tools(name, tools);
        }
        // No provider is built here: the engine builds one for each key.
        let catalog = Catalog::new()
            .backend(BackendDef::new(name, kind))
            .profile(Profile::new(name, name, sends).credential(CredentialSource::Explicit));
        Model::opened(name, with_tools(Engine::builder(catalog), tools))
    }

    /// The model a stored conversation runs on, looked up from `home` (the
    /// model the caller would otherwise use, whose engine knows the
    /// profiles and tools): its profile, its model name, or `home` when it
    /// names none. An imported conversation's name that opens a file of
    /// this machine (`local:PATH`, `scripted:PATH`) is refused unless it is
    /// `home`'s own name: data from elsewhere never chooses which local
    /// file is loaded.
    pub fn of_conversation(
        conversation: &skein_store::ConversationRecord,
        home: &Model,
    ) -> Result<Model> {
        crate::settings::model(conversation, home)
    }

    /// The name a surface opens, its own way, as the `home` a stored
    /// conversation's model is looked up from ([`Model::of_conversation`],
    /// [`Conversation::load`]): the profile the conversation names, else its
    /// model; `None` (open the default) when it names neither, names
    /// `default`, or is imported and names a file of this machine (which
    /// only the default may open). One rule for the CLI, the web view and
    /// Python, so going on with a conversation recorded on `echo` never
    /// opens the default model, which may not even be there.
    pub fn home_name_of<'a>(
        conversation: &'a skein_store::ConversationRecord,
        default: &str,
    ) -> Option<&'a str> {
        let settings = &conversation.settings;
        settings
            .profile
            .as_deref()
            .or(settings.model.as_deref())
            .filter(|name| {
                *name != default && !(conversation.imported && skein_providers::names_a_file(name))
            })
    }

    /// Refuse a stored conversation whose model names a file by a relative
    /// path (as an older skein stored it) that leads nowhere from the
    /// working directory ([`Error::StoredModelFileMissing`]), before anything
    /// opens it; [`Model::of_conversation`] checks it too.
    pub fn check_stored_file(conversation: &skein_store::ConversationRecord) -> Result<()> {
        crate::settings::check_model_file(conversation)
    }

    /// A configured profile of `engine`.
    pub fn from_profile(engine: &Engine, profile: &str) -> Result<Model> {
        engine.inspect_profile(profile)?;
        Ok(Model {
            engine: engine.clone(),
            profile: profile.to_string(),
            model: None,
            opened: false,
        })
    }

    /// The same profile and backend with another model name.
    pub fn with_model(mut self, model: impl Into<String>) -> Model {
        self.model = Some(model.into());
        self
    }

    /// The name a stored conversation remembers: the model name it was
    /// opened with, or the profile's name.
    pub fn name(&self) -> &str {
        match (&self.model, self.opened) {
            (Some(model), false) => model,
            _ => &self.profile,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// The model name given in place of the profile's, if any.
    pub fn model_override(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Whether this model was opened by name ([`Model::open`]) rather than
    /// taken from a configured profile.
    pub fn is_opened_by_name(&self) -> bool {
        self.opened
    }

    /// One prompt in a new conversation of its own (no store, no tools).
    /// The response can be replied to, forked and logged.
    pub fn prompt(&self, input: impl Into<TurnInput>) -> Prompt {
        self.conversation().build().prompt(input)
    }

    /// A tool loop with `tools` in a new conversation of its own. Without
    /// tools it is a single prompt wrapped in a
    /// [`ChainResponse`](crate::ChainResponse).
    pub fn chain(
        &self,
        input: impl Into<TurnInput>,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> ChainPrompt {
        self.conversation().tools(tools).build().chain(input)
    }

    /// A new conversation on this model.
    pub fn conversation(&self) -> ConversationBuilder {
        Conversation::builder(self.clone())
    }

    /// `request` routed to this model: its profile, and its model name
    /// when it overrides the profile's.
    pub fn bind(&self, request: skein_engine::Request) -> skein_engine::Request {
        let request = request.profile(self.profile.clone());
        match &self.model {
            Some(model) => request.model(model.clone()),
            None => request,
        }
    }

    /// The model `name`, opened on its own profile of `builder`'s engine.
    fn opened(name: &str, builder: EngineBuilder) -> Result<Model> {
        Ok(Model {
            engine: builder.build()?,
            profile: name.to_string(),
            model: None,
            opened: true,
        })
    }
}

/// `builder` with `tools` registered.
fn with_tools(
    builder: EngineBuilder,
    tools: impl IntoIterator<Item = Arc<dyn Tool>>,
) -> EngineBuilder {
    tools.into_iter().fold(builder, EngineBuilder::tool)
}

#[cfg(test)]
mod tests {
    use super::Model;
    use skein_core::{ConversationId, ConversationSettings};
    use skein_store::ConversationRecord;

    fn stored(model: Option<&str>, profile: Option<&str>, imported: bool) -> ConversationRecord {
        ConversationRecord {
            id: ConversationId("c0ffee".into()),
            name: None,
            head: None,
            len: 0,
            origin: None,
            created_ms: 0,
            updated_ms: 0,
            settings: ConversationSettings {
                model: model.map(str::to_string),
                profile: profile.map(str::to_string),
                ..ConversationSettings::default()
            },
            imported,
        }
    }

    #[test]
    fn a_stored_conversation_opens_its_profile_else_its_model_never_a_file_it_imported() {
        let home = |model, profile, imported| {
            Model::home_name_of(&stored(model, profile, imported), "smollm2").map(str::to_string)
        };
        assert_eq!(
            home(Some("gpt"), Some("fast"), false).as_deref(),
            Some("fast")
        );
        assert_eq!(home(Some("echo"), None, false).as_deref(), Some("echo"));
        assert_eq!(home(Some("smollm2"), None, false), None, "the default");
        assert_eq!(home(None, None, false), None, "names none");
        assert_eq!(
            home(Some("scripted:/tmp/x.toml"), None, false).as_deref(),
            Some("scripted:/tmp/x.toml"),
            "recorded here: its own file"
        );
        assert_eq!(
            home(Some("scripted:/tmp/x.toml"), None, true),
            None,
            "imported"
        );
        assert_eq!(home(Some("echo"), None, true).as_deref(), Some("echo"));
    }
}
