//! `metadata.recovery.strategy` (KIP-899): what the producer does when the brokers it knows
//! cannot be reached. The engine acts on it (`engine::sender::rebootstrap`).

use super::{parse, ConfigError};

/// `metadata.recovery.strategy` (KIP-899): what the producer does when it can reach none of the
/// brokers its metadata names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetadataRecoveryStrategy {
    /// Keep trying the brokers of the last metadata answer.
    None,
    /// Forget them and start again from `bootstrap.servers`, resolved afresh (Java 4.x's
    /// default).
    #[default]
    Rebootstrap,
}

impl MetadataRecoveryStrategy {
    /// Java's `CaseInsensitiveValidString` over `MetadataRecoveryStrategy`'s names.
    pub(super) fn parse(key: &str, raw: &str) -> Result<Self, ConfigError> {
        let v = raw.trim();
        if v.eq_ignore_ascii_case("none") {
            Ok(MetadataRecoveryStrategy::None)
        } else if v.eq_ignore_ascii_case("rebootstrap") {
            Ok(MetadataRecoveryStrategy::Rebootstrap)
        } else {
            Err(parse::invalid(
                key,
                raw,
                "must be one of none, rebootstrap (case-insensitive)",
            ))
        }
    }

    /// The property value, as Java's `MetadataRecoveryStrategy.name` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            MetadataRecoveryStrategy::None => "none",
            MetadataRecoveryStrategy::Rebootstrap => "rebootstrap",
        }
    }
}
