//! Idle connections closed by the broker or by the producer (`connections.max.idle.ms` on
//! either side), scripted on the deterministic simulator: three brokers, topic `t` with p0 led
//! by broker 1, a 1 ms network, linger 0. The simulator's checker runs after every event (no
//! duplicate, no reorder, acks at their offsets, definite failures never in the log).
#![cfg(feature = "testkit")]

use kacrab::testkit::internals::engine::{EngineConfig, TopicPartition};
use kacrab::testkit::sim::{RecordId, Sim, SimSetup, Verdict, MS, SECOND};

const PAD: usize = 24;
const BROKER_IDLE: u64 = 100 * MS;

fn p0() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// A started producer whose brokers close connections idle for `BROKER_IDLE`.
fn started(tune: impl FnOnce(&mut EngineConfig)) -> Sim {
    let mut setup = SimSetup::scripted(1);
    setup.engine.linger = 0;
    tune(&mut setup.engine);
    let mut sim = Sim::new(setup);
    sim.set_connections_max_idle(Some(BROKER_IDLE));
    sim.start();
    sim
}

/// Sends ten records to p0 and runs until they resolve; every one must be acknowledged.
fn send_acknowledged(sim: &mut Sim) -> Vec<RecordId> {
    let ids = sim.send_many(&p0(), 10, PAD);
    assert!(
        sim.run_until_settled(sim.now() + 10 * SECOND),
        "not settled"
    );
    for &id in &ids {
        assert!(
            matches!(sim.verdict(id), Verdict::Acked(_)),
            "record {id}: {:?}",
            sim.result(id)
        );
    }
    ids
}

#[test]
fn a_batch_written_as_the_broker_closes_the_idle_connection_is_retried_and_lands_once() {
    let mut sim = started(|_| {});
    send_acknowledged(&mut sim);
    // The next batch goes out half a millisecond before broker 1 (p0's leader) closes the
    // idle connection, so it is on the 1 ms wire when the connection closes, and the broker
    // never reads it. Other traffic on the connection (a metadata refresh after another
    // broker's idle close) moves the close: wait until it stays put.
    loop {
        let due = sim
            .broker_idle_close_due(0, 1)
            .expect("an open connection to broker 1");
        sim.run_until(due - MS / 2);
        if sim.broker_idle_close_due(0, 1) == Some(due) {
            break;
        }
    }
    let retries_before = sim.engine(0).stats().retries;
    send_acknowledged(&mut sim);
    let faults = sim.fault_counts();
    assert_eq!(faults.idle_crossings, 1, "{faults:?}");
    assert!(faults.idle_closes >= 1, "{faults:?}");
    assert_eq!(
        sim.engine(0).stats().retries,
        retries_before + 1,
        "the batch lost to the close is sent again, once"
    );
    sim.check_end();
}

#[test]
fn a_connection_the_broker_closed_for_idleness_is_opened_again_for_the_next_batch() {
    let mut sim = started(|_| {});
    send_acknowledged(&mut sim);
    sim.run_for(3 * BROKER_IDLE);
    assert!(sim.fault_counts().idle_closes >= 1);
    let stats = sim.engine(0).stats().clone();
    send_acknowledged(&mut sim);
    let after = sim.engine(0).stats();
    assert_eq!(sim.fault_counts().idle_crossings, 0);
    assert_eq!(
        after.retries, stats.retries,
        "nothing was written on the closed connection"
    );
    assert!(after.produce_requests > stats.produce_requests);
    sim.check_end();
}

#[test]
fn a_producer_closing_idle_connections_before_the_broker_does_reopens_them_and_loses_nothing() {
    let mut sim = started(|engine| engine.connections_max_idle = Some(BROKER_IDLE / 2));
    for _ in 0..3 {
        send_acknowledged(&mut sim);
        sim.run_for(3 * BROKER_IDLE);
    }
    send_acknowledged(&mut sim);
    assert!(sim.engine(0).stats().idle_disconnects >= 3);
    assert_eq!(
        sim.fault_counts().idle_closes,
        0,
        "the producer closed every idle connection first"
    );
    assert_eq!(sim.engine(0).stats().retries, 0);
    sim.check_end();
}
