//! Which transaction protocol a transactional producer speaks: transactions V1 (Kafka 0.11 to
//! 3.x: AddPartitionsToTxn before a partition's first write, AddOffsetsToTxn before
//! TxnOffsetCommit, the epoch bumped by the client only to recover) or transactions V2
//! (KIP-890 part 2, Kafka 4.0: Produce v12 adds the partition, TxnOffsetCommit v5 adds the
//! group, and every EndTxn v5 bumps the epoch and returns it).
//!
//! What the cluster offers is gathered from every ApiVersions answer the owner's engine reads
//! (`ClusterFeatures`, Java's `ApiVersions.update`: the finalized features of the answer with the
//! highest `FinalizedFeaturesEpoch`). The decision (`decide`) follows
//! `TransactionManager.maybeUpdateTransactionV2Enabled` and `kacrab.transaction.version`; the
//! transaction manager makes it at Java's two points only, so one transaction never changes
//! protocol half-way: when `init_transactions` succeeds and when a commit or abort begins
//! (for the next transaction; the EndTxn of the ending one keeps the protocol it began with).

use std::collections::BTreeMap;

use kafka_protocol::messages::ApiVersionsResponse;

pub use crate::config::TransactionVersion;

use crate::config::keys::KACRAB_TRANSACTION_VERSION;
use crate::error::{ErrorCause, TransactionError};
use crate::protocol::api::{ApiKey, NegotiatedVersions};
use crate::protocol::error_code::code;

use super::NodeId;

/// The name of the feature (KIP-584) whose finalized level turns transactions V2 on.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";

/// The first version of each API that speaks transactions V2: Produce v12, EndTxn v5,
/// TxnOffsetCommit v5 (Java's `LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2` plus one, in
/// `ProduceRequest`, `EndTxnRequest` and `TxnOffsetCommitRequest`).
pub const FIRST_TV2_VERSIONS: [(ApiKey, i16); 3] = [
    (ApiKey::Produce, 12),
    (ApiKey::EndTxn, 5),
    (ApiKey::TxnOffsetCommit, 5),
];

/// The version to send `api` at on a connection that negotiated `negotiated`, for a request of
/// a transactions V2 transaction (`v2`) or not: V1 caps the three V2 APIs one below their V2
/// version; V2 needs at least the V2 version, and a connection without it is the typed
/// reason the request cannot go out (Java's version mismatch, fatal).
pub fn version_for(api: ApiKey, negotiated: i16, v2: bool) -> Result<i16, String> {
    let Some((_, first)) = FIRST_TV2_VERSIONS.iter().find(|(a, _)| *a == api) else {
        return Ok(negotiated);
    };
    match (v2, negotiated >= *first) {
        (false, _) => Ok(negotiated.min(first - 1)),
        (true, true) => Ok(negotiated),
        (true, false) => Err(format!(
            "the broker speaks {api} up to v{negotiated}; a transactions V2 transaction needs \
             v{first} (Kafka 4.0)"
        )),
    }
}

/// What the brokers told this engine about transactions V2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFeatures {
    /// The highest `FinalizedFeaturesEpoch` of any answer (-1: none carried one; Java's
    /// `ApiVersions.maxFinalizedFeaturesEpoch`).
    pub finalized_features_epoch: i64,
    /// `transaction.version`'s finalized level in that answer (`None`: not finalized).
    pub transaction_version: Option<i16>,
    /// The broker of that answer speaks the V2 versions ([`FIRST_TV2_VERSIONS`]).
    pub features_broker_speaks_tv2: bool,
    /// Each broker's latest answer: does it speak the V2 versions (Java's per-node
    /// `NodeApiVersions`). One entry per node the engine connected to, replaced by the node's
    /// next answer, so bounded by the cluster's size.
    pub nodes: BTreeMap<NodeId, bool>,
}

impl Default for ClusterFeatures {
    fn default() -> Self {
        ClusterFeatures {
            finalized_features_epoch: -1,
            transaction_version: None,
            features_broker_speaks_tv2: false,
            nodes: BTreeMap::new(),
        }
    }
}

impl ClusterFeatures {
    /// One broker's ApiVersions answer (Java's `ApiVersions.update`): the finalized features
    /// are replaced only by an answer of a higher epoch, so a broker that has not caught up
    /// with a feature change does not undo it.
    pub fn on_api_versions(
        &mut self,
        node: NodeId,
        response: &ApiVersionsResponse,
        negotiated: &NegotiatedVersions,
    ) {
        let tv2 = speaks_tv2(negotiated);
        self.nodes.insert(node, tv2);
        if response.finalized_features_epoch > self.finalized_features_epoch {
            self.finalized_features_epoch = response.finalized_features_epoch;
            self.features_broker_speaks_tv2 = tv2;
            self.transaction_version = response
                .finalized_features
                .iter()
                .find(|f| f.name.as_str() == TRANSACTION_VERSION_FEATURE)
                .map(|f| f.max_version_level);
        }
    }

    /// The cluster finalized `transaction.version` ≥ 2 (Java's test in
    /// `maybeUpdateTransactionV2Enabled`).
    pub fn tv2_finalized(&self) -> bool {
        self.transaction_version.is_some_and(|v| v >= 2)
    }

    /// Every broker heard from speaks the V2 versions of the three APIs (each by its latest
    /// answer), and at least one was heard from.
    pub fn brokers_speak_tv2(&self) -> bool {
        !self.nodes.is_empty() && self.nodes.values().all(|tv2| *tv2)
    }
}

/// A connection's negotiated versions reach the first V2 version of each API.
pub fn speaks_tv2(negotiated: &NegotiatedVersions) -> bool {
    FIRST_TV2_VERSIONS
        .iter()
        .all(|(api, first)| negotiated.version(*api).is_ok_and(|v| v >= *first))
}

/// Whether the next transaction runs under transactions V2, or why it cannot.
///
/// `auto` is Java's rule (finalized `transaction.version` ≥ 2), with one more condition Java
/// leaves to the brokers: the broker whose answer carried the feature speaks the V2 versions.
/// A cluster that finalized the feature always does; a broker that claims it without them
/// would refuse the implicit adds, so `auto` stays on V1 there. (A broker that joins later
/// without Produce v12 is refused when a V2 batch is drained for it, `sender/drain.rs`.) `1` is
/// V1 on any cluster (a 4.x coordinator still serves V1 transactions). `2` is V2 whatever the
/// feature says, and a broker heard from without the V2 versions is a fatal error naming the
/// key, never a silent V1.
pub fn decide(
    config: TransactionVersion,
    cluster: &ClusterFeatures,
) -> Result<bool, TransactionError> {
    match config {
        TransactionVersion::V1 => Ok(false),
        TransactionVersion::Auto => {
            Ok(cluster.tv2_finalized() && cluster.features_broker_speaks_tv2)
        }
        TransactionVersion::V2 if cluster.brokers_speak_tv2() => Ok(true),
        TransactionVersion::V2 => Err(TransactionError::Fatal(ErrorCause::Other {
            code: Some(code::UNSUPPORTED_VERSION),
            reason: format!(
                "`{KACRAB_TRANSACTION_VERSION}` is 2, but brokers {:?} lack Produce v12, EndTxn \
                 v5 or TxnOffsetCommit v5 (transactions V2, Kafka 4.0)",
                cluster
                    .nodes
                    .iter()
                    .filter(|(_, tv2)| !**tv2)
                    .map(|(node, _)| *node)
                    .collect::<Vec<_>>()
            ),
        })),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn answer(epoch: i64, level: Option<i16>, tv2_apis: bool) -> ApiVersionsResponse {
        let (produce, end_txn, offsets) = if tv2_apis { (12, 5, 5) } else { (11, 4, 4) };
        let keys = [
            (0, 3, produce),
            (3, 1, 12),
            (26, 0, end_txn),
            (28, 0, offsets),
        ]
        .into_iter()
        .map(|(k, min, max)| {
            ApiVersion::default()
                .with_api_key(k)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
        let mut features = vec![FinalizedFeatureKey::default()
            .with_name(StrBytes::from_static_str("metadata.version"))
            .with_max_version_level(25)
            .with_min_version_level(25)];
        if let Some(level) = level {
            features.push(
                FinalizedFeatureKey::default()
                    .with_name(StrBytes::from_static_str(TRANSACTION_VERSION_FEATURE))
                    .with_max_version_level(level)
                    .with_min_version_level(level),
            );
        }
        ApiVersionsResponse::default()
            .with_api_keys(keys)
            .with_finalized_features_epoch(epoch)
            .with_finalized_features(features)
    }

    /// The answers, each from its own node.
    fn heard(answers: &[ApiVersionsResponse]) -> ClusterFeatures {
        let mut cluster = ClusterFeatures::default();
        for (node, a) in answers.iter().enumerate() {
            cluster.on_api_versions(node as NodeId, a, &NegotiatedVersions::from_response(a));
        }
        cluster
    }

    #[test]
    fn tv2_is_chosen_only_when_the_feature_is_finalized() {
        let auto = TransactionVersion::Auto;
        // A 4.0 cluster that finalized transaction.version=2.
        assert_eq!(decide(auto, &heard(&[answer(3, Some(2), true)])), Ok(true));
        // The same brokers with the feature at 1 or not finalized at all: V1.
        assert_eq!(decide(auto, &heard(&[answer(3, Some(1), true)])), Ok(false));
        assert_eq!(decide(auto, &heard(&[answer(3, None, true)])), Ok(false));
        // A 3.x cluster: no V2 versions, no feature.
        assert_eq!(decide(auto, &heard(&[answer(-1, None, false)])), Ok(false));
        // Nothing heard yet.
        assert_eq!(decide(auto, &ClusterFeatures::default()), Ok(false));
    }

    #[test]
    fn the_finalized_features_of_the_highest_epoch_win_as_in_java_api_versions() {
        // A broker that lags behind (older epoch, feature not yet finalized) does not undo the
        // newer answer, whichever order they come in.
        let newer = answer(9, Some(2), true);
        let older = answer(4, None, true);
        assert!(heard(&[newer.clone(), older.clone()]).tv2_finalized());
        assert!(heard(&[older, newer]).tv2_finalized());
        // A later epoch that lowered the feature wins too.
        assert!(!heard(&[answer(9, Some(2), true), answer(10, Some(1), true)]).tv2_finalized());
    }

    #[test]
    fn auto_stays_on_tv1_when_the_broker_of_the_feature_lacks_the_tv2_versions() {
        let cluster = heard(&[answer(5, Some(2), false)]);
        assert!(cluster.tv2_finalized());
        assert_eq!(decide(TransactionVersion::Auto, &cluster), Ok(false));
    }

    #[test]
    fn a_brokers_newer_answer_replaces_its_older_one() {
        // Broker 0 before and after its upgrade to 4.0: only its latest answer counts.
        let mut cluster = ClusterFeatures::default();
        let old = answer(-1, None, false);
        let new = answer(2, Some(2), true);
        cluster.on_api_versions(0, &old, &NegotiatedVersions::from_response(&old));
        assert!(!cluster.brokers_speak_tv2());
        cluster.on_api_versions(0, &new, &NegotiatedVersions::from_response(&new));
        assert!(cluster.brokers_speak_tv2());
        assert_eq!(decide(TransactionVersion::Auto, &cluster), Ok(true));
        assert_eq!(cluster.nodes.len(), 1);
    }

    #[test]
    fn transaction_version_key_forces_tv1_on_a_tv2_cluster() {
        let cluster = heard(&[answer(3, Some(2), true)]);
        assert_eq!(decide(TransactionVersion::V1, &cluster), Ok(false));
    }

    #[test]
    fn transaction_version_key_forces_tv2_and_refuses_a_cluster_without_its_versions() {
        // Forced V2 does not need the feature, only the versions.
        let cluster = heard(&[answer(-1, None, true)]);
        assert_eq!(decide(TransactionVersion::V2, &cluster), Ok(true));
        let err = decide(TransactionVersion::V2, &heard(&[answer(-1, None, false)])).unwrap_err();
        assert!(
            matches!(&err, TransactionError::Fatal(ErrorCause::Other { code: Some(c), .. })
                if *c == code::UNSUPPORTED_VERSION),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(KACRAB_TRANSACTION_VERSION),
            "{err}"
        );
    }

    #[test]
    fn a_tv1_transaction_caps_the_three_apis_below_their_tv2_version_and_tv2_needs_it() {
        assert_eq!(version_for(ApiKey::Produce, 12, false), Ok(11));
        assert_eq!(version_for(ApiKey::Produce, 9, false), Ok(9));
        assert_eq!(version_for(ApiKey::EndTxn, 5, false), Ok(4));
        assert_eq!(version_for(ApiKey::TxnOffsetCommit, 5, false), Ok(4));
        assert_eq!(version_for(ApiKey::Produce, 12, true), Ok(12));
        assert_eq!(version_for(ApiKey::EndTxn, 5, true), Ok(5));
        let err = version_for(ApiKey::Produce, 11, true).unwrap_err();
        assert!(
            err.contains("Produce up to v11") && err.contains("v12"),
            "{err}"
        );
        assert!(version_for(ApiKey::EndTxn, 4, true).is_err());
        assert!(version_for(ApiKey::TxnOffsetCommit, 4, true).is_err());
        // APIs without a V2 meaning are left as negotiated.
        assert_eq!(version_for(ApiKey::InitProducerId, 4, true), Ok(4));
        assert_eq!(version_for(ApiKey::InitProducerId, 4, false), Ok(4));
    }
}
