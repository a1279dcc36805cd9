//! Random runs: one `u64` seed draws a topology, a configuration, a fault mix and a send
//! schedule, and the run is checked after every event (see [`super::checker`]).
//!
//! A run has three phases:
//! 1. **Chaos**: several thousand records are sent at random times to random partitions while
//!    the network drops, delays, resets and reorders, leaders move, brokers go down and come
//!    back, errors are injected and (with a Legacy broker) producer state is lost.
//! 2. **Heal**: no new faults, every broker up, held answers released; the run continues until
//!    every send has resolved and every engine is idle.
//! 3. **Idle failure** (some plans): with nothing queued and nothing in flight, a broker dies
//!    and the controller moves its leaders to the survivors, at once or a little later. The
//!    producer sends nothing meanwhile, so only a lost connection (or a refused connect) can
//!    tell it the leaders moved.
//! 4. **Liveness**: a few more records to every partition must all succeed, so no partition
//!    was left wedged by what happened before. The one exception is a partition whose producer
//!    state a Legacy broker lost: its first batch may end as of unknown outcome (see the
//!    phase), and a second round of records there must then all succeed.

use crate::engine::{Micros, TopicPartition};
use crate::partitioner::partition_for_key;
use crate::protocol::error_code::code;
use crate::testkit::broker::{BrokerRules, KafkaBehaviour};

use super::checker::{CheckerStats, Verdict};
use super::rng::Rng;
use super::world::{
    default_engine_config, Chaos, FaultCounts, IdleLimits, QuietFaults, Sim, SimSetup, MS, SECOND,
};

/// Records sent in the chaos phase of a default run.
pub const DEFAULT_RECORDS: usize = 3_000;

/// Records sent to every partition in the liveness phase.
const LIVENESS_RECORDS: usize = 3;

/// The shape of one random run, drawn from its seed.
#[derive(Debug, Clone)]
pub struct RandomPlan {
    pub seed: u64,
    pub records: usize,
    /// Mean gap between bursts of sends.
    pub send_gap: Micros,
    pub burst_max: usize,
    pub pad_max: usize,
    /// Probability that a record is large (beyond a small `max.message.bytes`).
    pub large_record: f64,
    /// Probability that a record has a key and goes where the key hashes.
    pub keyed: f64,
    /// Mean time between leader moves.
    pub leader_move_every: Option<Micros>,
    /// Mean time between broker failures, and how long one lasts.
    pub broker_down_every: Option<Micros>,
    pub broker_down_for: (Micros, Micros),
    /// Probability that the controller moves a failed broker's leaders away.
    pub controller_moves_leaders: f64,
    /// Mean time between losses of producer state (Legacy brokers only).
    pub state_loss_every: Option<Micros>,
    /// A broker that dies while the producer is idle, after the heal.
    pub idle_broker_failure: Option<IdleBrokerFailure>,
    pub setup: SimSetup,
    pub chaos: Chaos,
    /// Snapshot reloads, expiry in flight, late appends, sequence wrap.
    pub quiet: QuietFaults,
    /// Idle connections closed by the brokers or the producer (`connections.max.idle.ms`).
    pub idle: IdleLimits,
}

/// A broker failure while the producer is idle: `broker` goes down (for the rest of the
/// run), the controller moves its leaders to the survivors `leaders_move_after` later, and
/// the producer stays idle for `idle_for` before the liveness records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleBrokerFailure {
    pub broker: i32,
    pub leaders_move_after: Micros,
    pub idle_for: Micros,
}

impl RandomPlan {
    pub fn from_seed(seed: u64, records: usize) -> Self {
        let mut rng = Rng::new(seed);
        let brokers = vec![1, 2, 3];
        let broker_ids = brokers.clone();
        let partitions = rng.range(4, 8) as usize;
        let topics = if rng.chance(0.3) { 2 } else { 1 };
        let offset = rng.below(3) as usize;
        let mut topic_list = Vec::new();
        let mut assigned = 0;
        for t in 0..topics {
            let count = if t + 1 == topics {
                partitions - assigned
            } else {
                partitions / 2
            };
            let leaders = (0..count)
                .map(|i| brokers[(assigned + i + offset) % brokers.len()])
                .collect();
            assigned += count;
            topic_list.push((format!("topic-{t}"), leaders));
        }

        let legacy = rng.chance(0.15);
        let small_messages = rng.chance(0.15);
        let mut rules = BrokerRules {
            kafka_version: if legacy {
                KafkaBehaviour::Legacy
            } else {
                KafkaBehaviour::Current
            },
            ..BrokerRules::default()
        };
        if small_messages {
            rules.max_message_bytes = *rng.pick(&[1_500, 3_000, 6_000]);
        }

        let idle = IdleLimits::draw(seed);
        let mut engine = default_engine_config();
        engine.connections_max_idle = idle.client;
        engine.linger = rng.range(0, 10) * MS;
        engine.batch_size = *rng.pick(&[1_024, 4_096, 16_384]);
        engine.max_in_flight = if rng.chance(0.7) {
            5
        } else {
            rng.range(1, 4) as usize
        };
        if rng.chance(0.2) {
            engine.max_request_size = *rng.pick(&[8_192, 32_768]);
        }

        let shards = match rng.below(10) {
            0..=4 => 1,
            5..=7 => 2,
            _ => 3,
        };
        let latency_lo = rng.range(50, 500);
        let latency_hi = latency_lo + rng.range(0, 4_000);
        let setup = SimSetup {
            seed,
            brokers,
            topics: topic_list,
            rules,
            engine,
            shards,
            latency: (latency_lo, latency_hi),
            identity_delay: (0, rng.range(0, 5) * MS),
            // No slack: the engine wakes up at every batch's delivery deadline, queued or on
            // the wire, so every send resolves within delivery.timeout.ms of its append.
            resolve_slack: 0,
            trace: false,
            // One seed in eight runs with a buffer too small for its batches' open buffers, so
            // that batches open without room for a whole buffer (`engine::batch_memory`). From
            // the seed, not the generator, so that every other draw stays as it was.
            buffer_memory: if seed % 8 == 7 { 64 << 10 } else { 1 << 20 },
        };

        let request_fault = match rng.below(10) {
            0 => 0.0,
            1..=3 => 0.002 + rng.below(8) as f64 / 1_000.0,
            4..=7 => 0.01 + rng.below(40) as f64 / 1_000.0,
            _ => 0.05 + rng.below(70) as f64 / 1_000.0,
        };
        let mut weights = [0u32; 10];
        for w in &mut weights {
            *w = rng.range(0, 10) as u32;
        }
        let mut after_append = vec![
            code::REQUEST_TIMED_OUT,
            code::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ];
        if legacy {
            after_append.push(code::DUPLICATE_SEQUENCE_NUMBER);
        }
        let chaos = Chaos {
            request_fault,
            weights,
            retriable: vec![
                code::NOT_LEADER_OR_FOLLOWER,
                code::REQUEST_TIMED_OUT,
                code::NOT_ENOUGH_REPLICAS,
            ],
            fatal_to_batch: if rng.chance(0.6) {
                vec![code::INVALID_RECORD, code::TOPIC_AUTHORIZATION_FAILED]
            } else {
                Vec::new()
            },
            after_append,
            leader_lost_after_append: vec![code::NOT_LEADER_OR_FOLLOWER, code::KAFKA_STORAGE_ERROR],
            max_delay: rng.range(0, 8) * SECOND,
            late_serve: rng.below(9) as f64 / 10.0,
            connect_fail: rng.below(20) as f64 / 100.0,
        };

        let span = rng.range(3, 15) * SECOND;
        let burst_max = rng.range(1, 20) as usize;
        let bursts = (records / burst_max.div_ceil(2)).max(1) as u64;
        RandomPlan {
            seed,
            records,
            send_gap: (span / bursts).max(1),
            burst_max,
            pad_max: rng.range(8, 600) as usize,
            large_record: if small_messages { 0.01 } else { 0.0 },
            keyed: rng.below(5) as f64 / 4.0,
            leader_move_every: rng.chance(0.6).then(|| rng.range(100, 3_000) * MS),
            broker_down_every: rng.chance(0.4).then(|| rng.range(1, 10) * SECOND),
            broker_down_for: (50 * MS, rng.range(1, 8) * SECOND),
            controller_moves_leaders: rng.below(11) as f64 / 10.0,
            state_loss_every: legacy.then(|| rng.range(200, 3_000) * MS),
            // Drawn last, so every earlier draw (and the chaos of the seeds that ran before
            // this phase existed) is unchanged.
            idle_broker_failure: rng.chance(0.3).then(|| IdleBrokerFailure {
                broker: *rng.pick(&broker_ids),
                leaders_move_after: rng.range(0, 2 * SECOND),
                idle_for: rng.range(0, 3 * SECOND),
            }),
            quiet: QuietFaults::draw(seed, !legacy, setup.engine.request_timeout),
            idle,
            setup,
            chaos,
        }
    }
}

/// What a run did, for reports and determinism checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    pub seed: u64,
    pub checker: CheckerStats,
    pub events: u64,
    pub healed_at: Micros,
    pub settled_at: Micros,
    pub epoch_bumps: u64,
    pub sequence_rewrites: u64,
    pub produce_requests: u64,
    pub retries: u64,
    pub disconnects: u64,
    pub leader_moves: u64,
    pub broker_failures: u64,
    /// Of `broker_failures`, those whose address stopped answering (connects hang).
    pub unreachable_brokers: u64,
    /// Broker failures while the producer was idle (phase 3).
    pub idle_broker_failures: u64,
    pub state_losses: u64,
    /// Connections the producer closed for idleness (the brokers' closes are in `faults`).
    pub client_idle_closes: u64,
    /// Batches opened with a one-record buffer because `buffer.memory` had no room for a
    /// whole batch's (`engine::batch_memory`).
    pub batches_without_room: u64,
    pub faults: FaultCounts,
}

/// Runs one seed with [`DEFAULT_RECORDS`] records. Panics, with the reason, on the first
/// violated rule.
pub fn run_seed(seed: u64) -> RunReport {
    run_plan(&RandomPlan::from_seed(seed, DEFAULT_RECORDS))
}

/// Salts the seed of the stream that decides whether a failed broker's address stops
/// answering (a machine lost, not a process: connection attempts hang instead of being
/// refused).
pub(crate) const UNREACHABLE_SALT: u64 = 0x756e_7265_6163_6862;

/// Draws an exponentially distributed gap with mean `mean` (at least 1 us).
fn exp_gap(rng: &mut Rng, mean: Micros) -> Micros {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((-(1.0 - u).ln()) * mean as f64).max(1.0) as Micros
}

/// Runs a plan. With `KACRAB_SIM_DEBUG` set, a failing run prints [`Sim::debug_dump`] (with a
/// request trace) before the panic goes on.
pub fn run_plan(plan: &RandomPlan) -> RunReport {
    let debug = std::env::var_os("KACRAB_SIM_DEBUG").is_some();
    let mut plan = plan.clone();
    plan.setup.trace |= debug;
    let mut sim = Sim::new(plan.setup.clone());
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_phases(&plan, &mut sim)));
    match outcome {
        Ok(report) => report,
        Err(panic) => {
            if debug {
                eprintln!("{}", sim.debug_dump());
            }
            std::panic::resume_unwind(panic)
        }
    }
}

fn run_phases(plan: &RandomPlan, sim: &mut Sim) -> RunReport {
    sim.set_chaos(Some(plan.chaos.clone()));
    sim.set_quiet_faults(plan.quiet.clone());
    sim.set_connections_max_idle(plan.idle.broker);
    let mut rng = Rng::new(plan.seed.rotate_left(17) ^ 0xd1ce);
    let partitions: Vec<TopicPartition> = sim.partitions().to_vec();
    let brokers = plan.setup.brokers.clone();
    let partition_counts: Vec<(String, i32)> = plan
        .setup
        .topics
        .iter()
        .map(|(name, leaders)| (name.clone(), leaders.len() as i32))
        .collect();

    let never = Micros::MAX;
    let mut next_send: Micros = 0;
    let mut next_leader_move = plan
        .leader_move_every
        .map_or(never, |m| exp_gap(&mut rng, m));
    let mut next_broker_failure = plan
        .broker_down_every
        .map_or(never, |m| exp_gap(&mut rng, m));
    let mut next_state_loss = plan
        .state_loss_every
        .map_or(never, |m| exp_gap(&mut rng, m));
    let mut leader_moves = 0u64;
    let mut broker_failures = 0u64;
    let mut unreachable_brokers = 0u64;
    // Its own stream, so that plans and the main stream stay what they were before this
    // fault class existed: a seed that found a defect replays the same run.
    let mut unreachable_rng = Rng::new(plan.seed ^ UNREACHABLE_SALT);
    let mut state_losses = 0u64;
    // Partitions whose producer state a Legacy broker lost (phase 4 needs them).
    let mut state_lost: Vec<TopicPartition> = Vec::new();

    // Phase 1: chaos while sending.
    while sim.sent() < plan.records {
        let t = next_send
            .min(next_leader_move)
            .min(next_broker_failure)
            .min(next_state_loss);
        sim.run_until(t);
        if t == next_send {
            let burst = rng.range(1, plan.burst_max as u64) as usize;
            let sticky = partitions[rng.below(partitions.len() as u64) as usize].clone();
            let mut touched = Vec::new();
            for _ in 0..burst.min(plan.records - sim.sent()) {
                let large = rng.chance(plan.large_record);
                let pad = if large {
                    rng.range(8_000, 12_000) as usize
                } else {
                    rng.range(0, plan.pad_max as u64) as usize
                };
                if !sim.has_room_for(pad + 40) {
                    break;
                }
                let (tp, key) = if rng.chance(plan.keyed) {
                    let key = format!("key-{}", rng.below(1_000)).into_bytes();
                    let (topic, count) = rng.pick(&partition_counts).clone();
                    let p = partition_for_key(&key, count);
                    (TopicPartition::new(topic.as_str(), p), Some(key))
                } else if rng.chance(0.5) {
                    (sticky.clone(), None)
                } else {
                    (
                        partitions[rng.below(partitions.len() as u64) as usize].clone(),
                        None,
                    )
                };
                sim.append_with_headers(&tp, key.as_deref(), pad, &[]);
                let shard = sim.shard_of(&tp);
                if !touched.contains(&shard) {
                    touched.push(shard);
                }
            }
            // The application threads' records reach each shard, which then runs.
            for &shard in &touched {
                sim.drive(shard);
            }
            // A full buffer blocks the application; it tries again shortly.
            next_send = sim.now()
                + if touched.is_empty() {
                    MS
                } else {
                    exp_gap(&mut rng, plan.send_gap)
                };
        } else if t == next_leader_move {
            let tp = rng.pick(&partitions).clone();
            let current = sim.leader(&tp);
            let others: Vec<i32> = brokers.iter().copied().filter(|&b| b != current).collect();
            let to = *rng.pick(&others);
            sim.set_leader(&tp, to);
            leader_moves += 1;
            next_leader_move = t + exp_gap(&mut rng, plan.leader_move_every.expect("planned"));
        } else if t == next_broker_failure {
            let down = sim.brokers_down();
            let up: Vec<i32> = brokers
                .iter()
                .copied()
                .filter(|b| !down.contains(b))
                .collect();
            if up.len() > 1 {
                let broker = *rng.pick(&up);
                let (lo, hi) = plan.broker_down_for;
                let back_at = t + rng.range(lo, hi);
                if unreachable_rng.chance(0.5) {
                    sim.broker_unreachable(broker);
                    unreachable_brokers += 1;
                } else {
                    sim.broker_down(broker);
                }
                sim.set_broker_down_until(broker, back_at);
                broker_failures += 1;
                sim.at(back_at, move |sim| sim.broker_up(broker));
                if rng.chance(plan.controller_moves_leaders) {
                    let survivors: Vec<i32> = up.iter().copied().filter(|&b| b != broker).collect();
                    let moves: Vec<(TopicPartition, i32)> = partitions
                        .iter()
                        .filter(|tp| sim.leader(tp) == broker)
                        .map(|tp| (tp.clone(), *rng.pick(&survivors)))
                        .collect();
                    let when = t + rng.range(0, 2 * SECOND);
                    sim.at(when, move |sim| {
                        for (tp, to) in moves {
                            if sim.leader(&tp) == broker && sim.is_broker_up(to) {
                                sim.set_leader(&tp, to);
                            }
                        }
                    });
                }
            }
            next_broker_failure = t + exp_gap(&mut rng, plan.broker_down_every.expect("planned"));
        } else if t == next_state_loss {
            let tp = rng.pick(&partitions).clone();
            if sim.partition_quiet(&tp) {
                if rng.chance(0.5) {
                    // Retention deleted everything, and a pre-2.5 broker the producer state
                    // with it: the producer sees UNKNOWN_PRODUCER_ID with a log start offset
                    // past its last ack.
                    sim.truncate_partition(&tp);
                } else {
                    sim.remove_producer_state(&tp);
                }
                state_losses += 1;
                if !state_lost.contains(&tp) {
                    state_lost.push(tp);
                }
            }
            next_state_loss = t + exp_gap(&mut rng, plan.state_loss_every.expect("planned"));
        }
    }

    // Phase 2: heal.
    let healed_at = sim.now();
    sim.set_chaos(None);
    for broker in sim.brokers_down() {
        sim.broker_up(broker);
    }
    sim.release_held();
    let config = &plan.setup.engine;
    let limit = healed_at + config.delivery_timeout + 2 * config.request_timeout + 10 * SECOND;
    if !sim.run_until_settled(limit) {
        panic!(
            "not settled {} us after healing: {} sends unresolved, engines idle: {}",
            limit - healed_at,
            sim.checker().unresolved(),
            sim.all_idle()
        );
    }
    let settled_at = sim.now();
    sim.check_end();

    // Phase 3: a broker dies while the producer is idle.
    let mut idle_broker_failures = 0u64;
    if let Some(failure) = plan.idle_broker_failure {
        assert!(sim.all_idle(), "the producer is idle after the heal");
        let broker = failure.broker;
        sim.broker_down(broker);
        idle_broker_failures += 1;
        let survivors: Vec<i32> = brokers.iter().copied().filter(|&b| b != broker).collect();
        let moves: Vec<(TopicPartition, i32)> = partitions
            .iter()
            .filter(|tp| sim.leader(tp) == broker)
            .map(|tp| (tp.clone(), *rng.pick(&survivors)))
            .collect();
        sim.at(sim.now() + failure.leaders_move_after, move |sim| {
            for (tp, to) in moves {
                sim.set_leader(&tp, to);
            }
        });
        sim.run_for(failure.idle_for);
    }

    // Phase 4: liveness.
    let mut probes = Vec::new();
    for tp in &partitions {
        for id in sim.send_many(tp, LIVENESS_RECORDS, 16) {
            probes.push((tp.clone(), id));
        }
    }
    let limit = sim.now() + config.delivery_timeout;
    assert!(
        sim.run_until_settled(limit),
        "liveness records did not settle after healing"
    );
    // One case is not a wedge: on a partition whose producer state a Legacy broker lost, a
    // first batch answered NOT_LEADER_OR_FOLLOWER by a leader the producer had not seen move
    // (which may follow an append under acks=all) and then UNKNOWN_PRODUCER_ID by the new
    // leader can never be placed: its old stamp is refused for good, and renumbered it could
    // land twice. It ends as of unknown outcome, and the partition must work right after it.
    let mut second_round = Vec::new();
    for (tp, id) in &probes {
        match sim.verdict(*id) {
            Verdict::Acked(_) => {}
            Verdict::Unknown if state_lost.contains(tp) => {
                if !second_round.contains(tp) {
                    second_round.push(tp.clone());
                }
            }
            _ => panic!(
                "record {id} sent after healing did not succeed: {:?}",
                sim.result(*id)
            ),
        }
    }
    if !second_round.is_empty() {
        let mut probes = Vec::new();
        for tp in &second_round {
            probes.extend(sim.send_many(tp, LIVENESS_RECORDS, 16));
        }
        let limit = sim.now() + config.delivery_timeout;
        assert!(
            sim.run_until_settled(limit),
            "second liveness records did not settle"
        );
        for id in probes {
            assert!(
                matches!(sim.verdict(id), Verdict::Acked(_)),
                "record {id}, sent after an earlier one of unknown outcome on a partition whose \
                 producer state was lost, did not succeed: {:?}",
                sim.result(id)
            );
        }
    }
    sim.check_end();

    let mut report = RunReport {
        seed: plan.seed,
        checker: sim.checker().stats().clone(),
        events: sim.events_handled(),
        healed_at,
        settled_at,
        epoch_bumps: 0,
        sequence_rewrites: 0,
        produce_requests: 0,
        retries: 0,
        disconnects: 0,
        leader_moves,
        broker_failures,
        unreachable_brokers,
        idle_broker_failures,
        state_losses,
        client_idle_closes: sim.producer_idle_closes(),
        batches_without_room: 0,
        faults: sim.fault_counts().clone(),
    };
    for shard in 0..sim.shard_count() {
        let stats = sim.engine(shard).stats();
        report.epoch_bumps += stats.epoch_bumps_requested;
        report.batches_without_room += stats.batches_without_room;
        report.sequence_rewrites += stats.sequence_rewrites;
        report.produce_requests += stats.produce_requests;
        report.retries += stats.retries;
        report.disconnects += stats.disconnects;
    }
    report
}
