//! The drain on the deterministic simulator: which batches leave together in one Produce
//! request, and that a producer without idempotence drains too. Three brokers, partitions led
//! round-robin, one shard, a 1 ms network and a virtual clock.
#![cfg(feature = "testkit")]

use kacrab::testkit::internals::protocol::record_batch::RecordBatchBuilder;
use kacrab::testkit::sim::{RecordId, Sim, SimSetup, MS, SECOND};
use kacrab::TopicPartition;

const PAD: usize = 1_000;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("t", partition)
}

/// The encoded size of a batch of one record sent by `Sim::send` with `PAD` bytes of padding.
fn one_record_batch_size() -> usize {
    let value = vec![0u8; 8 + PAD];
    let mut builder = RecordBatchBuilder::new(1024, 0);
    builder.append(0, None, Some(&value), &[]);
    builder.size_in_bytes()
}

fn run_until_acked(sim: &mut Sim, ids: &[RecordId]) {
    let limit = sim.now() + 10 * SECOND;
    assert!(
        sim.run_while_not(limit, |s| ids.iter().all(|&id| s.result(id).is_some())),
        "unresolved"
    );
    for &id in ids {
        assert!(
            matches!(sim.result(id), Some(Ok(_))),
            "record {id}: {:?}",
            sim.result(id)
        );
    }
}

#[test]
fn a_produce_request_carries_the_batches_of_several_partitions_up_to_max_request_size_and_no_more()
{
    let batch = one_record_batch_size();
    let mut setup = SimSetup::scripted(9);
    // All three partitions of broker 1 (0, 3, 6) close a batch in the same linger window.
    setup.engine.linger = 20 * MS;
    // Room for two of the three batches in one request.
    setup.engine.max_request_size = 2 * batch + batch / 2;
    let mut sim = Sim::new(setup);
    sim.start();
    let ids: Vec<RecordId> = [0, 3, 6]
        .iter()
        .map(|&p| sim.send(&tp(p), None, PAD))
        .collect();
    run_until_acked(&mut sim, &ids);
    let mut per_request: Vec<usize> = sim
        .produce_trace()
        .iter()
        .filter(|t| t.broker == 1)
        .map(|t| t.batches.len())
        .collect();
    per_request.sort_unstable();
    assert_eq!(per_request, vec![1, 2]);
}

#[test]
fn a_producer_without_idempotence_drains_its_batches_and_they_are_acknowledged() {
    let mut setup = SimSetup::scripted(3);
    setup.engine.idempotent = false;
    setup.engine.linger = 0;
    let mut sim = Sim::new(setup);
    sim.start();
    let ids: Vec<RecordId> = (0..6).map(|i| sim.send(&tp(i % 3), None, 16)).collect();
    run_until_acked(&mut sim, &ids);
    assert!(sim
        .produce_trace()
        .iter()
        .flat_map(|t| &t.batches)
        .all(|b| b.base_sequence == -1 && b.producer.producer_id == -1));
}

#[test]
fn a_batch_that_completes_gives_its_buffer_to_the_next_batch_instead_of_a_new_allocation() {
    let mut sim = Sim::new(SimSetup::scripted(11));
    sim.start();
    // One batch at a time: each is acknowledged before the next record arrives, so every
    // batch after the first can take the buffer of the one before it.
    for _ in 0..20 {
        let id = sim.send(&tp(0), None, PAD);
        run_until_acked(&mut sim, &[id]);
    }
    let (reused, allocated) = sim.engine(0).buffer_pool_counts();
    assert_eq!(
        (reused, allocated),
        (19, 1),
        "(reused, allocated) batch buffers for 20 batches in turn"
    );
}

#[test]
fn a_ready_broker_takes_the_open_batches_of_its_other_partitions_before_their_linger_and_no_other_brokers(
) {
    let mut setup = SimSetup::scripted(9);
    // Long enough that a batch which goes before it went because its broker was ready.
    setup.engine.linger = 2 * SECOND;
    let mut sim = Sim::new(setup);
    sim.start();
    // Partition 0 (broker 1) fills a batch; partition 3 (broker 1) and partition 4 (broker 2)
    // each hold one record in a batch that is neither full nor lingered.
    let batch_size = 16_384;
    let fill: Vec<RecordId> = (0..batch_size / PAD + 1)
        .map(|_| sim.send(&tp(0), None, PAD))
        .collect();
    let quiet_same_broker = sim.send(&tp(3), None, PAD);
    let quiet_other_broker = sim.send(&tp(4), None, PAD);
    let mut all = fill.clone();
    all.extend([quiet_same_broker, quiet_other_broker]);
    run_until_acked(&mut sim, &all);
    let trace = sim.produce_trace();
    let first_of = |p: i32| {
        trace
            .iter()
            .filter(|t| t.batches.iter().any(|b| b.tp == tp(p)))
            .map(|t| t.written_at)
            .min()
            .expect("sent")
    };
    let together = trace.iter().any(|t| {
        t.broker == 1
            && t.batches.iter().any(|b| b.tp == tp(0))
            && t.batches.iter().any(|b| b.tp == tp(3))
    });
    assert!(
        together,
        "partition 3's open batch rides in the request of partition 0's full one: {:?}",
        trace
            .iter()
            .map(|t| (
                t.broker,
                t.written_at,
                t.batches.iter().map(|b| b.tp.partition).collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>()
    );
    assert!(
        first_of(3) < SECOND,
        "partition 3 went with its broker's request, long before its linger"
    );
    assert!(
        first_of(4) >= 2 * SECOND,
        "partition 4's broker was not ready: its batch waited for its linger ({} µs)",
        first_of(4)
    );
}
