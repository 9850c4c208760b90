/*!
Where the CLI's models and tools come from, as the turn layer asks for
them ([`skein::Home`]): [`CliHome`], one for every command that opens a
stored conversation or recorded turn and for `skein serve`'s web view (with
the choices its page offers). Its failures keep their whole `anyhow`
error through the turn layer, and [`cli_error`] takes it back, so a
command reports (and exits with) the error it always did.
*/

use super::model::{home_model, stored_home};
use skein::core::BoxFuture;
use skein::store::ConversationRecord;
use skein::{Home, Model, SurfaceError};

/// The CLI's [`Home`]: models opened as every command opens them (the
/// configured engine directory's profiles, the built-in and MCP tools
/// registered), `default` when none is named, and MCP servers started.
pub struct CliHome {
    /// `-m` for `skein serve`, else the default model.
    default: String,
}

impl CliHome {
    /// The home of a command: its default is the default model.
    pub fn of_command() -> anyhow::Result<CliHome> {
        Ok(CliHome::with_default(super::model::default_model()?))
    }

    /// A home whose default is `default` (`skein serve -m`).
    pub fn with_default(default: String) -> CliHome {
        CliHome { default }
    }
}

impl Home for CliHome {
    fn open(&self, name: Option<&str>) -> Result<Model, SurfaceError> {
        home_model(Some(name.unwrap_or(&self.default).to_string())).map_err(surface)
    }

    fn default_name(&self) -> String {
        self.default.clone()
    }

    /// As every command goes on with a stored conversation:
    /// [`stored_home`].
    fn home_of(&self, stored: &ConversationRecord) -> Result<Model, SurfaceError> {
        stored_home(stored).map_err(surface)
    }

    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), SurfaceError>> {
        Box::pin(async move { super::tools::start_for(&names).await.map_err(surface) })
    }
}

/// A CLI error carried through the turn layer whole.
#[derive(Debug)]
struct Carried(anyhow::Error);

// As `anyhow` shows it: its alternate form with every cause (the web view
// shows that), its plain form the outer message, the causes as sources.
impl std::fmt::Display for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match f.alternate() {
            true => write!(f, "{:#}", self.0),
            false => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for Carried {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

fn surface(error: anyhow::Error) -> SurfaceError {
    SurfaceError::new(Carried(error))
}

/// A turn layer error as the command reports it: the CLI's own error,
/// whole, when it was the CLI's [`Home`] that failed.
pub fn cli_error(error: skein::Error) -> anyhow::Error {
    match error {
        skein::Error::Surface(failed) | skein::Error::ChosenModel(failed) => {
            match failed.into_inner().downcast::<Carried>() {
                Ok(carried) => carried.0,
                Err(other) => anyhow::Error::from_boxed(other),
            }
        }
        error => error.into(),
    }
}

/// A recorded chat error as the command reports it ([`cli_error`] for
/// the turn layer's).
pub fn recorded_error(error: skein::recorded::RecordedError) -> anyhow::Error {
    match error {
        skein::recorded::RecordedError::Conversation(error) => cli_error(error),
        error => error.into(),
    }
}
