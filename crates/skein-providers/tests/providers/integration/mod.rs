/*!
Integration tests of skein-providers, in one binary: the echo and scripted
models through the public `Provider` trait, rule-file loading, streaming
and the model registry. Scripts live in `tests/data/`.
*/

mod actions;
mod common;
mod conditions;
mod echo;
mod loading;
mod registry;
mod scripts;
mod streaming;
