//! InitProducerIdResponse v0..=v4, bounded (see [`super::response`]). It has no array: its
//! only count is the tagged-field count (v2+).

use kafka_protocol::messages::InitProducerIdResponse;

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for InitProducerIdResponse {
    const VERSIONS: (i16, i16) = (0, 4);
    const FIRST_FLEXIBLE: i16 = 2;

    fn decode_body(r: &mut Reader, _version: i16) -> DecodeResult<Self> {
        let mut response = InitProducerIdResponse::default();
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        response.error_code = r.i16("error_code")?;
        response.producer_id = r.i64("producer_id")?.into();
        response.producer_epoch = r.i16("producer_epoch")?;
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::ProducerId;

    use super::super::response::test_support::*;
    use super::*;

    fn response(version: i16) -> InitProducerIdResponse {
        let mut response = InitProducerIdResponse::default()
            .with_throttle_time_ms(3)
            .with_error_code(47)
            .with_producer_id(ProducerId(1 << 40))
            .with_producer_epoch(12);
        if version >= 2 {
            response
                .unknown_tagged_fields
                .insert(6, Bytes::from_static(b"f"));
        }
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        for version in 0..=4 {
            assert_same_as_kafka_protocol(&response(version), version);
            assert_same_as_kafka_protocol(&InitProducerIdResponse::default(), version);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 0..=4 {
            assert_every_prefix_is_refused(&response(version), version);
        }
    }

    #[test]
    fn a_huge_tagged_field_count_is_refused() {
        for version in 2..=4 {
            // Throttle time, error code, producer id and epoch: 16 bytes.
            assert_refused_count(
                decode_with_huge_count_at(&response(version), version, 16),
                "tagged_fields",
                &format!("v{version}"),
            );
        }
    }
}
