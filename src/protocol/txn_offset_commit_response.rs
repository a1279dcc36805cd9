//! TxnOffsetCommitResponse v0..=v5 (v5 is v4's layout: KIP-890 part 2 adds the group to the
//! transaction implicitly), bounded (see [`super::response`]).

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TopicName, TxnOffsetCommitResponse};

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for TxnOffsetCommitResponse {
    const VERSIONS: (i16, i16) = (0, 5);
    const FIRST_FLEXIBLE: i16 = 3;

    fn decode_body(r: &mut Reader, _version: i16) -> DecodeResult<Self> {
        let mut response = TxnOffsetCommitResponse::default();
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        // A topic: name (2 bytes classic, 1 compact) and its partitions' count (4 or 1).
        response.topics = r.array("topics", 2, |r| {
            let mut topic = TxnOffsetCommitResponseTopic::default();
            topic.name = TopicName(r.string("name")?);
            // Partition index and error code.
            topic.partitions = r.array("partitions", 6, |r| {
                let mut p = TxnOffsetCommitResponsePartition::default();
                p.partition_index = r.i32("partition_index")?;
                p.error_code = r.i16("error_code")?;
                p.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
                Ok(p)
            })?;
            topic.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
            Ok(topic)
        })?;
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::response::test_support::*;
    use super::*;

    fn partition(index: i32, error: i16) -> TxnOffsetCommitResponsePartition {
        TxnOffsetCommitResponsePartition::default()
            .with_partition_index(index)
            .with_error_code(error)
    }

    fn response(version: i16, full: bool) -> TxnOffsetCommitResponse {
        let name = TopicName(if full { text("input") } else { text("") });
        let mut response = TxnOffsetCommitResponse::default().with_topics(vec![
            TxnOffsetCommitResponseTopic::default()
                .with_name(name.clone())
                .with_partitions(vec![partition(0, 0), partition(1, 0)]),
            TxnOffsetCommitResponseTopic::default().with_name(name),
        ]);
        if full {
            response.throttle_time_ms = 2;
            response.topics[0].partitions[1] = partition(1, 22);
            if version >= 3 {
                response
                    .unknown_tagged_fields
                    .insert(1, Bytes::from_static(b"t"));
                response.topics[1]
                    .unknown_tagged_fields
                    .insert(3, Bytes::from_static(b"topic"));
            }
        }
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        for version in 0..=5 {
            for full in [true, false] {
                assert_same_as_kafka_protocol(&response(version, full), version);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 0..=5 {
            assert_every_prefix_is_refused(&response(version, true), version);
        }
    }

    #[test]
    fn a_huge_count_at_each_array_is_refused_before_any_element() {
        for version in 0..=5 {
            let full = response(version, true);
            let context = format!("v{version}");
            assert_refused_count(
                decode_with_huge_count_at(&full, version, 4),
                "topics",
                &context,
            );
            let mut more = full.clone();
            more.topics[1].partitions.push(partition(7, 0));
            let at = count_offset(first_difference(&more, &full, version), version >= 3);
            assert_refused_count(
                decode_with_huge_count_at(&full, version, at),
                "partitions",
                &context,
            );
        }
    }
}
