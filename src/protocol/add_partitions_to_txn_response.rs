//! AddPartitionsToTxnResponse v0..=v3, bounded (see [`super::response`]). v4+ (batched by
//! transaction, for brokers) is not negotiated.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnResponse, TopicName};

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for AddPartitionsToTxnResponse {
    const VERSIONS: (i16, i16) = (0, 3);
    const FIRST_FLEXIBLE: i16 = 3;

    fn decode_body(r: &mut Reader, _version: i16) -> DecodeResult<Self> {
        let mut response = AddPartitionsToTxnResponse::default();
        response.throttle_time_ms = r.i32("throttle_time_ms")?;
        // A topic: name (2 bytes classic, 1 compact) and its partitions' count (4 or 1).
        response.results_by_topic_v3_and_below = r.array("results_by_topic", 2, |r| {
            let mut topic = AddPartitionsToTxnTopicResult::default();
            topic.name = TopicName(r.string("name")?);
            // Partition index and error code.
            topic.results_by_partition = r.array("results_by_partition", 6, |r| {
                let mut p = AddPartitionsToTxnPartitionResult::default();
                p.partition_index = r.i32("partition_index")?;
                p.partition_error_code = r.i16("partition_error_code")?;
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

    fn partition(index: i32, error: i16) -> AddPartitionsToTxnPartitionResult {
        AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(index)
            .with_partition_error_code(error)
    }

    fn response(version: i16, full: bool) -> AddPartitionsToTxnResponse {
        let name = TopicName(if full { text("orders") } else { text("") });
        let mut response = AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(vec![
                AddPartitionsToTxnTopicResult::default()
                    .with_name(name.clone())
                    .with_results_by_partition(vec![partition(0, 0), partition(1, 0)]),
                AddPartitionsToTxnTopicResult::default().with_name(name),
            ]);
        if full {
            response.throttle_time_ms = 2;
            response.results_by_topic_v3_and_below[0].results_by_partition[1] = partition(1, 51);
            if version >= 3 {
                response
                    .unknown_tagged_fields
                    .insert(1, Bytes::from_static(b"t"));
                response.results_by_topic_v3_and_below[0].results_by_partition[0]
                    .unknown_tagged_fields
                    .insert(2, Bytes::from_static(b"p"));
            }
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
            let full = response(version, true);
            let context = format!("v{version}");
            assert_refused_count(
                decode_with_huge_count_at(&full, version, 4),
                "results_by_topic",
                &context,
            );
            let mut more = full.clone();
            more.results_by_topic_v3_and_below[1]
                .results_by_partition
                .push(partition(7, 0));
            let at = count_offset(first_difference(&more, &full, version), version >= 3);
            assert_refused_count(
                decode_with_huge_count_at(&full, version, at),
                "results_by_partition",
                &context,
            );
        }
    }
}
