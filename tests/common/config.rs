//! Building a producer configuration from key-value pairs, for the configuration tests.

use kacrab::config::{ConfigError, ProducerConfig};

/// `pairs` on top of a bootstrap address, built.
pub fn build(pairs: &[(&str, &str)]) -> Result<ProducerConfig, ConfigError> {
    pairs
        .iter()
        .fold(
            ProducerConfig::builder().set("bootstrap.servers", "localhost:9092"),
            |b, (k, v)| b.set(k, *v),
        )
        .build()
}

/// The key and the rule of the `InvalidValue` that `pairs` must give.
pub fn invalid(pairs: &[(&str, &str)]) -> (String, String) {
    match build(pairs) {
        Err(ConfigError::InvalidValue { key, rule, .. }) => (key, rule),
        other => panic!("{pairs:?}: expected an invalid value, got {other:?}"),
    }
}
