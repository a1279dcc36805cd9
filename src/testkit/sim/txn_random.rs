//! Random transactional runs: one `u64` seed draws a topology, a configuration, a fault mix and
//! an application that runs transactions (begin, sends, offsets, commit or abort, with
//! caller-side timeouts and repeated calls), and the run is checked after every event (the
//! idempotence rules of [`super::checker`]) and at the end (the read_committed rules of
//! [`super::txn_checker`]).
//!
//! Phases: transactions under chaos (drops, post-append drops, resets, delays, injected
//! produce and coordinator errors, leader moves, brokers down); heal and settle; then a
//! liveness transaction that must commit (unless the producer was fenced or went fatal).

use crate::engine::{Micros, TopicPartition, TransactionState, TxnHandle};
use crate::error::TransactionError;
use crate::protocol::error_code::code;
use crate::testkit::broker::BrokerRules;

use super::checker::CheckerStats;
use super::rng::Rng;
use super::txn_checker::TxnStats;
use super::world::{default_engine_config, Chaos, IdleLimits, Sim, SimSetup, MS, SECOND};

/// Transactions in a default run.
pub const DEFAULT_TRANSACTIONS: usize = 12;

/// The topic the application consumes from: the offsets it commits with its transactions name
/// its partitions. It must exist, as the broker answers UNKNOWN_TOPIC_OR_PARTITION (retriable,
/// so the call would never complete) for an offset of a partition it does not have.
const INPUT_TOPIC: &str = "input";
const INPUT_PARTITIONS: i32 = 3;

/// Seeds the generator of refused sends (the plan's chance, and each transaction's draw), kept
/// apart from the others so that the runs of older seeds stay as they were.
const SEND_REFUSED_SALT: u64 = 0x5e4d_4ef0_5ed0_0001;

/// The shape of one random transactional run, drawn from its seed.
#[derive(Debug, Clone)]
pub struct TxnPlan {
    pub seed: u64,
    pub transactions: usize,
    pub max_records: usize,
    pub abort_chance: f64,
    pub offsets_chance: f64,
    /// Mean gap between the application's steps.
    pub step_gap: Micros,
    /// How long the application waits for a call before calling it again.
    pub caller_timeout: Micros,
    pub leader_move_every: Option<Micros>,
    pub broker_down_every: Option<Micros>,
    pub broker_down_for: (Micros, Micros),
    /// When set, the coordinator answers EndTxn once the transaction is prepared and a marker
    /// writer writes the markers later, after a gap drawn from this range: Kafka's PrepareCommit
    /// window, in which the next transaction's AddPartitionsToTxn and EndTxn see
    /// CONCURRENT_TRANSACTIONS. `None`: markers are written before EndTxn is answered.
    pub marker_write_gap: Option<(Micros, Micros)>,
    /// Mean time between moves of the transaction coordinator (an election of its
    /// `__transaction_state` partition), also while markers are unwritten.
    pub coordinator_move_every: Option<Micros>,
    /// Idle connections closed by the brokers or the producer (`connections.max.idle.ms`).
    pub idle: IdleLimits,
    /// Chance that a transaction has a record `send` refuses (too large); then it must not
    /// commit. Drawn from its own generator, so no other draw of a seed moves.
    pub send_refused_chance: f64,
    pub setup: SimSetup,
    pub chaos: Chaos,
}

impl TxnPlan {
    pub fn from_seed(seed: u64, transactions: usize) -> Self {
        let mut rng = Rng::new(seed ^ 0x7a11_5eed);
        let brokers = vec![1, 2, 3];
        let partitions = rng.range(2, 6) as usize;
        let offset = rng.below(3) as usize;
        let leaders = (0..partitions)
            .map(|i| brokers[(i + offset) % brokers.len()])
            .collect();
        let idle = IdleLimits::draw(seed);
        let mut engine = default_engine_config();
        engine.connections_max_idle = idle.client;
        engine.transactional_id = Some(format!("sim-tx-{}", seed % 7));
        engine.linger = rng.range(0, 20) * MS;
        engine.batch_size = *rng.pick(&[1_024, 16_384]);
        engine.max_in_flight = if rng.chance(0.7) {
            5
        } else {
            rng.range(1, 4) as usize
        };
        let shards = if rng.chance(0.3) { 2 } else { 1 };
        let latency_lo = rng.range(50, 500);
        let latency_hi = latency_lo + rng.range(0, 3_000);
        let setup = SimSetup {
            seed,
            brokers,
            topics: vec![("topic-0".to_string(), leaders)],
            rules: BrokerRules::default(),
            engine,
            shards,
            latency: (latency_lo, latency_hi),
            identity_delay: (0, 0),
            resolve_slack: 0,
            trace: false,
            // As in the idempotent plans: one seed in eight opens batches without room.
            buffer_memory: if seed % 8 == 7 { 64 << 10 } else { 1 << 20 },
        };
        let request_fault = match rng.below(10) {
            0 => 0.0,
            1..=4 => 0.002 + rng.below(8) as f64 / 1_000.0,
            _ => 0.01 + rng.below(40) as f64 / 1_000.0,
        };
        let mut weights = [0u32; 10];
        for w in &mut weights {
            *w = rng.range(0, 10) as u32;
        }
        let chaos = Chaos {
            request_fault,
            weights,
            retriable: vec![
                code::NOT_LEADER_OR_FOLLOWER,
                code::REQUEST_TIMED_OUT,
                code::NOT_ENOUGH_REPLICAS,
            ],
            fatal_to_batch: if rng.chance(0.5) {
                vec![code::INVALID_RECORD]
            } else {
                Vec::new()
            },
            after_append: vec![
                code::REQUEST_TIMED_OUT,
                code::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            ],
            leader_lost_after_append: vec![code::NOT_LEADER_OR_FOLLOWER, code::KAFKA_STORAGE_ERROR],
            max_delay: rng.range(0, 4) * SECOND,
            late_serve: rng.below(9) as f64 / 10.0,
            connect_fail: rng.below(15) as f64 / 100.0,
        };
        let mut plan = TxnPlan {
            seed,
            transactions,
            max_records: rng.range(1, 40) as usize,
            abort_chance: rng.below(5) as f64 / 10.0,
            offsets_chance: rng.below(5) as f64 / 10.0,
            step_gap: rng.range(1, 50) * MS,
            caller_timeout: rng.range(1, 10) * SECOND,
            leader_move_every: rng.chance(0.5).then(|| rng.range(200, 3_000) * MS),
            broker_down_every: rng.chance(0.3).then(|| rng.range(2, 10) * SECOND),
            broker_down_for: (50 * MS, rng.range(1, 5) * SECOND),
            marker_write_gap: None,
            coordinator_move_every: None,
            idle,
            send_refused_chance: {
                let mut own = Rng::new(seed ^ SEND_REFUSED_SALT);
                if own.chance(0.25) {
                    own.range(5, 30) as f64 / 100.0
                } else {
                    0.0
                }
            },
            setup,
            chaos,
        };
        // Drawn last, so that the draws above (and the plans of older seeds) stay as they were.
        plan.marker_write_gap = rng.chance(0.4).then(|| {
            let lo = rng.range(1, 50) * MS;
            (lo, lo + rng.range(0, 500) * MS)
        });
        plan.coordinator_move_every = rng.chance(0.3).then(|| rng.range(300, 5_000) * MS);
        plan
    }

    /// The same plan on a cluster whose finalized `transaction.version` is `level` (0 or 1:
    /// Kafka 3.x transactions, 2: KIP-890 part 2; [`BrokerRules::transaction_version`]). The
    /// producer negotiates the protocol from what the brokers advertise; the coordinator's own
    /// aborts (timeouts, fences) follow the level.
    pub fn at_transaction_version(mut self, level: i16) -> Self {
        self.setup.rules.transaction_version = level;
        self
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRunReport {
    pub seed: u64,
    pub checker: CheckerStats,
    pub txn: TxnStats,
    pub events: u64,
    /// The producer ended fenced or fatal (its later transactions were not run).
    pub fatal: bool,
    /// The transaction manager's error when it ended fatal.
    pub fatal_error: Option<String>,
    pub repeated_calls: u64,
    pub leader_moves: u64,
    pub broker_failures: u64,
    /// Of `broker_failures`, those whose address stopped answering (connects hang).
    pub unreachable_brokers: u64,
    /// Transactions the coordinator aborted for outliving their timeout.
    pub timed_out: u64,
    /// Transactions whose markers were written after their EndTxn was answered.
    pub late_markers: u64,
    pub coordinator_moves: u64,
    /// Connections the brokers closed for idleness, and requests that crossed such a close.
    pub idle_closes: u64,
    pub idle_crossings: u64,
    /// Connections the producer closed for idleness.
    pub client_idle_closes: u64,
    /// Records `send` refused inside a transaction, each failing its transaction's commit.
    pub sends_refused: u64,
    /// The cluster's finalized `transaction.version` level.
    pub transaction_version: i16,
}

/// The run of `seed` on a cluster at the default `transaction.version` (2).
pub fn run_txn_seed(seed: u64) -> TxnRunReport {
    run_txn_plan(&TxnPlan::from_seed(seed, DEFAULT_TRANSACTIONS))
}

/// The run of `seed` on a cluster whose finalized `transaction.version` is `level`.
pub fn run_txn_seed_at(seed: u64, level: i16) -> TxnRunReport {
    run_txn_plan(&TxnPlan::from_seed(seed, DEFAULT_TRANSACTIONS).at_transaction_version(level))
}

/// Runs a plan; with `KACRAB_SIM_DEBUG` set, a failing run prints [`Sim::debug_dump`].
pub fn run_txn_plan(plan: &TxnPlan) -> TxnRunReport {
    let debug = std::env::var_os("KACRAB_SIM_DEBUG").is_some();
    let mut plan = plan.clone();
    plan.setup.trace |= debug;
    let mut sim = Sim::new(plan.setup.clone());
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Runner::new(&plan).run(&mut sim)
    }));
    match outcome {
        Ok(report) => report,
        Err(panic) => {
            if debug {
                eprintln!("{}", sim.debug_dump());
                eprintln!("transaction state {:?}", sim.txn_state());
            }
            std::panic::resume_unwind(panic)
        }
    }
}

fn exp_gap(rng: &mut Rng, mean: Micros) -> Micros {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((-(1.0 - u).ln()) * mean as f64).max(1.0) as Micros
}

/// A call's end, as the application sees it.
enum Called {
    Done(Result<(), TransactionError>),
    Refused(TransactionError),
}

struct Runner<'a> {
    plan: &'a TxnPlan,
    rng: Rng,
    next_leader_move: Micros,
    next_broker_failure: Micros,
    next_marker_write: Micros,
    next_coordinator_move: Micros,
    leader_moves: u64,
    broker_failures: u64,
    /// Its own stream (`random::UNREACHABLE_SALT`): plans and the main stream are unchanged.
    unreachable_rng: Rng,
    unreachable_brokers: u64,
    late_markers: u64,
    coordinator_moves: u64,
    repeated_calls: u64,
    chaos_on: bool,
    /// Whether a transaction has a refused send (`TxnPlan::send_refused_chance`).
    refusals: Rng,
}

impl<'a> Runner<'a> {
    fn new(plan: &'a TxnPlan) -> Self {
        let mut rng = Rng::new(plan.seed.rotate_left(23) ^ 0x000f_f5e7);
        let next_leader_move = plan
            .leader_move_every
            .map_or(Micros::MAX, |m| exp_gap(&mut rng, m));
        let next_broker_failure = plan
            .broker_down_every
            .map_or(Micros::MAX, |m| exp_gap(&mut rng, m));
        let next_marker_write = plan
            .marker_write_gap
            .map_or(Micros::MAX, |(lo, hi)| rng.range(lo, hi));
        let next_coordinator_move = plan
            .coordinator_move_every
            .map_or(Micros::MAX, |m| exp_gap(&mut rng, m));
        Runner {
            plan,
            rng,
            next_leader_move,
            next_broker_failure,
            next_marker_write,
            next_coordinator_move,
            leader_moves: 0,
            broker_failures: 0,
            unreachable_rng: Rng::new(plan.seed ^ super::random::UNREACHABLE_SALT),
            unreachable_brokers: 0,
            late_markers: 0,
            coordinator_moves: 0,
            repeated_calls: 0,
            chaos_on: true,
            refusals: Rng::new(plan.seed.rotate_left(7) ^ SEND_REFUSED_SALT),
        }
    }

    /// Lets virtual time pass to `until`, applying the planned leader moves, broker
    /// failures, coordinator moves and late marker writes on the way.
    fn advance(&mut self, sim: &mut Sim, until: Micros) {
        loop {
            let t = self
                .next_leader_move
                .min(self.next_broker_failure)
                .min(self.next_marker_write)
                .min(self.next_coordinator_move);
            if !self.chaos_on || t > until {
                sim.run_until(until);
                return;
            }
            sim.run_until(t);
            let brokers = self.plan.setup.brokers.clone();
            if t == self.next_marker_write {
                self.late_markers += sim.write_held_markers() as u64;
                let (lo, hi) = self.plan.marker_write_gap.expect("planned");
                self.next_marker_write = t + self.rng.range(lo, hi);
            } else if t == self.next_coordinator_move {
                let id = self.plan.setup.engine.transactional_id.clone();
                let current = sim
                    .cluster()
                    .transaction_coordinator(&id.expect("a transactional run"));
                let others: Vec<i32> = brokers.iter().copied().filter(|&b| b != current).collect();
                let to = *self.rng.pick(&others);
                if sim.is_broker_up(to) {
                    sim.move_transaction_coordinator(to);
                    self.coordinator_moves += 1;
                }
                self.next_coordinator_move = t + exp_gap(
                    &mut self.rng,
                    self.plan.coordinator_move_every.expect("planned"),
                );
            } else if t == self.next_leader_move {
                let tp = self.rng.pick(sim.partitions()).clone();
                let current = sim.leader(&tp);
                let others: Vec<i32> = brokers.iter().copied().filter(|&b| b != current).collect();
                let to = *self.rng.pick(&others);
                if sim.is_broker_up(to) {
                    sim.set_leader(&tp, to);
                    self.leader_moves += 1;
                }
                self.next_leader_move =
                    t + exp_gap(&mut self.rng, self.plan.leader_move_every.expect("planned"));
            } else {
                let down = sim.brokers_down();
                if down.is_empty() {
                    let broker = *self.rng.pick(&brokers);
                    let (lo, hi) = self.plan.broker_down_for;
                    let back_at = t + self.rng.range(lo, hi);
                    if self.unreachable_rng.chance(0.5) {
                        sim.broker_unreachable(broker);
                        self.unreachable_brokers += 1;
                    } else {
                        sim.broker_down(broker);
                    }
                    sim.set_broker_down_until(broker, back_at);
                    sim.at(back_at, move |sim| sim.broker_up(broker));
                    self.broker_failures += 1;
                }
                self.next_broker_failure =
                    t + exp_gap(&mut self.rng, self.plan.broker_down_every.expect("planned"));
            }
        }
    }

    /// Makes a call and waits for its result, calling it again after each caller-side
    /// timeout (docs/java-rules.md §6.3: the repeated call must return the same pending handle).
    fn call(
        &mut self,
        sim: &mut Sim,
        mut make: impl FnMut(&mut Sim) -> Result<TxnHandle, TransactionError>,
    ) -> Called {
        let first = match make(sim) {
            Ok(h) => h,
            Err(e) => return Called::Refused(e),
        };
        let give_up = sim.now() + 600 * SECOND;
        loop {
            let wait_until = sim.now() + self.plan.caller_timeout;
            if let Some(result) = self.wait(sim, first, wait_until) {
                return Called::Done(result);
            }
            assert!(
                sim.now() < give_up,
                "a transaction call did not complete in {} s of virtual time (state {:?})",
                600,
                sim.txn_state()
            );
            self.repeated_calls += 1;
            match make(sim) {
                Ok(again) => assert_eq!(
                    again, first,
                    "a repeated call after a timeout returned a new handle"
                ),
                Err(e) => panic!("a repeated call after a timeout was refused: {e}"),
            }
        }
    }

    fn wait(
        &mut self,
        sim: &mut Sim,
        handle: TxnHandle,
        until: Micros,
    ) -> Option<Result<(), TransactionError>> {
        // Faults keep happening while the application waits.
        while sim.now() < until {
            let step = (sim.now() + 100 * MS).min(until);
            self.advance(sim, step);
            if sim.txn_world().completed.contains(&handle) {
                return sim.wait_txn(handle, sim.now());
            }
        }
        sim.wait_txn(handle, sim.now())
    }

    fn fatal(sim: &Sim) -> bool {
        sim.txn_state() == Some(TransactionState::FatalError)
    }

    /// One transaction: begin, sends (and offsets), then commit or abort. Returns false once
    /// the producer is fatal.
    fn transaction(&mut self, sim: &mut Sim, must_commit: bool) -> bool {
        if let Err(e) = sim.begin_transaction() {
            assert!(
                e.is_fatal(),
                "begin_transaction refused in a healthy state: {e}"
            );
            return false;
        }
        let partitions = sim.partitions().to_vec();
        let records = if must_commit {
            partitions.len()
        } else {
            self.rng.range(0, self.plan.max_records as u64) as usize
        };
        for i in 0..records {
            let at = sim.now() + exp_gap(&mut self.rng, self.plan.step_gap);
            self.advance(sim, at);
            let tp: TopicPartition = if must_commit {
                partitions[i].clone()
            } else {
                self.rng.pick(&partitions).clone()
            };
            let pad = self.rng.range(0, 300) as usize;
            if !sim.has_room_for(pad + 40) {
                continue;
            }
            if let Err(e) = sim.send_in_transaction(&tp, pad) {
                // The transaction went abortable (or fatal) under the application.
                assert!(
                    e.is_abortable() || e.is_fatal(),
                    "send refused inside a transaction: {e}"
                );
                break;
            }
        }
        let refused = !must_commit
            && self.refusals.chance(self.plan.send_refused_chance)
            && sim.refuse_send_in_transaction().is_ok();
        if !must_commit && self.rng.chance(self.plan.offsets_chance) {
            let p = self.rng.below(INPUT_PARTITIONS as u64) as i32;
            let offset = self.rng.range(0, 1_000) as i64;
            let offsets = [(TopicPartition::new(INPUT_TOPIC, p), offset)];
            match self.call(sim, |sim| {
                sim.send_offsets_to_transaction("group", &offsets)
            }) {
                Called::Done(Err(e)) | Called::Refused(e) if e.is_fatal() => return false,
                _ => {}
            }
        }
        let abort = !must_commit
            && (self.rng.chance(self.plan.abort_chance)
                || sim.txn_state() == Some(TransactionState::AbortableError));
        if !abort {
            match self.call(sim, |sim| sim.commit_transaction()) {
                Called::Done(Ok(())) => {
                    assert!(
                        !refused,
                        "a transaction committed without a record send refused"
                    );
                    return true;
                }
                Called::Done(Err(e)) | Called::Refused(e) if e.is_fatal() => return false,
                Called::Done(Err(e)) | Called::Refused(e) => {
                    assert!(e.is_abortable(), "commit failed with {e}");
                    assert!(!must_commit, "the liveness transaction did not commit: {e}");
                }
            }
        }
        match self.call(sim, |sim| sim.abort_transaction()) {
            Called::Done(Ok(())) => true,
            Called::Done(Err(e)) | Called::Refused(e) => {
                assert!(e.is_fatal(), "abort failed with a non-fatal error: {e}");
                false
            }
        }
    }

    fn run(mut self, sim: &mut Sim) -> TxnRunReport {
        // Only the broker knows the input topic: the producer never writes to it.
        let leaders: Vec<i32> = (0..INPUT_PARTITIONS as usize)
            .map(|i| self.plan.setup.brokers[i % self.plan.setup.brokers.len()])
            .collect();
        assert!(sim.cluster().create_topic(INPUT_TOPIC, &leaders));
        sim.set_chaos(Some(self.plan.chaos.clone()));
        sim.set_connections_max_idle(self.plan.idle.broker);
        if self.plan.marker_write_gap.is_some() {
            sim.cluster().hold_transaction_markers(true);
        }
        sim.start();
        let mut alive = match self.call(sim, |sim| sim.init_transactions()) {
            Called::Done(Ok(())) => true,
            Called::Done(Err(e)) | Called::Refused(e) => {
                assert!(e.is_fatal(), "init_transactions failed with {e}");
                false
            }
        };
        for _ in 0..self.plan.transactions {
            if !alive {
                break;
            }
            alive = self.transaction(sim, false) && !Self::fatal(sim);
        }

        // Heal and settle.
        self.chaos_on = false;
        sim.set_chaos(None);
        for broker in sim.brokers_down() {
            sim.broker_up(broker);
        }
        sim.release_held();
        sim.cluster().hold_transaction_markers(false);
        self.late_markers += sim.write_held_markers() as u64;
        let config = &self.plan.setup.engine;
        let limit = sim.now() + config.delivery_timeout + 2 * config.request_timeout + 10 * SECOND;
        assert!(
            sim.run_until_settled(limit),
            "not settled after healing: {} sends unresolved, engines idle: {}",
            sim.checker().unresolved(),
            sim.all_idle()
        );
        sim.check_end();

        // Liveness: a healthy producer commits one more transaction touching every partition.
        let fatal = !alive || Self::fatal(sim);
        // No other producer shares the transactional id, so only the coordinator's own timeout
        // fences this one: it aborts the transaction and bumps the epoch
        // (`abortTimedOutTransactions`), and the producer's next request meets the new epoch.
        // Any other fatal end is the producer's doing.
        assert!(
            !fatal || sim.txn_world().timed_out > 0,
            "the producer ended fatal with no transaction aborted by the coordinator's timeout: \
             {:?}",
            sim.txn_last_error()
        );
        if !fatal {
            assert!(
                self.transaction(sim, true),
                "the liveness transaction did not commit"
            );
            let limit = sim.now() + config.delivery_timeout;
            assert!(
                sim.run_until_settled(limit),
                "liveness sends did not settle"
            );
            sim.check_end();
        }
        let txn = sim.check_transactions();
        TxnRunReport {
            seed: self.plan.seed,
            checker: sim.checker().stats().clone(),
            txn,
            events: sim.events_handled(),
            fatal,
            fatal_error: if fatal { sim.txn_last_error() } else { None },
            repeated_calls: self.repeated_calls,
            leader_moves: self.leader_moves,
            broker_failures: self.broker_failures,
            unreachable_brokers: self.unreachable_brokers,
            timed_out: sim.txn_world().timed_out,
            late_markers: self.late_markers,
            coordinator_moves: self.coordinator_moves,
            idle_closes: sim.fault_counts().idle_closes,
            idle_crossings: sim.fault_counts().idle_crossings,
            client_idle_closes: sim.producer_idle_closes(),
            sends_refused: sim.txn_world().sends_refused,
            transaction_version: self.plan.setup.rules.transaction_version,
        }
    }
}
