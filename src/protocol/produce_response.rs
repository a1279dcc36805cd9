//! ProduceResponse v3..=v12 (v12 is v11's layout), bounded (see [`super::response`]). The hot
//! path's answer: one per produce request.

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceResponse, TopicName};

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for ProduceResponse {
    const VERSIONS: (i16, i16) = (3, 12);
    const FIRST_FLEXIBLE: i16 = 9;

    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self> {
        let mut response = ProduceResponse::default();
        // A topic: its name (2 bytes classic, 1 compact) and its partitions' count (4 or 1).
        response.responses = r.array("responses", 2, |r| topic(r, version))?;
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        let mut node_endpoints = Vec::new();
        response.unknown_tagged_fields = r.tagged_fields(|tag, field| {
            if tag == 0 && version >= 10 {
                // Node id, host, port, rack, tagged fields.
                node_endpoints = field.array("node_endpoints", 11, node_endpoint)?;
                return Ok(true);
            }
            Ok(false)
        })?;
        response.node_endpoints = node_endpoints;
        Ok(response)
    }
}

fn topic(r: &mut Reader, version: i16) -> DecodeResult<TopicProduceResponse> {
    let mut topic = TopicProduceResponse::default();
    topic.name = TopicName(r.string("name")?);
    // Index, error code, base offset and log append time: 22 bytes in every version.
    topic.partition_responses = r.array("partition_responses", 22, |r| partition(r, version))?;
    topic.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
    Ok(topic)
}

fn partition(r: &mut Reader, version: i16) -> DecodeResult<PartitionProduceResponse> {
    let mut p = PartitionProduceResponse::default();
    p.index = r.i32("index")?;
    p.error_code = r.i16("error_code")?;
    p.base_offset = r.i64("base_offset")?;
    p.log_append_time_ms = r.i64("log_append_time_ms")?;
    if version >= 5 {
        p.log_start_offset = r.i64("log_start_offset")?;
    }
    if version >= 8 {
        // Batch index and its message (2 bytes classic, 1 compact).
        p.record_errors = r.array("record_errors", 5, |r| {
            let mut e = BatchIndexAndErrorMessage::default();
            e.batch_index = r.i32("batch_index")?;
            e.batch_index_error_message = r.nullable_string("batch_index_error_message")?;
            e.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
            Ok(e)
        })?;
        p.error_message = r.nullable_string("error_message")?;
    }
    let mut current_leader = LeaderIdAndEpoch::default();
    p.unknown_tagged_fields = r.tagged_fields(|tag, field| {
        if tag == 0 && version >= 10 {
            current_leader.leader_id = field.i32("current_leader.leader_id")?.into();
            current_leader.leader_epoch = field.i32("current_leader.leader_epoch")?;
            current_leader.unknown_tagged_fields = field.tagged_fields(|_, _| Ok(false))?;
            return Ok(true);
        }
        Ok(false)
    })?;
    p.current_leader = current_leader;
    Ok(p)
}

fn node_endpoint(r: &mut Reader) -> DecodeResult<NodeEndpoint> {
    let mut node = NodeEndpoint::default();
    node.node_id = r.i32("node_id")?.into();
    node.host = r.string("host")?;
    node.port = r.i32("port")?;
    node.rack = r.nullable_string("rack")?;
    node.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
    Ok(node)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::BrokerId;

    use super::super::response::test_support::*;
    use super::*;

    fn partition(index: i32, full: bool, version: i16) -> PartitionProduceResponse {
        let mut p = PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(if full { 10 } else { 0 })
            .with_base_offset(1 << 40)
            .with_log_append_time_ms(1_700_000_000_000);
        if !full {
            return p;
        }
        if version >= 5 {
            p.log_start_offset = 12;
        }
        if version >= 8 {
            p.record_errors = vec![
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(3)
                    .with_batch_index_error_message(Some(text("bad record"))),
                BatchIndexAndErrorMessage::default().with_batch_index(4),
            ];
            p.error_message = Some(text("some records were invalid"));
        }
        if version >= 9 {
            p.unknown_tagged_fields
                .insert(7, Bytes::from_static(b"future"));
        }
        if version >= 10 {
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(2))
                .with_leader_epoch(9);
        }
        p
    }

    /// A response using every field of `version`, or (`full` false) only the required ones
    /// with empty strings and arrays, the least bytes an element can take.
    fn response(version: i16, full: bool) -> ProduceResponse {
        let name = if full { text("orders") } else { text("") };
        let mut response = ProduceResponse::default()
            .with_responses(vec![
                TopicProduceResponse::default()
                    .with_name(TopicName(name.clone()))
                    .with_partition_responses(vec![
                        partition(0, full, version),
                        partition(1, full, version),
                    ]),
                TopicProduceResponse::default().with_name(TopicName(name)),
            ])
            .with_throttle_time_ms(if full { 25 } else { 0 });
        if full && version >= 10 {
            response.node_endpoints = vec![
                NodeEndpoint::default()
                    .with_node_id(BrokerId(2))
                    .with_host(text("broker-2"))
                    .with_port(9092)
                    .with_rack(Some(text("rack-a"))),
                NodeEndpoint::default().with_host(text("")),
            ];
        }
        if full && version >= 9 {
            response
                .unknown_tagged_fields
                .insert(5, Bytes::from_static(b"\x01\x02"));
        }
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        for version in 3..=12 {
            for full in [true, false] {
                assert_same_as_kafka_protocol(&response(version, full), version);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 3..=12 {
            assert_every_prefix_is_refused(&response(version, true), version);
        }
    }

    #[test]
    fn a_huge_count_at_each_array_is_refused_before_any_element() {
        for version in 3..=12 {
            let flexible = version >= 9;
            let full = response(version, true);
            // responses: the body's first field.
            assert_refused_count(
                decode_with_huge_count_at(&full, version, 0),
                "responses",
                "responses",
            );
            // partition_responses of the second topic (the first topic has two partitions).
            let mut more = full.clone();
            more.responses[1].partition_responses = vec![partition(5, true, version)];
            let at = count_offset(first_difference(&more, &full, version), flexible);
            assert_refused_count(
                decode_with_huge_count_at(&full, version, at),
                "partition_responses",
                &format!("v{version}"),
            );
            if version >= 8 {
                // record_errors of the second partition of the first topic.
                let mut more = full.clone();
                more.responses[0].partition_responses[1]
                    .record_errors
                    .push(BatchIndexAndErrorMessage::default());
                let at = count_offset(first_difference(&more, &full, version), flexible);
                assert_refused_count(
                    decode_with_huge_count_at(&full, version, at),
                    "record_errors",
                    &format!("v{version}"),
                );
            }
            if version >= 10 {
                // node_endpoints, the top level's tagged field 0: the tagged-field count,
                // tag, size, then the array's count.
                let mut without = full.clone();
                without.node_endpoints.clear();
                without.unknown_tagged_fields.clear();
                let mut with = without.clone();
                with.node_endpoints = vec![NodeEndpoint::default()];
                let at = first_difference(&with, &without, version) + 3;
                assert_refused_count(
                    decode_with_huge_tagged_count_at(&with, version, at),
                    "node_endpoints",
                    &format!("v{version}"),
                );
            }
        }
    }

    #[test]
    fn tag_zero_before_v10_is_kept_as_an_unknown_field() {
        // current_leader is tag 0 from v10 on; at v9 the tag is not defined. kafka-protocol
        // writes no unknown tag 0, so the answer is written with tag 1 and the tag rewritten.
        let mut response = response(9, false);
        let field = Bytes::from_static(b"\x00\x00\x00\x02");
        let tags = &mut response.responses[0].partition_responses[0].unknown_tagged_fields;
        tags.insert(1, field.clone());
        let mut encoded = bytes::BytesMut::new();
        kafka_protocol::protocol::Encodable::encode(&response, &mut encoded, 9).unwrap();
        let at = encoded
            .windows(7)
            .position(|w| w == [0x01, 0x01, 0x04, 0x00, 0x00, 0x00, 0x02])
            .expect("one tagged field, tag 1 of 4 bytes");
        encoded[at + 1] = 0x00;
        let tags = &mut response.responses[0].partition_responses[0].unknown_tagged_fields;
        tags.clear();
        tags.insert(0, field);
        let ours = ProduceResponse::decode_versioned(encoded.freeze(), 9).expect("decodes");
        assert_eq!(ours, response);
    }

    #[test]
    fn a_known_tagged_field_is_read_within_its_declared_size() {
        // current_leader declared 4 bytes long but holding 9 (two INT32 and a tag count):
        // reading past the declared size is an error, not a shift of what follows.
        let version = 10;
        let mut encoded = bytes::BytesMut::new();
        kafka_protocol::protocol::Encodable::encode(
            &response(version, true),
            &mut encoded,
            version,
        )
        .unwrap();
        let declared = encoded
            .windows(7)
            .position(|w| w == [0x02, 0x00, 0x09, 0x00, 0x00, 0x00, 0x02])
            .expect("two tagged fields, then tag 0 of size 9 holding leader 2");
        encoded[declared + 2] = 0x04;
        assert!(ProduceResponse::decode_versioned(encoded.freeze(), version).is_err());
    }
}
