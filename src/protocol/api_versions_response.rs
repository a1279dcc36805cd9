//! ApiVersionsResponse v0..=v3, bounded (see [`super::response`]). Its header is always v0
//! (KIP-511: a client must be able to read the answer whatever version it asked for).

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::ApiVersionsResponse;

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for ApiVersionsResponse {
    const VERSIONS: (i16, i16) = (0, 3);
    const FIRST_FLEXIBLE: i16 = 3;

    fn header_version(_version: i16) -> i16 {
        0
    }

    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self> {
        let mut response = ApiVersionsResponse::default();
        response.error_code = r.i16("error_code")?;
        // Key, min and max version.
        response.api_keys = r.array("api_keys", 6, |r| {
            let mut key = ApiVersion::default();
            key.api_key = r.i16("api_key")?;
            key.min_version = r.i16("min_version")?;
            key.max_version = r.i16("max_version")?;
            key.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
            Ok(key)
        })?;
        if version >= 1 {
            response.throttle_time_ms = r.i32("throttle_time_ms")?;
        }
        let mut supported_features = Vec::new();
        let mut finalized_features_epoch = -1;
        let mut finalized_features = Vec::new();
        let mut zk_migration_ready = false;
        response.unknown_tagged_fields = r.tagged_fields(|tag, field| {
            match tag {
                // Name (compact), two versions, tagged fields: 6 bytes at least.
                0 => {
                    supported_features = field.array("supported_features", 6, |r| {
                        let mut feature = SupportedFeatureKey::default();
                        feature.name = r.string("name")?;
                        feature.min_version = r.i16("min_version")?;
                        feature.max_version = r.i16("max_version")?;
                        feature.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
                        Ok(feature)
                    })?
                }
                1 => finalized_features_epoch = field.i64("finalized_features_epoch")?,
                2 => {
                    finalized_features = field.array("finalized_features", 6, |r| {
                        let mut feature = FinalizedFeatureKey::default();
                        feature.name = r.string("name")?;
                        feature.max_version_level = r.i16("max_version_level")?;
                        feature.min_version_level = r.i16("min_version_level")?;
                        feature.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
                        Ok(feature)
                    })?
                }
                3 => zk_migration_ready = field.bool("zk_migration_ready")?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        response.supported_features = supported_features;
        response.finalized_features_epoch = finalized_features_epoch;
        response.finalized_features = finalized_features;
        response.zk_migration_ready = zk_migration_ready;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::response::test_support::*;
    use super::*;

    fn response(version: i16, full: bool) -> ApiVersionsResponse {
        let mut response = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(0)
                .with_min_version(3)
                .with_max_version(11),
            ApiVersion::default(),
        ]);
        if !full {
            return response;
        }
        response.error_code = 35;
        if version >= 1 {
            response.throttle_time_ms = 5;
        }
        if version >= 3 {
            response.api_keys[1]
                .unknown_tagged_fields
                .insert(1, Bytes::from_static(b"k"));
            response.supported_features = vec![
                SupportedFeatureKey::default()
                    .with_name(text("metadata.version"))
                    .with_min_version(1)
                    .with_max_version(20),
                SupportedFeatureKey::default(),
            ];
            response.finalized_features_epoch = 77;
            response.finalized_features = vec![
                FinalizedFeatureKey::default()
                    .with_name(text("metadata.version"))
                    .with_max_version_level(20)
                    .with_min_version_level(20),
                FinalizedFeatureKey::default(),
            ];
            response.zk_migration_ready = true;
            response
                .unknown_tagged_fields
                .insert(9, Bytes::from_static(b"later"));
        }
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        for version in 0..=3 {
            for full in [true, false] {
                assert_same_as_kafka_protocol(&response(version, full), version);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 0..=3 {
            assert_every_prefix_is_refused(&response(version, true), version);
        }
    }

    #[test]
    fn a_huge_count_at_each_array_is_refused_before_any_element() {
        for version in 0..=3 {
            // api_keys follows the error code.
            assert_refused_count(
                decode_with_huge_count_at(&response(version, true), version, 2),
                "api_keys",
                &format!("v{version}"),
            );
        }
        // The feature arrays sit in the top level's tagged fields 0 and 2 (v3): the
        // tagged-field count, tag, size, then the array's count.
        let version = 3;
        let without = response(version, false);
        let mut with = without.clone();
        with.supported_features = vec![SupportedFeatureKey::default()];
        let at = first_difference(&with, &without, version) + 3;
        assert_refused_count(
            decode_with_huge_tagged_count_at(&with, version, at),
            "supported_features",
            "v3",
        );
        let mut with = without.clone();
        with.finalized_features = vec![FinalizedFeatureKey::default()];
        let at = first_difference(&with, &without, version) + 3;
        assert_refused_count(
            decode_with_huge_tagged_count_at(&with, version, at),
            "finalized_features",
            "v3",
        );
    }
}
