//! Shard 0 hands a snapshot to the `metrics` facade on its own, once a second, without any
//! `Producer::metrics` call: an exporter installed as the global recorder sees the counts.
//! (Its own test binary: the global recorder can be installed once per process.)
#![cfg(feature = "testkit")]

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kacrab::testkit::broker::BrokerRules;
use kacrab::testkit::server::ReferenceCluster;
use kacrab::{Producer, ProducerRecord};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Counts the counter and gauge updates a recorder saw, and wakes whoever waits for one.
#[derive(Default)]
struct Updates {
    count: Mutex<u64>,
    signal: Condvar,
}

impl Updates {
    fn raise(&self) {
        *self.count.lock().unwrap() += 1;
        self.signal.notify_all();
    }

    fn count(&self) -> u64 {
        *self.count.lock().unwrap()
    }

    /// Waits until an update after the `seen`-th one; false if `deadline` passed first.
    fn wait_past(&self, seen: u64, deadline: Instant) -> bool {
        let mut count = self.count.lock().unwrap();
        while *count == seen {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            count = self.signal.wait_timeout(count, deadline - now).unwrap().0;
        }
        true
    }
}

/// The debugging recorder, raising [`Updates`] after each counter or gauge update it has
/// recorded: an update is visible in a snapshot taken once its signal is seen.
struct SignallingRecorder {
    inner: DebuggingRecorder,
    updates: Arc<Updates>,
}

struct Signalling<H> {
    inner: H,
    updates: Arc<Updates>,
}

impl CounterFn for Signalling<Counter> {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        self.updates.raise();
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
        self.updates.raise();
    }
}

impl GaugeFn for Signalling<Gauge> {
    fn increment(&self, value: f64) {
        self.inner.increment(value);
        self.updates.raise();
    }

    fn decrement(&self, value: f64) {
        self.inner.decrement(value);
        self.updates.raise();
    }

    fn set(&self, value: f64) {
        self.inner.set(value);
        self.updates.raise();
    }
}

impl Recorder for SignallingRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Signalling {
            inner: self.inner.register_counter(key, metadata),
            updates: Arc::clone(&self.updates),
        }))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Signalling {
            inner: self.inner.register_gauge(key, metadata),
            updates: Arc::clone(&self.updates),
        }))
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(key, metadata)
    }
}

#[test]
fn shard_zero_publishes_the_producers_totals_to_the_global_recorder_unasked() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let updates = Arc::new(Updates::default());
    metrics::set_global_recorder(SignallingRecorder {
        inner: recorder,
        updates: Arc::clone(&updates),
    })
    .unwrap_or_else(|_| panic!("the only global recorder"));

    let cluster = ReferenceCluster::start(1, BrokerRules::default());
    cluster.create_topic("ticked", &[1, 1]);
    let producer = Producer::builder()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("client.id", "ticking")
        .set("kacrab.shards", "2")
        .build()
        .expect("producer");
    let pending: Vec<_> = (0..20u8)
        .map(|i| {
            producer.send(
                ProducerRecord::new("ticked", Bytes::from(vec![i; 10]))
                    .with_partition(i32::from(i % 2)),
            )
        })
        .collect();
    for p in pending {
        p.wait().expect("a record");
    }

    // Both shards' records, summed by shard 0's periodic snapshot. A look at the recorder takes
    // the counters' values (it resets them to 0), and each look follows an update the recorder
    // signalled: the count is read before the look, so an update during it brings another look
    // at once, and the look after `record-send-total` is set sees it unless an earlier one
    // already did. The deadline only bounds a failure.
    let sent = |value: &DebugValue| *value == DebugValue::Counter(20);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = updates.count();
        let last = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find(|(key, _, _, _)| {
                let key = key.key();
                key.name() == "record-send-total"
                    && key
                        .labels()
                        .any(|l| l.key() == "group" && l.value() == "producer-metrics")
                    && key
                        .labels()
                        .any(|l| l.key() == "client-id" && l.value() == "ticking")
            })
            .map(|(_, _, _, value)| value);
        if last.as_ref().is_some_and(sent) {
            break;
        }
        assert!(
            updates.wait_past(seen, deadline),
            "no snapshot showed 20 records sent; last seen: {last:?}"
        );
    }
    producer.close(Duration::from_secs(5));
}
