//! The batch send: [`Producer::send_batch`] takes many records in one call and gives one handle,
//! [`BatchDelivery`], that yields every record's result in the order the records were given;
//! [`Producer::send_batch_with_callback`] runs one callback with all of them instead. This is
//! what pipelines and bridges use: a consumer's poll, a file's lines, a request's events.
//!
//! Each record goes the way [`Producer::send`] sends it (the same partitioner, checks, limits
//! and `max.block.ms`), so a record that fails alone (too large, a bad partition) fails in its
//! place in the results and the others go on. Records to one partition keep the order they
//! have in the call.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::engine::RecordMetadata;
use crate::error::ProduceError;

use super::{DeliveryFuture, Producer, ProducerRecord};

type DeliveryResult = Result<RecordMetadata, ProduceError>;

/// The results of one [`Producer::send_batch`], in the order its records were given:
/// awaitable from async code, or waited on from a thread.
#[must_use = "a BatchDelivery reports whether the records were written"]
pub struct BatchDelivery {
    futures: Vec<DeliveryFuture>,
    /// Results already read, by position, while polling.
    results: Vec<Option<DeliveryResult>>,
    /// Position of the first record whose result has not been read yet.
    next: usize,
}

impl BatchDelivery {
    fn new(futures: Vec<DeliveryFuture>) -> BatchDelivery {
        BatchDelivery {
            results: Vec::with_capacity(futures.len()),
            futures,
            next: 0,
        }
    }

    /// How many records the call was given.
    pub fn len(&self) -> usize {
        self.futures.len()
    }

    /// True for a call given no records.
    pub fn is_empty(&self) -> bool {
        self.futures.is_empty()
    }

    /// Blocks the calling thread until every record's result is known; in the order given.
    /// On a shard thread (in a delivery callback) it does not block, as
    /// [`DeliveryFuture::wait`] does not.
    pub fn wait(self) -> Vec<DeliveryResult> {
        let mut results = self.results;
        results.extend(
            self.futures
                .into_iter()
                .skip(self.next)
                .map(|future| Some(future.wait())),
        );
        results
            .into_iter()
            .map(|result| result.expect("every result is read"))
            .collect()
    }

    /// Every result if all are known already (never blocks).
    pub fn try_results(&self) -> Option<Vec<DeliveryResult>> {
        self.futures
            .iter()
            .map(DeliveryFuture::try_result)
            .collect()
    }
}

impl Future for BatchDelivery {
    type Output = Vec<DeliveryResult>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // Results are read in order: a pending record registers its waker and the poll
        // returns; a later wake resumes from it.
        while this.next < this.futures.len() {
            match Pin::new(&mut this.futures[this.next]).poll(cx) {
                Poll::Ready(result) => {
                    this.results.push(Some(result));
                    this.next += 1;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        let results = std::mem::take(&mut this.results);
        Poll::Ready(
            results
                .into_iter()
                .map(|result| result.expect("every result is read"))
                .collect(),
        )
    }
}

impl Producer {
    /// Sends many records in one call. Each goes as [`send`](Self::send) sends it (the
    /// partitioner, size checks and `max.block.ms` apply per record; a record that cannot be
    /// sent fails in its place and the others go on); records to one partition keep the order
    /// they have here. The handle yields every record's result, in this order.
    pub fn send_batch(&self, records: impl IntoIterator<Item = ProducerRecord>) -> BatchDelivery {
        BatchDelivery::new(
            records
                .into_iter()
                .map(|record| self.send(record))
                .collect(),
        )
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
