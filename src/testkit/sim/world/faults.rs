//! Faults the world applies to requests as they reach a broker: one chosen by a scripted rule
//! ([`FaultRule`], matched by [`RequestMatch`]) or drawn at random ([`Chaos`]).

use super::*;

/// What happens to one request when it reaches the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Served normally.
    None,
    /// Lost before the broker saw it. Kafka runs over TCP, so a lost request means a dead
    /// path: the connection stalls (answers already sent still arrive, nothing after them does,
    /// either way) until the client gives up on it.
    DropRequest,
    /// The connection is reset before the broker reads the request.
    ResetBeforeProcessing,
    /// Answered with this error code without processing (every partition of a Produce).
    Inject(i16),
    /// Processed (appended), then answered with this error code, as a broker does for
    /// REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    AppendThenAnswer(i16),
    /// Processed, and the answer is lost: the connection is reset (`close`) or stalls.
    DropResponse { close: bool },
    /// Processed; the connection breaks in the middle of the answer: the engine is handed
    /// the first part of it as a frame (what a broken peer would send), then the connection
    /// is gone.
    ResetMidFrame,
    /// Processed; the answer (and every later one on the connection) waits this much longer.
    Delay(Micros),
    /// Processed; the answer (and every later one on the connection) is held until
    /// [`Sim::release_held`].
    Hold,
}

/// Which requests a scripted fault applies to.
#[derive(Debug, Clone, Default)]
pub struct RequestMatch {
    pub broker: Option<i32>,
    pub api: Option<WireApiKey>,
    /// Produce only: the request carries a batch for this partition...
    pub partition: Option<TopicPartition>,
    /// ...with this base sequence.
    pub base_sequence: Option<i32>,
    /// Matching requests to let through before the fault applies.
    pub skip: usize,
}

impl RequestMatch {
    pub fn produce() -> Self {
        RequestMatch {
            api: Some(WireApiKey::Produce),
            ..Default::default()
        }
    }

    pub fn api(api: WireApiKey) -> Self {
        RequestMatch {
            api: Some(api),
            ..Default::default()
        }
    }

    pub fn to_broker(mut self, broker: i32) -> Self {
        self.broker = Some(broker);
        self
    }

    pub fn partition(mut self, tp: &TopicPartition) -> Self {
        self.partition = Some(tp.clone());
        self
    }

    pub fn base_sequence(mut self, sequence: i32) -> Self {
        self.base_sequence = Some(sequence);
        self
    }

    pub fn skip(mut self, n: usize) -> Self {
        self.skip = n;
        self
    }
}

type ClusterHook = Box<dyn FnOnce(&mut Cluster)>;

/// A scripted fault: the next `times` requests matching `matcher` get `fault`; `before` runs on
/// the cluster just before the first of them is served (e.g. to move a leader).
pub struct FaultRule {
    pub matcher: RequestMatch,
    pub fault: Fault,
    pub times: usize,
    pub before: Option<ClusterHook>,
    /// Extra delay of the answer, on top of the fault (e.g. an injected error that arrives
    /// late).
    pub delay: Micros,
}

impl FaultRule {
    pub fn new(matcher: RequestMatch, fault: Fault) -> Self {
        FaultRule {
            matcher,
            fault,
            times: 1,
            before: None,
            delay: 0,
        }
    }

    pub fn delayed(mut self, delay: Micros) -> Self {
        self.delay = delay;
        self
    }

    pub fn times(mut self, n: usize) -> Self {
        self.times = n;
        self
    }

    pub fn before(mut self, hook: impl FnOnce(&mut Cluster) + 'static) -> Self {
        self.before = Some(Box::new(hook));
        self
    }
}

/// Random faults the world applies by itself (see `random.rs`); scripted runs leave it off.
#[derive(Debug, Clone)]
pub struct Chaos {
    /// Probability that a request arriving at a broker gets a fault.
    pub request_fault: f64,
    /// Relative weights of the faults, by index: 0 drop the request, 1 reset before serving
    /// it, 2 drop the answer, 3 reset mid-frame, 4 an extra delay, 5 answer a code of
    /// `retriable`, 6 one of `fatal_to_batch`, 7 append then answer one of `after_append`,
    /// 8 COORDINATOR_NOT_AVAILABLE (requests other than Produce), 9 append then answer one of
    /// `leader_lost_after_append`. A kind that does not apply to the request is a delay.
    pub weights: [u32; 10],
    /// Retriable error codes to inject.
    pub retriable: Vec<i16>,
    /// Non-retriable error codes to inject (each fails its batches definitely).
    pub fatal_to_batch: Vec<i16>,
    /// Codes to answer after appending.
    pub after_append: Vec<i16>,
    /// Codes a leader answers after appending when it lost leadership (or its log directory)
    /// while waiting for the replicas: Kafka's `DelayedProduce` ends with NOT_LEADER_OR_FOLLOWER
    /// (`Partition.checkEnoughReplicasReachOffset`) or KAFKA_STORAGE_ERROR
    /// (`ReplicaManager.getPartitionOrError`). A class of its own, so a plan can weigh these
    /// answers, which a producer also gets before any append, apart from the others.
    pub leader_lost_after_append: Vec<i16>,
    /// Extra answer delay, uniform up to this.
    pub max_delay: Micros,
    /// Probability that a request still in transit when the client closed is served anyway.
    pub late_serve: f64,
    /// Probability that a connection attempt fails (or hangs, half of those).
    pub connect_fail: f64,
}

impl Chaos {
    pub(super) fn pick(&self, rng: &mut Rng, api: i16) -> Fault {
        if !rng.chance(self.request_fault) {
            return Fault::None;
        }
        let total: u32 = self.weights.iter().sum();
        if total == 0 {
            return Fault::None;
        }
        let mut roll = rng.below(u64::from(total)) as u32;
        let mut kind = 0;
        for (i, w) in self.weights.iter().enumerate() {
            if roll < *w {
                kind = i;
                break;
            }
            roll -= w;
        }
        let produce = api == WireApiKey::Produce as i16;
        match kind {
            0 => Fault::DropRequest,
            1 => Fault::ResetBeforeProcessing,
            2 => Fault::DropResponse {
                close: rng.chance(0.7),
            },
            3 => Fault::ResetMidFrame,
            4 => Fault::Delay(rng.range(0, self.max_delay)),
            5 if produce && !self.retriable.is_empty() => Fault::Inject(*rng.pick(&self.retriable)),
            6 if produce && !self.fatal_to_batch.is_empty() => {
                Fault::Inject(*rng.pick(&self.fatal_to_batch))
            }
            7 if produce && !self.after_append.is_empty() => {
                Fault::AppendThenAnswer(*rng.pick(&self.after_append))
            }
            8 if !produce => Fault::Inject(code::COORDINATOR_NOT_AVAILABLE),
            9 if produce && !self.leader_lost_after_append.is_empty() => {
                Fault::AppendThenAnswer(*rng.pick(&self.leader_lost_after_append))
            }
            _ => Fault::Delay(rng.range(0, self.max_delay)),
        }
    }
}
