/*!
What several commands share: the option groups they flatten into their
arguments (a turn's options, the model and key, tools, configured
prompts, the turn a recorded-chat command names) with the code that reads
them, the opened database ([`context::Context`]), running a turn, and
value parsers. A command's own arguments and handler live in its own
module under `commands/`.
*/

pub mod configured;
pub mod context;
pub mod engine_dir;
pub mod home;
pub mod model;
pub mod recorded;
pub mod tools;
pub mod turn;
pub mod turn_options;
pub mod values;
