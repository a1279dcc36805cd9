//! API keys kacrab speaks, the version range it implements for each, and per-connection
//! version negotiation from the broker's ApiVersions answer.
//!
//! Invariant: a request is only ever sent at a version inside both our range and the range the
//! broker advertised on that connection. Brokers (and librdkafka's mock) close the connection
//! on a request outside their range instead of answering with an error.

use std::fmt;

use kafka_protocol::messages::ApiVersionsResponse;

/// Kafka API keys used by the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i16)]
pub enum ApiKey {
    /// Produce (0): record batches to partition leaders.
    Produce = 0,
    /// Metadata (3): brokers, topics and partition leaders.
    Metadata = 3,
    /// FindCoordinator (10): the transaction coordinator of a `transactional.id`.
    FindCoordinator = 10,
    /// SaslHandshake (17): the SASL mechanism of a connection.
    SaslHandshake = 17,
    /// ApiVersions (18): the versions a broker speaks, asked first on every connection.
    ApiVersions = 18,
    /// InitProducerId (22): a producer id and epoch.
    InitProducerId = 22,
    /// AddPartitionsToTxn (24): partitions joining the current transaction.
    AddPartitionsToTxn = 24,
    /// AddOffsetsToTxn (25): a consumer group joining the current transaction.
    AddOffsetsToTxn = 25,
    /// EndTxn (26): commit or abort.
    EndTxn = 26,
    /// TxnOffsetCommit (28): consumer offsets committed in the transaction.
    TxnOffsetCommit = 28,
    /// SaslAuthenticate (36): the SASL exchange's messages.
    SaslAuthenticate = 36,
}

impl ApiKey {
    /// Every API the producer speaks.
    pub const ALL: [ApiKey; 11] = [
        ApiKey::Produce,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
        ApiKey::ApiVersions,
        ApiKey::InitProducerId,
        ApiKey::AddPartitionsToTxn,
        ApiKey::AddOffsetsToTxn,
        ApiKey::EndTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
    ];

    /// The key's number on the wire.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// The versions kacrab implements. Produce stops at v12 (v13 addresses topics by id). Three
    /// top versions mean transactions V2 (KIP-890 part 2) and are sent only by a producer whose
    /// transaction runs under it (`engine::transaction_version`): Produce v12 (the partition
    /// joins the transaction with its first write), EndTxn v5 (every commit and abort bumps the
    /// epoch) and TxnOffsetCommit v5 (the group joins the transaction with its first commit).
    pub fn supported(self) -> VersionRange {
        let (min, max) = match self {
            ApiKey::Produce => (3, 12),
            // v13 adds the top-level error code a broker uses to ask for a rebootstrap
            // (REBOOTSTRAP_REQUIRED, KIP-1102); the request is v12's.
            ApiKey::Metadata => (1, 13),
            ApiKey::FindCoordinator => (1, 4),
            ApiKey::ApiVersions => (0, 3),
            ApiKey::InitProducerId => (0, 4),
            ApiKey::AddPartitionsToTxn => (0, 3),
            // AddPartitionsToTxn v4+ batches transactions for brokers (a client stops at v3).
            ApiKey::AddOffsetsToTxn => (0, 4),
            ApiKey::EndTxn => (0, 5),
            ApiKey::TxnOffsetCommit => (0, 5),
            // v0 sends the SASL tokens as bare frames with no Kafka header (pre-KIP-43); v1
            // wraps them in SaslAuthenticate, which every broker since 1.0 supports.
            ApiKey::SaslHandshake => (1, 1),
            // v1 adds `session_lifetime_ms`, v2 is the flexible encoding.
            ApiKey::SaslAuthenticate => (0, 2),
        };
        VersionRange { min, max }
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An inclusive range of API versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRange {
    /// The lowest version.
    pub min: i16,
    /// The highest version.
    pub max: i16,
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}..=v{}", self.min, self.max)
    }
}

/// Why a needed API cannot be used on a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("broker does not support {api} (kacrab implements {ours})")]
    Missing { api: ApiKey, ours: VersionRange },
    #[error("broker supports {api} {theirs}, kacrab implements {ours}: no common version")]
    NoOverlap {
        api: ApiKey,
        ours: VersionRange,
        theirs: VersionRange,
    },
}

/// The version chosen for each API on one connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NegotiatedVersions {
    /// Indexed by position in `ApiKey::ALL`; `None` when the broker lacks the API or the
    /// ranges do not overlap (the reason is kept for the typed error).
    chosen: [Option<Result<i16, VersionError>>; 11],
}

impl NegotiatedVersions {
    /// Intersects our ranges with the broker's advertised ones.
    pub fn from_response(response: &ApiVersionsResponse) -> Self {
        let mut chosen: [Option<Result<i16, VersionError>>; 11] = Default::default();
        for (slot, api) in chosen.iter_mut().zip(ApiKey::ALL) {
            let ours = api.supported();
            let theirs = response
                .api_keys
                .iter()
                .find(|k| k.api_key == api.code())
                .map(|k| VersionRange {
                    min: k.min_version,
                    max: k.max_version,
                });
            *slot = Some(match theirs {
                None => Err(VersionError::Missing { api, ours }),
                Some(theirs) => {
                    let max = ours.max.min(theirs.max);
                    let min = ours.min.max(theirs.min);
                    if min <= max {
                        Ok(max)
                    } else {
                        Err(VersionError::NoOverlap { api, ours, theirs })
                    }
                }
            });
        }
        NegotiatedVersions { chosen }
    }

    /// The version to send `api` at, or the typed reason it cannot be sent.
    pub fn version(&self, api: ApiKey) -> Result<i16, VersionError> {
        let index = ApiKey::ALL
            .iter()
            .position(|k| *k == api)
            .expect("every ApiKey is in ApiKey::ALL");
        match &self.chosen[index] {
            Some(result) => result.clone(),
            None => Err(VersionError::Missing {
                api,
                ours: api.supported(),
            }),
        }
    }
}

/// The ApiVersions version to retry with after a broker answered UNSUPPORTED_VERSION: the
/// highest version both sides support, from the range the broker put in its (v0-format) answer.
/// Returns `None` when there is none (the connection cannot be used).
pub fn api_versions_fallback(response: &ApiVersionsResponse, tried: i16) -> Option<i16> {
    let theirs = response
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions.code())?;
    let candidate = theirs.max_version.min(tried - 1);
    (candidate >= theirs.min_version && candidate >= 0).then_some(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    fn response(keys: &[(i16, i16, i16)]) -> ApiVersionsResponse {
        let mut r = ApiVersionsResponse::default();
        r.api_keys = keys
            .iter()
            .map(|&(k, min, max)| {
                ApiVersion::default()
                    .with_api_key(k)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect();
        r
    }

    #[test]
    fn negotiation_picks_highest_common_version() {
        let v = NegotiatedVersions::from_response(&response(&[(0, 0, 7), (3, 0, 20)]));
        assert_eq!(v.version(ApiKey::Produce), Ok(7));
        assert_eq!(v.version(ApiKey::Metadata), Ok(13));
    }

    #[test]
    fn missing_api_is_a_typed_error_naming_the_api() {
        let v = NegotiatedVersions::from_response(&response(&[(0, 0, 7)]));
        let err = v.version(ApiKey::InitProducerId).unwrap_err();
        assert!(err.to_string().contains("InitProducerId"), "{err}");
    }

    #[test]
    fn disjoint_ranges_name_both_ranges() {
        let v = NegotiatedVersions::from_response(&response(&[(0, 0, 2)]));
        let err = v.version(ApiKey::Produce).unwrap_err();
        assert_eq!(
            err.to_string(),
            "broker supports Produce v0..=v2, kacrab implements v3..=v12: no common version"
        );
    }

    #[test]
    fn api_versions_falls_back_into_the_advertised_range() {
        assert_eq!(api_versions_fallback(&response(&[(18, 0, 2)]), 3), Some(2));
        assert_eq!(api_versions_fallback(&response(&[(18, 0, 3)]), 3), Some(2));
        assert_eq!(api_versions_fallback(&response(&[]), 3), None);
    }
}
