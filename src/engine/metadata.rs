//! The cluster view the engine routes by: brokers, and each topic's partition leaders.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::MetadataResponse;

use crate::protocol::error_code::code;

use super::NodeId;

/// One partition's leader as the last Metadata response described it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLeader {
    pub leader: Option<NodeId>,
    pub leader_epoch: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub error_code: i16,
    /// The topic id the answer carried (0 when the broker sent none, before Metadata v10).
    pub topic_id: u128,
    pub partitions: Vec<PartitionLeader>,
}

/// Brokers are addressed by node id; bootstrap addresses get the negative ids -1, -2, ...
/// until the first Metadata answer names the real brokers (as in Java).
#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    pub nodes: HashMap<NodeId, String>,
    pub topics: HashMap<Arc<str>, TopicMetadata>,
    /// Topics the producer has asked about; each Metadata request names them.
    pub interest: BTreeSet<Arc<str>>,
    pub bootstrapped: bool,
}

impl ClusterMetadata {
    pub fn new(bootstrap_servers: &[String]) -> Self {
        let nodes = bootstrap_servers
            .iter()
            .enumerate()
            .map(|(i, address)| (-(i as NodeId) - 1, address.clone()))
            .collect();
        ClusterMetadata {
            nodes,
            ..Default::default()
        }
    }

    /// Replaces the broker list with the bootstrap addresses, as Java's `Metadata.rebootstrap`
    /// does; the driver resolves each address again when it connects. Topics and their
    /// partition lists are kept, so records waiting for a partition keep it: a leader named
    /// by the old list has no address any more and is replaced by the next answer.
    pub fn rebootstrap(&mut self, bootstrap_servers: &[String]) {
        self.nodes = Self::new(bootstrap_servers).nodes;
        self.bootstrapped = false;
    }

    /// Applies a Metadata response. Returns the topics whose partition count or leaders changed.
    pub fn update(&mut self, response: &MetadataResponse) -> Vec<Arc<str>> {
        if !response.brokers.is_empty() {
            let mut nodes = HashMap::new();
            for broker in &response.brokers {
                nodes.insert(
                    broker.node_id.0,
                    format!("{}:{}", broker.host.as_str(), broker.port),
                );
            }
            self.nodes = nodes;
            self.bootstrapped = true;
        }
        let mut changed = Vec::new();
        for topic in &response.topics {
            let Some(name) = &topic.name else { continue };
            let name: Arc<str> = Arc::from(name.0.as_str());
            let mut partitions = vec![
                PartitionLeader {
                    leader: None,
                    leader_epoch: -1,
                };
                topic.partitions.len()
            ];
            for p in &topic.partitions {
                let Some(slot) = usize::try_from(p.partition_index)
                    .ok()
                    .and_then(|i| partitions.get_mut(i))
                else {
                    continue;
                };
                // Java's `Metadata.update` finds the leader among the answer's brokers: one the
                // answer does not list has no address, so the leader is unknown and is asked for
                // again, rather than kept until metadata.max.age.ms.
                let listed = response.brokers.is_empty() || self.nodes.contains_key(&p.leader_id.0);
                let has_leader = p.leader_id.0 >= 0
                    && listed
                    && (p.error_code == code::NONE || p.error_code == code::REPLICA_NOT_AVAILABLE);
                *slot = PartitionLeader {
                    leader: has_leader.then_some(p.leader_id.0),
                    leader_epoch: p.leader_epoch,
                };
            }
            let topic_id = topic.topic_id.as_u128();
            // Java's Metadata.updateLatestMetadata: an answer from a broker that has not yet
            // seen the latest election (an older leader epoch than the one cached) must not
            // move a partition back to its old leader; the cached leader stays. An answer
            // without an epoch is taken as it comes, and so is a re-created topic (its topic
            // id changed), whose epochs start again.
            if let Some(old) = self.topics.get(&name) {
                let same_topic = topic_id == 0 || old.topic_id == topic_id;
                if same_topic {
                    for (slot, cached) in partitions.iter_mut().zip(&old.partitions) {
                        if slot.leader_epoch >= 0 && cached.leader_epoch > slot.leader_epoch {
                            *slot = *cached;
                        }
                    }
                }
            }
            let meta = TopicMetadata {
                error_code: topic.error_code,
                topic_id,
                partitions,
            };
            // A failed lookup keeps the last good partition list: an error answer about a
            // topic we already know must not make its partitions vanish.
            if meta.error_code != code::NONE {
                if let Some(old) = self.topics.get_mut(&name) {
                    old.error_code = meta.error_code;
                    continue;
                }
            }
            if self.topics.get(&name) != Some(&meta) {
                changed.push(name.clone());
                self.topics.insert(name, meta);
            }
        }
        changed
    }

    pub fn leader(&self, topic: &str, partition: i32) -> Option<PartitionLeader> {
        self.topics
            .get(topic)
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?).copied())
    }

    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        self.topics
            .get(topic)
            .filter(|t| !t.partitions.is_empty())
            .map(|t| t.partitions.len() as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    /// An answer naming `leader` at `leader_epoch` for `t`-0 (-1: the broker sent no epoch).
    fn answer(leader: i32, leader_epoch: i32) -> MetadataResponse {
        answer_for_topic_id(1, leader, leader_epoch)
    }

    fn answer_for_topic_id(topic_id: u128, leader: i32, leader_epoch: i32) -> MetadataResponse {
        MetadataResponse::default().with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
            .with_topic_id(
                topic_id
                    .to_be_bytes()
                    .to_vec()
                    .try_into()
                    .expect("16 bytes"),
            )
            .with_partitions(vec![MetadataResponsePartition::default()
                .with_partition_index(0)
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(leader_epoch)])])
    }

    fn led_by(leader: i32, leader_epoch: i32) -> Option<PartitionLeader> {
        Some(PartitionLeader {
            leader: Some(leader),
            leader_epoch,
        })
    }

    // Java's `Metadata.update` looks each leader up among the answer's brokers: a leader the
    // answer does not list (librdkafka's mock leaves a broker that is down out of the list
    // but keeps it as the leader) has no address, so the partition's leader is unknown and
    // the producer asks again, rather than keeping a leader it cannot reach until
    // metadata.max.age.ms.
    #[test]
    fn a_leader_the_answer_does_not_list_among_its_brokers_is_unknown() {
        let mut metadata = ClusterMetadata::new(&[]);
        let brokers = |ids: &[i32]| {
            ids.iter()
                .map(|&id| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(id))
                        .with_host(StrBytes::from_string(format!("b{id}")))
                        .with_port(9092)
                })
                .collect::<Vec<_>>()
        };
        metadata.update(&answer(2, 5).with_brokers(brokers(&[1, 2, 3])));
        assert_eq!(metadata.leader("t", 0), led_by(2, 5));
        metadata.update(&answer(2, 5).with_brokers(brokers(&[1, 3])));
        assert_eq!(
            metadata.leader("t", 0),
            Some(PartitionLeader {
                leader: None,
                leader_epoch: 5
            })
        );
        metadata.update(&answer(2, 5).with_brokers(brokers(&[1, 2, 3])));
        assert_eq!(metadata.leader("t", 0), led_by(2, 5));
    }

    // Java's Metadata.updateLatestMetadata: an answer from a broker that has not yet seen the
    // latest election (an older leader epoch) keeps the cached, newer leader.
    #[test]
    fn an_answer_with_an_older_leader_epoch_keeps_the_newer_leader() {
        let mut metadata = ClusterMetadata::new(&[]);
        metadata.update(&answer(2, 5));
        let changed = metadata.update(&answer(1, 4));
        assert_eq!(metadata.leader("t", 0), led_by(2, 5));
        assert!(changed.is_empty(), "nothing changed: {changed:?}");
    }

    // The same epoch, a newer one, or none at all (an old broker, or a topic whose epochs
    // are not known) is taken as it comes.
    #[test]
    fn an_answer_with_the_same_a_newer_or_no_leader_epoch_replaces_the_leader() {
        let mut metadata = ClusterMetadata::new(&[]);
        metadata.update(&answer(2, 5));
        metadata.update(&answer(3, 5));
        assert_eq!(metadata.leader("t", 0), led_by(3, 5));
        metadata.update(&answer(1, 6));
        assert_eq!(metadata.leader("t", 0), led_by(1, 6));
        metadata.update(&answer(2, -1));
        assert_eq!(metadata.leader("t", 0), led_by(2, -1));
        metadata.update(&answer(3, 0));
        assert_eq!(metadata.leader("t", 0), led_by(3, 0));
    }

    /// An answer for `t` with `partitions`, each `(leader, error_code)`.
    fn answer_with_partitions(partitions: &[(i32, i16)]) -> MetadataResponse {
        let partitions = partitions
            .iter()
            .enumerate()
            .map(|(i, &(leader, error))| {
                MetadataResponsePartition::default()
                    .with_partition_index(i as i32)
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(3)
                    .with_error_code(error)
            })
            .collect();
        MetadataResponse::default().with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
            .with_partitions(partitions)])
    }

    // Kafka's metadata cache answers REPLICA_NOT_AVAILABLE for a partition whose leader is up
    // but some replica is not, with that leader, and LEADER_NOT_AVAILABLE when no leader
    // serves it (an election). The first keeps its leader; any other error leaves the
    // partition without one until the next answer.
    #[test]
    fn a_partition_answered_replica_not_available_keeps_its_leader_and_one_in_an_election_has_none()
    {
        let mut metadata = ClusterMetadata::new(&[]);
        metadata.update(&answer_with_partitions(&[
            (1, code::NONE),
            (2, code::REPLICA_NOT_AVAILABLE),
            (3, code::LEADER_NOT_AVAILABLE),
        ]));
        assert_eq!(metadata.leader("t", 0), led_by(1, 3));
        assert_eq!(metadata.leader("t", 1), led_by(2, 3));
        assert_eq!(
            metadata.leader("t", 2),
            Some(PartitionLeader {
                leader: None,
                leader_epoch: 3
            })
        );
    }

    #[test]
    fn a_topics_partition_count_is_its_answered_partitions_and_unknown_without_any() {
        let mut metadata = ClusterMetadata::new(&[]);
        assert_eq!(metadata.partition_count("t"), None);
        metadata.update(&answer_with_partitions(&[]));
        assert_eq!(
            metadata.partition_count("t"),
            None,
            "a topic without partitions"
        );
        metadata.update(&answer_with_partitions(&[(1, code::NONE); 3]));
        assert_eq!(metadata.partition_count("t"), Some(3));
        assert_eq!(metadata.partition_count("u"), None);
    }

    // Java resets the last seen epoch when the topic id changes: a deleted and re-created
    // topic starts its epochs again.
    #[test]
    fn a_recreated_topic_takes_its_new_leaders_whatever_their_epochs() {
        let mut metadata = ClusterMetadata::new(&[]);
        metadata.update(&answer_for_topic_id(1, 2, 5));
        metadata.update(&answer_for_topic_id(2, 1, 0));
        assert_eq!(metadata.leader("t", 0), led_by(1, 0));
    }
}
