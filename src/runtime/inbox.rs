//! A shard's inbox: the one queue through which application threads hand a shard their
//! commands (a partition queue's notice, flush, a transaction's barrier, close), in one order.
//! Records do not pass through it: the sending threads encode them into their partitions'
//! batches (`producer::accumulator`), and the inbox carries one notice when a partition first
//! has a batch the shard does not know of.
//!
//! Why a mutex-guarded deque and not a channel of boxed messages: the shard takes the whole
//! deque at once by swapping it with its own empty one, so both sides reuse the same two
//! allocations, and a shard is woken at most once per burst of commands. A notice does not wake
//! the shard when it need not: with `linger.ms` above 0, a notice wakes a parked shard only if
//! the shard's own timer (its next linger expiry, timeout or refresh) would fire after the new
//! batch's linger has run out, as Java's accumulator wakes its sender only for a new or full
//! batch. A full batch wakes it at once (`nudge`), and so does every other command. A park
//! costs the shard a `membarrier` (glommio's sleep protocol, which interrupts every CPU running
//! one of the process's threads) and the caller an eventfd write; under load, waking only when
//! there is something to do saves both. The lock is contended only by calling threads racing
//! each other and by the shard's swap, which holds it for a pointer exchange.
//!
//! Order: the lock gives every push one total order, the order the shard handles them in. A
//! partition queue's notice is pushed before its first record's `send` returns, so a flush or a
//! barrier pushed later finds the queue listed (`runtime::intake`).
//!
//! Bound: commands are one per application call, or one per partition queue the shard does not
//! list yet. A closed inbox refuses pushes, so nothing is left behind in a queue nobody reads.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::command::ShardCommand;
use crate::sync::{fence, AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};

/// Entries a deque keeps allocated however idle the producer is. A burst larger than this
/// grows the deque; it shrinks back only after `SPARSE_TAKES_BEFORE_SHRINK` takes in a row
/// used under an eighth of it, so a producer under sustained load does not reallocate a deque
/// on every take. Commands are few (records do not pass here), so a few hundred slots of a
/// small `ShardCommand` cover any burst of them.
const RETAINED_CAPACITY: usize = 1 << 8;
const SPARSE_TAKES_BEFORE_SHRINK: u32 = 64;

pub(crate) struct ShardInbox {
    queue: Mutex<Queue>,
    /// The shard is parked (or about to park) on `waker`: the push that must wake it does.
    /// Cleared by whoever wakes it.
    parked: AtomicBool,
    /// When the parked shard wakes on its own (its timer), in µs since `epoch`. Written before
    /// `parked` is raised, so a caller that sees `parked` reads this park's deadline.
    parked_until: AtomicU64,
    /// A peer published to the ticket ring since the shard's last park ended: the next park
    /// returns at once, so the shard reads the ring again. Raised by `nudge`, lowered by the
    /// park that returns for it (or for anything else: the shard reads the ring after every
    /// park). Without it, a nudge landing after the shard's last look at the ring and before
    /// it raises `parked` finds nobody to wake, and the ticket waits for the shard's timer.
    nudged: AtomicBool,
    waker: Mutex<Option<Waker>>,
    /// Takes in a row that used under an eighth of a grown deque; the shard's alone.
    sparse_takes: AtomicU32,
    /// The clock of `parked_until` and of a burst's arrival; the shard's `now` counts from it.
    epoch: Instant,
    wake: WakePolicy,
}

/// When a notice pushed to a parked shard wakes it (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WakePolicy {
    /// `linger.ms` in µs. 0: the first notice of every burst wakes the shard.
    pub linger_us: u64,
}

impl WakePolicy {
    /// Every burst wakes the shard at once.
    pub(crate) const EAGER: WakePolicy = WakePolicy { linger_us: 0 };
}

struct Queue {
    commands: VecDeque<ShardCommand>,
    /// Set by the push of the shard's `Close`: nothing is accepted behind it.
    closed: bool,
    /// When the oldest queued command arrived (µs since `epoch`), or `NOT_TIMED` when the
    /// policy does not linger in the inbox. Meaningful while `commands` is not empty.
    oldest_us: u64,
}

/// `Queue::oldest_us` when arrivals are not timed.
const NOT_TIMED: u64 = u64::MAX;

/// What a push asks of the shard.
enum Wake {
    No,
    /// Wake it if it is parked.
    Now,
    /// The first record of a burst, arrived at this instant: wake the shard if it is parked
    /// past the record's linger.
    Unless(u64),
}

impl Default for ShardInbox {
    fn default() -> Self {
        ShardInbox::new(WakePolicy::EAGER)
    }
}

impl ShardInbox {
    pub(crate) fn new(wake: WakePolicy) -> ShardInbox {
        ShardInbox {
            queue: Mutex::new(Queue {
                commands: VecDeque::new(),
                closed: false,
                oldest_us: NOT_TIMED,
            }),
            parked: AtomicBool::new(false),
            parked_until: AtomicU64::new(0),
            nudged: AtomicBool::new(false),
            waker: Mutex::new(None),
            sparse_takes: AtomicU32::new(0),
            epoch: Instant::now(),
            wake,
        }
    }

    /// The instant the shard's clock and the arrival times count from.
    pub(crate) fn epoch(&self) -> Instant {
        self.epoch
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Queues `command` (not a record) behind everything pushed before it, and wakes the shard
    /// if it is parked; gives it back when the shard has closed (or is closing) its inbox.
    // The command comes back by value (no box on this path): the caller drops it, which
    // answers its record.
    #[allow(clippy::result_large_err)]
    pub(crate) fn push(&self, command: ShardCommand) -> Result<(), ShardCommand> {
        {
            let mut queue = self.queue.lock().expect("inbox lock");
            if queue.closed {
                return Err(command);
            }
            queue.commands.push_back(command);
            if queue.commands.len() == 1 {
                queue.oldest_us = self.arrival_us();
            }
        }
        self.wake_shard();
        Ok(())
    }

    /// Queues a partition queue's notice (its first batch the shard does not know of) behind
    /// everything pushed before it. With `now`, or `linger.ms` 0, it wakes a parked shard;
    /// else only if the shard's own timer fires after the new batch's linger has run out (the
    /// first notice of a burst decides; a later one finds the shard woken or timed already).
    #[allow(clippy::result_large_err)]
    pub(crate) fn push_notice(&self, command: ShardCommand, now: bool) -> Result<(), ShardCommand> {
        let wake = {
            let mut queue = self.queue.lock().expect("inbox lock");
            if queue.closed {
                return Err(command);
            }
            queue.commands.push_back(command);
            let first = queue.commands.len() == 1;
            if first {
                queue.oldest_us = self.arrival_us();
            }
            if now {
                Wake::Now
            } else if first {
                Wake::Unless(queue.oldest_us)
            } else {
                Wake::No
            }
        };
        match wake {
            Wake::No => {}
            Wake::Now => self.wake_shard(),
            Wake::Unless(arrived) => self.wake_shard_unless_due(arrived),
        }
        Ok(())
    }

    /// The arrival time of a burst's first command, read only when records may wait.
    fn arrival_us(&self) -> u64 {
        if self.wake.linger_us == 0 {
            NOT_TIMED
        } else {
            self.now_us()
        }
    }

    /// Queues the shard's last command and closes the inbox behind it; false when it was
    /// already closed.
    pub(crate) fn push_last(&self, command: ShardCommand) -> bool {
        {
            let mut queue = self.queue.lock().expect("inbox lock");
            if queue.closed {
                return false;
            }
            queue.closed = true;
            queue.commands.push_back(command);
        }
        self.wake_shard();
        true
    }

    /// Wakes the shard for something that is not a command (a peer published to the ticket
    /// ring, before this): one wake if it sleeps, else its next park returns at once.
    pub(crate) fn nudge(&self) {
        // Raised before the fence in `wake_shard`, which pairs with the one in `Parked::poll`:
        // either the park sees `nudged` after raising `parked`, or this sees `parked` raised
        // and wakes it. Release: the shard that takes the nudge reads the ring after it, and
        // sees what was published before it. A swap rather than a store, for loom, as the
        // park's raise of `parked`: it orders this raise after the shard's last take.
        self.nudged.swap(true, Ordering::Release);
        self.wake_shard();
    }

    /// Wakes the parked shard unless its own timer fires within the linger of a record that
    /// arrived at `arrived`.
    fn wake_shard_unless_due(&self, arrived: u64) {
        // Pairs with the fence in `Parked::poll`, as in `wake_shard`: a shard that is not seen
        // parked here sees the record before it parks.
        fence(Ordering::SeqCst);
        if arrived != NOT_TIMED {
            if !self.parked.load(Ordering::Acquire) {
                return;
            }
            let until = self.parked_until.load(Ordering::Acquire);
            if until <= arrived.saturating_add(self.wake.linger_us) {
                return;
            }
        }
        self.wake_if_parked();
    }

    fn wake_shard(&self) {
        // Pairs with the fence in `Parked::poll`: either the shard sees the pushed command
        // when it looks again after raising `parked`, or this sees `parked` raised.
        fence(Ordering::SeqCst);
        self.wake_if_parked();
    }

    /// Wakes the shard if it is parked; the caller has fenced after its push.
    fn wake_if_parked(&self) {
        if self.parked.swap(false, Ordering::AcqRel) {
            if let Some(waker) = self.waker.lock().expect("inbox waker lock").take() {
                waker.wake();
            }
        }
    }

    /// The shard's side: moves everything queued into `into` (which must be empty) in one
    /// swap, keeping both allocations. Returns when the oldest of them arrived (µs since
    /// [`epoch`](Self::epoch)), if arrivals are timed and anything was queued.
    pub(crate) fn take_all(&self, into: &mut VecDeque<ShardCommand>) -> Option<u64> {
        debug_assert!(into.is_empty());
        let oldest = {
            let mut queue = self.queue.lock().expect("inbox lock");
            std::mem::swap(&mut queue.commands, into);
            std::mem::replace(&mut queue.oldest_us, NOT_TIMED)
        };
        let oldest = (oldest != NOT_TIMED && !into.is_empty()).then_some(oldest);
        // Only the shard takes, so a relaxed counter is enough.
        let capacity = into.capacity();
        if capacity <= RETAINED_CAPACITY {
            return oldest;
        }
        if into.len() >= capacity / 8 {
            self.sparse_takes.store(0, Ordering::Relaxed);
            return oldest;
        }
        let sparse = self.sparse_takes.load(Ordering::Relaxed) + 1;
        if sparse < SPARSE_TAKES_BEFORE_SHRINK {
            self.sparse_takes.store(sparse, Ordering::Relaxed);
        } else {
            // Few commands to move: the deque is mostly empty.
            into.shrink_to(RETAINED_CAPACITY);
            self.sparse_takes.store(0, Ordering::Relaxed);
        }
        oldest
    }

    /// Closes the inbox without a last command (the shard stopped on its own) and hands back
    /// what is still queued, to be answered.
    pub(crate) fn close(&self) -> VecDeque<ShardCommand> {
        let mut queue = self.queue.lock().expect("inbox lock");
        queue.closed = true;
        std::mem::take(&mut queue.commands)
    }

    /// Resolves once something is queued or [`nudge`](Self::nudge) was called since the last
    /// park ended (at once if that was before this one). The shard's only way to sleep on its
    /// inbox, and it reads the ticket ring after every park. `until`: when the shard wakes on
    /// its own (µs since [`epoch`](Self::epoch)); a record whose linger runs out after that
    /// does not wake it (see [`WakePolicy`]).
    pub(crate) fn parked(&self, until: u64) -> Parked<'_> {
        Parked {
            inbox: self,
            armed: false,
            until,
        }
    }

    fn has_commands(&self) -> bool {
        !self.queue.lock().expect("inbox lock").commands.is_empty()
    }
}

/// The shard asleep on its inbox. Invariants: while an armed `Parked` lives and has not
/// resolved, `parked` is true unless a push or nudge cleared it to wake the shard. No push or
/// nudge is lost to a park: the caller stores (the command, under the queue's lock, or
/// `nudged`), fences, then swaps `parked`; the park raises `parked`, fences, then looks at the
/// queue and `nudged`. Both fences are SeqCst, so at least one side sees the other's store:
/// the park returns, or the caller wakes it.
pub(crate) struct Parked<'a> {
    inbox: &'a ShardInbox,
    armed: bool,
    until: u64,
}

impl Future for Parked<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inbox = self.inbox;
        {
            let mut waker = inbox.waker.lock().expect("inbox waker lock");
            match waker.as_mut() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
        }
        if self.armed {
            // Polled again: a waker cleared `parked` (ready), or another future of the
            // shard's select woke the task (look at the queue once more).
            if !inbox.parked.load(Ordering::Acquire) {
                self.armed = false;
                // The shard reads the ring next, which covers a nudge that woke it. A swap,
                // not a store: a nudge it takes synchronizes with it (Acquire), so that read
                // sees the ticket; one raised after stays raised.
                inbox.nudged.swap(false, Ordering::Acquire);
                return Poll::Ready(());
            }
        } else {
            self.armed = true;
            // Before `parked` is raised: a caller that sees it raised reads this deadline.
            inbox.parked_until.store(self.until, Ordering::Relaxed);
            // A swap, not a store (the same cost, once per park). The memory model orders a
            // plain store as well: a push's late swap that read `false` from before this park
            // is ordered before this raise, and a push that happens after the raise reads it.
            // loom's model of read-modify-writes leaves such a late swap and a plain store
            // unordered, and reports a lost wake that cannot happen (a later push's swap
            // reading the late swap's `false`); a swap reads the latest value, which puts the
            // raise in order for loom too.
            inbox.parked.swap(true, Ordering::SeqCst);
        }
        // Pairs with the fence in `wake_shard`: either this sees a command pushed (or a nudge
        // raised) before the raise above, or that push (nudge) sees `parked` raised and wakes
        // us.
        fence(Ordering::SeqCst);
        let nudged = inbox.nudged.swap(false, Ordering::Acquire);
        if nudged || inbox.has_commands() {
            self.armed = false;
            inbox.parked.store(false, Ordering::Release);
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Parked<'_> {
    /// The shard woke for something else: pushes need not wake it until it parks again.
    fn drop(&mut self) {
        if self.armed {
            self.inbox.parked.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use super::*;

    /// Counts the wakes of a parked shard.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Parks the shard's side of `inbox` until `until_in` µs from now and polls once. The
    /// shard stays parked while the returned future lives; the counter says how often pushes
    /// woke it.
    fn parked_for(inbox: &ShardInbox, until_in: u64) -> (Pin<Box<Parked<'_>>>, Arc<Wakes>) {
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut parked = Box::pin(inbox.parked(inbox.now_us() + until_in));
        let polled = parked.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending(), "nothing is queued yet");
        (parked, wakes)
    }

    const LINGER_5_MS: WakePolicy = WakePolicy { linger_us: 5_000 };

    /// A lazy notice (a new batch lingering), stood for by a command of the same weight.
    fn notice(inbox: &ShardInbox, topic: &Arc<str>) {
        let command = ShardCommand::RequestTopic(topic.clone());
        assert!(inbox.push_notice(command, false).is_ok());
    }

    #[test]
    fn a_notice_lingering_past_the_shards_own_timer_does_not_wake_it_and_is_taken_as_of_its_arrival(
    ) {
        let inbox = ShardInbox::new(LINGER_5_MS);
        let topic: Arc<str> = Arc::from("t");
        let before = inbox.now_us();
        let (_parked, wakes) = parked_for(&inbox, 1_000);
        notice(&inbox, &topic);
        notice(&inbox, &topic);
        assert_eq!(
            wakes.count(),
            0,
            "the shard's timer fires within the linger"
        );
        let mut local = VecDeque::new();
        let arrived = inbox.take_all(&mut local).expect("timed arrival");
        assert_eq!(local.len(), 2);
        assert!(arrived >= before && arrived <= inbox.now_us());
        local.clear();
        assert_eq!(inbox.take_all(&mut local), None, "nothing left");
    }

    #[test]
    fn a_burst_is_timed_from_its_first_command_on_the_inbox_clock() {
        let inbox = ShardInbox::new(LINGER_5_MS);
        let topic: Arc<str> = Arc::from("t");
        // Let the inbox's clock move off its start, so a time not read from it shows.
        while inbox.epoch().elapsed() < std::time::Duration::from_millis(2) {
            std::hint::spin_loop();
        }
        let mut local = VecDeque::new();
        for first_is_a_notice in [true, false] {
            let before = inbox.epoch().elapsed().as_micros() as u64;
            if first_is_a_notice {
                notice(&inbox, &topic);
            } else {
                assert!(inbox
                    .push(ShardCommand::RequestTopic(topic.clone()))
                    .is_ok());
            }
            notice(&inbox, &topic);
            let after = inbox.epoch().elapsed().as_micros() as u64;
            let arrived = inbox.take_all(&mut local).expect("timed arrival");
            assert!(
                (before..=after).contains(&arrived),
                "{arrived} µs not within the push's {before}..={after} µs"
            );
            local.clear();
        }
    }

    #[test]
    fn a_notice_whose_linger_ends_before_the_shards_timer_wakes_it() {
        let inbox = ShardInbox::new(LINGER_5_MS);
        let topic: Arc<str> = Arc::from("t");
        let (_parked, wakes) = parked_for(&inbox, 60_000_000);
        notice(&inbox, &topic);
        assert_eq!(wakes.count(), 1);
    }

    #[test]
    fn a_command_behind_lingering_notices_wakes_the_shard() {
        let inbox = ShardInbox::new(LINGER_5_MS);
        let topic: Arc<str> = Arc::from("t");
        let (_parked, wakes) = parked_for(&inbox, 1_000);
        notice(&inbox, &topic);
        assert_eq!(wakes.count(), 0);
        assert!(inbox
            .push(ShardCommand::RequestTopic(topic.clone()))
            .is_ok());
        assert_eq!(wakes.count(), 1);
    }

    #[test]
    fn without_linger_the_first_notice_of_a_burst_wakes_the_shard_and_arrivals_are_not_timed() {
        let inbox = ShardInbox::new(WakePolicy::EAGER);
        let topic: Arc<str> = Arc::from("t");
        let (_parked, wakes) = parked_for(&inbox, 1_000);
        notice(&inbox, &topic);
        notice(&inbox, &topic);
        assert_eq!(wakes.count(), 1);
        let mut local = VecDeque::new();
        assert_eq!(inbox.take_all(&mut local), None);
        assert_eq!(local.len(), 2);
    }

    #[test]
    fn a_nudge_between_the_shards_last_look_at_the_ring_and_its_park_wakes_the_park() {
        let inbox = ShardInbox::default();
        // The shard has read the ring and found nothing; a peer publishes and nudges before
        // the shard raises `parked`, so the nudge finds nobody to wake.
        inbox.nudge();
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(wakes.clone());
        let mut parked = Box::pin(inbox.parked(inbox.now_us() + 1_000));
        assert!(
            parked
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready(),
            "the park returns at once, for the shard to read the ring again"
        );
        drop(parked);
        // That park took the nudge: the next one sleeps until something comes, and a nudge
        // then wakes it.
        let (_parked, wakes) = parked_for(&inbox, 1_000);
        inbox.nudge();
        assert_eq!(wakes.count(), 1);
    }

    fn burst(inbox: &ShardInbox, topic: &Arc<str>, n: usize) {
        for _ in 0..n {
            assert!(inbox
                .push(ShardCommand::RequestTopic(topic.clone()))
                .is_ok());
        }
    }

    #[test]
    fn deques_grown_under_sustained_load_keep_their_capacity_and_shrink_after_a_sparse_spell() {
        let inbox = ShardInbox::default();
        let topic: Arc<str> = Arc::from("t");
        let mut local = VecDeque::new();
        let big = 4 * RETAINED_CAPACITY;
        for _ in 0..2 * SPARSE_TAKES_BEFORE_SHRINK {
            burst(&inbox, &topic, big);
            inbox.take_all(&mut local);
            assert_eq!(local.len(), big);
            local.clear();
        }
        let both = |local: &VecDeque<ShardCommand>| {
            let queued = inbox.queue.lock().unwrap().commands.capacity();
            (local.capacity(), queued)
        };
        let (a, b) = both(&local);
        assert!(
            a >= big && b >= big,
            "sustained load keeps both deques grown"
        );
        // The two deques take turns; each shrinks after its own sparse takes.
        for _ in 0..3 * SPARSE_TAKES_BEFORE_SHRINK {
            burst(&inbox, &topic, 1);
            inbox.take_all(&mut local);
            local.clear();
        }
        let (a, b) = both(&local);
        assert!(
            a < big && b < big,
            "a sparse spell shrinks both deques ({a}, {b})"
        );
    }
}

/// Model checks of the hand-off between a shard and the threads that push to it or nudge it
/// (built with `--cfg loom`, see `crate::sync`): every interleaving, up to a bound on
/// preemptions, of the real inbox and ticket ring. The shard's park has no timer here, so a
/// lost wake is a deadlock loom reports; in the shard, `MAX_PARK` would hide it as up to 50 ms
/// of latency.
#[cfg(all(test, loom))]
mod loom_tests {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::runtime::ticket_ring::{Ticket, TicketRing};
    use crate::sync::check;

    fn command() -> ShardCommand {
        ShardCommand::RequestTopic(std::sync::Arc::from("t"))
    }

    /// A peer shard: publishes a ticket, then nudges this shard to read it.
    fn publish_and_nudge(
        inbox: &Arc<ShardInbox>,
        ring: &Arc<TicketRing>,
    ) -> thread::JoinHandle<()> {
        let (inbox, ring) = (inbox.clone(), ring.clone());
        thread::spawn(move || {
            ring.publish(TICKET).expect("room");
            inbox.nudge();
        })
    }

    const TICKET: Ticket = Ticket::Bump {
        producer_id: 1,
        epoch: 0,
    };

    /// A shard's loop as far as the inbox and the ring go: take what is queued, read the ring,
    /// park when it has not had everything yet. With `cut_short`, its first park ends before
    /// anything wakes it (another future of the shard's select won, say its timer): polled
    /// once, then dropped.
    fn shard(
        inbox: &ShardInbox,
        ring: &TicketRing,
        commands: usize,
        tickets: usize,
        cut_short: bool,
    ) {
        let mut local = VecDeque::new();
        let (mut taken, mut read) = (0, 0);
        let mut cut_short = cut_short;
        loop {
            inbox.take_all(&mut local);
            taken += local.len();
            local.clear();
            while ring.next(0).is_some() {
                read += 1;
            }
            if taken == commands && read == tickets {
                return;
            }
            if std::mem::take(&mut cut_short) {
                let mut parked = pin!(inbox.parked(0));
                let _ = parked
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()));
            } else {
                loom::future::block_on(inbox.parked(0));
            }
        }
    }

    fn setup() -> (Arc<ShardInbox>, Arc<TicketRing>) {
        (
            Arc::new(ShardInbox::new(WakePolicy::EAGER)),
            Arc::new(TicketRing::new(2, 1)),
        )
    }

    /// A command or record pushed while the shard goes to sleep is taken: either the shard's
    /// look after raising `parked` sees it, or the push sees `parked` and wakes it.
    #[test]
    fn loom_a_pushed_command_or_record_is_never_stranded() {
        check(|| {
            let (inbox, ring) = setup();
            let pusher = {
                let inbox = inbox.clone();
                thread::spawn(move || assert!(inbox.push(command()).is_ok()))
            };
            let recorder = {
                let inbox = inbox.clone();
                thread::spawn(move || assert!(inbox.push_notice(command(), false).is_ok()))
            };
            shard(&inbox, &ring, 2, 0, false);
            pusher.join().unwrap();
            recorder.join().unwrap();
        });
    }

    /// A push racing a park that ends without it (the shard woke for something else) is
    /// taken on the shard's next look or wakes its next park.
    #[test]
    fn loom_a_push_racing_a_park_cut_short_is_not_stranded() {
        check(|| {
            let (inbox, ring) = setup();
            let pusher = {
                let inbox = inbox.clone();
                thread::spawn(move || assert!(inbox.push(command()).is_ok()))
            };
            shard(&inbox, &ring, 1, 0, true);
            pusher.join().unwrap();
        });
    }

    /// A peer publishes a ticket and nudges the shard, with no command: the shard reads the
    /// ticket, however the nudge falls between its last look at the ring and its park.
    #[test]
    fn loom_a_nudge_after_the_shards_last_look_at_the_ring_wakes_it() {
        check(|| {
            let (inbox, ring) = setup();
            let peer = publish_and_nudge(&inbox, &ring);
            shard(&inbox, &ring, 0, 1, false);
            peer.join().unwrap();
        });
    }

    /// A nudge and a push together, with a park cut short: the shard gets both.
    #[test]
    fn loom_a_nudge_and_a_push_racing_a_park_both_reach_the_shard() {
        check(|| {
            let (inbox, ring) = setup();
            let peer = publish_and_nudge(&inbox, &ring);
            let pusher = {
                let inbox = inbox.clone();
                thread::spawn(move || assert!(inbox.push(command()).is_ok()))
            };
            shard(&inbox, &ring, 1, 1, true);
            peer.join().unwrap();
            pusher.join().unwrap();
        });
    }
}
