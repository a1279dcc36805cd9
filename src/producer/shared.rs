//! State shared by the application threads and the shards: the read-mostly metadata snapshot
//! the callers' partitioner reads, `buffer.memory` accounting, and the epoch coordinator.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::ProduceError;

/// `buffer.memory`: bytes of records accepted and not yet completed. `send` blocks up to
/// `max.block.ms` for room, then fails with `BufferExhausted`.
pub(crate) struct BufferMemory {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
    /// Threads blocked in `reserve`; `release` signals only when there are any (an
    /// unconditional `notify_all` is a futex syscall per record on the shard thread).
    waiters: std::sync::atomic::AtomicUsize,
}

impl BufferMemory {
    pub(crate) fn new(limit: usize) -> Self {
        BufferMemory {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
            waiters: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub(crate) fn reserve(&self, bytes: usize, deadline: Instant) -> Result<(), ProduceError> {
        let mut used = self.used.lock().expect("buffer memory lock");
        let started = Instant::now();
        while *used + bytes > self.limit {
            let now = Instant::now();
            if now >= deadline {
                return Err(ProduceError::BufferExhausted {
                    buffer_memory: self.limit,
                    waited: now - started,
                });
            }
            // Registered under the lock, so a release that frees room after this point sees it.
            self.waiters
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            used = self
                .freed
                .wait_timeout(used, deadline - now)
                .expect("buffer memory lock")
                .0;
            self.waiters
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        *used += bytes;
        Ok(())
    }

    pub(crate) fn release(&self, bytes: usize) {
        let mut used = self.used.lock().expect("buffer memory lock");
        *used = used.saturating_sub(bytes);
        let waiters = self.waiters.load(std::sync::atomic::Ordering::SeqCst);
        drop(used);
        if waiters > 0 {
            self.freed.notify_all();
        }
    }

    pub(crate) fn used(&self) -> usize {
        *self.used.lock().expect("buffer memory lock")
    }
}

/// What callers know of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    pub partition_count: i32,
    pub error_code: i16,
}

/// The callers' view of topic metadata, published by the shards.
#[derive(Default)]
pub(crate) struct MetadataSnapshot {
    topics: RwLock<HashMap<Arc<str>, TopicInfo>>,
    /// Set once a shard's engine is in a fatal state: waiting callers stop waiting.
    fatal: RwLock<Option<ProduceError>>,
    changed: Condvar,
    changed_lock: Mutex<u64>,
}

impl MetadataSnapshot {
    pub(crate) fn get(&self, topic: &str) -> Option<TopicInfo> {
        self.topics
            .read()
            .expect("metadata lock")
            .get(topic)
            .copied()
    }

    pub(crate) fn fatal(&self) -> Option<ProduceError> {
        self.fatal.read().expect("metadata lock").clone()
    }

    pub(crate) fn publish_fatal(&self, err: ProduceError) {
        {
            let mut fatal = self.fatal.write().expect("metadata lock");
            if fatal.is_some() {
                return;
            }
            *fatal = Some(err);
        }
        *self.changed_lock.lock().expect("metadata lock") += 1;
        self.changed.notify_all();
    }

    pub(crate) fn publish(&self, topic: Arc<str>, info: TopicInfo) {
        {
            let mut topics = self.topics.write().expect("metadata lock");
            // An error answer does not erase a known partition count.
            let entry = topics.entry(topic).or_insert(info);
            if info.partition_count > 0 || entry.partition_count == 0 {
                *entry = info;
            } else {
                entry.error_code = info.error_code;
            }
        }
        *self.changed_lock.lock().expect("metadata lock") += 1;
        self.changed.notify_all();
    }

    /// Waits until `topic` has partitions or `deadline` passes.
    pub(crate) fn wait_for(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<TopicInfo, Option<i16>> {
        let mut generation = self.changed_lock.lock().expect("metadata lock");
        loop {
            if self.fatal.read().expect("metadata lock").is_some() {
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
