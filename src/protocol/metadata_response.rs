//! MetadataResponse v1..=v13, bounded (see [`super::response`]).

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{MetadataResponse, TopicName};

use super::response::{DecodeResult, Reader, ResponseBody};

impl ResponseBody for MetadataResponse {
    const VERSIONS: (i16, i16) = (1, 13);
    const FIRST_FLEXIBLE: i16 = 9;

    fn decode_body(r: &mut Reader, version: i16) -> DecodeResult<Self> {
        let mut response = MetadataResponse::default();
        if version >= 3 {
            response.throttle_time_ms = r.i32("throttle_time_ms")?;
        }
        // Node id, host (2 bytes classic, 1 compact), port, rack (v1+: 2 or 1).
        response.brokers = r.array("brokers", 10, |r| {
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = r.i32("node_id")?.into();
            broker.host = r.string("host")?;
            broker.port = r.i32("port")?;
            broker.rack = r.nullable_string("rack")?;
            broker.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
            Ok(broker)
        })?;
        if version >= 2 {
            response.cluster_id = r.nullable_string("cluster_id")?;
        }
        response.controller_id = r.i32("controller_id")?.into();
        // Error code, name (2 or 1), is_internal, partitions' count (4 or 1).
        response.topics = r.array("topics", 5, |r| topic(r, version))?;
        if (8..=10).contains(&version) {
            response.cluster_authorized_operations = r.i32("cluster_authorized_operations")?;
        }
        if version >= 13 {
            // The top-level error (KIP-1102: REBOOTSTRAP_REQUIRED).
            response.error_code = r.i16("error_code")?;
        }
        response.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(response)
    }
}

fn topic(r: &mut Reader, version: i16) -> DecodeResult<MetadataResponseTopic> {
    let mut topic = MetadataResponseTopic::default();
    topic.error_code = r.i16("error_code")?;
    topic.name = r.nullable_string("name")?.map(TopicName);
    if version >= 10 {
        topic.topic_id = r.uuid("topic_id")?;
    }
    topic.is_internal = r.bool("is_internal")?;
    // Error code, index, leader, replicas' and ISR's counts (4 or 1 each).
    topic.partitions = r.array("partitions", 12, |r| {
        let mut p = MetadataResponsePartition::default();
        p.error_code = r.i16("error_code")?;
        p.partition_index = r.i32("partition_index")?;
        p.leader_id = r.i32("leader_id")?.into();
        if version >= 7 {
            p.leader_epoch = r.i32("leader_epoch")?;
        }
        p.replica_nodes = r.i32_array("replica_nodes")?;
        p.isr_nodes = r.i32_array("isr_nodes")?;
        if version >= 5 {
            p.offline_replicas = r.i32_array("offline_replicas")?;
        }
        p.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
        Ok(p)
    })?;
    if version >= 8 {
        topic.topic_authorized_operations = r.i32("topic_authorized_operations")?;
    }
    topic.unknown_tagged_fields = r.tagged_fields(|_, _| Ok(false))?;
    Ok(topic)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::BrokerId;

    use super::super::response::test_support::*;
    use super::*;

    /// Adds an element to one array of a partition.
    type Grow = fn(&mut MetadataResponsePartition);

    fn partition(index: i32, full: bool, version: i16) -> MetadataResponsePartition {
        let mut p = MetadataResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(if full { 2 } else { 0 }));
        if !full {
            return p;
        }
        p.error_code = 9;
        if version >= 7 {
            p.leader_epoch = 17;
        }
        p.replica_nodes = vec![BrokerId(1), BrokerId(2), BrokerId(3)];
        p.isr_nodes = vec![BrokerId(2), BrokerId(3)];
        if version >= 5 {
            p.offline_replicas = vec![BrokerId(1)];
        }
        if version >= 9 {
            p.unknown_tagged_fields.insert(3, Bytes::from_static(b"x"));
        }
        p
    }

    fn response(version: i16, full: bool) -> MetadataResponse {
        let s = |v: &'static str| if full { text(v) } else { text("") };
        let mut topic = MetadataResponseTopic::default()
            .with_name(Some(TopicName(s("orders"))))
            .with_partitions(vec![
                partition(0, full, version),
                partition(1, full, version),
            ]);
        let mut response = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(s("broker-1"))
                    .with_port(9092),
                MetadataResponseBroker::default().with_host(s("")),
            ])
            .with_controller_id(BrokerId(1));
        if full {
            response.brokers[0].rack = Some(text("rack-a"));
            topic.is_internal = true;
            topic.error_code = 3;
            if version >= 3 {
                response.throttle_time_ms = 40;
            }
            if version >= 2 {
                response.cluster_id = Some(text("cluster"));
            }
            if version >= 8 {
                topic.topic_authorized_operations = 0x0f;
            }
            if (8..=10).contains(&version) {
                response.cluster_authorized_operations = 0x1f;
            }
            if version >= 13 {
                response.error_code = 129;
            }
            if version >= 10 {
                topic.topic_id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
            }
            if version >= 9 {
                response
                    .unknown_tagged_fields
                    .insert(0, Bytes::from_static(b"tag"));
            }
        }
        let mut other = MetadataResponseTopic::default().with_name(Some(TopicName(s("other"))));
        if full && version >= 12 {
            // A null name: v12 answers by topic id.
            other.name = None;
        }
        response.topics = vec![topic, other];
        response
    }

    #[test]
    fn every_version_decodes_as_kafka_protocol_does_and_re_encodes_identically() {
        for version in 1..=13 {
            for full in [true, false] {
                assert_same_as_kafka_protocol(&response(version, full), version);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 1..=13 {
            assert_every_prefix_is_refused(&response(version, true), version);
        }
    }

    #[test]
    fn a_huge_count_at_each_array_is_refused_before_any_element() {
        for version in 1..=13 {
            let flexible = version >= 9;
            let full = response(version, true);
            let context = format!("v{version}");
            let mut more = full.clone();
            more.brokers.push(MetadataResponseBroker::default());
            let at = count_offset(first_difference(&more, &full, version), flexible);
            assert_refused_count(
                decode_with_huge_count_at(&full, version, at),
                "brokers",
                &context,
            );

            let mut more = full.clone();
            more.topics.push(MetadataResponseTopic::default());
            let at = count_offset(first_difference(&more, &full, version), flexible);
            assert_refused_count(
                decode_with_huge_count_at(&full, version, at),
                "topics",
                &context,
            );

            // The second topic's partitions (it has none).
            let mut more = full.clone();
            more.topics[1].partitions.push(partition(4, true, version));
            let at = count_offset(first_difference(&more, &full, version), flexible);
            assert_refused_count(
                decode_with_huge_count_at(&full, version, at),
                "partitions",
                &context,
            );

            // Each INT32 array of the first topic's second partition.
            let arrays: [(&str, Grow); 3] = [
                ("replica_nodes", |p| p.replica_nodes.push(BrokerId(9))),
                ("isr_nodes", |p| p.isr_nodes.push(BrokerId(9))),
                ("offline_replicas", |p| p.offline_replicas.push(BrokerId(9))),
            ];
            for (what, grow) in arrays {
                if what == "offline_replicas" && version < 5 {
                    continue;
                }
                let mut more = full.clone();
                grow(&mut more.topics[0].partitions[1]);
                let at = count_offset(first_difference(&more, &full, version), flexible);
                assert_refused_count(
                    decode_with_huge_count_at(&full, version, at),
                    what,
                    &context,
                );
            }
        }
    }
}
