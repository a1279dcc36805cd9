//! The idempotent producer's scenarios (docs/java-rules.md §9 items 1-8 and 11-15,
//! and failover cases), each scripted on the deterministic simulator: the engine,
//! the reference broker behind its in-memory face, a 1 ms network and a virtual clock. The
//! simulator's checker runs after every event in every test (no duplicate, no reorder, acks at
//! their offsets, definite failures never in the log), on top of each test's own assertions.
//!
//! Unless a test says otherwise: three brokers, topic `t` with p0 led by broker 1, linger 0,
//! `batch.size` that holds exactly ten of the test's records, max.in.flight 5.
//!
//! This file holds the common setup and helpers; the scenarios are in `scenarios_idempotence/`:
//! - `sequences`: items 1-5, 8 and 11 (stamping, the wrap, five in flight, retries under one
//!   epoch) and the request timeout on the wire;
//! - `epoch_bumps`: items 6-7, InitProducerId refusals, producer state rebuilt from a snapshot;
//! - `splits`: item 12, batches split for MESSAGE_TOO_LARGE;
//! - `expiry`: items 13-15, expiry and unresolved sequences;
//! - `failover` and `superseded_epoch`: failover cases, the latter with UNKNOWN_PRODUCER_ID from
//!   a broker that lost the producer state, batches refused under a superseded epoch, and a close
//!   that runs out of time.
#![cfg(feature = "testkit")]

#[path = "scenarios_idempotence/epoch_bumps.rs"]
mod epoch_bumps;
#[path = "scenarios_idempotence/expiry.rs"]
mod expiry;
#[path = "scenarios_idempotence/failover.rs"]
mod failover;
#[path = "scenarios_idempotence/sequences.rs"]
mod sequences;
#[path = "scenarios_idempotence/splits.rs"]
mod splits;
#[path = "scenarios_idempotence/superseded_epoch.rs"]
mod superseded_epoch;

use kacrab::error::ProduceError;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::internals::engine::{EngineConfig, TopicPartition};
use kacrab::testkit::internals::protocol::record_batch::RecordBatchBuilder;
use kacrab::testkit::sim::{ProduceTrace, RecordId, RequestMatch, Sim, SimSetup, SECOND};

/// Value bytes after each record's 8-byte id.
const PAD: usize = 24;
const RECORDS_PER_BATCH: usize = 10;
/// The producer id the reference broker hands out first in these tests.
const PID: i64 = 7;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("t", partition)
}

/// Produce requests for p0 whose batch starts at `base_sequence`: the batch most of these
/// scenarios aim a fault at.
fn p0_batch_at(base_sequence: i32) -> RequestMatch {
    RequestMatch::produce()
        .partition(&tp(0))
        .base_sequence(base_sequence)
}

/// `batch.size` that takes exactly `n` of the tests' records.
fn batch_size_for(n: usize) -> usize {
    let value = vec![0u8; 8 + PAD];
    let mut builder = RecordBatchBuilder::new(1024, 0);
    for _ in 0..n {
        builder.append(0, None, Some(&value), &[]);
    }
    builder.size_in_bytes()
}

fn setup_with(leaders: &[i32], tune: impl FnOnce(&mut EngineConfig)) -> SimSetup {
    let mut setup = SimSetup::scripted(leaders.len());
    setup.topics = vec![("t".to_string(), leaders.to_vec())];
    setup.rules = BrokerRules {
        first_producer_id: PID,
        ..BrokerRules::default()
    };
    setup.engine.linger = 0;
    setup.engine.batch_size = batch_size_for(RECORDS_PER_BATCH);
    tune(&mut setup.engine);
    setup
}

/// Starts the engines and runs until the producer id and every leader are known.
fn started(setup: SimSetup) -> Sim {
    let mut sim = Sim::new(setup);
    sim.start();
    let partitions = sim.partitions().to_vec();
    assert!(
        sim.run_while_not(SECOND, |sim| {
            sim.engine(0).identity().is_valid()
                && partitions.iter().all(|tp| {
                    sim.engine_for(tp)
                        .metadata()
                        .leader(&tp.topic, tp.partition)
                        .is_some_and(|l| l.leader.is_some())
                })
        }),
        "the producer did not start"
    );
    sim
}

/// Sends one batch of ten records to `tp` and returns their ids.
fn batch(sim: &mut Sim, tp: &TopicPartition) -> Vec<RecordId> {
    sim.send_many(tp, RECORDS_PER_BATCH, PAD)
}

fn settle(sim: &mut Sim, within: u64) {
    let limit = sim.now() + within;
    assert!(sim.run_until_settled(limit), "not settled in {within} us");
    sim.check_end();
}

/// Offsets the records were acknowledged at (panics on anything but success).
fn acked_offsets(sim: &Sim, ids: &[RecordId]) -> Vec<i64> {
    ids.iter()
        .map(|&id| match sim.result(id) {
            Some(Ok(meta)) => meta.offset,
            other => panic!("record {id}: expected success, got {other:?}"),
        })
        .collect()
}

fn offsets(range: std::ops::Range<i64>) -> Vec<i64> {
    range.collect()
}

/// Produce requests carrying `tp`, in write order: (broker, epoch, base sequence, answer).
fn attempts(sim: &Sim, tp: &TopicPartition) -> Vec<(i32, i16, i32, Option<i16>)> {
    sim.produce_trace()
        .iter()
        .flat_map(|t| {
            t.batches
                .iter()
                .enumerate()
                .filter(|(_, b)| &b.tp == tp)
                .map(|(i, b)| {
                    (
                        t.broker,
                        b.producer.epoch,
                        b.base_sequence,
                        t.answers.get(i).map(|a| a.0),
                    )
                })
        })
        .collect()
}

/// The traced request that carried `tp` at `base` under `epoch`, the `nth` time (0-based).
fn request_for<'a>(
    sim: &'a Sim,
    tp: &TopicPartition,
    epoch: i16,
    base: i32,
    nth: usize,
) -> &'a ProduceTrace {
    sim.produce_trace()
        .iter()
        .filter(|t| {
            t.batches
                .iter()
                .any(|b| &b.tp == tp && b.producer.epoch == epoch && b.base_sequence == base)
        })
        .nth(nth)
        .unwrap_or_else(|| panic!("no attempt {nth} of {tp} epoch {epoch} base {base}"))
}

/// (producer id, epoch, base sequence, record count) of every batch in `tp`'s log.
fn log_batches(sim: &Sim, tp: &TopicPartition) -> Vec<(i64, i16, i32, i32)> {
    sim.cluster()
        .partition_log(&tp.topic, tp.partition)
        .iter()
        .map(|b| {
            (
                b.producer_id,
                b.producer_epoch,
                b.base_sequence,
                b.record_count,
            )
        })
        .collect()
}

/// Every record of `ids` failed definitely with the broker's `error`: not in the log.
fn assert_rejected_with(sim: &Sim, ids: &[RecordId], error: i16, why: &str) {
    for &id in ids {
        assert!(
            matches!(
                sim.result(id),
                Some(Err(ProduceError::Rejected { code, .. })) if *code == error
            ),
            "{why}: record {id}: {:?}",
            sim.result(id)
        );
    }
}

fn bumps(sim: &Sim) -> u64 {
    (0..sim.shard_count())
        .map(|s| sim.engine(s).stats().epoch_bumps_requested)
        .sum()
}

fn rewrites(sim: &Sim) -> u64 {
    (0..sim.shard_count())
        .map(|s| sim.engine(s).stats().sequence_rewrites)
        .sum()
}

/// Timeouts stretched so one batch's retry and another's answer can be placed around the
/// delivery timeout: delivery 30 s, request 60 s.
fn stretched(backoff: u64) -> impl FnOnce(&mut EngineConfig) {
    move |c| {
        c.delivery_timeout = 30 * SECOND;
        c.request_timeout = 60 * SECOND;
        c.retry_backoff = backoff;
        c.retry_backoff_max = backoff;
    }
}
