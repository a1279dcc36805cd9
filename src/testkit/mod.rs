//! Test and benchmark tooling: the reference broker, its TCP face, the simulator.
//!
//! - [`broker`]: the sans-IO reference broker, a whole cluster in one struct whose verdicts
//!   follow the Apache Kafka broker's producer-state rules.
//! - [`server`]: its TCP face, several brokers in one process with a fault plan.
//! - [`batch`]: the record batch v2 header as the broker reads it, and a test batch encoder.
//! - [`sim`]: the seeded deterministic simulator (engine + broker core + lossy network).

pub mod batch;
pub mod broker;
#[doc(hidden)]
pub mod handoff;
pub mod server;
pub mod sim;
