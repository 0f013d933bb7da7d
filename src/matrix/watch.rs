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
        let start = counter();
        let mut last_line = Instant::now();
        let mut last = (Instant::now(), start);
        while !handle.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            if last.0.elapsed() < Duration::from_millis(500) {
                continue;
            }
            let now = counter();
            // The counters restart from zero when a disk comes back under the same name
            // (unplugged and replugged): never subtract past zero.
            let moved = start.zip(now).map(|(s, n)| n.saturating_sub(s));
            let rate_mib_s = last.1.zip(now).map(|(p, n)| {
                n.saturating_sub(p) as f64 / last.0.elapsed().as_secs_f64() / 1048576.0
            });
            let line_due = last_line.elapsed() >= line_every;
            if line_due {
                last_line = Instant::now();
            }
            tick(Tick {
                elapsed: t0.elapsed(),
                moved,
                rate_mib_s,
                line_due,
            });
            last = (Instant::now(), now);
        }
        match handle.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
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
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn ticks_report_the_bytes_moved_and_lines_come_at_their_interval() {
        let bytes = AtomicU64::new(1000);
        let mut ticks = Vec::new();
        let out = watch(
            || Some(bytes.load(Ordering::Relaxed)),
            Duration::from_millis(1000),
            |t| ticks.push(t),
            || {
                for _ in 0..25 {
                    std::thread::sleep(Duration::from_millis(100));
                    bytes.fetch_add(1 << 20, Ordering::Relaxed);
                }
                7
            },
        );
        assert_eq!(out, 7);
        assert!(ticks.len() >= 3, "{ticks:?}");
        assert!(
            ticks.windows(2).all(|w| w[0].moved <= w[1].moved),
            "{ticks:?}"
        );
        // A tick may fall in a moment the worker did not run (a busy machine): every rate is
        // known and none negative, and the bytes did move.
        assert!(
            ticks.iter().all(|t| t.rate_mib_s.is_some_and(|r| r >= 0.0)),
            "{ticks:?}"
        );
        assert!(
            ticks.iter().any(|t| t.rate_mib_s.is_some_and(|r| r > 0.0)),
            "{ticks:?}"
        );
        let lines = ticks.iter().filter(|t| t.line_due).count();
        assert!(
            (1..=3).contains(&lines),
            "{lines} lines in 2.5 s at one a second"
        );
        assert!(ticks.last().unwrap().words().contains("moved"));
    }

    #[test]
    fn without_counters_only_the_time() {
        let mut ticks = Vec::new();
        watch(
            || None,
            Duration::from_secs(10),
            |t| ticks.push(t),
            || std::thread::sleep(Duration::from_millis(700)),
        );
        assert!(!ticks.is_empty());
        assert!(ticks.iter().all(|t| t.moved.is_none() && !t.line_due));
        assert!(ticks[0].words().ends_with(" s"), "{}", ticks[0].words());
    }
}
