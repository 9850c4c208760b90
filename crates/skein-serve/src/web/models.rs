/*!
The models the web view's actions run on: [`Models`] opens a model by the
name the page sends (a configured profile or a model name), lists the
choices the page offers and starts what serves a conversation's tools. A
surface's [`Home`] (the turn layer's: how it opens models and starts
tools, as its commands use it) with the [`Choices`] the page offers is
[`Models`]; that is how the CLI supplies its own. [`ModelNames`] opens
plain model names, which is what a library user or a test needs. The
actions open stored conversations through the turn layer's
`skein::conversation::home` with the server's models as its [`Home`]
(`PageHome`).

Only names and labels reach the page: never a credential, an endpoint's
key or a file's contents.
*/

use serde::Serialize;
use skein::core::BoxFuture;
use skein::store::ConversationRecord;
use skein::{Home, Model, SurfaceError};

/// One model the page can choose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelChoice {
    /// What the page sends back as `model`.
    pub name: String,
    /// What it shows.
    pub label: String,
}

/// Where the web view's actions find their models.
pub trait Models: Send + Sync {
    /// The model `name` names, or the default one for `None`. The error
    /// says what is wrong with the name, in words fit for the page.
    fn open(&self, name: Option<&str>) -> Result<Model, String>;

    /// The models the page offers, the default among them.
    fn choices(&self) -> Vec<ModelChoice>;

    /// The name of the model a new conversation runs on.
    fn default_name(&self) -> String;

    /// The model to look stored conversation `stored`'s own model up from
    /// (the `home` of [`Model::of_conversation`] and of the turn layer's
    /// loads), so that going on with a conversation opens its own model,
    /// never the default first (which may not even be there: a model file
    /// not downloaded). By default: the model or profile the conversation
    /// names, opened by name, else (it names none, it names the default,
    /// or it is imported and names a file, which only the default may
    /// open) the default.
    fn home_of(&self, stored: &ConversationRecord) -> Result<Model, String> {
        self.open(Model::home_name_of(stored, &self.default_name()))
    }

    /// Start whatever serves the tools `names` (MCP servers), so that a
    /// conversation offering them can be continued; plain built-in tools
    /// need nothing.
    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), String>> {
        let _ = names;
        Box::pin(async { Ok(()) })
    }
}

/// The models a surface's [`Home`] opens, offered to the page.
pub trait Choices: Home {
    /// The models the page offers, the default among them.
    fn choices(&self) -> Vec<ModelChoice>;
}

/// A [`Home`] with its [`Choices`] is the web view's [`Models`], its
/// failures said in words (with every cause).
impl<T: Choices> Models for T {
    fn open(&self, name: Option<&str>) -> Result<Model, String> {
        Home::open(self, name).map_err(|error| format!("{error:#}"))
    }

    fn choices(&self) -> Vec<ModelChoice> {
        Choices::choices(self)
    }

    fn default_name(&self) -> String {
        Home::default_name(self)
    }

    fn home_of(&self, stored: &ConversationRecord) -> Result<Model, String> {
        Home::home_of(self, stored).map_err(|error| format!("{error:#}"))
    }

    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), String>> {
        let started = Home::start_tools(self, names);
        Box::pin(async move { started.await.map_err(|error| format!("{error:#}")) })
    }
}

/// The server's [`Models`] as the turn layer's [`Home`], so the actions
/// open stored conversations as every surface does; a model that cannot be
/// opened is said as the page says it.
pub(crate) struct PageHome<'a>(pub &'a dyn Models);

impl Home for PageHome<'_> {
    fn open(&self, name: Option<&str>) -> Result<Model, SurfaceError> {
        self.0.open(name).map_err(|problem| {
            SurfaceError::new(match name {
                Some(_) => problem,
                None => format!("the default model cannot be opened: {problem}"),
            })
        })
    }

    fn default_name(&self) -> String {
        self.0.default_name()
    }

    fn home_of(&self, stored: &ConversationRecord) -> Result<Model, SurfaceError> {
        self.0.home_of(stored).map_err(|problem| {
            SurfaceError::new(format!(
                "the model of conversation {} cannot be opened: {problem}",
                stored.id
            ))
        })
    }

    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), SurfaceError>> {
        let started = self.0.start_tools(names);
        Box::pin(async move { started.await.map_err(SurfaceError::new) })
    }
}

/// Models by name ([`Model::open`]), with a default and the names to
/// offer.
#[derive(Clone, Debug)]
pub struct ModelNames {
    default: String,
    offered: Vec<String>,
}

impl ModelNames {
    /// `default` and the other names `offered` (the default is offered
    /// first whether or not it is among them).
    pub fn new(default: impl Into<String>, offered: impl IntoIterator<Item = String>) -> Self {
        let default = default.into();
        let mut names = vec![default.clone()];
        for name in offered {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        ModelNames {
            default,
            offered: names,
        }
    }
}

impl Models for ModelNames {
    fn open(&self, name: Option<&str>) -> Result<Model, String> {
        Model::open(name.unwrap_or(&self.default)).map_err(|error| error.to_string())
    }

    fn choices(&self) -> Vec<ModelChoice> {
        self.offered
            .iter()
            .map(|name| ModelChoice {
                name: name.clone(),
                label: name.clone(),
            })
            .collect()
    }

    fn default_name(&self) -> String {
        self.default.clone()
    }
}
