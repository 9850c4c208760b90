/*!
The models the web view's actions run on: [`Models`] opens a model by the
name the page sends (a configured profile or a model name), lists the
choices the page offers and starts what serves a conversation's tools. The
CLI supplies its own (its default model, engine directory and tools, as
every command uses them); [`ModelNames`] opens plain model names, which is
what a library user or a test needs.

Only names and labels reach the page: never a credential, an endpoint's
key or a file's contents.
*/

use serde::Serialize;
use skein::Model;
use skein::core::BoxFuture;
use skein::store::ConversationRecord;

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
