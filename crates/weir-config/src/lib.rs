//! weir's configuration: YAML with positions, the validated model, and the rule language.
#![forbid(unsafe_code)]

pub mod breaker_expression;
pub mod dump;
pub mod load;
pub mod model;
pub mod predicate;
mod regex_error;
pub mod rule;
pub mod yaml;

pub use load::{
    acme_warnings, load_file, load_file_with, load_str, located, parse_jwk_set, ConfigError,
    Document, Sources,
};
pub use model::*;
