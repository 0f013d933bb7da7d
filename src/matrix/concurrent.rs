//! Owns what the lanes of a run share while they run at the same time: the one
//! kernel log, read by whoever asks and handed to each device's tests from the moment the
//! first started ([`KmsgHub`], [`Window`]); the gate that lets a CPU-bound cell run alone
//! ([`Gate`]); and who ran beside whom ([`Overlap`]). With one lane (`schedule: serial`) they
//! reduce to the serial run's behaviour: each cell sees the kernel lines logged since the
//! cell before it ended, and nothing waits.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::events::KmsgRecord;

use super::env::KernelLog;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A lane that panicked has already lost its cell; the others keep the shared state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel log shared by the running cells. `/dev/kmsg` has one reader position per open
/// file, and records read are gone: each cell draining it itself would take lines from the
/// cell beside it. Here the records read are kept until every window that was open when
/// they were logged has taken them.
pub struct KmsgHub<'a> {
    state: Mutex<HubState<'a>>,
}

struct HubState<'a> {
    log: Result<Box<dyn KernelLog + 'a>, String>,
    /// Records read and not yet taken by every open window.
    buf: Vec<KmsgRecord>,
    /// The position of `buf[0]` in the run's stream of records.
    base: usize,
    /// Reads of the log so far.
    reads: u64,
    /// The reads that failed (their number, and why) that an open window has not yet been
    /// told of: records may be missing from every window open then.
    failed: Vec<(u64, String)>,
    /// Where each open window takes from next.
    open: Vec<Mark>,
}

/// A window's place: the position in the stream of records it takes from next, and the last
/// read whose failure it has been told of.
#[derive(Clone, Copy, PartialEq)]
struct Mark {
    pos: usize,
    read: u64,
}

impl HubState<'_> {
    fn pull(&mut self) {
        if let Ok(log) = &mut self.log {
            self.reads += 1;
            match log.drain() {
                Ok(recs) => self.buf.extend(recs),
                Err(e) => self.failed.push((self.reads, e.to_string())),
            }
        }
    }

    /// Where a window opened or taken from now stands.
    fn now(&self) -> Mark {
        Mark {
            pos: self.base + self.buf.len(),
            read: self.reads,
        }
    }

    /// Forgets the records and failures no open window still needs.
    fn trim(&mut self) {
        let now = self.now();
        let keep_from = self.open.iter().map(|m| m.pos).min().unwrap_or(now.pos);
        let drop = keep_from.saturating_sub(self.base).min(self.buf.len());
        self.buf.drain(..drop);
        self.base += drop;
        let told = self.open.iter().map(|m| m.read).min().unwrap_or(now.read);
        self.failed.retain(|(n, _)| *n > told);
    }
}

impl<'a> KmsgHub<'a> {
    /// `log`: the kernel log, or why it cannot be read (then no cell gets lines or errors:
    /// the report's warnings say it once).
    pub fn new(log: Result<Box<dyn KernelLog + 'a>, String>) -> KmsgHub<'a> {
        KmsgHub {
            state: Mutex::new(HubState {
                log,
                buf: Vec::new(),
                base: 0,
                reads: 0,
                failed: Vec::new(),
                open: Vec::new(),
            }),
        }
    }

    /// A device's tests start: records logged before now belong to none of them. The window
    /// stays open until it is dropped; a failure of the read that opens it is its first
    /// take's to say.
    pub fn open(&self) -> Window<'_, 'a> {
        let mut s = lock(&self.state);
        let read = s.reads;
        s.pull();
        let at = Mark {
            pos: s.now().pos,
            read,
        };
        s.open.push(at);
        s.trim();
        Window { hub: self, at }
    }
}

/// A device's place in the kernel log, from its first test to its last. Each take hands
/// over every record logged since the one before, so a line logged between two tests (while
/// the next test file is made, or just after a test ended, as a filesystem's error often is)
/// goes to the next test instead of to none.
pub struct Window<'h, 'a> {
    hub: &'h KmsgHub<'a>,
    at: Mark,
}

impl Window<'_, '_> {
    /// Every record logged since the previous take (other devices' lines among them:
    /// attribution picks its own), and why the log could not be read meanwhile, if a read
    /// failed while this window was open (whoever's read it was): the records read around
    /// it are still handed over.
    pub fn take(&mut self) -> (Vec<KmsgRecord>, Option<String>) {
        let mut s = lock(&self.hub.state);
        s.pull();
        let from = self.at.pos.saturating_sub(s.base).min(s.buf.len());
        let out = s.buf[from..].to_vec();
        let mut why: Vec<&str> = Vec::new();
        for (_, e) in s.failed.iter().filter(|(n, _)| *n > self.at.read) {
            if !why.contains(&e.as_str()) {
                why.push(e);
            }
        }
        let error = (!why.is_empty()).then(|| why.join("; "));
        let now = s.now();
        if let Some(m) = s.open.iter_mut().find(|m| **m == self.at) {
            *m = now;
        }
        self.at = now;
        s.trim();
        (out, error)
    }
}

impl Drop for Window<'_, '_> {
    fn drop(&mut self) {
        let mut s = lock(&self.hub.state);
        if let Some(i) = s.open.iter().position(|m| *m == self.at) {
            s.open.swap_remove(i);
        }
        s.trim();
    }
}

/// How a cell asks the [`Gate`] to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Entry {
    /// Beside any others: the device, not the CPU, is its limit.
    Free,
    /// Beside others while the CPU the running cells are predicted to take, this one's
    /// included, stays within the gate's capacity (in % of one CPU).
    Budget(f64),
    /// With nobody else.
    Exclusive,
}

/// Lets cells run together, within a CPU budget, or one alone. A waiting exclusive holder
/// keeps new ones out, so a CPU-bound cell is not starved by lanes that keep starting
/// device-bound cells; budget cells that wait get their turn in the order they came, so a
/// large one is not overtaken for good by small ones. A waiting cell decides again each time
/// a cell leaves: the run may have measured what it needed meanwhile.
#[derive(Default)]
pub struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Default)]
struct GateState {
    shared: usize,
    exclusive: bool,
    waiting_exclusive: usize,
    /// The tickets of the budget cells waiting for room, oldest first: the oldest runs
    /// first, and new budget cells wait behind them all.
    waiting_budget: BTreeSet<u64>,
    next_ticket: u64,
    /// The budget the shared holders take, in % of one CPU.
    used: f64,
    /// Counts the holders that left and the waiters that stopped holding others back: a
    /// waiter decides again when it moved.
    left: u64,
    /// How many times a caller went to sleep waiting: tests order their threads by it.
    #[cfg(test)]
    sleeps: u64,
}

/// Held while a cell runs; lets the others go when dropped.
pub struct GateGuard<'g> {
    gate: &'g Gate,
    entry: Entry,
}

impl Gate {
    pub fn exclusive(&self) -> GateGuard<'_> {
        self.enter(0.0, || Entry::Exclusive).0
    }

    /// Waits until the cell `decide` describes may run, asking it again whenever a holder
    /// leaves (never while the gate's lock is held: it may read the report). `capacity`: the
    /// budget of [`Entry::Budget`] cells together. Returns the guard and the entry it ran by.
    pub fn enter(
        &self,
        capacity: f64,
        mut decide: impl FnMut() -> Entry,
    ) -> (GateGuard<'_>, Entry) {
        // What this caller is counted as while it waits: an exclusive waiter keeps every new
        // cell out; a budget waiter keeps new budget cells out (they could keep it out for
        // good, taking turns under the capacity). Kept across a decision asked again, so the
        // caller keeps its place in line.
        let (mut waiting_x, mut waiting_b) = (false, None::<u64>);
        loop {
            let seen = lock(&self.state).left;
            let entry = decide();
            let mut s = lock(&self.state);
            if s.left != seen {
                continue;
            }
            let others_x = s.waiting_exclusive - usize::from(waiting_x);
            // A budget cell's turn: nobody waits for the budget, or it is the oldest waiter.
            let budget_turn =
                s.waiting_budget.first().copied() == waiting_b || s.waiting_budget.is_empty();
            let open = !s.exclusive && others_x == 0;
            let fits = match entry {
                Entry::Exclusive => !s.exclusive && s.shared == 0,
                Entry::Free => open,
                // Alone, a cell fits whatever its prediction: it is never kept out for good.
                Entry::Budget(c) => {
                    open && budget_turn && (s.shared == 0 || s.used + c <= capacity)
                }
            };
            let was_waiting = waiting_x || waiting_b.is_some();
            if waiting_x && (fits || entry != Entry::Exclusive) {
                s.waiting_exclusive -= 1;
                waiting_x = false;
            }
            if let Some(t) = waiting_b {
                if fits || !matches!(entry, Entry::Budget(_)) {
                    s.waiting_budget.remove(&t);
                    waiting_b = None;
                }
            }
            if was_waiting && !(waiting_x || waiting_b.is_some()) && !fits {
                // It no longer keeps anyone out: those it held back look again.
                s.left += 1;
                self.cv.notify_all();
                continue;
            }
            if fits {
                match entry {
                    Entry::Exclusive => s.exclusive = true,
                    Entry::Free => s.shared += 1,
                    Entry::Budget(c) => {
                        s.shared += 1;
                        s.used += c;
                    }
                }
                if was_waiting {
                    s.left += 1;
                    self.cv.notify_all();
                }
                return (GateGuard { gate: self, entry }, entry);
            }
            match entry {
                Entry::Exclusive if !waiting_x => {
                    s.waiting_exclusive += 1;
                    waiting_x = true;
                }
                Entry::Budget(_) if waiting_b.is_none() => {
                    let t = s.next_ticket;
                    s.next_ticket += 1;
                    s.waiting_budget.insert(t);
                    waiting_b = Some(t);
                }
                _ => {}
            }
            let seen = s.left;
            #[cfg(test)]
            {
                s.sleeps += 1;
            }
            while s.left == seen {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.gate.state);
        match self.entry {
            Entry::Exclusive => s.exclusive = false,
            Entry::Free => s.shared -= 1,
            Entry::Budget(c) => {
                s.shared -= 1;
                s.used = if s.shared == 0 {
                    0.0
                } else {
                    (s.used - c).max(0.0)
                };
            }
        }
        s.left += 1;
        drop(s);
        self.gate.cv.notify_all();
    }
}

/// Which devices' cells ran while each running cell did.
#[derive(Default)]
pub struct Overlap {
    running: Mutex<Vec<Running>>,
    next: AtomicU64,
}

struct Running {
    id: u64,
    device: String,
    beside: BTreeSet<String>,
}

/// A running cell's entry in [`Overlap`].
#[derive(Debug)]
pub struct Ticket(u64);

impl Overlap {
    pub fn start(&self, device: &str) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut r = lock(&self.running);
        let mut beside = BTreeSet::new();
        for other in r.iter_mut() {
            if other.device != device {
                other.beside.insert(device.to_string());
                beside.insert(other.device.clone());
            }
        }
        r.push(Running {
            id,
            device: device.to_string(),
            beside,
        });
        Ticket(id)
    }

    /// The devices whose cells ran while this one did, in name order.
    pub fn finish(&self, t: Ticket) -> Vec<String> {
        let mut r = lock(&self.running);
        match r.iter().position(|x| x.id == t.0) {
            Some(i) => r.swap_remove(i).beside.into_iter().collect(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventsError;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    /// A kernel log whose next drain returns the lines pushed since.
    struct Fed(Arc<Mutex<Vec<KmsgRecord>>>);

    impl KernelLog for Fed {
        fn drain(&mut self) -> Result<Vec<KmsgRecord>, EventsError> {
            Ok(std::mem::take(&mut *lock(&self.0)))
        }
    }

    fn rec(seq: u64, msg: &str) -> KmsgRecord {
        KmsgRecord {
            seq,
            ts_usec: seq * 1000,
            level: 3,
            facility: 0,
            message: msg.to_string(),
            subsystem: None,
            device: None,
            lost_before: 0,
        }
    }

    /// Waits (up to a minute, for a slow emulated CPU) until the gate counts this many
    /// exclusive and budget waiters: a test orders its threads by the gate's own state, not
    /// by sleeping and hoping the other thread got there.
    fn until_waiting(gate: &Gate, exclusive: usize, budget: usize) {
        let end = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let s = lock(&gate.state);
            let now = (s.waiting_exclusive, s.waiting_budget.len());
            if now == (exclusive, budget) {
                return;
            }
            drop(s);
            assert!(
                std::time::Instant::now() < end,
                "waiters {now:?}, expected {:?}",
                (exclusive, budget)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits (up to a minute) until callers have gone to sleep in the gate `n` times in all.
    fn until_slept(gate: &Gate, n: u64) {
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while lock(&gate.state).sleeps < n {
            assert!(std::time::Instant::now() < end, "fewer than {n} sleeps");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn msgs(r: &[KmsgRecord]) -> Vec<&str> {
        r.iter().map(|r| r.message.as_str()).collect()
    }

    #[test]
    fn each_device_gets_every_line_logged_while_its_window_was_open() {
        let feed = Arc::new(Mutex::new(vec![rec(1, "before anything")]));
        let hub = KmsgHub::new(Ok(Box::new(Fed(feed.clone()))));
        let mut a = hub.open();
        lock(&feed).push(rec(2, "during a"));
        let mut b = hub.open();
        lock(&feed).push(rec(3, "during a and b"));
        let (got, err) = a.take();
        assert!(err.is_none());
        assert_eq!(
            msgs(&got),
            ["during a", "during a and b"],
            "a sees what was logged from its start, not before"
        );
        lock(&feed).push(rec(4, "between a's tests, during b"));
        assert_eq!(
            msgs(&b.take().0),
            ["during a and b", "between a's tests, during b"]
        );
        drop(b);
        // A line logged after a's test ended and before the next one began goes to the next.
        assert_eq!(msgs(&a.take().0), ["between a's tests, during b"]);
        assert!(a.take().0.is_empty(), "a take hands a record over once");
        drop(a);
        // Nobody is running: everything read is forgotten.
        let mut c = hub.open();
        assert!(c.take().0.is_empty());
        drop(c);
        assert!(lock(&hub.state).buf.is_empty());
        assert!(lock(&hub.state).open.is_empty());
    }

    /// A kernel log that fails on its second read.
    struct FailsOnce(usize);

    impl KernelLog for FailsOnce {
        fn drain(&mut self) -> Result<Vec<KmsgRecord>, EventsError> {
            self.0 += 1;
            if self.0 == 2 {
                return Err(EventsError::Read {
                    path: "/dev/kmsg".into(),
                    source: std::io::Error::from_raw_os_error(libc::EIO),
                });
            }
            Ok(vec![rec(self.0 as u64, &format!("read {}", self.0))])
        }
    }

    #[test]
    fn a_failed_read_is_said_once_to_every_window_open_then_and_keeps_what_was_read() {
        let hub = KmsgHub::new(Ok(Box::new(FailsOnce(0))));
        let mut a = hub.open();
        let mut b = hub.open();
        // The second read (b's opening) failed: b's first take says so, with what the third
        // read brought.
        let (got, err) = b.take();
        assert!(err.is_some());
        assert_eq!(msgs(&got), ["read 3"]);
        // a was open when it failed: its lines may be missing too.
        let (got, err) = a.take();
        assert!(err.is_some(), "a was open when the read failed");
        assert_eq!(msgs(&got), ["read 3", "read 4"], "all since a opened");
        let (got, err) = b.take();
        assert!(err.is_none(), "said once: {err:?}");
        assert_eq!(msgs(&got), ["read 4", "read 5"]);
        assert!(a.take().1.is_none(), "said once");
        // A window opened after the failure is not told of it, and nobody keeps it.
        let mut c = hub.open();
        assert!(c.take().1.is_none());
        assert!(lock(&hub.state).failed.is_empty());
    }

    #[test]
    fn an_unreadable_log_gives_no_lines_and_no_error_per_cell() {
        let hub = KmsgHub::new(Err("/dev/kmsg: Permission denied".into()));
        let mut c = hub.open();
        let (got, err) = c.take();
        assert!(got.is_empty() && err.is_none());
    }

    #[test]
    fn an_exclusive_holder_runs_alone_and_shared_ones_together() {
        let gate = Gate::default();
        let order = Mutex::new(Vec::new());
        // Two free holders are inside at once.
        let one = gate.enter(0.0, || Entry::Free).0;
        let two = gate.enter(0.0, || Entry::Free).0;
        std::thread::scope(|s| {
            let (gate, order) = (&gate, &order);
            s.spawn(move || {
                let _g = gate.exclusive();
                lock(order).push("exclusive");
                std::thread::sleep(Duration::from_millis(20));
                lock(order).push("exclusive left");
            });
            until_waiting(gate, 1, 0);
            until_slept(gate, 1);
            // A waiting exclusive holder keeps a new free one out, until it has run alone.
            s.spawn(move || {
                let _g = gate.enter(0.0, || Entry::Free).0;
                lock(order).push("free");
            });
            // Both asleep, neither inside.
            until_slept(gate, 2);
            assert!(lock(order).is_empty(), "{:?}", lock(order));
            // One holder left: both wake, decide again, and sleep again (a second free holder
            // is still inside).
            drop(one);
            until_slept(gate, 4);
            assert!(lock(order).is_empty(), "{:?}", lock(order));
            drop(two);
        });
        assert_eq!(*lock(&order), ["exclusive", "exclusive left", "free"]);
    }

    #[test]
    fn budget_holders_run_together_only_within_the_capacity() {
        let gate = Gate::default();
        let inside = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..6 {
                let (gate, inside, most) = (&gate, &inside, &most);
                s.spawn(move || {
                    // 40 % each under 100 %: two at a time, never three.
                    let (_g, e) = gate.enter(100.0, || Entry::Budget(40.0));
                    assert_eq!(e, Entry::Budget(40.0));
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    inside.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 2, "three fit in 100 %");
        // Two fit, a third waits until one leaves.
        let one = gate.enter(100.0, || Entry::Budget(40.0)).0;
        let two = gate.enter(100.0, || Entry::Budget(40.0)).0;
        let third_in = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let (gate, third_in) = (&gate, &third_in);
            s.spawn(move || {
                let _g = gate.enter(100.0, || Entry::Budget(40.0)).0;
                third_in.store(1, Ordering::SeqCst);
            });
            until_waiting(gate, 0, 1);
            assert_eq!(third_in.load(Ordering::SeqCst), 0);
            drop(one);
        });
        assert_eq!(third_in.load(Ordering::SeqCst), 1);
        drop(two);
        // Over the capacity on its own, a cell still runs: alone.
        let (_g, e) = gate.enter(100.0, || Entry::Budget(250.0));
        assert_eq!(e, Entry::Budget(250.0));
    }

    #[test]
    fn a_waiting_budget_cell_is_not_overtaken_by_smaller_ones() {
        let gate = Gate::default();
        let order = Mutex::new(Vec::new());
        let a = gate.enter(150.0, || Entry::Budget(20.0)).0;
        std::thread::scope(|s| {
            let (gate, order) = (&gate, &order);
            s.spawn(move || {
                let _g = gate.enter(150.0, || Entry::Budget(140.0)).0;
                order.lock().unwrap().push("big");
                std::thread::sleep(Duration::from_millis(50));
            });
            until_waiting(gate, 0, 1);
            s.spawn(move || {
                // 20 + 20 fits, but the big one waits first.
                let _g = gate.enter(150.0, || Entry::Budget(20.0)).0;
                order.lock().unwrap().push("small");
            });
            until_waiting(gate, 0, 2);
            assert!(
                order.lock().unwrap().is_empty(),
                "{:?}",
                order.lock().unwrap()
            );
            drop(a);
        });
        assert_eq!(*order.lock().unwrap(), ["big", "small"]);
    }

    #[test]
    fn a_waiting_cell_decides_again_when_a_holder_leaves() {
        let gate = Gate::default();
        let asked = AtomicUsize::new(0);
        let first = gate.enter(0.0, || Entry::Free).0;
        std::thread::scope(|s| {
            let (gate, asked) = (&gate, &asked);
            let t = s.spawn(move || {
                // Exclusive until something was measured (the holder left), then a budget.
                let (_g, e) = gate.enter(100.0, || {
                    if asked.fetch_add(1, Ordering::SeqCst) == 0 {
                        Entry::Exclusive
                    } else {
                        Entry::Budget(10.0)
                    }
                });
                e
            });
            until_waiting(gate, 1, 0);
            drop(first);
            assert_eq!(t.join().unwrap(), Entry::Budget(10.0));
        });
        assert!(asked.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn overlap_names_the_other_devices_only() {
        let o = Overlap::default();
        let a = o.start("sda");
        let b = o.start("sdb");
        let a2 = o.start("sda");
        assert_eq!(o.finish(b), ["sda"]);
        let c = o.start("mmcblk0");
        assert_eq!(o.finish(a), ["mmcblk0", "sdb"]);
        assert_eq!(o.finish(a2), ["mmcblk0", "sdb"]);
        assert!(o.finish(c).contains(&"sda".to_string()));
    }
}
