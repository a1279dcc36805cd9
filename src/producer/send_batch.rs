//! The batch send: [`Producer::send_batch`] takes many records in one call and gives one handle,
//! [`BatchDelivery`], that yields every record's result in the order the records were given;
//! [`Producer::send_batch_with_callback`] runs one callback with all of them instead. This is
//! what pipelines and bridges use: a consumer's poll, a file's lines, a request's events.
//!
//! Each record goes the way [`Producer::send`] sends it (the same partitioner, checks, limits
//! and `max.block.ms`), so a record that fails alone (too large, a bad partition) fails in its
//! place in the results and the others go on. Records to one partition keep the order they
//! have in the call.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::engine::RecordMetadata;
use crate::error::ProduceError;
use crate::runtime::completion::{BatchCompletion, Outcome};

use super::delivery::{result_of, unknown_on_shard, Queued};
use super::{Block, Producer, ProducerRecord, Refused};

type DeliveryResult = Result<RecordMetadata, ProduceError>;

/// Topics a call's records are looked up among one by one; past this, by a hash of the name.
const TOPICS_SEARCHED: usize = 16;

/// One record of a call: where its result will be, and what it is built from. Its topic is a
/// position in the call's `topics`.
struct Entry {
    completion: Arc<BatchCompletion>,
    index: u32,
    topic: u32,
    partition: i32,
    timestamp: i64,
}

/// The results of one [`Producer::send_batch`], in the order its records were given:
/// awaitable from async code, or waited on from a thread.
///
/// It keeps, per record, its batch's completion and its place in that batch, and each topic of
/// the call once: the records' own topic handles are released on the sending thread, within
/// the call. The topic of each result is cloned from a handle the reading thread makes for
/// itself when it first reads. So the one `Arc<str>` an application clones for every record it
/// makes is counted by that thread alone, and a thread that reads results while another sends
/// does not move its reference count (or the topic's bytes beside it, which each `send`
/// compares) between two cores for every record.
#[must_use = "a BatchDelivery reports whether the records were written"]
pub struct BatchDelivery {
    /// The call's topics, each once, in the order first seen.
    topics: Vec<Arc<str>>,
    /// `topics` by name, once a call names more than `TOPICS_SEARCHED`.
    topic_index: Option<HashMap<Arc<str>, u32>>,
    entries: Vec<Entry>,
    /// The results read so far, in order: those of `entries[..results.len()]`.
    results: Vec<DeliveryResult>,
    /// Copies of `topics` made by the reading thread, for the results' topics.
    readers_topics: Vec<Arc<str>>,
    /// A waker is registered for `entries[results.len()]` with its completion.
    registered: bool,
}

impl BatchDelivery {
    fn with_capacity(records: usize) -> BatchDelivery {
        BatchDelivery {
            topics: Vec::new(),
            topic_index: None,
            entries: Vec::with_capacity(records),
            results: Vec::new(),
            readers_topics: Vec::new(),
            registered: false,
        }
    }

    /// Position of `topic` in `topics`, added if new. A call names few topics, and mostly the
    /// same as the record before.
    fn topic_position(&mut self, topic: &Arc<str>) -> u32 {
        if let Some(last) = self.entries.last() {
            let known = &self.topics[last.topic as usize];
            if Arc::ptr_eq(known, topic) || **known == **topic {
                return last.topic;
            }
        }
        let found = match &self.topic_index {
            Some(index) => index.get(topic).copied(),
            None => self
                .topics
                .iter()
                .position(|t| **t == **topic)
                .map(|at| at as u32),
        };
        if let Some(at) = found {
            return at;
        }
        let at = u32::try_from(self.topics.len()).expect("no more topics than records");
        self.topics.push(topic.clone());
        if let Some(index) = &mut self.topic_index {
            index.insert(topic.clone(), at);
        } else if self.topics.len() > TOPICS_SEARCHED {
            let index = self.topics.iter().cloned().zip(0..).collect();
            self.topic_index = Some(index);
        }
        at
    }

    fn push(&mut self, queued: Queued) {
        let topic = self.topic_position(&queued.topic);
        self.entries.push(Entry {
            completion: queued.completion,
            index: queued.index,
            topic,
            partition: queued.partition,
            timestamp: queued.timestamp,
        });
    }

    /// A record that failed before it was queued: its result is `err` already.
    fn push_failed(&mut self, topic: Arc<str>, err: ProduceError) {
        let topic = self.topic_position(&topic);
        self.entries.push(Entry {
            completion: Arc::new(BatchCompletion::done(Outcome::Failed(Box::new(err)))),
            index: 0,
            topic,
            partition: -1,
            timestamp: -1,
        });
    }

    /// How many records the call was given.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True for a call given no records.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The reading thread's own topic handles, made at its first read.
    fn readers_topics(&mut self) -> &[Arc<str>] {
        if self.readers_topics.len() != self.topics.len() {
            self.readers_topics = self.topics.iter().map(|t| Arc::from(&**t)).collect();
        }
        &self.readers_topics
    }

    /// Blocks the calling thread until every record's result is known; in the order given.
    /// On a shard thread (in a delivery callback) it does not block, as
    /// [`DeliveryFuture::wait`](super::DeliveryFuture::wait) does not: a result not known yet
    /// is then [`ProduceError::OutcomeUnknown`].
    pub fn wait(mut self) -> Vec<DeliveryResult> {
        let on_shard = crate::runtime::shard::on_shard_thread();
        let entries = std::mem::take(&mut self.entries);
        let mut results = std::mem::take(&mut self.results);
        self.registered = false;
        let topics = self.readers_topics();
        results.reserve(entries.len() - results.len());
        for entry in &entries[results.len()..] {
            let topic = &topics[entry.topic as usize];
            let outcome = if on_shard {
                entry.completion.outcome(entry.index)
            } else {
                entry.completion.wait(entry.index, None)
            };
            results.push(match outcome {
                Some(outcome) => result_of(topic, entry.partition, entry.timestamp, &outcome),
                None => Err(unknown_on_shard(topic, entry.partition)),
            });
        }
        results
    }

    /// Every result if all are known already (never blocks).
    pub fn try_results(&self) -> Option<Vec<DeliveryResult>> {
        let mut results = Vec::with_capacity(self.entries.len());
        results.extend(self.results.iter().cloned());
        for entry in &self.entries[self.results.len()..] {
            let outcome = entry.completion.outcome(entry.index)?;
            let topic = &self.topics[entry.topic as usize];
            results.push(result_of(topic, entry.partition, entry.timestamp, &outcome));
        }
        Some(results)
    }
}

impl Future for BatchDelivery {
    type Output = Vec<DeliveryResult>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        this.readers_topics();
        // Results are read in order: a pending record registers its waker and the poll
        // returns; the completion's wake (which takes the waker) resumes from it.
        while this.results.len() < this.entries.len() {
            let entry = &this.entries[this.results.len()];
            let Poll::Ready(outcome) = entry.completion.poll_outcome(entry.index, cx) else {
                this.registered = true;
                return Poll::Pending;
            };
            this.registered = false;
            let topic = &this.readers_topics[entry.topic as usize];
            let result = result_of(topic, entry.partition, entry.timestamp, &outcome);
            this.results.push(result);
        }
        Poll::Ready(std::mem::take(&mut this.results))
    }
}

impl Drop for BatchDelivery {
    fn drop(&mut self) {
        if self.registered {
            if let Some(entry) = self.entries.get(self.results.len()) {
                entry.completion.unregister_waker(entry.index);
            }
        }
    }
}

impl Producer {
    /// Sends many records in one call. Each goes as [`send`](Self::send) sends it (the
    /// partitioner, size checks and `max.block.ms` apply per record; a record that cannot be
    /// sent fails in its place and the others go on); records to one partition keep the order
    /// they have here. The handle yields every record's result, in this order.
    pub fn send_batch(&self, records: impl IntoIterator<Item = ProducerRecord>) -> BatchDelivery {
        let records = records.into_iter();
        let mut delivery = BatchDelivery::with_capacity(records.size_hint().0);
        let max_block = self.max_block();
        for record in records {
            match self.send_record(record, Block::UpTo(max_block), None) {
                Ok(queued) => delivery.push(queued),
                Err(Refused::Failed(topic, err)) => delivery.push_failed(topic, err),
                Err(Refused::WouldBlock(..)) => unreachable!("a blocking send waits"),
            }
        }
        delivery
    }

    /// Sends many records as [`send_batch`](Self::send_batch) does, and runs `callback` once,
    /// with every record's result in the order given, when the last is known: on the shard
    /// thread that completes it, or on the calling thread before this returns when every
    /// record failed before it was queued (or none were given). The rules of
    /// [`send_with_callback`](Self::send_with_callback) apply to the callback.
    pub fn send_batch_with_callback(
        &self,
        records: impl IntoIterator<Item = ProducerRecord>,
        callback: impl FnOnce(Vec<DeliveryResult>) + Send + 'static,
    ) {
        let records: Vec<ProducerRecord> = records.into_iter().collect();
        let gather = Arc::new(Gather {
            state: Mutex::new(GatherState {
                results: (0..records.len()).map(|_| None).collect(),
                left: records.len(),
                callback: Some(Box::new(callback)),
            }),
        });
        if records.is_empty() {
            gather.finish_if_done();
            return;
        }
        for (index, record) in records.into_iter().enumerate() {
            let gather = gather.clone();
            self.send_with_callback(record, move |result| gather.put(index, result));
        }
    }
}

type BatchCallback = Box<dyn FnOnce(Vec<DeliveryResult>) + Send>;

/// Collects the results of a `send_batch_with_callback` until the last arrives.
struct Gather {
    state: Mutex<GatherState>,
}

struct GatherState {
    results: Vec<Option<DeliveryResult>>,
    left: usize,
    callback: Option<BatchCallback>,
}

impl Gather {
    fn put(&self, index: usize, result: DeliveryResult) {
        {
            let mut state = self.state.lock().expect("batch results lock");
            if state.results[index].replace(result).is_none() {
                state.left -= 1;
            }
        }
        self.finish_if_done();
    }

    fn finish_if_done(&self) {
        let ready = {
            let mut state = self.state.lock().expect("batch results lock");
            if state.left > 0 {
                return;
            }
            state.callback.take().map(|callback| {
                let results = std::mem::take(&mut state.results)
                    .into_iter()
                    .map(|result| result.expect("every result arrived"))
                    .collect::<Vec<_>>();
                (callback, results)
            })
        };
        if let Some((callback, results)) = ready {
            // Caught as a record's callback's panic is: it must not stop the shard.
            if let Err(panic) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || callback(results)))
            {
                tracing::error!(
                    target: "kacrab::producer",
                    thread = std::thread::current().name().unwrap_or("?"),
                    panic = %crate::panics::panic_message(panic.as_ref()),
                    "a batch's delivery callback panicked"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use super::*;

    fn queued(completion: &Arc<BatchCompletion>, index: u32, topic: &str) -> Queued {
        Queued {
            completion: completion.clone(),
            index,
            timestamp: 1000 + i64::from(index),
            // A handle of its own, as each record of an application may bring.
            topic: Arc::from(topic),
            partition: 0,
        }
    }

    fn appended(base_offset: i64) -> Outcome {
        Outcome::Appended {
            base_offset,
            log_append_time: -1,
        }
    }

    #[test]
    fn records_of_many_topics_resolve_in_order_each_with_its_own_topic() {
        // More topics than are searched one by one, each named twice, by handles that are
        // not the same `Arc`.
        let names: Vec<String> = (0..TOPICS_SEARCHED * 2 + 3)
            .map(|i| format!("topic-{i}"))
            .collect();
        let completions: Vec<_> = names
            .iter()
            .map(|_| Arc::new(BatchCompletion::new()))
            .collect();
        let mut delivery = BatchDelivery::with_capacity(0);
        for round in 0..2 {
            for (name, completion) in names.iter().zip(&completions) {
                delivery.push(queued(completion, round, name));
            }
        }
        assert_eq!(delivery.topics.len(), names.len(), "each topic kept once");
        for (i, completion) in completions.iter().enumerate() {
            completion.complete(appended(100 * i as i64));
        }
        let results = delivery.wait();
        assert_eq!(results.len(), names.len() * 2);
        for (at, result) in results.into_iter().enumerate() {
            let (round, i) = (at / names.len(), at % names.len());
            let metadata = result.expect("appended");
            assert_eq!(&*metadata.topic, names[i]);
            assert_eq!(metadata.offset, 100 * i as i64 + round as i64);
            assert_eq!(metadata.timestamp, 1000 + round as i64);
        }
    }

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A one-record batch polled once before its record completed, and the waker it left.
    fn polled_while_pending() -> (Arc<BatchCompletion>, BatchDelivery, Arc<CountingWaker>) {
        let completion = Arc::new(BatchCompletion::new());
        let mut delivery = BatchDelivery::with_capacity(1);
        delivery.push(queued(&completion, 0, "t"));
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut delivery).poll(&mut cx).is_pending());
        (completion, delivery, counter)
    }

    #[test]
    fn a_batch_dropped_while_pending_leaves_no_waker_behind() {
        let (completion, delivery, counter) = polled_while_pending();
        drop(delivery);
        completion.complete(appended(0));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0, "nobody to wake");
    }

    #[test]
    fn a_pending_batch_is_woken_once_its_record_completes_and_then_resolves() {
        let (completion, mut delivery, counter) = polled_while_pending();
        completion.complete(appended(7));
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        let waker = Waker::from(counter);
        match Pin::new(&mut delivery).poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(results) => assert_eq!(results[0].as_ref().unwrap().offset, 7),
            Poll::Pending => panic!("the record completed"),
        }
    }
}
