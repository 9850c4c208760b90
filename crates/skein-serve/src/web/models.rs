/*!
The models the web view's actions run on: [`Models`] opens a model by the
name the page sends (a configured profile or a model name), lists the
choices the page offers and starts what serves a conversation's tools: a
surface's [`Home`] (the turn layer's: how it opens models and starts
tools, as its commands use it) with the choices its page offers; that is
how the CLI supplies its own. [`ModelNames`] opens
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

/// Where the web view's actions find their models: a surface's [`Home`]
/// (how it opens models by name and starts what serves tools, as its
/// commands do) and the models the page offers.
pub trait Models: Home {
    /// The models the page offers, the default among them.
    fn choices(&self) -> Vec<ModelChoice>;
}

/// The server's [`Models`] as the actions hand them to the turn layer:
/// a model that cannot be opened is said as the page says it (which model,
/// and why, with every cause).
pub(crate) struct PageHome<'a>(pub &'a dyn Models);

impl Home for PageHome<'_> {
    fn open(&self, name: Option<&str>) -> Result<Model, SurfaceError> {
        self.0.open(name).map_err(|problem| {
            SurfaceError::new(match name {
                Some(_) => format!("{problem:#}"),
                None => format!("the default model cannot be opened: {problem:#}"),
            })
        })
    }

    fn default_name(&self) -> String {
        self.0.default_name()
    }

    fn home_of(&self, stored: &ConversationRecord) -> Result<Model, SurfaceError> {
        self.0.home_of(stored).map_err(|problem| {
            SurfaceError::new(format!(
                "the model of conversation {} cannot be opened: {problem:#}",
                stored.id
            ))
        })
    }

    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), SurfaceError>> {
        let started = self.0.start_tools(names);
        Box::pin(async move {
            started
                .await
                .map_err(|problem| SurfaceError::new(format!("{problem:#}")))
        })
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

impl Home for ModelNames {
    fn open(&self, name: Option<&str>) -> Result<Model, SurfaceError> {
        Model::open(name.unwrap_or(&self.default)).map_err(SurfaceError::new)
    }

    fn default_name(&self) -> String {
        self.default.clone()
    }
}

impl Models for ModelNames {
    fn choices(&self) -> Vec<ModelChoice> {
        self.offered
            .iter()
            .map(|name| ModelChoice {
                name: name.clone(),
                label: name.clone(),
            })
            .collect()
    }
}
