//! Test and benchmark tooling: the reference broker, its TCP face, the simulator. Behind the
//! `testkit` feature (add `kacrab = { version = "...", features = ["testkit"] }` to your
//! `[dev-dependencies]`).
//!
//! # Testing your service against the reference cluster
//!
//! [`server::ReferenceCluster`] runs N Kafka brokers in your test process, on 127.0.0.1
//! ephemeral ports, over one cluster state that follows Kafka's producer rules (sequences,
//! epochs, duplicates, the transaction coordinator, markers, LSO; see [`broker::BrokerRules`] to
//! model an older broker). Any Kafka client can talk to it, kacrab or not. The calls a test
//! needs:
//! - start and shape: `ReferenceCluster::start(3, BrokerRules::default())`,
//!   `create_topic(name, &leaders)`, `set_leader`, `broker_down` / `broker_up`;
//! - inject faults while traffic runs: `faults()` ([`server::FaultPlan`]: drop an answer after
//!   the append, reset a connection, delay an answer, answer an error, append then answer an
//!   error), counted per broker and API;
//! - read back: `with_cluster(|c| c.partition_log(topic, partition))` gives the stored batches
//!   (decode them with [`batch::decode_records`]), `high_watermark`,
//!   `last_stable_offset`, `producer_state`;
//! - the coordinator's view: `with_cluster(|c| c.transaction_metadata(id))`;
//! - what the brokers saw: `stats()` (requests per API, version and broker; connections).
//!
//! `examples/reference_cluster.rs` does all of these around a transactional producer.
//!
//! # Stability
//!
//! The items named above follow the crate's semantic versioning like the rest of its public
//! API. The rules they enforce track Kafka's: a minor release may add a rule Kafka has (a
//! request a test's broker accepted may then be refused as Kafka refuses it), and such changes
//! are listed in the release notes. [`sim`] and the items marked `#[doc(hidden)]` are kacrab's
//! own test machinery and may change in any release.
//!
//! - [`broker`]: the sans-IO reference broker, a whole cluster in one struct whose verdicts
//!   follow the Apache Kafka broker's producer-state rules.
//! - [`server`]: its TCP face, several brokers in one process with a fault plan.
//! - [`batch`]: the record batch v2 header as the broker reads it, and a test batch encoder.
//! - [`sim`]: the seeded deterministic simulator (engine + broker core + lossy network).

pub mod batch;
pub mod broker;

/// Makes shard `shard` of `producer` panic when it takes this command from its inbox (behind
/// every record queued there before), as a bug of kacrab's own would: in its driver loop, or
/// (`in_task`) in a task it spawns, which takes its executor's thread down with it. For tests
/// of what a producer does when one of its shards dies. False if that shard has stopped.
#[doc(hidden)]
pub fn panic_shard(producer: &crate::Producer, shard: usize, in_task: bool) -> bool {
    producer.inject_shard_panic(shard, in_task)
}
/// Each partition of `topic` as `producer`'s partitioner last saw the shards publish it:
/// its queue of batches not yet sent, and whether it may be chosen. `None` before the first
/// keyless record to `topic` switched partitions. For tests that wait on the adaptive
/// partitioner's view instead of sleeping.
#[doc(hidden)]
pub fn partition_load(producer: &crate::Producer, topic: &str) -> Option<Vec<(u32, bool)>> {
    producer.partition_load(topic)
}
#[doc(hidden)]
pub mod handoff;
pub mod server;
// The simulator is kacrab's own test machinery, not a stable API (as `internals` below):
// exempt from `missing_docs`.
#[allow(missing_docs)]
pub mod sim;

/// The crate's internal layers, for kacrab's own tests, benchmarks and simulator: the wire
/// codec, the sans-IO engine and the runtime, as they are inside the crate.
///
/// **Not a stable API.** Anything here may change or go in any release, patch releases
/// included; the producer's public API is what the crate root and its public modules export.
#[allow(missing_docs)]
pub mod internals {
    /// The sans-IO producer engine (`src/engine`).
    pub mod engine {
        pub use crate::engine::*;
    }
    /// The synchronous wire codec (`src/protocol`).
    pub mod protocol {
        pub use crate::protocol::*;
    }
    /// The shards' runtime (`src/runtime`).
    pub mod runtime {
        pub use crate::runtime::*;
    }
}
