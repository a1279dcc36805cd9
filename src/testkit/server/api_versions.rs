//! Which APIs and versions each broker advertises, and the ApiVersions answer.
//!
//! A broker serves exactly what it advertises: a request outside the advertised range closes
//! the connection (as Kafka's `SocketServer` does for an unsupported version), except
//! ApiVersions itself, which answers UNSUPPORTED_VERSION in a v0 body carrying its own range so
//! the client can retry at a version the broker knows (KIP-511, `ApiVersionsRequest.getErrorResponse`).

use std::collections::BTreeMap;

use bytes::BytesMut;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Encodable;

use super::handlers::str_bytes;
use super::handlers::HandlerResult;
use crate::testkit::broker::error_codes::UNSUPPORTED_VERSION;
use crate::testkit::broker::{MAX_TRANSACTION_VERSION_LEVEL, TRANSACTION_VERSION_FEATURE};

/// The versions the TCP face implements, per API: the default advertisement and the ceiling
/// for [`super::ReferenceCluster::set_api_versions`].
pub const IMPLEMENTED: &[(ApiKey, i16, i16)] = &[
    // v12 is TV2's (v13 names topics by id and is not implemented).
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::ApiVersions, 0, 3),
    // v5 only tells the broker the client knows TRANSACTION_ABORTABLE (KIP-890).
    (ApiKey::InitProducerId, 0, 5),
    // The transaction APIs. TV2 starts at Produce v12, EndTxn v5 and TxnOffsetCommit v5; Kafka
    // 4.0 advertises these whatever its finalized `transaction.version`, and picks the protocol
    // by the request's version. AddPartitionsToTxn v4+ is what brokers send the coordinator
    // (KIP-890), never a client.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
];

/// One broker's advertised ranges, by API key.
#[derive(Debug, Clone)]
pub struct ApiVersionTable {
    ranges: BTreeMap<i16, (i16, i16)>,
}

impl Default for ApiVersionTable {
    fn default() -> Self {
        ApiVersionTable {
            ranges: IMPLEMENTED
                .iter()
                .map(|&(api, min, max)| (api as i16, (min, max)))
                .collect(),
        }
    }
}

impl ApiVersionTable {
    /// Advertises SaslHandshake and SaslAuthenticate, as a SASL listener does.
    pub fn add_sasl(&mut self) {
        for &(api, min, max) in super::sasl::IMPLEMENTED {
            self.ranges.insert(api as i16, (min, max));
        }
    }

    /// Restricts (or restores, or with `None` removes) one API's range. The range must lie
    /// within what the face implements.
    pub fn set(&mut self, api: ApiKey, range: Option<(i16, i16)>) {
        match range {
            None => {
                assert!(
                    api != ApiKey::ApiVersions,
                    "every broker answers ApiVersions"
                );
                self.ranges.remove(&(api as i16));
            }
            Some((min, max)) => {
                let (_, lo, hi) = IMPLEMENTED
                    .iter()
                    .chain(super::sasl::IMPLEMENTED)
                    .find(|(a, _, _)| *a == api)
                    .copied()
                    .unwrap_or_else(|| panic!("{api:?} is not implemented"));
                assert!(
                    lo <= min && min <= max && max <= hi,
                    "{api:?} {min}..={max} outside {lo}..={hi}"
                );
                self.ranges.insert(api as i16, (min, max));
            }
        }
    }

    /// The versions advertised for `api_key`, inclusive; `None` when it is not advertised.
    pub fn range(&self, api_key: i16) -> Option<(i16, i16)> {
        self.ranges.get(&api_key).copied()
    }

    /// Whether `version` of `api_key` is advertised.
    pub fn supports(&self, api_key: i16, version: i16) -> bool {
        self.range(api_key)
            .is_some_and(|(min, max)| (min..=max).contains(&version))
    }

    fn api_keys(&self) -> Vec<ApiVersion> {
        self.ranges
            .iter()
            .map(|(&key, &(min, max))| {
                ApiVersion::default()
                    .with_api_key(key)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect()
    }
}

/// The normal answer, at the request's version. From v3 (KIP-511's tagged fields) it names
/// the features: `transaction.version` is supported at levels 0..=2, and finalized at
/// `transaction_version` (the cluster's [`BrokerRules::transaction_version`]) with the
/// finalized-features epoch; a level of 0 is not finalized and is left out, as Kafka leaves
/// out features at level 0 (`ApiVersionsResponse.createApiVersionsResponse`, `FinalizedFeatures`).
///
/// [`BrokerRules::transaction_version`]: crate::testkit::broker::BrokerRules::transaction_version
pub fn answer(
    table: &ApiVersionTable,
    version: i16,
    injected: Option<i16>,
    (transaction_version, features_epoch): (i16, i64),
    out: &mut BytesMut,
) -> HandlerResult {
    let finalized = if transaction_version > 0 {
        vec![FinalizedFeatureKey::default()
            .with_name(str_bytes(TRANSACTION_VERSION_FEATURE))
            .with_min_version_level(transaction_version)
            .with_max_version_level(transaction_version)]
    } else {
        Vec::new()
    };
    let response = ApiVersionsResponse::default()
        .with_error_code(injected.unwrap_or(0))
        .with_api_keys(table.api_keys())
        .with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(str_bytes(TRANSACTION_VERSION_FEATURE))
            .with_min_version(0)
            .with_max_version(MAX_TRANSACTION_VERSION_LEVEL)])
        .with_finalized_features_epoch(features_epoch)
        .with_finalized_features(finalized);
    response.encode(out, version)?;
    Ok(super::handlers::Reply::Respond)
}

/// The answer to an ApiVersions request of a version the broker does not advertise: always
/// encoded as v0, naming only the ApiVersions range.
pub fn answer_unsupported(table: &ApiVersionTable, out: &mut BytesMut) -> HandlerResult {
    let (min, max) = table.range(ApiKey::ApiVersions as i16).unwrap_or((0, 0));
    let response = ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(vec![ApiVersion::default()
            .with_api_key(ApiKey::ApiVersions as i16)
            .with_min_version(min)
            .with_max_version(max)]);
    response.encode(out, 0)?;
    Ok(super::handlers::Reply::Respond)
}
