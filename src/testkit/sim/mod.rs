//! The seeded deterministic simulator: producer engines, the reference broker behind its
//! in-memory face and a lossy network, on a virtual clock, in one thread.
//!
//! - [`world`]: the world ([`Sim`]) and its scripting surface: send records, add scripted
//!   [`FaultRule`]s, move leaders, take brokers down, run the clock, read the trace.
//! - [`random`]: random runs drawn from one `u64` seed ([`run_seed`]).
//! - [`checker`]: the rules checked after every event.
//! - [`rng`]: the seeded generator.
//!
//! The in-memory peer serves requests through the TCP face's own parse, dispatch and encode
//! functions, so the engine's frames take the same codec path as over a socket.

pub mod checker;
pub mod random;
pub mod rng;
pub mod txn_checker;
pub mod txn_random;
pub mod world;

pub use checker::{Checker, CheckerStats, RecordId, Verdict};
pub use random::{run_plan, run_seed, RandomPlan, RunReport, DEFAULT_RECORDS};
pub use rng::Rng;
pub use world::{
    default_engine_config, Chaos, Fault, FaultCounts, FaultRule, IdleLimits, ProduceTrace,
    QuietFaults, RequestMatch, Sim, SimDelivery, SimSetup, TracedBatch, EPOCH_MS, MS, SECOND,
};
