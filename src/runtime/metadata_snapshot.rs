//! The callers' view of topic metadata: what each topic's partition count is, published by the
//! shards as their engines learn it and read by the callers' partitioner on every send; and
//! whether the producer turned fatal or is closing, which ends every caller's wait for metadata.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::ProduceError;

use super::waiters::TopicWaiters;

/// What callers know of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    pub partition_count: i32,
    pub error_code: i16,
}

/// The callers' view of topic metadata, published by the shards.
pub(crate) struct MetadataSnapshot {
    topics: RwLock<HashMap<Arc<str>, TopicInfo>>,
    /// Set once a shard's engine is in a fatal state: waiting callers stop waiting.
    fatal: RwLock<Option<ProduceError>>,
    /// `fatal` is set: read first, so that a healthy producer's send takes no lock for it.
    is_fatal: std::sync::atomic::AtomicBool,
    changed: Condvar,
    changed_lock: Mutex<u64>,
    /// Bumped on every change of `topics`; unique across snapshots of a process, so that a
    /// caller's cached answer (see [`topic_partition_count`](Self::topic_partition_count)) is
    /// never taken for another snapshot's.
    version: std::sync::atomic::AtomicU64,
    /// Tasks of `send_async` waiting for a topic's metadata (or a fatal error).
    pub(crate) async_waiters: TopicWaiters,
    /// The producer is closing: callers stop waiting for metadata (`close`).
    closed: AtomicBool,
}

impl Default for MetadataSnapshot {
    fn default() -> Self {
        /// Each snapshot's versions start at a distinct multiple of 2^32.
        static SNAPSHOTS: AtomicU64 = AtomicU64::new(1);
        MetadataSnapshot {
            topics: RwLock::default(),
            fatal: RwLock::default(),
            is_fatal: Default::default(),
            changed: Condvar::new(),
            changed_lock: Mutex::new(0),
            version: AtomicU64::new(SNAPSHOTS.fetch_add(1, Ordering::Relaxed) << 32),
            async_waiters: TopicWaiters::default(),
            closed: AtomicBool::new(false),
        }
    }
}

/// A calling thread's last answer for one topic (most threads send to one topic at a time).
struct CachedTopic {
    version: u64,
    topic: Arc<str>,
    partition_count: i32,
}

thread_local! {
    static LAST_TOPIC: std::cell::RefCell<Option<CachedTopic>> = const { std::cell::RefCell::new(None) };
}

impl MetadataSnapshot {
    /// `topic`'s partition count if known: from this thread's last answer while the snapshot
    /// has not changed since (one atomic load), else from the map.
    pub(crate) fn topic_partition_count(&self, topic: &Arc<str>) -> Option<i32> {
        let version = self.version.load(Ordering::Acquire);
        let hit = LAST_TOPIC.with(|last| {
            last.borrow().as_ref().and_then(|c| {
                (c.version == version && (Arc::ptr_eq(&c.topic, topic) || c.topic == *topic))
                    .then_some(c.partition_count)
            })
        });
        if hit.is_some() {
            return hit;
        }
        let count = self
            .get(topic)
            .map(|i| i.partition_count)
            .filter(|&n| n > 0)?;
        LAST_TOPIC.with(|last| {
            *last.borrow_mut() = Some(CachedTopic {
                version,
                topic: topic.clone(),
                partition_count: count,
            })
        });
        Some(count)
    }

    pub(crate) fn get(&self, topic: &str) -> Option<TopicInfo> {
        self.topics
            .read()
            .expect("metadata lock")
            .get(topic)
            .copied()
    }

    pub(crate) fn fatal(&self) -> Option<ProduceError> {
        // One load per send while the producer is healthy.
        if !self.is_fatal.load(Ordering::Acquire) {
            return None;
        }
        self.fatal.read().expect("metadata lock").clone()
    }

    pub(crate) fn publish_fatal(&self, err: ProduceError) {
        {
            let mut fatal = self.fatal.write().expect("metadata lock");
            if fatal.is_some() {
                return;
            }
            *fatal = Some(err);
            self.is_fatal.store(true, Ordering::Release);
        }
        *self.changed_lock.lock().expect("metadata lock") += 1;
        self.changed.notify_all();
        self.async_waiters.wake_all();
    }

    /// The producer is closing: every caller waiting for metadata stops waiting.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.changed_lock.lock().expect("metadata lock") += 1;
        self.changed.notify_all();
        self.async_waiters.wake_all();
    }

    pub(crate) fn publish(&self, topic: Arc<str>, info: TopicInfo) {
        {
            let mut topics = self.topics.write().expect("metadata lock");
            // An error answer does not erase a known partition count.
            let entry = topics.entry(topic.clone()).or_insert(info);
            if info.partition_count > 0 || entry.partition_count == 0 {
                *entry = info;
            } else {
                entry.error_code = info.error_code;
            }
            self.version.fetch_add(1, Ordering::AcqRel);
        }
        *self.changed_lock.lock().expect("metadata lock") += 1;
        self.changed.notify_all();
        self.async_waiters.wake_topic(&topic);
    }

    /// Waits until `topic` has partitions or `deadline` passes, or the producer closes or
    /// turns fatal.
    pub(crate) fn wait_for(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<TopicInfo, Option<i16>> {
        let mut generation = self.changed_lock.lock().expect("metadata lock");
        loop {
            // Read under the lock `close` and `publish_fatal` signal under: not missed.
            if self.closed.load(Ordering::Acquire)
                || self.fatal.read().expect("metadata lock").is_some()
            {
                return Err(None);
            }
            let info = self.get(topic);
            if let Some(info) = info.filter(|i| i.partition_count > 0) {
                return Ok(info);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(info.map(|i| i.error_code));
            }
            let seen = *generation;
            let (g, _) = self
                .changed
                .wait_timeout_while(
                    generation,
                    (deadline - now).min(Duration::from_millis(100)),
                    |g| *g == seen,
                )
                .expect("metadata lock");
            generation = g;
        }
    }
}
