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
                let has_leader = p.leader_id.0 >= 0
                    && (p.error_code == code::NONE || p.error_code == code::REPLICA_NOT_AVAILABLE);
                *slot = PartitionLeader {
                    leader: has_leader.then_some(p.leader_id.0),
                    leader_epoch: p.leader_epoch,
                };
            }
            let meta = TopicMetadata {
                error_code: topic.error_code,
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
