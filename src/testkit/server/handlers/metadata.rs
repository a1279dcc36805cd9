//! Metadata (v0-v12): every broker, and the requested topics with their leaders and leader
//! epochs. Every broker hosts a replica of every partition and all are in sync, so replicas and
//! ISR list every broker. Unknown topics answer UNKNOWN_TOPIC_OR_PARTITION unless
//! auto-creation is on and the request allows it (`KafkaApis.handleTopicMetadataRequest`).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{str_bytes, uuid, HandlerResult, Reply, RequestContext};
use crate::testkit::broker::error_codes::{NONE, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION};

pub(super) fn handle(
    ctx: &RequestContext<'_>,
    body: &mut Bytes,
    injected: Option<i16>,
    out: &mut BytesMut,
) -> HandlerResult {
    let request = MetadataRequest::decode(body, ctx.version)?;
    let brokers: Vec<MetadataResponseBroker> = ctx
        .shared
        .listener_addrs(ctx.listener)
        .into_iter()
        .map(|(id, addr)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&addr.ip().to_string()))
                .with_port(i32::from(addr.port()))
        })
        .collect();
    let all_brokers: Vec<BrokerId> = brokers.iter().map(|b| b.node_id).collect();
    // Before v4 the request has no flag and brokers auto-created by default.
    let allow_auto_create = ctx.version < 4 || request.allow_auto_topic_creation;

    let mut cluster = ctx.shared.cluster();
    // v0 has no null: an empty list means every topic; v1+ null means every topic.
    let wanted: Vec<(Option<String>, u128)> = match request.topics {
        Some(topics) if !(ctx.version == 0 && topics.is_empty()) => topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.0.to_string()),
                    t.topic_id.as_u128(),
                )
            })
            .collect(),
        _ => cluster
            .topic_names()
            .into_iter()
            .map(|n| (Some(n), 0))
            .collect(),
    };
    let topics = wanted
        .into_iter()
        .map(|(name, topic_id)| {
            let name = match name {
                Some(name) => name,
                None => match cluster.topic_name_by_id(topic_id) {
                    Some(name) => name.to_string(),
                    None => {
                        return MetadataResponseTopic::default()
                            .with_error_code(UNKNOWN_TOPIC_ID)
                            .with_name(None)
                            .with_topic_id(uuid(topic_id))
                    }
                },
            };
            if cluster.topic_metadata(&name).is_none() && allow_auto_create {
                cluster.maybe_auto_create_topic(&name);
            }
            let topic =
                MetadataResponseTopic::default().with_name(Some(TopicName(str_bytes(&name))));
            let Some(metadata) = cluster.topic_metadata(&name) else {
                return topic.with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
            };
            let error_code = injected.unwrap_or(NONE);
            let partitions = if injected.is_some() {
                Vec::new()
            } else {
                metadata
                    .partitions
                    .iter()
                    .enumerate()
                    .map(|(index, p)| {
                        MetadataResponsePartition::default()
                            .with_partition_index(index as i32)
                            .with_leader_id(BrokerId(p.leader))
                            .with_leader_epoch(p.leader_epoch)
                            .with_replica_nodes(all_brokers.clone())
                            .with_isr_nodes(all_brokers.clone())
                    })
                    .collect()
            };
            topic
                .with_error_code(error_code)
                .with_topic_id(uuid(metadata.topic_id))
                .with_partitions(partitions)
        })
        .collect();
    let controller = cluster.broker_ids()[0];
    drop(cluster);

    let response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes("kacrab-reference")))
        .with_controller_id(BrokerId(controller))
        .with_topics(topics);
    response.encode(out, ctx.version)?;
    Ok(Reply::Respond)
}
