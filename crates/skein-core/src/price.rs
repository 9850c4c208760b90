/*!
What recorded usage cost: a price table (per model, US dollars per million
tokens of uncached input, output, cache reads and cache writes) applied to
[`Totals`] when they are read, so changing a price re-prices history.

The built-in table ([`PriceTable::builtin`]) holds the common OpenAI and
Anthropic models at the prices their providers published on
[`BUILT_IN_DATE`]; the configuration file overrides and extends it
([`PriceTable::with`]). A model is priced by its name, or else by the
longest table name it starts with followed by `-` (so
`claude-sonnet-4-5-20250929` takes `claude-sonnet-4-5`'s price), after
dropping a `provider:` or `provider/` prefix.

A cost is never a silent zero: runs that reported no usage (or part of it)
and runs of a model the table does not price are named in the [`Cost`],
which is then *incomplete* (a lower bound).

A run of a provider that runs on this machine (the echo and scripted
models, local GGUF files, the embedded models:
[`crate::usage::LOCAL_PROVIDERS`]) costs nothing: it is priced at exactly
zero ([`PriceSource::Local`]), and its missing figures leave the cost
whole, since there is nothing they could add. A price the configuration
gives its model still wins (to count a machine's own cost).
*/

use crate::run::RunId;
use crate::usage::{ModelTokens, Totals};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The day the built-in prices were taken from the providers' price pages.
pub const BUILT_IN_DATE: &str = "2025-11-24";

/// One model's prices in US dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input tokens not read from or written to a prompt cache.
    pub input: f64,
    pub output: f64,
    /// Input tokens read from a prompt cache; the input price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Input tokens written to a prompt cache; the input price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    const fn of(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
        Price {
            input,
            output,
            cache_read: Some(cache_read),
            cache_write: Some(cache_write),
        }
    }

    /// What `tokens` cost at this price, in dollars.
    pub fn cost(&self, tokens: &ModelTokens) -> f64 {
        let per_token = |per_million: f64, count: u64| per_million * count as f64 / 1e6;
        per_token(self.input, tokens.uncached_input)
            + per_token(self.cache_read.unwrap_or(self.input), tokens.cache_read)
            + per_token(self.cache_write.unwrap_or(self.input), tokens.cache_write)
            + per_token(self.output, tokens.output)
    }

    /// What reading `tokens`' cache reads saved over paying full input.
    pub fn cache_savings(&self, tokens: &ModelTokens) -> f64 {
        (self.input - self.cache_read.unwrap_or(self.input)) * tokens.cache_read as f64 / 1e6
    }
}

/// OpenAI charges nothing extra to write its cache: a write is input.
const fn openai(input: f64, cached: f64, output: f64) -> Price {
    Price::of(input, output, cached, input)
}

/// Anthropic: reads cost a tenth of input, five-minute writes a quarter more.
const fn anthropic(input: f64, output: f64) -> Price {
    Price::of(input, output, input / 10.0, input * 1.25)
}

const BUILT_IN: &[(&str, Price)] = &[
    ("gpt-5", openai(1.25, 0.125, 10.0)),
    ("gpt-5-mini", openai(0.25, 0.025, 2.0)),
    ("gpt-5-nano", openai(0.05, 0.005, 0.40)),
    ("gpt-4.1", openai(2.0, 0.50, 8.0)),
    ("gpt-4.1-mini", openai(0.40, 0.10, 1.60)),
    ("gpt-4.1-nano", openai(0.10, 0.025, 0.40)),
    ("gpt-4o", openai(2.50, 1.25, 10.0)),
    ("gpt-4o-mini", openai(0.15, 0.075, 0.60)),
    ("o3", openai(2.0, 0.50, 8.0)),
    ("o3-mini", openai(1.10, 0.55, 4.40)),
    ("o4-mini", openai(1.10, 0.275, 4.40)),
    ("claude-opus-4-5", anthropic(5.0, 25.0)),
    ("claude-opus-4-1", anthropic(15.0, 75.0)),
    ("claude-opus-4", anthropic(15.0, 75.0)),
    ("claude-sonnet-4-5", anthropic(3.0, 15.0)),
    ("claude-sonnet-4", anthropic(3.0, 15.0)),
    ("claude-3-7-sonnet", anthropic(3.0, 15.0)),
    ("claude-3-5-sonnet", anthropic(3.0, 15.0)),
    ("claude-haiku-4-5", anthropic(1.0, 5.0)),
    ("claude-3-5-haiku", anthropic(0.80, 4.0)),
    ("claude-3-haiku", anthropic(0.25, 1.25)),
];

/// Where a price came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PriceSource {
    BuiltIn,
    /// The configuration file (a new model, or a built-in one overridden).
    Configured,
    /// A provider of this machine ran it: free.
    Local,
}

/// The price of what a provider of this machine runs.
const FREE: Price = Price::of(0.0, 0.0, 0.0, 0.0);

/// Prices by model name, with the date of the built-in ones.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, (Price, PriceSource)>,
}

impl Default for PriceTable {
    fn default() -> PriceTable {
        PriceTable::builtin()
    }
}

/// The model names the built-in table prices (OpenAI's and Anthropic's,
/// without their provider prefix): the models skein knows by name, which
/// a mistyped model name is compared with.
pub fn builtin_models() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|(model, _)| *model)
}

impl PriceTable {
    /// The built-in prices, as of [`BUILT_IN_DATE`].
    pub fn builtin() -> PriceTable {
        PriceTable {
            prices: BUILT_IN
                .iter()
                .map(|(model, price)| (model.to_string(), (*price, PriceSource::BuiltIn)))
                .collect(),
        }
    }

    /// A table with no prices (every model unpriced).
    pub fn empty() -> PriceTable {
        PriceTable {
            prices: BTreeMap::new(),
        }
    }

    /// This table with `model` priced at `price` (added, or replacing the
    /// built-in price).
    pub fn with(mut self, model: impl Into<String>, price: Price) -> PriceTable {
        self.prices
            .insert(model.into(), (price, PriceSource::Configured));
        self
    }

    /// The date of the built-in prices, [`BUILT_IN_DATE`].
    pub fn date(&self) -> &'static str {
        BUILT_IN_DATE
    }

    /// How many prices came from the configuration.
    pub fn configured(&self) -> usize {
        self.prices
            .values()
            .filter(|(_, source)| *source == PriceSource::Configured)
            .count()
    }

    /// The price of `model` and the table name it was found under.
    pub fn price_of(&self, model: &str) -> Option<(&str, &Price, PriceSource)> {
        let bare = model.rsplit([':', '/']).next().unwrap_or(model);
        [model, bare]
            .into_iter()
            .find_map(|name| self.exact_or_prefix(name))
    }

    fn exact_or_prefix(&self, model: &str) -> Option<(&str, &Price, PriceSource)> {
        fn found<'t>(
            (name, (price, source)): (&'t String, &'t (Price, PriceSource)),
        ) -> (&'t str, &'t Price, PriceSource) {
            (name.as_str(), price, *source)
        }
        if let Some(entry) = self.prices.get_key_value(model) {
            return Some(found(entry));
        }
        self.prices
            .iter()
            .filter(|(name, _)| {
                model
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(name, _)| name.len())
            .map(found)
    }

    /// The configuration's price of `model`, if it gives one.
    fn configured_price(&self, model: &str) -> Option<(&str, &Price, PriceSource)> {
        self.price_of(model)
            .filter(|(_, _, source)| *source == PriceSource::Configured)
    }

    /// What the runs of `totals` cost at these prices.
    pub fn cost(&self, totals: &Totals) -> Cost {
        // A local run that reported nothing still costs nothing, unless
        // the configuration prices its model.
        let unmeasured = totals
            .incomplete_runs()
            .into_iter()
            .filter(|run| {
                totals
                    .local_runs
                    .get(run)
                    .is_none_or(|model| self.configured_price(model).is_some())
            })
            .collect();
        let mut cost = Cost {
            dollars: 0.0,
            cache_savings: 0.0,
            by_model: Vec::new(),
            unpriced: Vec::new(),
            unmeasured,
            prices_date: self.date(),
        };
        for (model, tokens) in &totals.by_model {
            let local = tokens
                .runs
                .iter()
                .all(|run| totals.local_runs.contains_key(run));
            let priced = match self.configured_price(model) {
                Some(configured) => Some(configured),
                None if local => Some((model.as_str(), &FREE, PriceSource::Local)),
                None => self.price_of(model),
            };
            let dollars = priced.map(|(_, price, _)| price.cost(tokens));
            if let Some((_, price, _)) = priced {
                cost.dollars += price.cost(tokens);
                cost.cache_savings += price.cache_savings(tokens);
            } else {
                cost.unpriced.extend(tokens.runs.iter().cloned());
            }
            cost.by_model.push(ModelCost {
                model: model.clone(),
                priced_as: priced.map(|(name, _, _)| name.to_string()),
                source: priced.map(|(_, _, source)| source),
                runs: tokens.runs.len(),
                dollars,
            });
        }
        cost.unpriced.sort();
        cost
    }
}

/// What a set of runs cost.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cost {
    /// US dollars over the runs that reported usage and have a price: the
    /// whole cost when [`is_complete`](Cost::is_complete), else a lower
    /// bound.
    pub dollars: f64,
    /// What reading from prompt caches saved over paying full input.
    pub cache_savings: f64,
    pub by_model: Vec<ModelCost>,
    /// Runs of a model the price table does not price.
    pub unpriced: Vec<RunId>,
    /// Runs that reported no usage, or only part of it.
    pub unmeasured: Vec<RunId>,
    /// The date of the built-in prices.
    pub prices_date: &'static str,
}

impl Cost {
    /// Whether every run counted is priced and reported its usage.
    pub fn is_complete(&self) -> bool {
        self.unpriced.is_empty() && self.unmeasured.is_empty()
    }

    /// The models without a price, for a message that says what to add.
    pub fn unpriced_models(&self) -> Vec<&str> {
        self.by_model
            .iter()
            .filter(|model| model.dollars.is_none())
            .map(|model| model.model.as_str())
            .collect()
    }
}

/// One model's share of a [`Cost`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelCost {
    pub model: String,
    /// The table name its price was found under; `None`: unpriced.
    pub priced_as: Option<String>,
    pub source: Option<PriceSource>,
    /// Its runs that reported usage.
    pub runs: usize,
    /// `None` when the model has no price.
    pub dollars: Option<f64>,
}

/// A [`Cost`] as reports print it (`skein usage --json`, a replay's
/// report): the figures, and whether they are whole or a lower bound.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostSummary {
    pub dollars: f64,
    /// Every run counted reported its usage and has a price; else
    /// `dollars` is a lower bound.
    pub complete: bool,
    pub cache_savings: f64,
    pub by_model: Vec<ModelCost>,
    pub unpriced_runs: Vec<RunId>,
    pub unmeasured_runs: Vec<RunId>,
    pub prices_date: &'static str,
}

impl From<&Cost> for CostSummary {
    fn from(cost: &Cost) -> CostSummary {
        CostSummary {
            dollars: cost.dollars,
            complete: cost.is_complete(),
            cache_savings: cost.cache_savings,
            by_model: cost.by_model.clone(),
            unpriced_runs: cost.unpriced.clone(),
            unmeasured_runs: cost.unmeasured.clone(),
            prices_date: cost.prices_date,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Usage;
    use crate::run::RunStatus;
    use crate::usage::RunFigures;

    fn run(model: &str, usage: Usage) -> Option<RunFigures> {
        on("openai", model, usage)
    }

    fn on(provider: &str, model: &str, usage: Usage) -> Option<RunFigures> {
        Some(RunFigures {
            model: model.to_string(),
            provider: provider.to_string(),
            status: RunStatus::Succeeded,
            usage,
            usage_complete: true,
        })
    }

    fn usage(input: u64, output: u64, read: Option<u64>, write: Option<u64>) -> Usage {
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn dated_names_take_the_longest_matching_price_and_a_provider_prefix_is_dropped() {
        let table = PriceTable::builtin();
        let name = |model: &str| table.price_of(model).map(|(name, _, _)| name.to_string());
        assert_eq!(
            name("claude-sonnet-4-5-20250929").unwrap(),
            "claude-sonnet-4-5"
        );
        assert_eq!(name("claude-opus-4-1-20250805").unwrap(), "claude-opus-4-1");
        assert_eq!(name("gpt-4o-mini-2024-07-18").unwrap(), "gpt-4o-mini");
        assert_eq!(name("openai:gpt-4o").unwrap(), "gpt-4o");
        assert_eq!(
            name("anthropic/claude-haiku-4-5").unwrap(),
            "claude-haiku-4-5"
        );
        // A prefix must end at a `-`: `gpt-4oo` is no `gpt-4o`.
        assert_eq!(name("gpt-4oo"), None);
        assert_eq!(name("smollm2"), None);
    }

    #[test]
    fn cached_tokens_are_priced_once_at_their_own_rate() {
        // Anthropic, normalised: 1,000 input of which 800 read, 100 written.
        let totals = Totals::of([(
            RunId("a".into()),
            run("claude-sonnet-4-5", usage(1000, 100, Some(800), Some(100))),
        )]);
        let cost = PriceTable::builtin().cost(&totals);
        let expected = (100.0 * 3.0 + 800.0 * 0.3 + 100.0 * 3.75 + 100.0 * 15.0) / 1e6;
        assert!(close(cost.dollars, expected), "{}", cost.dollars);
        assert!(close(cost.cache_savings, 800.0 * 2.7 / 1e6));
        assert!(cost.is_complete());
        // OpenAI: 500 prompt tokens of which 200 cached.
        let totals = Totals::of([(
            RunId("o".into()),
            run("gpt-4o", usage(500, 10, Some(200), None)),
        )]);
        let cost = PriceTable::builtin().cost(&totals);
        let expected = (300.0 * 2.5 + 200.0 * 1.25 + 10.0 * 10.0) / 1e6;
        assert!(close(cost.dollars, expected), "{}", cost.dollars);
    }

    #[test]
    fn unpriced_and_unmeasured_runs_are_named_never_zero() {
        let totals = Totals::of([
            (
                RunId("p".into()),
                run("gpt-4o", usage(1_000_000, 0, None, None)),
            ),
            (RunId("u".into()), run("smollm2", usage(10, 10, None, None))),
            (RunId("m".into()), None),
        ]);
        let cost = PriceTable::builtin().cost(&totals);
        assert!(close(cost.dollars, 2.5));
        assert_eq!(cost.unpriced, vec![RunId("u".into())]);
        assert_eq!(cost.unmeasured, vec![RunId("m".into())]);
        assert_eq!(cost.unpriced_models(), ["smollm2"]);
        assert!(!cost.is_complete());
        // A configured price prices it, and overrides a built-in one.
        let table = PriceTable::builtin()
            .with(
                "smollm2",
                Price {
                    input: 1.0,
                    output: 1.0,
                    cache_read: None,
                    cache_write: None,
                },
            )
            .with(
                "gpt-4o",
                Price {
                    input: 1.0,
                    output: 0.0,
                    cache_read: None,
                    cache_write: None,
                },
            );
        let cost = table.cost(&totals);
        assert!(cost.unpriced.is_empty());
        assert!(close(cost.dollars, 1.0 + 20.0 / 1e6));
        assert_eq!(table.configured(), 2);
        assert_eq!(cost.by_model[0].source, Some(PriceSource::Configured));
    }

    #[test]
    fn what_runs_on_this_machine_costs_exactly_nothing_and_is_whole() {
        let none = Usage::default();
        let totals = Totals::of([
            (
                RunId("e".into()),
                on("echo", "echo", usage(1_000, 10, None, None)),
            ),
            (
                RunId("s".into()),
                on("scripted", "scripted", usage(5, 5, None, None)),
            ),
            (
                RunId("l".into()),
                on("local", "smollm2", usage(50, 50, None, None)),
            ),
            // A local GGUF file named like a paid model is still free, and
            // a local run without figures leaves the cost whole.
            (
                RunId("g".into()),
                on("local", "/models/gpt-4o-mini.gguf", none),
            ),
            (
                RunId("h".into()),
                on(
                    "local",
                    "/models/gpt-4o-mini-q4.gguf",
                    usage(9, 9, None, None),
                ),
            ),
        ]);
        let cost = PriceTable::builtin().cost(&totals);
        assert_eq!(cost.dollars, 0.0);
        assert!(cost.is_complete(), "{cost:?}");
        assert!(cost.unpriced.is_empty() && cost.unmeasured.is_empty());
        for model in &cost.by_model {
            assert_eq!(model.dollars, Some(0.0), "{model:?}");
            assert_eq!(model.source, Some(PriceSource::Local));
        }
        // A paid model's missing usage is still a lower bound beside them.
        let mixed = Totals::of([
            (
                RunId("e".into()),
                on("echo", "echo", usage(10, 10, None, None)),
            ),
            (RunId("p".into()), on("openai", "gpt-4o", none)),
        ]);
        let cost = PriceTable::builtin().cost(&mixed);
        assert_eq!(cost.unmeasured, vec![RunId("p".into())]);
        assert!(!cost.is_complete());
        // A configured price for a local model is its price.
        let table = PriceTable::builtin().with(
            "smollm2",
            Price {
                input: 1.0,
                output: 1.0,
                cache_read: None,
                cache_write: None,
            },
        );
        let cost = table.cost(&totals);
        assert!(close(cost.dollars, 100.0 / 1e6), "{}", cost.dollars);
        let smollm2 = cost.by_model.iter().find(|m| m.model == "smollm2").unwrap();
        assert_eq!(smollm2.source, Some(PriceSource::Configured));
    }
}
