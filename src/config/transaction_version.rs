//! `kacrab.transaction.version`: which transaction protocol a transactional producer speaks.
//! Java has no such key; its 4.x producer always follows the cluster (transactions V2, KIP-890
//! part 2, once the cluster finalized the feature `transaction.version` at 2 or more). The key
//! exists so tests can force either protocol against one cluster.

use std::fmt;

use super::keys::{KACRAB_TRANSACTION_VERSION, TRANSACTIONAL_ID};
use super::parse;
use super::ConfigError;

/// The transaction protocol a transactional producer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransactionVersion {
    /// `auto` (the default): as Java 4.x, transactions V2 when the cluster finalized
    /// `transaction.version` ≥ 2 and its brokers speak Produce v12, EndTxn v5 and
    /// TxnOffsetCommit v5; transactions V1 otherwise.
    #[default]
    Auto,
    /// `1`: transactions V1 (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ≤ v4) on any cluster.
    V1,
    /// `2`: transactions V2 whatever the cluster finalized; `init_transactions` fails with a
    /// fatal error naming this key when a broker lacks Produce v12, EndTxn v5 or
    /// TxnOffsetCommit v5.
    V2,
}

impl TransactionVersion {
    /// Parses the key's value: `auto`, `1` or `2` (surrounding spaces ignored).
    pub(super) fn parse(raw: &str) -> Result<Self, ConfigError> {
        match raw.trim() {
            "auto" => Ok(TransactionVersion::Auto),
            "1" => Ok(TransactionVersion::V1),
            "2" => Ok(TransactionVersion::V2),
            _ => Err(parse::invalid(
                KACRAB_TRANSACTION_VERSION,
                raw,
                "must be one of auto, 1, 2",
            )),
        }
    }
}

/// The cross-key rule: forcing a protocol (`1` or `2`) means something only for a
/// transactional producer, so it needs `transactional.id` (`auto` is the default and always
/// allowed).
pub(super) fn check(
    version: Option<TransactionVersion>,
    transactional: bool,
) -> Result<(), ConfigError> {
    match version {
        Some(forced @ (TransactionVersion::V1 | TransactionVersion::V2)) if !transactional => {
            Err(ConfigError::Conflict {
                keys: vec![KACRAB_TRANSACTION_VERSION.into(), TRANSACTIONAL_ID.into()],
                rule: format!(
                    "`{KACRAB_TRANSACTION_VERSION}` is {forced}, which chooses a transaction \
                     protocol, but `{TRANSACTIONAL_ID}` is not set; set it, or leave the \
                     version at auto"
                ),
            })
        }
        _ => Ok(()),
    }
}

impl fmt::Display for TransactionVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransactionVersion::Auto => "auto",
            TransactionVersion::V1 => "1",
            TransactionVersion::V2 => "2",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_version_key_takes_auto_1_or_2_and_names_itself_otherwise() {
        assert_eq!(
            TransactionVersion::parse("auto").unwrap(),
            TransactionVersion::Auto
        );
        assert_eq!(
            TransactionVersion::parse(" 1 ").unwrap(),
            TransactionVersion::V1
        );
        assert_eq!(
            TransactionVersion::parse("2").unwrap(),
            TransactionVersion::V2
        );
        for bad in ["3", "0", "v2", "AUTO", ""] {
            let err = TransactionVersion::parse(bad).unwrap_err();
            assert_eq!(err.keys(), vec![KACRAB_TRANSACTION_VERSION], "{bad}");
            assert!(err.to_string().contains("auto, 1, 2"), "{err}");
        }
    }

    #[test]
    fn a_forced_transaction_version_needs_a_transactional_id() {
        for forced in [TransactionVersion::V1, TransactionVersion::V2] {
            let err = check(Some(forced), false).unwrap_err();
            assert_eq!(
                err.keys(),
                vec![KACRAB_TRANSACTION_VERSION, TRANSACTIONAL_ID]
            );
            assert!(check(Some(forced), true).is_ok());
        }
        assert!(check(Some(TransactionVersion::Auto), false).is_ok());
        assert!(check(None, false).is_ok());
    }
}
