//! AddOffsetsToTxnResponse v0..=v4 and EndTxnResponse v0..=v5, bounded (see
//! [`super::response`]). Both carry a throttle time and an error code; EndTxn v5 adds the
//! producer id and epoch the coordinator bumped to (KIP-890 part 2). Neither has an array, so
//! their only count is the tagged-field count (v3+).

use kafka_protocol::messages::{AddOffsetsToTxnResponse, EndTxnResponse, ProducerId};

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for AddOffsetsToTxnResponse {
    const VERSIONS: (i16, i16) = (0, 4);
    const FIRST_FLEXIBLE: i16 = 3;

    fn decode_body(r: &mut Reader, _version: i16) -> DecodeResult<Self> {
        let mut response = AddOffsetsToTxnResponse::default();
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        response.error_code = r.i16("error_code")?;
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

impl ResponseBody for EndTxnResponse {
    const VERSIONS: (i16, i16) = (0, 5);
    const FIRST_FLEXIBLE: i16 = 3;

    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self> {
        let mut response = EndTxnResponse::default();
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        response.error_code = r.i16("error_code")?;
        // Below v5 the fields keep their defaults (-1), which is how the transaction manager
        // tells an answer that bumped the epoch from one that did not (Java's
        // `EndTxnHandler.handleResponse` checks `producerId() != -1`).
        if version >= 5 {
            response.producer_id = ProducerId(r.i64("producer_id")?);
            response.producer_epoch = r.i16("producer_epoch")?;
        }
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::super::response::test_support::*;
    use super::*;

    /// The three checks every response of this shape must pass, for each version up to
    /// `max`; `build(version)` makes a populated answer.
    fn check_all_versions<R>(max: i16, build: impl Fn(i16) -> R)
    where
        R: ResponseBody + Encodable + Decodable + Default + PartialEq + std::fmt::Debug,
    {
        for version in 0..=max {
            assert_same_as_kafka_protocol(&build(version), version);
            assert_same_as_kafka_protocol(&R::default(), version);
            assert_every_prefix_is_refused(&build(version), version);
        }
        for version in 3..=max {
            // The tagged-field count follows the throttle time and the error code, and from
            // EndTxn v5 the producer id and epoch.
            let at = if version >= 5 { 16 } else { 6 };
            assert_refused_count(
                decode_with_huge_count_at(&build(version), version, at),
                "tagged_fields",
                &format!("v{version}"),
            );
        }
    }

    #[test]
    fn add_offsets_to_txn_decodes_as_kafka_protocol_does_and_refuses_truncations_and_huge_counts() {
        check_all_versions(4, |version| {
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
        check_all_versions(5, |version| {
            let mut response = EndTxnResponse::default()
                .with_throttle_time_ms(3)
                .with_error_code(48);
            if version >= 5 {
                response.producer_id = ProducerId(0x0102_0304_0506);
                response.producer_epoch = 7;
            }
            if version >= 3 {
                response
                    .unknown_tagged_fields
                    .insert(6, Bytes::from_static(b"f"));
            }
            response
        });
    }
}
