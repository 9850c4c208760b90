/*!
The proxy's model table: which skein model answers the model a client asks
for. Names map exactly (`gpt-4o-mini` → `openai:gpt-4o-mini`); a request
naming no model, or one the table lacks, goes to the fallback (`"*"` in
the configuration, or `-m`), and without a fallback it is refused with a
404 that lists the names served.
*/

use super::turn::{ErrorKind, ProxyError};
use axum::http::StatusCode;
use skein::Model;
use std::collections::BTreeMap;

/// Client model names to skein models.
#[derive(Clone, Debug, Default)]
pub struct ModelTable {
    named: BTreeMap<String, Model>,
    fallback: Option<Model>,
}

impl ModelTable {
    /// Every request answered by `model`, whatever it names.
    pub fn single(model: Model) -> ModelTable {
        ModelTable {
            named: BTreeMap::new(),
            fallback: Some(model),
        }
    }

    /// `named` models by the name clients ask for, and the model that
    /// answers any other name (or none).
    pub fn new(named: BTreeMap<String, Model>, fallback: Option<Model>) -> ModelTable {
        ModelTable { named, fallback }
    }

    /// The model that answers a request for `requested`.
    pub fn route(&self, requested: Option<&str>) -> Result<&Model, ProxyError> {
        if let Some(model) = requested.and_then(|name| self.named.get(name)) {
            return Ok(model);
        }
        self.fallback.as_ref().ok_or_else(|| {
            let served: Vec<String> = self.named.keys().map(|name| format!("`{name}`")).collect();
            ProxyError::new(
                StatusCode::NOT_FOUND,
                ErrorKind::NotFound,
                format!(
                    "{} is not served here (this proxy serves {}): add it to [proxy.models] in config.toml, or give a fallback (`\"*\"` there, or -m)",
                    match requested {
                        Some(name) => format!("model `{name}`"),
                        None => "a request without a model".to_string(),
                    },
                    served.join(", ")
                ),
            )
            .at("model")
        })
    }

    /// The names clients may ask for (the fallback answers any other).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.named.keys().cloned().collect();
        if let Some(fallback) = &self.fallback
            && !self.named.contains_key(fallback.name())
        {
            names.push(fallback.name().to_string());
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_exactly_and_the_rest_go_to_the_fallback_or_are_refused() {
        let echo = Model::open("echo").unwrap();
        let named = BTreeMap::from([("gpt-4o-mini".to_string(), echo.clone())]);
        let strict = ModelTable::new(named.clone(), None);
        assert_eq!(strict.route(Some("gpt-4o-mini")).unwrap().name(), "echo");
        let refused = strict.route(Some("claude-x")).unwrap_err();
        assert_eq!(refused.status, StatusCode::NOT_FOUND);
        assert!(
            refused.message.contains("`claude-x`"),
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("`gpt-4o-mini`"),
            "{}",
            refused.message
        );
        assert!(strict.route(None).is_err());
        assert_eq!(strict.names(), ["gpt-4o-mini"]);

        let open = ModelTable::new(named, Some(echo));
        assert_eq!(open.route(Some("anything")).unwrap().name(), "echo");
        assert_eq!(open.route(None).unwrap().name(), "echo");
        assert_eq!(open.names(), ["gpt-4o-mini", "echo"]);
    }
}
