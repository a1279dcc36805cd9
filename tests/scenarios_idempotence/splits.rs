//! Batches split for MESSAGE_TOO_LARGE (docs/java-rules.md §9 item 12): children keep their
//! parent's sequences, a flush waits for them, and a one-record batch fails definitely.

use kacrab::config::Codec;
use kacrab::error::ProduceError;
use kacrab::testkit::internals::engine::ProducerIdAndEpoch;
use kacrab::testkit::internals::protocol::error_code::code;
use kacrab::testkit::internals::protocol::record_batch::RecordBatchHeader;
use kacrab::testkit::sim::{Fault, FaultRule, RecordId, RequestMatch, MS, SECOND};

use super::{
    acked_offsets, attempts, batch, batch_size_for, bumps, offsets, p0_batch_at, settle,
    setup_with, started, stretched, tp, PAD, PID,
};

// ---------------------------------------------------------------------------------------------
// docs/java-rules.md §9 item 12
// ---------------------------------------------------------------------------------------------

#[test]
fn message_too_large_splits_a_batch_at_base_100_into_children_with_its_sequences_and_flush_waits_for_them(
) {
    let mut sim = started(setup_with(&[1], |_| {}));
    let mut earlier = Vec::new();
    for _ in 0..10 {
        earlier.extend(batch(&mut sim, &tp(0)));
        settle(&mut sim, SECOND);
    }
    sim.add_fault(FaultRule::new(
        p0_batch_at(100),
        Fault::Inject(code::MESSAGE_TOO_LARGE),
    ));
    // The first child (also at base 100) is held so the state can be looked at.
    sim.add_fault(FaultRule::new(p0_batch_at(100), Fault::Hold));
    let big = batch(&mut sim, &tp(0));
    let flush = sim.begin_flush(0);
    sim.run_for(50 * MS);

    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    let children: Vec<(i32, i32)> = slot
        .entry
        .inflight_batches_by_sequence
        .iter()
        .map(|s| {
            assert_eq!(s.producer, ProducerIdAndEpoch::new(PID, 0));
            (s.base_sequence, s.record_count)
        })
        .collect();
    assert!(children.len() >= 2, "split into {children:?}");
    let mut next = 100;
    for &(base, count) in &children {
        assert_eq!(base, next, "consecutive bases from 100");
        next += count;
    }
    assert_eq!(next, 110);
    assert_eq!(
        slot.entry.next_sequence, 110,
        "a split takes no new sequences"
    );
    let queued = slot.deque.front().expect("children wait in the deque");
    assert_eq!(queued.base_sequence(), Some(children[1].0));
    assert_eq!(queued.attempts, 0, "a split is not an attempt");
    assert!(!sim.flush_done(flush), "flush waits for the children");

    sim.release_held();
    settle(&mut sim, 5 * SECOND);
    assert!(sim.flush_done(flush));
    assert_eq!(acked_offsets(&sim, &earlier), offsets(0..100));
    assert_eq!(acked_offsets(&sim, &big), offsets(100..110));
    assert_eq!(bumps(&sim), 0);
}

// A (0-9) is refused MESSAGE_TOO_LARGE, but the answer comes after A's delivery timeout ended
// it on the wire. A batch already done is not split (Java's `Sender.completeBatch` splits only a
// batch that is not done): A's records were completed at its expiry, and the answer only ends
// its bookkeeping, so a flush waiting for A completes.
#[test]
fn a_batch_answered_message_too_large_after_it_expired_is_not_split_and_a_flush_waiting_for_it_completes(
) {
    let mut sim = started(setup_with(&[1], stretched(SECOND)));
    let t0 = sim.now();
    sim.add_fault(
        FaultRule::new(
            RequestMatch::produce().partition(&tp(0)),
            Fault::Inject(code::MESSAGE_TOO_LARGE),
        )
        .delayed(31 * SECOND),
    );
    let a = batch(&mut sim, &tp(0));
    let flush = sim.begin_flush(0);
    sim.run_until(t0 + 30 * SECOND + 10 * MS);
    for &id in &a {
        assert!(
            matches!(sim.result(id), Some(Err(e)) if e.is_outcome_unknown()),
            "{:?}",
            sim.result(id)
        );
    }
    assert!(!sim.flush_done(flush), "A's answer is still due");
    sim.run_until(t0 + 32 * SECOND);
    assert!(sim.flush_done(flush));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)),
        vec![(1, 0, 0, Some(code::MESSAGE_TOO_LARGE))]
    );
}

// A (0-9) is refused NOT_ENOUGH_REPLICAS and waits for its retry, still the first in-flight
// entry, when B (10-19), sent right behind it, is refused MESSAGE_TOO_LARGE. B's children take
// the place of B's entry, not of A's (the first entry of the same producer): A's retry then
// still finds A, and both land once, in order.
#[test]
fn a_batch_split_behind_an_earlier_batch_waiting_to_retry_takes_the_place_of_its_own_entry_only() {
    let mut sim = started(setup_with(&[1], |_| {}));
    sim.add_fault(FaultRule::new(
        p0_batch_at(0),
        Fault::Inject(code::NOT_ENOUGH_REPLICAS),
    ));
    sim.add_fault(FaultRule::new(
        p0_batch_at(10),
        Fault::Inject(code::MESSAGE_TOO_LARGE),
    ));
    let a = batch(&mut sim, &tp(0));
    let b = batch(&mut sim, &tp(0));
    sim.run_for(20 * MS);
    let slot = sim.engine(0).partition(&tp(0)).unwrap();
    let bases: Vec<i32> = slot
        .entry
        .inflight_batches_by_sequence
        .iter()
        .map(|s| s.base_sequence)
        .collect();
    assert_eq!(bases.first(), Some(&0), "A keeps its entry: {bases:?}");
    assert!(
        bases.len() >= 3 && bases[1] == 10,
        "B's children follow A: {bases:?}"
    );
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &a), offsets(0..10));
    assert_eq!(acked_offsets(&sim, &b), offsets(10..20));
    assert_eq!(bumps(&sim), 0);
    // A's second attempt is the one retry; a split child's first attempt is not a retry.
    assert_eq!(sim.engine(0).stats().retries, 1);
}

#[test]
fn a_split_child_that_splits_again_does_not_end_its_parent_early() {
    // A topic's max.message.bytes below a quarter of batch.size: the ten-record batch splits
    // into children of 4, 4 and 2 records, and the first child, still above the limit, splits
    // again while its two siblings wait behind it. A flush taken after the batch is done only
    // once every one of its records has its answer.
    let mut setup = setup_with(&[1], |_| {});
    setup.rules.max_message_bytes = batch_size_for(2);
    let mut sim = started(setup);
    let ids = batch(&mut sim, &tp(0));
    let flush = sim.begin_flush(0);
    let limit = sim.now() + 5 * SECOND;
    while !sim.flush_done(flush) {
        assert!(sim.now() < limit && sim.step(), "the flush never ended");
    }
    let unresolved: Vec<RecordId> = ids
        .iter()
        .copied()
        .filter(|&id| sim.result(id).is_none())
        .collect();
    assert!(
        unresolved.is_empty(),
        "the flush ended with records {unresolved:?} unanswered"
    );
    let too_large_at_0 = attempts(&sim, &tp(0))
        .iter()
        .filter(|a| a.2 == 0 && a.3 == Some(code::MESSAGE_TOO_LARGE))
        .count();
    assert_eq!(
        too_large_at_0, 2,
        "the batch and its first child were both too large"
    );
    settle(&mut sim, 5 * SECOND);
    assert_eq!(acked_offsets(&sim, &ids), offsets(0..10));
    assert_eq!(bumps(&sim), 0);
}

#[test]
fn a_compressed_batch_refused_as_too_large_splits_into_compressed_children_that_land_exactly_once()
{
    for codec in [
        Codec::Gzip { level: -1 },
        Codec::Snappy,
        Codec::Lz4 { level: 9 },
        Codec::Zstd { level: 3 },
    ] {
        let mut sim = started(setup_with(&[1], |engine| engine.compression = codec));
        // Known to the broker first, so the split batch's children are the next sequences it
        // expects (a fresh producer's first batch may start anywhere).
        let mut earlier = Vec::new();
        for _ in 0..10 {
            earlier.extend(batch(&mut sim, &tp(0)));
            settle(&mut sim, SECOND);
        }
        sim.add_fault(FaultRule::new(
            p0_batch_at(100),
            Fault::Inject(code::MESSAGE_TOO_LARGE),
        ));
        let ids = batch(&mut sim, &tp(0));
        settle(&mut sim, 5 * SECOND);
        assert_eq!(acked_offsets(&sim, &earlier), offsets(0..100), "{codec:?}");
        assert_eq!(acked_offsets(&sim, &ids), offsets(100..110), "{codec:?}");
        let attempts = attempts(&sim, &tp(0));
        let too_large: Vec<_> = attempts
            .iter()
            .filter(|a| a.3 == Some(code::MESSAGE_TOO_LARGE))
            .collect();
        assert_eq!(too_large, [&(1, 0, 100, Some(code::MESSAGE_TOO_LARGE))]);
        // The refused batch's records are in the log once (the checker of `settle` reads every
        // stored batch), in children compressed with the producer's codec.
        let log: Vec<(u8, i32)> = sim
            .cluster()
            .partition_log("t", 0)
            .iter()
            .filter(|b| b.base_offset >= 100)
            .map(|b| {
                let header = RecordBatchHeader::parse(&b.bytes).unwrap();
                (header.compression(), header.record_count)
            })
            .collect();
        assert!(log.len() >= 2, "{codec:?}: {log:?}");
        assert!(
            log.iter().all(|&(c, _)| c == codec.id()),
            "{codec:?}: {log:?}"
        );
        assert_eq!(log.iter().map(|&(_, n)| n).sum::<i32>(), 10);
        assert!(log.len() >= 2, "{codec:?}: the batch was split: {log:?}");
        assert_eq!(bumps(&sim), 0);
    }
}

#[test]
fn message_too_large_on_a_single_record_batch_fails_it_definitely_and_bumps_the_epoch_for_p0() {
    let mut sim = started(setup_with(&[1], |_| {}));
    let a = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    sim.add_fault(FaultRule::new(
        RequestMatch::produce().partition(&tp(0)),
        Fault::Inject(code::MESSAGE_TOO_LARGE),
    ));
    let single = sim.send(&tp(0), None, PAD);
    settle(&mut sim, SECOND);
    assert!(matches!(
        sim.result(single),
        Some(Err(ProduceError::Rejected {
            code: code::MESSAGE_TOO_LARGE,
            ..
        }))
    ));
    assert_eq!(sim.identity(), ProducerIdAndEpoch::new(PID, 1));
    let b = batch(&mut sim, &tp(0));
    settle(&mut sim, SECOND);
    assert_eq!(
        attempts(&sim, &tp(0)).last().copied(),
        Some((1, 1, 0, Some(code::NONE))),
        "p0 restarts at 0 under the new epoch"
    );
    assert_eq!(acked_offsets(&sim, &[a, b].concat()), offsets(0..20));
}
