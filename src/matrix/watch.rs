//! Owns watching a long test from outside while it runs: the elapsed time and, where the
//! kernel counts it (the block device's `stat`), the bytes moved and the rate, so a console
//! never looks hung. The test itself runs untouched on its own thread.

use std::time::{Duration, Instant};

/// What a watcher sees at one tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    pub elapsed: Duration,
    /// Bytes read and written on the device since the start, when it has counters.
    pub moved: Option<u64>,
    /// MiB/s since the previous tick.
    pub rate_mib_s: Option<f64>,
    /// A line is due (every `line_every`): for a console without a terminal.
    pub line_due: bool,
}

/// How often a tick comes.
const TICK: Duration = Duration::from_millis(500);
/// How often the watching thread looks whether a tick is due or the test ended.
const POLL: Duration = Duration::from_millis(100);

/// Runs `f` on its own thread; every half second calls `tick` with what `counter` (the
/// device's bytes read plus written) says. `line_due` is set once per `line_every`.
pub fn watch<T: Send>(
    counter: impl Fn() -> Option<u64>,
    line_every: Duration,
    mut tick: impl FnMut(Tick),
    f: impl FnOnce() -> T + Send,
) -> T {
    std::thread::scope(|scope| {
        let handle = scope.spawn(f);
        let t0 = Instant::now();
        let mut ticker = Ticker::new(counter(), line_every);
        while !handle.is_finished() {
            std::thread::sleep(POLL);
            if let Some(t) = ticker.at(t0.elapsed(), &counter) {
                tick(t);
            }
        }
        match handle.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// The watcher's arithmetic over times given to it (since the start): [`watch`] gives the
/// monotonic clock's, tests the times they choose.
struct Ticker {
    line_every: Duration,
    /// The counter at the start.
    start: Option<u64>,
    last_line: Duration,
    /// The time and the counter of the last tick.
    last: (Duration, Option<u64>),
}

impl Ticker {
    fn new(start: Option<u64>, line_every: Duration) -> Ticker {
        Ticker {
            line_every,
            start,
            last_line: Duration::ZERO,
            last: (Duration::ZERO, start),
        }
    }

    /// The tick at `now`, when half a second has passed since the last one; `counter` is
    /// read only then.
    fn at(&mut self, now: Duration, counter: impl Fn() -> Option<u64>) -> Option<Tick> {
        let since = now.saturating_sub(self.last.0);
        if since < TICK {
            return None;
        }
        let bytes = counter();
        // The counters restart from zero when a disk comes back under the same name
        // (unplugged and replugged): never subtract past zero.
        let moved = self.start.zip(bytes).map(|(s, n)| n.saturating_sub(s));
        let rate_mib_s = self
            .last
            .1
            .zip(bytes)
            .map(|(p, n)| n.saturating_sub(p) as f64 / since.as_secs_f64() / 1048576.0);
        let line_due = now.saturating_sub(self.last_line) >= self.line_every;
        if line_due {
            self.last_line = now;
        }
        self.last = (now, bytes);
        Some(Tick {
            elapsed: now,
            moved,
            rate_mib_s,
            line_due,
        })
    }
}

impl Tick {
    /// `12 s, 340 MiB moved, 28.1 MiB/s`, or `12 s` without counters.
    pub fn words(&self) -> String {
        let s = format!("{:.0} s", self.elapsed.as_secs_f64());
        match (self.moved, self.rate_mib_s) {
            (Some(m), Some(r)) => {
                format!("{s}, {} moved, {r:.1} MiB/s", crate::units::human_bytes(m))
            }
            _ => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Times and counter readings a watcher is fed, as the watching thread would at each
    /// look: ticks come every half second, rates are over the time since the last tick, and
    /// a line is due once a second.
    #[test]
    fn ticks_report_the_bytes_moved_and_lines_come_at_their_interval() {
        let mut t = Ticker::new(Some(1000), ms(1000));
        // (time, counter): looks every 100 ms; 2 MiB/s, then nothing, then a replug.
        let looks = [
            (100, 1000 + MIB / 5),
            (400, 1000 + MIB * 4 / 5),
            (500, 1000 + MIB),
            (900, 1000 + MIB * 9 / 5),
            (1000, 1000 + MIB * 2),
            (1500, 1000 + MIB * 2),
            (2000, 4096),
        ];
        let got: Vec<(u64, Tick)> = looks
            .iter()
            .filter_map(|&(at, c)| t.at(ms(at), || Some(c)).map(|tick| (at, tick)))
            .collect();
        let at: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(at, [500, 1000, 1500, 2000], "a tick each half second");
        let ticks: Vec<Tick> = got.into_iter().map(|g| g.1).collect();
        let rates: Vec<f64> = ticks.iter().map(|t| t.rate_mib_s.unwrap()).collect();
        assert_eq!(
            rates,
            [2.0, 2.0, 0.0, 0.0],
            "the replug never gives a negative rate"
        );
        let moved: Vec<u64> = ticks.iter().map(|t| t.moved.unwrap()).collect();
        assert_eq!(moved, [MIB, 2 * MIB, 2 * MIB, 3096]);
        let lines: Vec<bool> = ticks.iter().map(|t| t.line_due).collect();
        assert_eq!(lines, [false, true, false, true]);
        assert_eq!(ticks[1].elapsed, ms(1000));
        assert_eq!(ticks[1].words(), "1 s, 2.00 MiB moved, 2.0 MiB/s");
    }

    #[test]
    fn without_counters_only_the_time() {
        let mut t = Ticker::new(None, Duration::from_secs(10));
        let tick = t.at(ms(700), || None).unwrap();
        assert_eq!(tick.moved, None);
        assert!(!tick.line_due);
        assert_eq!(tick.words(), "1 s");
    }

    /// The thread that runs the test hands back its value, and its panic.
    #[test]
    fn the_watched_test_returns_its_value_and_its_panic() {
        assert_eq!(watch(|| None, ms(1000), |_| (), || 7), 7);
        let p = std::panic::catch_unwind(|| watch(|| None, ms(1000), |_| (), || panic!("gone")));
        assert!(p.is_err());
    }
}
