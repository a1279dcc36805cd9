//! The engine's configuration: the share of `ProducerConfig` the engine reads, converted to
//! engine units (microseconds) once.

use std::time::Duration;

use crate::config::{MetadataRecoveryStrategy, ProducerConfig, SaslConfig};
use crate::protocol::compression::Codec;

use super::Micros;

/// The engine's share of the producer configuration, in engine units.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub client_id: String,
    pub bootstrap_servers: Vec<String>,
    pub acks: i16,
    pub idempotent: bool,
    pub transactional_id: Option<String>,
    pub transaction_timeout_ms: i32,
    pub linger: Micros,
    pub batch_size: usize,
    /// `buffer.memory`.
    pub buffer_memory: usize,
    /// Bytes of idle batch buffers the engine's own pool keeps for reuse: an eighth of
    /// `buffer.memory`, shared among the engines of a producer's shards. (The producer gives
    /// its engines one pool of its own instead, bounded by `buffer.memory` itself.)
    pub buffer_pool_idle: usize,
    pub max_in_flight: usize,
    pub delivery_timeout: Micros,
    pub request_timeout: Micros,
    pub retries: i32,
    pub retry_backoff: Micros,
    pub retry_backoff_max: Micros,
    pub reconnect_backoff: Micros,
    pub reconnect_backoff_max: Micros,
    pub connection_setup_timeout: Micros,
    /// `connections.max.idle.ms`: a `Ready` connection with nothing in flight and no traffic
    /// this long is closed. `None`: never.
    pub connections_max_idle: Option<Micros>,
    pub max_request_size: usize,
    pub metadata_max_age: Micros,
    /// `metadata.max.idle.ms`: a topic unused this long is no longer fetched.
    pub metadata_max_idle: Micros,
    /// `metadata.recovery.rebootstrap.trigger.ms` under `metadata.recovery.strategy=rebootstrap`;
    /// `None` under `none`, which never rebootstraps.
    pub rebootstrap_trigger: Option<Micros>,
    /// `compression.type` with its level.
    pub compression: Codec,
    /// This engine sends InitProducerId when no identity is in force. In a sharded producer
    /// exactly one engine owns the identity; the others adopt what it obtains.
    pub owns_identity: bool,
    /// Authenticate every new connection with SASL (`security.protocol=SASL_PLAINTEXT` or
    /// `SASL_SSL`, inside TLS then).
    pub sasl: Option<SaslConfig>,
    /// `partitioner.availability.timeout.ms` under adaptive partitioning (0: off, and always 0
    /// with `partitioner.adaptive.partitioning.enable=false`, where Java ignores it): a node
    /// whose batches were ready but not drained for longer than this makes its partitions
    /// unavailable to the partitioner (`node_latency`).
    pub partition_availability_timeout: Micros,
}

fn micros(d: Duration) -> Micros {
    d.as_micros().min(u64::MAX as u128) as Micros
}

impl EngineConfig {
    pub fn from_producer_config(config: &ProducerConfig, owns_identity: bool) -> Self {
        EngineConfig {
            client_id: config.client_id.clone(),
            bootstrap_servers: config.bootstrap_servers.clone(),
            acks: config.acks.as_i16(),
            idempotent: config.enable_idempotence,
            transactional_id: config.transactional_id.clone(),
            transaction_timeout_ms: config.transaction_timeout.as_millis().min(i32::MAX as u128)
                as i32,
            linger: micros(config.linger),
            batch_size: config.batch_size.max(1),
            buffer_memory: config.buffer_memory,
            buffer_pool_idle: config.buffer_memory / 8,
            max_in_flight: config.max_in_flight_requests_per_connection,
            delivery_timeout: micros(config.delivery_timeout),
            request_timeout: micros(config.request_timeout),
            retries: config.retries,
            retry_backoff: micros(config.retry_backoff),
            retry_backoff_max: micros(config.retry_backoff_max),
            reconnect_backoff: micros(config.reconnect_backoff),
            reconnect_backoff_max: micros(config.reconnect_backoff_max),
            connection_setup_timeout: micros(config.socket_connection_setup_timeout),
            connections_max_idle: config.connections_max_idle.map(micros),
            max_request_size: config.max_request_size,
            metadata_max_age: micros(config.metadata_max_age),
            metadata_max_idle: micros(config.metadata_max_idle),
            rebootstrap_trigger: match config.metadata_recovery_strategy {
                MetadataRecoveryStrategy::None => None,
                MetadataRecoveryStrategy::Rebootstrap => {
                    Some(micros(config.metadata_recovery_rebootstrap_trigger))
                }
            },
            compression: config.compression_codec(),
            owns_identity,
            sasl: config.sasl.clone(),
            partition_availability_timeout: if config.partitioner_adaptive {
                micros(config.partitioner_availability_timeout)
            } else {
                0
            },
        }
    }

    /// The configuration of shard `index` of `shards`: the first shard's engine owns the
    /// identity, and the shards share the idle buffers' bound.
    pub fn for_shard(config: &ProducerConfig, index: usize, shards: usize) -> Self {
        let mut engine = Self::from_producer_config(config, index == 0);
        engine.buffer_pool_idle /= shards.max(1);
        engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_share_an_eighth_of_buffer_memory_for_idle_buffers_and_the_first_owns_the_identity() {
        let config = ProducerConfig::builder()
            .bootstrap_servers("broker:9092")
            .buffer_memory(64 << 20)
            .build()
            .unwrap();
        let shards: Vec<_> = (0..4)
            .map(|i| EngineConfig::for_shard(&config, i, 4))
            .collect();
        assert!(shards.iter().all(|s| s.buffer_pool_idle == 2 << 20));
        assert_eq!(
            shards.iter().map(|s| s.owns_identity).collect::<Vec<_>>(),
            [true, false, false, false]
        );
    }
}
