//! FindCoordinatorResponse v1..=v4, bounded (see [`super::response`]). v4 answers a list of
//! keys with a list of coordinators; v1..=v3 answer one key at the top level.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::FindCoordinatorResponse;

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for FindCoordinatorResponse {
    const VERSIONS: (i16, i16) = (1, 4);
    const FIRST_FLEXIBLE: i16 = 3;

    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self> {
        let mut response = FindCoordinatorResponse::default();
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        if version <= 3 {
            response.error_code = r.i16("error_code")?;
            response.error_message = r.nullable_string("error_message")?;
            response.node_id = r.i32("node_id")?.into();
            response.host = r.string("host")?;
            response.port = r.i32("port")?;
        } else {
            // Key, node id, host, port, error code, message, tagged fields (all compact).
            response.coordinators = r.array("coordinators", 14, |r| {
                let mut c = Coordinator::default();
                c.key = r.string("key")?;
                c.node_id = r.i32("node_id")?.into();
                c.host = r.string("host")?;
                c.port = r.i32("port")?;
                c.error_code = r.i16("error_code")?;
                c.error_message = r.nullable_string("error_message")?;
                c.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
                Ok(c)
            })?;
        }
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::BrokerId;

    use super::super::response::test_support::*;
    use super::*;

    fn response(version: i16, full: bool) -> FindCoordinatorResponse {
        let mut response = FindCoordinatorResponse::default();
        if version >= 4 {
            response.coordinators = vec![
                Coordinator::default()
                    .with_key(text("txn-1"))
                    .with_node_id(BrokerId(3))
                    .with_host(text("broker-3"))
                    .with_port(9092),
                Coordinator::default().with_error_message(None),
            ];
        } else {
            response.node_id = BrokerId(3);
            response.host = text("broker-3");
            response.port = 9092;
        }
        if !full {
            return response;
        }
        response.throttle_time_ms = 8;
        if version >= 4 {
            response.coordinators[1].error_code = 15;
            response.coordinators[1].error_message = Some(text("not available"));
            response.coordinators[1]
                .unknown_tagged_fields
                .insert(2, Bytes::from_static(b"c"));
        } else {
            response.error_code = 15;
            response.error_message = None;
        }
        if version >= 3 {
            response
                .unknown_tagged_fields
                .insert(4, Bytes::from_static(b"t"));
        }
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        for version in 1..=4 {
            for full in [true, false] {
                assert_same_as_kafka_protocol(&response(version, full), version);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 1..=4 {
            assert_every_prefix_is_refused(&response(version, true), version);
        }
    }

    #[test]
    fn a_huge_count_at_each_array_is_refused_before_any_element() {
        // coordinators (v4) follows the throttle time.
        assert_refused_count(
            decode_with_huge_count_at(&response(4, true), 4, 4),
            "coordinators",
            "v4",
        );
        // v3 has no array: a huge tagged-field count at the end is refused as well.
        let v3 = response(3, false);
        let mut encoded = bytes::BytesMut::new();
        kafka_protocol::protocol::Encodable::encode(&v3, &mut encoded, 3).unwrap();
        let at = encoded.len() - 1;
        assert_refused_count(decode_with_huge_count_at(&v3, 3, at), "tagged_fields", "v3");
    }
}
