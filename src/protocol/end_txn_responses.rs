//! AddOffsetsToTxnResponse and EndTxnResponse v0..=v4, bounded (see [`super::response`]).
//! Both carry only a throttle time and an error code; neither has an array, so their only
//! count is the tagged-field count (v3+). One decoder body serves both.

use kafka_protocol::messages::{AddOffsetsToTxnResponse, EndTxnResponse};

use super::response::{DecodeResult, Reader, ResponseBody};

/// `ResponseBody` for a v0..=v4 response of exactly `throttle_time_ms`, `error_code` and,
/// from v3, tagged fields.
macro_rules! throttle_and_error_response {
    ($response:ty) => {
        impl ResponseBody for $response {
            const VERSIONS: (i16, i16) = (0, 4);
            const FIRST_FLEXIBLE: i16 = 3;

            fn decode_body(r: &mut Reader, _version: i16) -> DecodeResult<Self> {
                let mut response = <$response>::default();
                response.throttle_time_ms = r.i32("throttle_time_ms")?;
                response.error_code = r.i16("error_code")?;
                response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
                Ok(response)
            }
        }
    };
}

throttle_and_error_response!(AddOffsetsToTxnResponse);
throttle_and_error_response!(EndTxnResponse);

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::super::response::test_support::*;
    use super::*;

    /// The three checks every response of this shape must pass, for each version;
    /// `build(version, error_code)` makes a populated answer.
    fn check_all_versions<R>(build: impl Fn(i16) -> R)
    where
        R: ResponseBody + Encodable + Decodable + Default + PartialEq + std::fmt::Debug,
    {
        for version in 0..=4 {
            assert_same_as_kafka_protocol(&build(version), version);
            assert_same_as_kafka_protocol(&R::default(), version);
            assert_every_prefix_is_refused(&build(version), version);
        }
        for version in 3..=4 {
            assert_refused_count(
                decode_with_huge_count_at(&build(version), version, 6),
                "tagged_fields",
                &format!("v{version}"),
            );
        }
    }

    #[test]
    fn add_offsets_to_txn_decodes_as_kafka_protocol_does_and_refuses_truncations_and_huge_counts() {
        check_all_versions(|version| {
            let mut response = AddOffsetsToTxnResponse::default()
                .with_throttle_time_ms(3)
                .with_error_code(51);
            if version >= 3 {
                response
                    .unknown_tagged_fields
                    .insert(6, Bytes::from_static(b"f"));
            }
            response
        });
    }

    #[test]
    fn end_txn_decodes_as_kafka_protocol_does_and_refuses_truncations_and_huge_counts() {
        check_all_versions(|version| {
            let mut response = EndTxnResponse::default()
                .with_throttle_time_ms(3)
                .with_error_code(48);
            if version >= 3 {
                response
                    .unknown_tagged_fields
                    .insert(6, Bytes::from_static(b"f"));
            }
            response
        });
    }
}
