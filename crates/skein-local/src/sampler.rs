/*!
How the next token of a reply is chosen: one llama.cpp sampler chain per
request, built from the request's options, the model's repetition settings
and, when the request carries an output schema, a grammar.

The chain is, in order: the JSON grammar (when there is one), the penalties
sampler, DRY, then either greedy selection or, when a temperature above zero
asks for sampling, top-p, temperature and a seeded draw. Greedy stays
deterministic: nothing before it draws a random number.

**Grammars.** An output schema becomes a GBNF grammar through llama.cpp's own
converter (`json_schema_to_grammar`), so every token that would leave the
grammar is masked and the reply is a valid object on the first attempt. A
schema the converter cannot handle (an unresolvable `$ref`, a regular
expression it cannot parse) is decoded unconstrained: the engine validates
every reply against the schema anyway and asks for a repair when it fails,
so the request still works, just without the first-attempt guarantee. The
model's stats count both outcomes.
*/

use crate::config::Repetition;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use skein_core::ProviderError;
use skein_core::provider::GenerationOptions;

/// The sampler chain of one request.
pub(crate) struct Picker {
    chain: LlamaSampler,
    constrained: bool,
}

/// Whether a request's output schema became a grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Constraint {
    /// The request had no output schema.
    None,
    /// Decoding follows the schema's grammar.
    Grammar,
    /// llama.cpp could not turn the schema into a grammar: unconstrained.
    Unsupported,
}

impl Picker {
    /// The chain for `options`, with `repetition` control and the grammar of
    /// `schema` when llama.cpp can derive one.
    pub(crate) fn new(
        model: &LlamaModel,
        options: &GenerationOptions,
        repetition: &Repetition,
        schema: Option<&serde_json::Value>,
    ) -> (Picker, Constraint) {
        let mut chain = Vec::new();
        let constraint = match schema {
            None => Constraint::None,
            Some(schema) => match grammar(model, schema) {
                Some(grammar) => {
                    chain.push(grammar);
                    Constraint::Grammar
                }
                None => Constraint::Unsupported,
            },
        };
        if repetition.penalty_last_n > 0 {
            chain.push(LlamaSampler::penalties(
                model.n_vocab(),
                clamp_i32(repetition.penalty_last_n),
                repetition.penalty_repeat,
                repetition.penalty_freq,
                repetition.penalty_present,
            ));
        }
        if repetition.dry_multiplier > 0.0 && repetition.dry_last_n > 0 {
            chain.push(LlamaSampler::dry(
                model,
                repetition.dry_multiplier,
                repetition.dry_base,
                clamp_i32(repetition.dry_allowed_length),
                clamp_i32(repetition.dry_last_n),
                repetition
                    .dry_sequence_breakers
                    .iter()
                    .map(|breaker| breaker.replace('\0', "")),
            ));
        }
        match options.temperature {
            Some(temperature) if temperature > 0.0 => {
                if let Some(top_p) = options.top_p {
                    chain.push(LlamaSampler::top_p(top_p as f32, 1));
                }
                chain.push(LlamaSampler::temp(temperature as f32));
                chain.push(LlamaSampler::dist(seed(options)));
            }
            _ => chain.push(LlamaSampler::greedy()),
        }
        let picker = Picker {
            chain: LlamaSampler::chain_simple(chain),
            constrained: constraint == Constraint::Grammar,
        };
        (picker, constraint)
    }

    /// The next token from the logits at `index` of the last evaluation,
    /// accepted into the chain (which advances the penalty windows and the
    /// grammar).
    pub(crate) fn next(
        &mut self,
        ctx: &LlamaContext<'_>,
        index: i32,
    ) -> Result<LlamaToken, ProviderError> {
        if !self.constrained {
            // Applies the chain, picks, and accepts the token.
            return Ok(self.chain.sample(ctx, index));
        }
        // Under a grammar, pick and accept in two steps: llama.cpp aborts the
        // process when a grammar is made to accept a token it rejected, which
        // is what a chain whose grammar rejects every candidate would pick.
        let mut candidates = ctx.token_data_array_ith(index);
        candidates.apply_sampler(&mut self.chain);
        let picked = candidates
            .selected
            .and_then(|selected| candidates.data.get(selected))
            .filter(|candidate| candidate.logit() > f32::NEG_INFINITY)
            .map(|candidate| candidate.id())
            .ok_or_else(|| ProviderError::Backend {
                message: "the output schema's grammar allows no next token".into(),
            })?;
        self.chain
            .try_accept(picked)
            .map_err(|error| ProviderError::Backend {
                message: format!("the output schema's grammar rejected a token: {error}"),
            })?;
        Ok(picked)
    }
}

/// The grammar sampler for `schema`, or `None` when llama.cpp cannot convert
/// the schema or parse the grammar it produced.
fn grammar(model: &LlamaModel, schema: &serde_json::Value) -> Option<LlamaSampler> {
    let gbnf = llama_cpp_2::json_schema_to_grammar(&schema.to_string()).ok()?;
    LlamaSampler::grammar(model, &gbnf, "root").ok()
}

/// The request's seed, or one from the clock when it sets none.
fn seed(options: &GenerationOptions) -> u32 {
    options.seed.map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        },
        |seed| seed as u32,
    )
}

fn clamp_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}
