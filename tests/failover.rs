//! kacrab over TCP against the reference cluster (3 brokers, 12 partitions, 2 shards) under
//! faults. Every test reads the topic back with librdkafka's consumer and checks it record by
//! record: every acknowledged record is in the log exactly once, at the offset it was
//! acknowledged with; nothing is duplicated; each partition holds its records in send order;
//! a record that failed definitely is absent; no send is left unresolved.
#![cfg(feature = "testkit")]

mod common;
#[path = "failover/harness.rs"]
mod harness;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kacrab::stats::RuntimeStats;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{ProduceError, Producer};
use kafka_protocol::messages::ApiKey;

use harness::*;

// Broker 2 goes down while each shard's connection to it carries five produce requests: the
// first of them appended with its answer held back, four more queued behind it. The
// partitions of brokers 1 and 3 must keep completing while broker 2 is down (they all
// complete while every record bound for broker 2 is still unresolved); when broker 2 comes
// back every record lands exactly once and in order, the appended request's retry being
// recognised as a duplicate.
#[test]
fn broker_down_with_five_requests_in_flight_loses_and_duplicates_nothing() {
    let topic = "broker-down";
    let cluster = start_cluster(topic);
    let producer = producer(&cluster, &[]);
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    let before = assert_steady(&cluster, &producer);
    println!("steady before: {before:?}");

    // Each connection to broker 2 has its first produce request appended and then held.
    cluster
        .faults()
        .delay_response(2, ApiKey::Produce, 2, Duration::from_secs(120));
    let burst_start = ledger.len();
    let five_in_flight = |stats: &RuntimeStats| {
        let to_2: Vec<u64> = stats
            .connections_to(2)
            .map(|(_, c)| c.requests_in_flight())
            .collect();
        to_2.len() == 2 && to_2.iter().all(|n| *n >= 5)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !five_in_flight(&producer.runtime_stats()) {
        assert!(
            Instant::now() < deadline,
            "five requests never in flight: {:?}",
            producer.runtime_stats().shards
        );
        ledger.send_rounds(&producer, 4);
        // Let the shards drain before sending more: wait for the next request to go out.
        let written = |s: &RuntimeStats| {
            s.connections_to(2)
                .map(|(_, c)| c.requests_written)
                .sum::<u64>()
        };
        let seen = written(&producer.runtime_stats());
        producer.wait_for_runtime_stats(Duration::from_millis(200), |s| written(s) > seen);
    }
    let stats = producer.runtime_stats();
    println!(
        "in flight to broker 2 when it goes down: {:?}",
        stats
            .connections_to(2)
            .map(|(s, c)| (s, c.requests_in_flight()))
            .collect::<Vec<_>>()
    );
    assert!(cluster
        .faults()
        .wait_until_consumed(Duration::from_secs(10)));
    cluster.broker_down(2);
    let connect_failures_at_down = producer.runtime_stats().connect_failures;
    // More records while broker 2 is down, to every partition.
    ledger.send_rounds(&producer, 50);
    let burst_end = ledger.len();
    let on_2 = |partition: i32| leader_of(partition) == 2;

    ledger.wait_for(
        "the partitions of live brokers",
        Duration::from_secs(60),
        |id, p| id >= burst_start && !on_2(p),
    );
    let mut pending_on_2 = 0;
    for id in burst_start..burst_end {
        if on_2(ledger.partitions[id]) {
            assert!(
                !ledger.is_resolved(id),
                "record {id} for broker 2 resolved while it was down: {:?}",
                ledger.outcome(id)
            );
            pending_on_2 += 1;
        } else {
            assert!(
                matches!(ledger.outcome(id), Some(Ok(_))),
                "record {id}: {:?}",
                ledger.outcome(id)
            );
        }
    }
    // The dead broker is retried under the reconnect backoff meanwhile, and nothing of it
    // has resolved: its records wait for it, they do not fail or time out.
    wait_for_stats(
        &producer,
        "reconnects to broker 2 to be refused",
        Duration::from_secs(30),
        |s| s.connect_failures >= connect_failures_at_down + 2,
    );
    for id in burst_start..burst_end {
        if on_2(ledger.partitions[id]) {
            assert!(
                !ledger.is_resolved(id),
                "record {id} resolved while broker 2 was down"
            );
        }
    }
    println!("live brokers done with {pending_on_2} records for broker 2 pending");

    cluster.broker_up(2);
    ledger.wait_all(Duration::from_secs(60));
    let verdict = verify(&cluster, &ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.acked, ledger.len(), "every record acknowledged");
    assert!(
        cluster.with_cluster(|c| c.duplicates_answered()) >= 2,
        "the held requests' retries were answered as duplicates"
    );
    assert_broker_logs_contiguous(&cluster, topic);
    let after = assert_steady(&cluster, &producer);
    println!("steady after: {after:?}");
    // A completed record's bytes come back at the end of its shard's turn: a flush returns
    // after that.
    assert!(producer.flush_timeout(Duration::from_secs(30)), "flushed");
    assert_eq!(producer.buffered_bytes(), 0);
    assert_closed_cleanly(&cluster, &producer);
}

/// The shard that owns `partition`: the one whose engine sends the next batch for it.
fn shard_of(producer: &Producer, ledger: &mut Ledger, partition: i32) -> usize {
    let sent =
        |s: &RuntimeStats| -> Vec<u64> { s.shards.iter().map(|r| r.engine.batches_sent).collect() };
    let before = sent(&producer.runtime_stats());
    let id = ledger.send(producer, partition);
    ledger.wait_for("a probe record", Duration::from_secs(30), |i, _| i == id);
    assert!(matches!(ledger.outcome(id), Some(Ok(_))));
    let after = sent(&producer.runtime_stats());
    let shards: Vec<usize> = (0..after.len()).filter(|&i| after[i] > before[i]).collect();
    assert_eq!(
        shards.len(),
        1,
        "one shard sent the probe: {before:?} -> {after:?}"
    );
    shards[0]
}

// The response to one produce request on one connection is dropped after the broker appended
// it, five times during a burst. Each time the connection closes, its requests have unknown
// outcomes and are retried under their original sequences; the broker recognises the
// appended ones and nothing is written twice.
#[test]
fn responses_dropped_after_append_are_retried_without_duplicates() {
    responses_dropped_after_append(&[]);
}

// The same with zstd batches: a retried compressed batch is the same bytes under its original
// stamp, recognised as a duplicate, and the log holds each record once.
#[test]
fn responses_dropped_after_append_are_retried_without_duplicates_in_zstd_batches() {
    let cluster = responses_dropped_after_append(&[("compression.type", "zstd")]);
    let codecs = log_codecs(&cluster, "dropped-responses");
    assert_eq!(codecs, BTreeSet::from([4]), "every stored batch is zstd");
}

fn responses_dropped_after_append(extra: &[(&str, &str)]) -> ReferenceCluster {
    let topic = "dropped-responses";
    let cluster = start_cluster(topic);
    let producer = producer(&cluster, extra);
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    for round in 0..5 {
        cluster
            .faults()
            .drop_response_after_append(1 + round % BROKERS, ApiKey::Produce, 1);
        ledger.send_rounds(&producer, 100);
        assert!(
            cluster
                .faults()
                .wait_until_consumed(Duration::from_secs(30)),
            "round {round}: the fault was never hit"
        );
    }
    ledger.wait_all(Duration::from_secs(60));
    let verdict = verify(&cluster, &ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.acked, ledger.len(), "every record acknowledged");
    let duplicates = cluster.with_cluster(|c| c.duplicates_answered());
    assert!(
        duplicates >= 5,
        "each dropped answer's batches came back as duplicates ({duplicates})"
    );
    let stats = producer.runtime_stats();
    // Each dropped answer closed its connection. The producer learns of a close by reading the
    // end of the stream or, when it writes first, by a failed write (EPIPE): either counts.
    assert!(stats.closed_by_peer + stats.io_errors >= 5, "{stats:?}");
    assert_broker_logs_contiguous(&cluster, topic);
    assert_steady(&cluster, &producer);
    // A completed record's bytes come back at the end of its shard's turn: a flush returns
    // after that.
    assert!(producer.flush_timeout(Duration::from_secs(30)), "flushed");
    assert_eq!(producer.buffered_bytes(), 0);
    assert_closed_cleanly(&cluster, &producer);
    cluster
}

// Leaders move and brokers answer retriable errors (injected before the append) while records
// flow to every partition. A moved partition is answered NOT_LEADER_OR_FOLLOWER inside a
// response whose other partitions succeeded: only it is retried (no neighbour is re-sent,
// so the broker never sees a duplicate) and nothing fails.
#[test]
fn leader_moves_and_retriable_errors_under_load_stay_exact() {
    use kacrab::testkit::broker::error_codes::*;
    let topic = "leader-moves";
    let cluster = start_cluster(topic);
    let producer = producer(&cluster, &[]);
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    let errors = [
        NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS,
        REQUEST_TIMED_OUT,
        LEADER_NOT_AVAILABLE,
        UNKNOWN_LEADER_EPOCH,
        FENCED_LEADER_EPOCH,
        CORRUPT_MESSAGE,
    ];
    let mut leaders: Vec<i32> = (0..PARTITIONS).map(leader_of).collect();
    for step in 0..36usize {
        ledger.send_rounds(&producer, 20);
        if step % 2 == 0 {
            let partition = (step / 2) as i32 % PARTITIONS;
            let to = 1 + leaders[partition as usize] % BROKERS;
            cluster.set_leader(topic, partition, to);
            leaders[partition as usize] = to;
        } else {
            let broker = 1 + (step as i32 / 2) % BROKERS;
            let error = errors[(step / 2) % errors.len()];
            cluster
                .faults()
                .inject_error(broker, ApiKey::Produce, error, 1 + step % 3);
            ledger.send_rounds(&producer, 20);
            assert!(
                cluster
                    .faults()
                    .wait_until_consumed(Duration::from_secs(30)),
                "step {step}: injected {error} never hit"
            );
        }
    }
    ledger.wait_all(Duration::from_secs(60));
    let verdict = verify(&cluster, &ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.acked, ledger.len(), "every record acknowledged");
    assert_eq!(
        cluster.with_cluster(|c| c.duplicates_answered()),
        0,
        "no batch was sent again after it was appended"
    );
    let retries = producer.runtime_stats().engine_totals().retries;
    assert!(retries > 0, "the faults caused retries");
    assert_broker_logs_contiguous(&cluster, topic);
    assert_steady(&cluster, &producer);
    // A completed record's bytes come back at the end of its shard's turn: a flush returns
    // after that.
    assert!(producer.flush_timeout(Duration::from_secs(30)), "flushed");
    assert_eq!(producer.buffered_bytes(), 0);
    assert_closed_cleanly(&cluster, &producer);
}

/// Partitions of each shard led by `broker`, found by probing.
fn partitions_by_shard(
    producer: &Producer,
    ledger: &mut Ledger,
    leader: impl Fn(i32) -> bool,
) -> [Vec<i32>; 2] {
    let mut by_shard = [Vec::new(), Vec::new()];
    for partition in (0..PARTITIONS).filter(|&p| leader(p)) {
        by_shard[shard_of(producer, ledger, partition)].push(partition);
    }
    assert!(
        !by_shard[0].is_empty() && !by_shard[1].is_empty(),
        "both shards own such partitions: {by_shard:?}"
    );
    by_shard
}

/// Every record acknowledged and read back exactly once, the log holding epochs 0 and 1 of
/// `pid` only (one bump), contiguous, and the producer closing cleanly.
fn assert_exact_with_one_new_epoch(
    cluster: &ReferenceCluster,
    ledger: &Ledger,
    producer: &Producer,
    topic: &str,
    pid: i64,
) {
    let verdict = verify(cluster, ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.acked, ledger.len());
    assert_eq!(
        log_epochs(cluster, topic),
        BTreeSet::from([(pid, 0), (pid, 1)]),
        "exactly one new epoch"
    );
    assert_broker_logs_contiguous(cluster, topic);
    assert_closed_cleanly(cluster, producer);
}

fn identities(stats: &RuntimeStats) -> Vec<Option<(i64, i16)>> {
    stats
        .shards
        .iter()
        .map(|s| s.identity.map(|i| (i.producer_id, i.epoch)))
        .collect()
}

// Both shards' batches, stamped under epoch 0, are answered OUT_OF_ORDER_SEQUENCE_NUMBER at
// about the same time (on broker 1 for a partition of shard 0, on broker 2 for a partition of
// shard 1): both shards ask for a bump of epoch 0, and the producer moves to exactly one new
// epoch. To have both batches stamped under epoch 0 before either answer, each sits behind a
// request whose answer the broker holds for a while; the test checks that both were written
// while their shard was still on epoch 0. The broker then sees the two partitions restart at
// sequence 0 under epoch 1, and no other epoch.
#[test]
fn both_shards_bumping_the_same_epoch_make_one_new_epoch() {
    use kacrab::testkit::broker::error_codes::OUT_OF_ORDER_SEQUENCE_NUMBER;
    let topic = "one-bump";
    let cluster = start_cluster(topic);
    let producer = producer(&cluster, &[]);
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    let on_1 = partitions_by_shard(&producer, &mut ledger, |p| leader_of(p) == 1);
    let on_2 = partitions_by_shard(&producer, &mut ledger, |p| leader_of(p) == 2);
    // (shard, broker, partition)
    let targets = [(0usize, 1i32, on_1[0][0]), (1, 2, on_2[1][0])];
    let pid = identities(&producer.runtime_stats())[0]
        .expect("identity")
        .0;
    assert_eq!(
        identities(&producer.runtime_stats()),
        vec![Some((pid, 0)); 2]
    );

    for &(_, broker, _) in &targets {
        cluster
            .faults()
            .delay_response(broker, ApiKey::Produce, 1, Duration::from_secs(3));
        cluster
            .faults()
            .inject_error(broker, ApiKey::Produce, OUT_OF_ORDER_SEQUENCE_NUMBER, 1);
    }
    // Per shard: in flight to its broker, and whether the shard is still on epoch 0.
    let view = |stats: &RuntimeStats, shard: usize, broker: i32| {
        let report = &stats.shards[shard];
        let in_flight = report
            .connections
            .iter()
            .find(|c| c.node == broker)
            .map_or(0, |c| c.requests_in_flight());
        (in_flight, report.identity.map(|i| i.epoch) == Some(0))
    };
    let first: Vec<usize> = targets
        .iter()
        .map(|&(_, _, p)| ledger.send(&producer, p))
        .collect();
    for &(shard, broker, _) in &targets {
        wait_for_stats(
            &producer,
            "the held request",
            Duration::from_secs(10),
            |s| view(s, shard, broker).0 >= 1,
        );
    }
    let second: Vec<usize> = targets
        .iter()
        .map(|&(_, _, p)| ledger.send(&producer, p))
        .collect();
    for &(shard, broker, _) in &targets {
        wait_for_stats(
            &producer,
            "the second request written under epoch 0",
            Duration::from_secs(10),
            |s| view(s, shard, broker) == (2, true),
        );
    }
    ledger.wait_for("the four records", Duration::from_secs(30), |id, _| {
        first.contains(&id) || second.contains(&id)
    });
    assert!(cluster
        .faults()
        .wait_until_consumed(Duration::from_secs(10)));
    for &id in first.iter().chain(&second) {
        assert!(
            matches!(ledger.outcome(id), Some(Ok(_))),
            "{:?}",
            ledger.outcome(id)
        );
    }
    wait_for_stats(
        &producer,
        "both shards on the new epoch",
        Duration::from_secs(10),
        |s| identities(s) == vec![Some((pid, 1)); 2],
    );
    cluster.with_cluster(|c| {
        for &(_, _, p) in &targets {
            let first = c
                .partition_log(topic, p)
                .iter()
                .find(|b| b.producer_epoch == 1)
                .expect("a batch under the new epoch");
            assert_eq!(first.base_sequence, 0, "p{p} restarts at sequence 0");
        }
    });
    let stats = producer.runtime_stats();
    assert!(
        stats.shards.iter().all(|s| s.engine.sequence_rewrites >= 1),
        "both shards rewrote their partition's sequences: {:?}",
        stats.shards
    );
    // Both requests went through the ticket ring and both shards read them: the install and
    // two bump requests of epoch 0, of which only the first bumped.
    assert_eq!(
        stats
            .shards
            .iter()
            .map(|s| s.identity_tickets)
            .collect::<Vec<_>>(),
        vec![3, 3],
        "{:?}",
        stats.shards
    );

    ledger.send_rounds(&producer, 50);
    ledger.wait_all(Duration::from_secs(60));
    assert_exact_with_one_new_epoch(&cluster, &ledger, &producer, topic, pid);
}

// The same request for a bump, late: shard 0 bumps the epoch (OUT_OF_ORDER_SEQUENCE_NUMBER on
// broker 1) while a batch of shard 1 stamped under the old epoch is still waiting to be
// retried (its partition moved to broker 3, which is down). When broker 3 comes back that
// batch is answered OUT_OF_ORDER_SEQUENCE_NUMBER too. Shard 1 has long adopted the new epoch,
// but the batch observed the old one: its request names the old epoch, which was bumped
// already, so no second bump happens. The broker sees epochs 0 and 1 only.
#[test]
fn a_late_bump_request_for_an_epoch_already_bumped_is_not_a_second_bump() {
    use kacrab::testkit::broker::error_codes::{
        LEADER_NOT_AVAILABLE, OUT_OF_ORDER_SEQUENCE_NUMBER,
    };
    let topic = "late-bump";
    let cluster = start_cluster(topic);
    let producer = producer(&cluster, &[]);
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    let on_1 = partitions_by_shard(&producer, &mut ledger, |p| leader_of(p) == 1);
    let on_2 = partitions_by_shard(&producer, &mut ledger, |p| leader_of(p) == 2);
    let (pa, pb) = (on_1[0][0], on_2[1][0]);
    let pid = identities(&producer.runtime_stats())[0]
        .expect("identity")
        .0;

    // Shard 1's batch for pb: stamped under epoch 0, refused by broker 2 before the append
    // (LEADER_NOT_AVAILABLE: NOT_LEADER_OR_FOLLOWER may come after an append, and would leave
    // the batch of unknown outcome), and held back: the new leader, broker 3, is down. Losing its connection to
    // broker 3 makes shard 1 refresh its metadata; that answer (pb still on broker 2) comes
    // back before the leadership moves, so the batch goes to broker 2. (Answers read from
    // brokers 1 and 2 only: the connections to broker 3, its bootstrap one included, go.)
    let read_by_1 = |s: &RuntimeStats| -> u64 {
        s.shards[1]
            .connections
            .iter()
            .filter(|c| c.node == 1 || c.node == 2)
            .map(|c| c.responses_read)
            .sum()
    };
    let stats = producer.runtime_stats();
    // Node -3 is broker 3 reached through its bootstrap address.
    let shard_1_lost_3 = stats.shards[1]
        .connections
        .iter()
        .any(|c| c.node == 3 || c.node == -3);
    let read_before = read_by_1(&stats);
    cluster.broker_down(3);
    if shard_1_lost_3 {
        wait_for_stats(
            &producer,
            "shard 1's metadata refresh after losing broker 3",
            Duration::from_secs(10),
            |s| read_by_1(s) > read_before,
        );
    }
    cluster
        .faults()
        .inject_error(2, ApiKey::Produce, LEADER_NOT_AVAILABLE, 1);
    cluster.set_leader(topic, pb, 3);
    let b = ledger.send(&producer, pb);
    assert!(cluster
        .faults()
        .wait_until_consumed(Duration::from_secs(10)));

    // Shard 0 bumps to epoch 1; shard 1 adopts it.
    cluster
        .faults()
        .inject_error(1, ApiKey::Produce, OUT_OF_ORDER_SEQUENCE_NUMBER, 1);
    let a = ledger.send(&producer, pa);
    ledger.wait_for("shard 0's record", Duration::from_secs(30), |id, _| id == a);
    assert!(
        matches!(ledger.outcome(a), Some(Ok(_))),
        "{:?}",
        ledger.outcome(a)
    );
    wait_for_stats(
        &producer,
        "both shards on epoch 1",
        Duration::from_secs(10),
        |s| identities(s) == vec![Some((pid, 1)); 2],
    );
    assert!(!ledger.is_resolved(b), "shard 1's batch is still waiting");

    cluster
        .faults()
        .inject_error(3, ApiKey::Produce, OUT_OF_ORDER_SEQUENCE_NUMBER, 1);
    cluster.broker_up(3);
    ledger.wait_for("shard 1's record", Duration::from_secs(30), |id, _| id == b);
    assert!(cluster
        .faults()
        .wait_until_consumed(Duration::from_secs(10)));
    assert!(
        matches!(ledger.outcome(b), Some(Ok(_))),
        "{:?}",
        ledger.outcome(b)
    );

    ledger.send_rounds(&producer, 20);
    ledger.wait_all(Duration::from_secs(60));
    assert_eq!(
        identities(&producer.runtime_stats()),
        vec![Some((pid, 1)); 2],
        "no second bump"
    );
    // The late request did reach the ring (install, shard 0's bump, shard 1's late one) and
    // every replica discarded it.
    let tickets: Vec<u64> = producer
        .runtime_stats()
        .shards
        .iter()
        .map(|s| s.identity_tickets)
        .collect();
    assert_eq!(tickets, vec![3, 3]);
    assert_exact_with_one_new_epoch(&cluster, &ledger, &producer, topic, pid);
}

// A broker holds its answer longer than request.timeout.ms: the shard's timer closes the
// connection (the engine's request timeout, run on a glommio timer), every request on it has
// an unknown outcome, and the retries on a new connection are answered as duplicates of what
// the broker had appended. Partitions of the other brokers are not held up.
#[test]
fn a_request_timeout_closes_the_connection_and_the_retry_is_recognised() {
    let topic = "request-timeout";
    let cluster = start_cluster(topic);
    let producer = producer(
        &cluster,
        &[
            ("request.timeout.ms", "700"),
            ("delivery.timeout.ms", "30000"),
        ],
    );
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    let abandoned_before = producer.runtime_stats().abandoned;
    cluster
        .faults()
        .delay_response(3, ApiKey::Produce, 1, Duration::from_secs(3));
    ledger.send_rounds(&producer, 100);
    assert!(cluster
        .faults()
        .wait_until_consumed(Duration::from_secs(10)));
    ledger.wait_all(Duration::from_secs(30));
    let stats = producer.runtime_stats();
    assert!(
        stats.abandoned > abandoned_before,
        "the engine closed the held connection: {stats:?}"
    );
    assert!(stats.recent_failures.iter().any(|f| f.node == 3
        && f.error == kacrab::stats::ConnectionError::Abandoned { established: true }));
    let verdict = verify(&cluster, &ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.acked, ledger.len(), "every record acknowledged");
    assert!(cluster.with_cluster(|c| c.duplicates_answered()) >= 1);
    assert_broker_logs_contiguous(&cluster, topic);
    assert_steady(&cluster, &producer);
    assert_closed_cleanly(&cluster, &producer);
}

// Faults of every kind about every 100 ms while records flow to all 12 partitions from both
// shards: answers dropped after the append, connections reset (also mid-frame), answers
// delayed (some past request.timeout.ms), retriable and non-retriable errors injected,
// Metadata failing, leaders moving, brokers going down and coming back. Afterwards, with the
// cluster healed: every send resolved; sent = acknowledged + failed (typed errors); every
// acknowledged record is in the log exactly once at its offset; nothing duplicated or
// reordered; a definite failure is absent; the connections the broker counts are the ones
// the producer holds; `buffered_bytes()` is back to 0.
//
// Bounded for CI by default (20 s of faults, 150 000 records); longer runs:
// `KACRAB_SOAK_SECS=600 KACRAB_SOAK_RECORDS=1000000 cargo test --release --features testkit
// --test failover soak -- --nocapture` (`KACRAB_SOAK_SEED` picks the fault schedule).
#[test]
fn soak_faults_of_every_kind_every_100ms() {
    let secs = env_u64("KACRAB_SOAK_SECS", 20);
    let records = env_u64("KACRAB_SOAK_RECORDS", 150_000) as usize;
    let seed = env_u64("KACRAB_SOAK_SEED", 0x5eed_cafe).max(1);
    let topic = "soak";
    let cluster = std::sync::Arc::new(start_cluster(topic));
    let producer = producer(&cluster, &SOAK_SETTINGS);
    let reader = Reader::plaintext(&cluster);
    soak(cluster, topic, producer, &reader, secs, records, seed);
}

// Four produce requests for one partition on one connection, each answered differently: the
// first held for a while (so the others queue behind it), the second refused INVALID_RECORD
// (its batch fails definitely and the epoch is bumped), the third answered
// OUT_OF_ORDER_SEQUENCE_NUMBER by the broker itself (the gap: it is known not to be in the
// log), the fourth processed and its connection dropped before the answer (unknown outcome).
// The fourth may only be inferred absent while the broker keeps the producer's state (one
// without it takes any sequence), so it is never renumbered: it is retried under its old
// stamp, the third (still ahead of it, and retried so too) fails definitely on its second
// OUT_OF_ORDER_SEQUENCE_NUMBER, the fourth keeps its unknown outcome, and the partition is
// rewritten under the new epoch at once: nothing waits for delivery.timeout.ms.
#[test]
fn a_batch_of_unknown_outcome_behind_one_known_absent_does_not_wedge_the_rewrite() {
    use kacrab::testkit::broker::error_codes::{INVALID_RECORD, OUT_OF_ORDER_SEQUENCE_NUMBER};
    let topic = "no-wedge";
    let cluster = start_cluster(topic);
    let producer = producer(&cluster, &[("delivery.timeout.ms", "120000")]);
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    let partition = 0;
    assert_eq!(leader_of(partition), 1);
    let pid = identities(&producer.runtime_stats())[0]
        .expect("identity")
        .0;
    let faults = cluster.faults();
    faults.delay_response(1, ApiKey::Produce, 1, Duration::from_secs(2));
    faults.inject_error(1, ApiKey::Produce, INVALID_RECORD, 1);
    faults.delay_response(1, ApiKey::Produce, 1, Duration::from_millis(1));
    faults.drop_response_after_append(1, ApiKey::Produce, 1);
    let written = |stats: &RuntimeStats| -> u64 {
        stats
            .connections_to(1)
            .map(|(_, c)| c.requests_written)
            .sum()
    };
    let mut ids = Vec::new();
    for _ in 0..4 {
        let before = written(&producer.runtime_stats());
        ids.push(ledger.send(&producer, partition));
        wait_for_stats(
            &producer,
            "the record's own request",
            Duration::from_secs(10),
            |s| written(s) > before,
        );
    }
    ledger.wait_for("the four records", Duration::from_secs(60), |id, _| {
        ids.contains(&id)
    });
    assert!(faults.wait_until_consumed(Duration::from_secs(10)));
    let outcomes: Vec<_> = ids.iter().map(|&id| ledger.outcome(id).cloned()).collect();
    assert!(matches!(outcomes[0], Some(Ok(_))), "{outcomes:?}");
    assert!(
        matches!(&outcomes[1], Some(Err(ProduceError::Rejected { code, .. })) if *code == INVALID_RECORD),
        "{outcomes:?}"
    );
    assert!(
        matches!(&outcomes[2], Some(Err(ProduceError::Rejected { code, .. })) if *code == OUT_OF_ORDER_SEQUENCE_NUMBER),
        "{outcomes:?}"
    );
    assert!(
        matches!(&outcomes[3], Some(Err(e)) if e.is_outcome_unknown()),
        "{outcomes:?}"
    );
    ledger.send_rounds(&producer, 10);
    ledger.wait_all(Duration::from_secs(30));
    let verdict = verify(&cluster, &ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.failed_definitely, 2);
    assert_eq!(verdict.outcome_unknown, 1);
    // This broker kept the producer's state, so the fourth was refused behind the gap.
    assert_eq!(verdict.outcome_unknown_in_log, 0);
    assert_eq!(verdict.acked, ledger.len() - 3);
    assert_eq!(
        log_epochs(&cluster, topic),
        BTreeSet::from([(pid, 0), (pid, 1)])
    );
    assert_broker_logs_contiguous(&cluster, topic);
    assert_closed_cleanly(&cluster, &producer);
}

// An idle producer (every record acknowledged, nothing queued) loses broker 2, and the
// controller moves broker 2's partitions to broker 3. The next record, for a partition broker
// 2 led, must learn the new leader from a metadata refresh (Java's NetworkClient asks for one
// on every disconnect and failed connect) and be acknowledged: it must not keep reconnecting
// to the dead broker until metadata.max.age.ms (300 s) and time out at delivery.timeout.ms.
#[test]
fn a_record_sent_after_its_idle_leader_died_reaches_the_new_leader() {
    let topic = "idle-leader-dies";
    let cluster = start_cluster(topic);
    let producer = producer(
        &cluster,
        &[
            ("delivery.timeout.ms", "30000"),
            ("request.timeout.ms", "10000"),
            ("metadata.max.age.ms", "300000"),
        ],
    );
    let mut ledger = Ledger::new(topic);
    warm_up(&mut ledger, &producer);
    assert_steady(&cluster, &producer);

    cluster.broker_down(2);
    for partition in (0..PARTITIONS).filter(|&p| leader_of(p) == 2) {
        cluster.set_leader(topic, partition, 3);
    }
    let partition = 1;
    assert_eq!(leader_of(partition), 2);
    let id = ledger.send(&producer, partition);
    // Longer than the delivery timeout: the record resolves one way or the other.
    ledger.wait_for(
        "the record after the failure",
        Duration::from_secs(60),
        |i, _| i == id,
    );
    assert!(
        matches!(ledger.outcome(id), Some(Ok(meta)) if meta.partition == partition),
        "record {id}: {:?}",
        ledger.outcome(id)
    );

    cluster.broker_up(2);
    ledger.send_rounds(&producer, 2);
    ledger.wait_all(Duration::from_secs(30));
    let verdict = verify(&cluster, &ledger);
    println!("{verdict:?}");
    assert_eq!(verdict.acked, ledger.len(), "every record acknowledged");
    assert_broker_logs_contiguous(&cluster, topic);
    assert_closed_cleanly(&cluster, &producer);
}
