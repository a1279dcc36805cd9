//! Which transaction protocol a request speaks: Kafka's `TransactionVersion` feature and the
//! per-request choice the broker makes from the request's version.
//!
//! A Kafka 4.x cluster finalizes the feature `transaction.version` (0, 1 or 2; 2 on a cluster
//! created by 4.0 or later) and advertises it in ApiVersions v3+. Clients read it and send the
//! TV2 versions of Produce, EndTxn and TxnOffsetCommit only when the finalized level is 2 or
//! more (`ProduceRequest.Builder`, `EndTxnRequest.Builder` cap their version at
//! `LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2` otherwise). The broker itself does not look at
//! the feature to serve a client request: it decides from the request's version alone
//! (`TransactionVersion.transactionVersionForEndTxn`, `AddPartitionsToTxnManager
//! .produceRequestVersionToTransactionSupportedOperation` and
//! `txnOffsetCommitRequestVersionToTransactionSupportedOperation`). Only what the coordinator
//! does on its own, the timeout abort and InitProducerId's fence of an open transaction, uses
//! the cluster's finalized level (`TransactionStateManager.transactionVersionLevel`).

/// The feature's name in ApiVersions (`TransactionVersion.FEATURE_NAME`).
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";

/// The highest `transaction.version` level this broker supports (`TransactionVersion.TV_2`).
pub const MAX_TRANSACTION_VERSION_LEVEL: i16 = 2;

/// The transaction protocol of one request or coordinator action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionVersion {
    /// Kafka 3.x transactions (feature levels 0 and 1): partitions added by
    /// AddPartitionsToTxn/AddOffsetsToTxn, the epoch kept across transactions, KIP-890 part 1
    /// verification of produce.
    Tv1,
    /// KIP-890 part 2 (feature level 2): partitions added implicitly by Produce and
    /// TxnOffsetCommit, the epoch bumped by every EndTxn, markers at the bumped epoch.
    Tv2,
}

impl TransactionVersion {
    /// The protocol of a finalized feature level (`TransactionVersion.fromFeatureLevel`,
    /// `supportsEpochBump`: level 2 and up).
    pub fn from_feature_level(level: i16) -> Self {
        if level >= 2 {
            TransactionVersion::Tv2
        } else {
            TransactionVersion::Tv1
        }
    }

    /// Produce v12 and up is TV2 (`produceRequestVersionToTransactionSupportedOperation`:
    /// `addPartition` above v11).
    pub fn for_produce(version: i16) -> Self {
        Self::from_threshold(version, 12)
    }

    /// EndTxn v5 and up is TV2 (`TransactionVersion.transactionVersionForEndTxn`).
    pub fn for_end_txn(version: i16) -> Self {
        Self::from_threshold(version, 5)
    }

    /// TxnOffsetCommit v5 and up is TV2
    /// (`txnOffsetCommitRequestVersionToTransactionSupportedOperation`).
    pub fn for_txn_offset_commit(version: i16) -> Self {
        Self::from_threshold(version, 5)
    }

    fn from_threshold(version: i16, first_tv2: i16) -> Self {
        if version >= first_tv2 {
            TransactionVersion::Tv2
        } else {
            TransactionVersion::Tv1
        }
    }

    /// Whether ending a transaction bumps the epoch (`TransactionVersion.supportsEpochBump`).
    pub fn supports_epoch_bump(self) -> bool {
        self == TransactionVersion::Tv2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // TransactionVersion `transactionVersionForEndTxn`, AddPartitionsToTxnManager
    // `produceRequestVersionToTransactionSupportedOperation` /
    // `txnOffsetCommitRequestVersionToTransactionSupportedOperation`.
    #[test]
    fn tv2_starts_at_produce_v12_end_txn_v5_and_txn_offset_commit_v5() {
        assert_eq!(TransactionVersion::for_produce(11), TransactionVersion::Tv1);
        assert_eq!(TransactionVersion::for_produce(12), TransactionVersion::Tv2);
        assert_eq!(TransactionVersion::for_end_txn(4), TransactionVersion::Tv1);
        assert_eq!(TransactionVersion::for_end_txn(5), TransactionVersion::Tv2);
        assert_eq!(
            TransactionVersion::for_txn_offset_commit(4),
            TransactionVersion::Tv1
        );
        assert_eq!(
            TransactionVersion::for_txn_offset_commit(5),
            TransactionVersion::Tv2
        );
        for level in [0, 1] {
            assert_eq!(
                TransactionVersion::from_feature_level(level),
                TransactionVersion::Tv1
            );
        }
        assert_eq!(
            TransactionVersion::from_feature_level(2),
            TransactionVersion::Tv2
        );
    }
}
