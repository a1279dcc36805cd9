//! Waiting without blocking a thread, for the producer's `send_async`: the tasks waiting for
//! room in `buffer.memory` ([`RoomWaiters`]) and those waiting for a topic's metadata
//! ([`TopicWaiters`]). The shards wake them as they free memory and publish metadata.
//!
//! Each waiting send holds one registration in one list, made on its first `Pending` poll
//! (later polls only replace its waker) and removed when its wait resolves or is dropped. A
//! change wakes only the waits it can satisfy: a release of `buffer.memory` wakes the waiters
//! the freed room fits, oldest first; a topic's metadata wakes the waiters of that topic. A
//! close or a fatal error wakes them all (each then finds the producer closed or fatal). Under
//! the lists' locks, which shard threads take, no step walks the waiters that are not woken.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Tasks waiting for room in `buffer.memory`, in the order they began to wait.
#[derive(Default)]
pub(crate) struct RoomWaiters {
    /// Registered waiters: a release takes the lock only when some wait.
    count: AtomicUsize,
    queue: Mutex<RoomQueue>,
}

#[derive(Default)]
struct RoomQueue {
    next_id: u64,
    /// By registration id (so oldest first): the bytes each needs, and its waker.
    waiting: BTreeMap<u64, (usize, Waker)>,
}

impl RoomWaiters {
    /// Registers (or re-arms) the wait `id` for `bytes` of room; `id` is set on the first
    /// call and keeps the wait's place in the queue. The caller checks for room again after
    /// this (a release between its first look and this registration is not missed then).
    fn register(&self, id: &mut Option<u64>, bytes: usize, waker: &Waker) {
        let mut queue = self.queue.lock().expect("room waiters lock");
        let key = *id.get_or_insert_with(|| {
            queue.next_id += 1;
            queue.next_id
        });
        match queue.waiting.get_mut(&key) {
            Some((_, w)) if w.will_wake(waker) => {}
            Some((_, w)) => *w = waker.clone(),
            None => {
                queue.waiting.insert(key, (bytes, waker.clone()));
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(queue);
        // Pairs with the fence in `wake_fitting`: either the release sees this registration,
        // or the caller's next look sees the released room.
        fence(Ordering::SeqCst);
    }

    fn unregister(&self, id: u64) {
        let mut queue = self.queue.lock().expect("room waiters lock");
        if queue.waiting.remove(&id).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// `room` bytes are free now: wakes the oldest waiters while each one's need fits in what
    /// is left, and stops at the first that does not (it keeps its place; a later release
    /// serves it before younger ones, as Java's `BufferPool` serves its waiters in order).
    pub(crate) fn wake_fitting(&self, mut room: usize) {
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut woken = Vec::new();
        {
            let mut queue = self.queue.lock().expect("room waiters lock");
            while let Some(entry) = queue.waiting.first_entry() {
                let (bytes, _) = entry.get();
                if *bytes > room {
                    break;
                }
                room -= *bytes;
                woken.push(entry.remove().1);
            }
            self.count.fetch_sub(woken.len(), Ordering::Relaxed);
        }
        woken.into_iter().for_each(Waker::wake);
    }

    /// Wakes every waiter (the producer is closing).
    pub(crate) fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let woken = {
            let mut queue = self.queue.lock().expect("room waiters lock");
            self.count.store(0, Ordering::Relaxed);
            std::mem::take(&mut queue.waiting)
        };
        woken.into_values().for_each(|(_, w)| w.wake());
    }

    /// Waits registered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.lock().expect("room waiters lock").waiting.len()
    }
}

/// Tasks waiting for a topic's metadata, by topic.
#[derive(Default)]
pub(crate) struct TopicWaiters {
    count: AtomicUsize,
    topics: Mutex<TopicMap>,
}

#[derive(Default)]
struct TopicMap {
    next_id: u64,
    waiting: HashMap<Arc<str>, BTreeMap<u64, Waker>>,
}

impl TopicWaiters {
    /// Registers (or re-arms) the wait `id` for `topic`; as [`RoomWaiters::register`].
    fn register(&self, id: &mut Option<u64>, topic: &Arc<str>, waker: &Waker) {
        let mut topics = self.topics.lock().expect("topic waiters lock");
        let key = *id.get_or_insert_with(|| {
            topics.next_id += 1;
            topics.next_id
        });
        let waiting = topics.waiting.entry(topic.clone()).or_default();
        match waiting.get_mut(&key) {
            Some(w) if w.will_wake(waker) => {}
            Some(w) => *w = waker.clone(),
            None => {
                waiting.insert(key, waker.clone());
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(topics);
        // Pairs with the fence in `wake_topic` and `wake_all`.
        fence(Ordering::SeqCst);
    }

    fn unregister(&self, id: u64, topic: &str) {
        let mut topics = self.topics.lock().expect("topic waiters lock");
        if let Some(waiting) = topics.waiting.get_mut(topic) {
            if waiting.remove(&id).is_some() {
                self.count.fetch_sub(1, Ordering::Relaxed);
            }
            if waiting.is_empty() {
                topics.waiting.remove(topic);
            }
        }
    }

    /// `topic`'s metadata changed: wakes its waiters (after the change is visible).
    pub(crate) fn wake_topic(&self, topic: &str) {
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let woken = {
            let mut topics = self.topics.lock().expect("topic waiters lock");
            let woken = topics.waiting.remove(topic).unwrap_or_default();
            self.count.fetch_sub(woken.len(), Ordering::Relaxed);
            woken
        };
        woken.into_values().for_each(Waker::wake);
    }

    /// Wakes every waiter (the producer is closing, or fatal).
    pub(crate) fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let woken = {
            let mut topics = self.topics.lock().expect("topic waiters lock");
            self.count.store(0, Ordering::Relaxed);
            std::mem::take(&mut topics.waiting)
        };
        woken
            .into_values()
            .flat_map(BTreeMap::into_values)
            .for_each(Waker::wake);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let topics = self.topics.lock().expect("topic waiters lock");
        topics.waiting.values().map(BTreeMap::len).sum()
    }
}

/// Resolves once `ready()` holds, woken by `RoomWaiters::wake_fitting` (or `wake_all`).
/// Holds one registration while pending; dropping it removes the registration.
pub(crate) struct RoomWait<'a, F: Fn() -> bool> {
    pub(crate) waiters: &'a RoomWaiters,
    pub(crate) bytes: usize,
    pub(crate) ready: F,
    pub(crate) id: Option<u64>,
}

impl<F: Fn() -> bool + Unpin> Future for RoomWait<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if !(this.ready)() {
            this.waiters.register(&mut this.id, this.bytes, cx.waker());
            if !(this.ready)() {
                return Poll::Pending;
            }
        }
        if let Some(id) = this.id.take() {
            this.waiters.unregister(id);
        }
        Poll::Ready(())
    }
}

impl<F: Fn() -> bool> Drop for RoomWait<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.waiters.unregister(id);
        }
    }
}

/// Resolves once `ready()` holds, woken by `TopicWaiters::wake_topic` for its topic (or
/// `wake_all`). One registration while pending, as [`RoomWait`].
pub(crate) struct TopicWait<'a, F: Fn() -> bool> {
    pub(crate) waiters: &'a TopicWaiters,
    pub(crate) topic: Arc<str>,
    pub(crate) ready: F,
    pub(crate) id: Option<u64>,
}

impl<F: Fn() -> bool + Unpin> Future for TopicWait<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if !(this.ready)() {
            this.waiters.register(&mut this.id, &this.topic, cx.waker());
            if !(this.ready)() {
                return Poll::Pending;
            }
        }
        if let Some(id) = this.id.take() {
            this.waiters.unregister(id, &this.topic);
        }
        Poll::Ready(())
    }
}

impl<F: Fn() -> bool> Drop for TopicWait<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.waiters.unregister(id, &self.topic);
        }
    }
}

/// Wakers that count their wakes, and a one-shot poll, for the tests of the wait lists here and
/// of the deadline timer (`producer::async_wait`).
#[cfg(test)]
pub(crate) mod test_waker {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    /// Counts its wakes.
    #[derive(Default)]
    pub(crate) struct Wakes(pub AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A waker and the count of its wakes.
    pub(crate) fn waker() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes::default());
        (wakes.clone(), Waker::from(wakes))
    }

    /// Polls `future` once with `waker`.
    pub(crate) fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    use test_waker::{poll, waker};

    #[test]
    fn a_release_wakes_only_the_waiters_its_room_fits_oldest_first() {
        let waiters = RoomWaiters::default();
        let never = || false;
        let needs = [100, 300, 100];
        let mut waits: Vec<_> = needs
            .iter()
            .map(|&bytes| RoomWait {
                waiters: &waiters,
                bytes,
                ready: never,
                id: None,
            })
            .collect();
        let wakers: Vec<_> = needs.iter().map(|_| waker()).collect();
        for (wait, (_, waker)) in waits.iter_mut().zip(&wakers) {
            assert!(poll(wait, waker).is_pending());
            assert!(
                poll(wait, waker).is_pending(),
                "a second poll re-arms, nothing more"
            );
        }
        assert_eq!(waiters.len(), 3, "one registration per wait");
        let woken = || {
            wakers
                .iter()
                .map(|(w, _)| w.0.load(Ordering::SeqCst))
                .collect::<Vec<_>>()
        };
        waiters.wake_fitting(250);
        assert_eq!(
            woken(),
            [1, 0, 0],
            "the second does not fit, so the third waits behind it"
        );
        waiters.wake_fitting(400);
        assert_eq!(woken(), [1, 1, 1]);
        assert_eq!(waiters.len(), 0);
        // A woken wait whose room was taken by another sender waits again in its old place.
        let (again, again_waker) = waker();
        let (young, young_waker) = waker();
        assert!(poll(&mut waits[1], &again_waker).is_pending());
        let mut younger = RoomWait {
            waiters: &waiters,
            bytes: 100,
            ready: never,
            id: None,
        };
        assert!(poll(&mut younger, &young_waker).is_pending());
        waiters.wake_fitting(300);
        assert_eq!(
            (
                again.0.load(Ordering::SeqCst),
                young.0.load(Ordering::SeqCst)
            ),
            (1, 0),
            "the older wait is served first"
        );
        drop(younger);
        drop(waits);
        assert_eq!(
            waiters.len(),
            0,
            "dropped waits leave no registration behind"
        );
    }

    #[test]
    fn a_topics_metadata_wakes_only_the_waits_for_that_topic() {
        let waiters = TopicWaiters::default();
        let known = AtomicBool::new(false);
        let ready = || known.load(Ordering::SeqCst);
        let mut orders = TopicWait {
            waiters: &waiters,
            topic: "orders".into(),
            ready,
            id: None,
        };
        let mut payments = TopicWait {
            waiters: &waiters,
            topic: "payments".into(),
            ready: || false,
            id: None,
        };
        let (orders_woken, orders_waker) = waker();
        let (payments_woken, payments_waker) = waker();
        assert!(poll(&mut orders, &orders_waker).is_pending());
        assert!(poll(&mut payments, &payments_waker).is_pending());
        known.store(true, Ordering::SeqCst);
        waiters.wake_topic("orders");
        assert_eq!(orders_woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(payments_woken.0.load(Ordering::SeqCst), 0);
        assert!(poll(&mut orders, &orders_waker).is_ready());
        assert_eq!(
            waiters.len(),
            1,
            "only the wait still pending is registered"
        );
        waiters.wake_all();
        assert_eq!(payments_woken.0.load(Ordering::SeqCst), 1);
        drop(payments);
        assert_eq!(waiters.len(), 0);
    }
}
