//! What an acquirer writes about itself.

use crate::record::RESERVED_FIELDS;
use serde_json::{Map, Value};

/// What the acquirer writes about itself beside the core fields.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Who takes it (a harness name, a user), shown to those refused.
    pub owner: String,
    /// Further fields: `role`, `profile`, `agentIdentity`, `limit_ms`... Names the core writes
    /// itself ([`RESERVED_FIELDS`]) are refused.
    pub fields: Map<String, Value>,
}

impl Request {
    /// A request by `owner` with no further fields.
    #[must_use]
    pub fn new(owner: impl Into<String>) -> Request {
        Request {
            owner: owner.into(),
            fields: Map::new(),
        }
    }

    /// Adds a field.
    #[must_use]
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Request {
        self.fields.insert(name.to_owned(), value.into());
        self
    }
}

impl Request {
    /// The first field of the request that the core writes itself, if any.
    pub(crate) fn reserved_field(&self) -> Option<&str> {
        self.fields
            .keys()
            .find(|k| RESERVED_FIELDS.contains(&k.as_str()))
            .map(String::as_str)
    }
}
