//! Owns the fleet's mergeable quantile sketch: the values of one figure kept as counts in
//! logarithmic buckets (DDSketch: Masson, Rim and Lee, VLDB 2019). Its size grows with the
//! figure's range, not with the number of reports, and sketches of days, lines or collectors
//! merge into the sketch of their union. It is what lets a fleet of millions of reports be
//! summarised once, as reports arrive, rather than read whole for every query.
//!
//! Why this sketch and not the HDR histogram the engine keeps latencies in, or a t-digest:
//! - its error is relative and holds from 1e-300 to 1e300 without a scale per metric. An HDR
//!   histogram keeps a fixed number of digits above a unit it must be told, in a dense array
//!   of 25-170 KB per histogram, and reads a quantile as its bucket's highest value;
//! - a merge adds counts bucket by bucket. The result does not depend on the order of the
//!   merges, so a sketch built as reports arrive equals one rebuilt from them, byte for byte.
//!   A t-digest's merge depends on the order, and its error has no bound;
//! - it is small: a figure that spans a factor of 4 fills about 140 buckets at 0.5 %.
//!
//! What can be kept exactly is: the count, the minimum, the maximum, the zeros, and a
//! bucket's value while every value in it is the same. Link speeds, error counts and
//! capacities take few distinct values, so their percentiles stay exact.
//!
//! **The stated error.** Every percentile, interpolated between order statistics as
//! [`super::stats::percentile`] does, is within the sketch's accuracy (relative) of the exact
//! one. Each order statistic lies in the bucket the sketch reads it from, and the bucket's
//! value is within that accuracy of every value in it. An interpolation between two such
//! values of the same sign keeps the bound.

/// The accuracy of a figure's value sketch: every percentile within 0.5 % of the exact one.
pub const VALUE_PPM: u32 = 5_000;
/// The finest and the coarsest accuracy a sketch may have, in millionths.
const PPM_RANGE: std::ops::RangeInclusive<u32> = 1..=100_000;
/// The encoding's format byte.
const FORMAT: u8 = 1;
/// The most bytes [`Sketch::decode`] reads: 256 KiB holds 20,000 buckets with their values,
/// more than any figure spans at 0.1 % (1e-9 to 1e12 is 24,000 buckets; real figures span
/// a few hundred).
pub const MAX_ENCODED: usize = 256 << 10;

/// Why a value, a merge or a stored sketch is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SketchError {
    #[error("a sketch's accuracy must be 1 to 100000 millionths (0.0001 % to 10 %), not {ppm}")]
    Accuracy { ppm: u32 },
    #[error("{value} cannot be summarised: a figure is finite and not negative")]
    Value { value: f64 },
    #[error(
        "a sketch of {ours} millionths cannot take one of {theirs}: merge sketches of one \
         accuracy"
    )]
    Mismatch { ours: u32, theirs: u32 },
    #[error("a stored sketch is damaged or of another format: {why}")]
    Damaged { why: String },
}

/// Values of one figure in buckets `(gamma^(i-1), gamma^i]`, `gamma = (1 + a) / (1 - a)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sketch {
    ppm: u32,
    ln_gamma: f64,
    count: u64,
    zeros: u64,
    /// Meaningful only when `count > 0`.
    min: f64,
    max: f64,
    /// Strictly increasing by index; every count at least 1.
    buckets: Vec<Bucket>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    index: i32,
    count: u64,
    /// The bucket's one value while every value put in it was that value.
    same: Option<f64>,
}

impl Sketch {
    /// An empty sketch whose percentiles are within `ppm` millionths of the exact ones.
    pub fn new(ppm: u32) -> Result<Sketch, SketchError> {
        if !PPM_RANGE.contains(&ppm) {
            return Err(SketchError::Accuracy { ppm });
        }
        let a = f64::from(ppm) / 1e6;
        Ok(Sketch {
            ppm,
            ln_gamma: ((1.0 + a) / (1.0 - a)).ln(),
            count: 0,
            zeros: 0,
            min: 0.0,
            max: 0.0,
            buckets: Vec::new(),
        })
    }

    /// The accuracy in millionths, as given to [`Sketch::new`].
    pub fn ppm(&self) -> u32 {
        self.ppm
    }

    /// How many values the sketch holds.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The smallest value, exactly; `None` when empty.
    pub fn min(&self) -> Option<f64> {
        (self.count > 0).then_some(self.min)
    }

    /// The largest value, exactly; `None` when empty.
    pub fn max(&self) -> Option<f64> {
        (self.count > 0).then_some(self.max)
    }

    /// How many buckets hold values: what the sketch's size grows with.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Adds one value. A figure is finite and not negative; anything else is refused and the
    /// sketch is unchanged.
    pub fn insert(&mut self, value: f64) -> Result<(), SketchError> {
        if !value.is_finite() || value < 0.0 {
            return Err(SketchError::Value { value });
        }
        // -0.0 is a zero like 0.0: one bit pattern, so equal sketches encode equally.
        let value = if value == 0.0 { 0.0 } else { value };
        self.note_extremes(value, value);
        self.count += 1;
        if value == 0.0 {
            self.zeros += 1;
            return Ok(());
        }
        let index = self.index(value);
        match self.buckets.binary_search_by_key(&index, |b| b.index) {
            Ok(at) => {
                let b = &mut self.buckets[at];
                b.count += 1;
                if b.same != Some(value) {
                    b.same = None;
                }
            }
            Err(at) => self.buckets.insert(
                at,
                Bucket {
                    index,
                    count: 1,
                    same: Some(value),
                },
            ),
        }
        Ok(())
    }

    /// Adds `value` `n` times: a weighted value, as the fleet's norm weighs each of a
    /// report's devices ([`super::stats::device_weight`]).
    pub fn insert_n(&mut self, value: f64, n: u64) -> Result<(), SketchError> {
        if n == 0 {
            return Ok(());
        }
        self.insert(value)?;
        let value = if value == 0.0 { 0.0 } else { value };
        self.count += n - 1;
        if value == 0.0 {
            self.zeros += n - 1;
        } else {
            let index = self.index(value);
            if let Ok(at) = self.buckets.binary_search_by_key(&index, |b| b.index) {
                self.buckets[at].count += n - 1;
            }
        }
        Ok(())
    }

    /// The values as the sketch knows them, ascending, each with how many times it is held:
    /// the order statistics [`Sketch::percentile`] reads (the exact minimum and maximum
    /// first and last, each bucket's value between), for the weighted statistics of
    /// [`super::stats`].
    pub fn pairs(&self) -> Vec<(f64, u64)> {
        if self.count == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(self.buckets.len() + 3);
        if self.zeros > 0 {
            out.push((0.0, self.zeros));
        }
        out.extend(self.buckets.iter().map(|b| (b.value(self), b.count)));
        // The first and last order statistics are the exact extremes.
        if out[0].0 != self.min {
            out[0].1 -= 1;
            out.insert(0, (self.min, 1));
        }
        let last = out.len() - 1;
        if out[last].0 != self.max {
            out[last].1 -= 1;
            out.push((self.max, 1));
        }
        out.retain(|p| p.1 > 0);
        out
    }

    /// Adds every value of `other`, which must have the same accuracy. The result is the
    /// same whatever the order of the merges and inserts that built it.
    pub fn merge(&mut self, other: &Sketch) -> Result<(), SketchError> {
        if other.ppm != self.ppm {
            return Err(SketchError::Mismatch {
                ours: self.ppm,
                theirs: other.ppm,
            });
        }
        if other.count == 0 {
            return Ok(());
        }
        self.note_extremes(other.min, other.max);
        self.count += other.count;
        self.zeros += other.zeros;
        let (xs, ys) = (&self.buckets, &other.buckets);
        let mut merged = Vec::with_capacity(xs.len() + ys.len());
        let (mut i, mut j) = (0, 0);
        loop {
            let next = match (xs.get(i), ys.get(j)) {
                (Some(x), Some(y)) if x.index == y.index => {
                    (i, j) = (i + 1, j + 1);
                    Bucket {
                        index: x.index,
                        count: x.count + y.count,
                        same: x.same.filter(|p| y.same == Some(*p)),
                    }
                }
                (Some(x), Some(y)) if x.index < y.index => {
                    i += 1;
                    *x
                }
                (Some(x), None) => {
                    i += 1;
                    *x
                }
                (_, Some(y)) => {
                    j += 1;
                    *y
                }
                (None, None) => break,
            };
            merged.push(next);
        }
        self.buckets = merged;
        Ok(())
    }

    /// Percentile `p` (0..=100), interpolated between order statistics as
    /// [`super::stats::percentile`] does, within the accuracy of the exact one; the 0th and
    /// 100th are the exact minimum and maximum. `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        super::stats::percentile_of(self.count, p, |k| self.order_statistic(k))
    }

    /// How many values are at most `x`. Only values in `x`'s own bucket (within the accuracy
    /// of `x`) can be counted on the wrong side, and none where that bucket holds one value.
    pub fn count_at_most(&self, x: f64) -> u64 {
        if self.count == 0 || x.is_nan() || x < 0.0 {
            return 0;
        }
        if x >= self.max {
            return self.count;
        }
        let mut n = self.zeros;
        for b in &self.buckets {
            if b.value(self) <= x {
                n += b.count;
            } else {
                break;
            }
        }
        n
    }

    /// The value of the `k`th smallest (from 0), as the sketch knows it.
    fn order_statistic(&self, k: u64) -> f64 {
        if k == 0 {
            return self.min;
        }
        if k + 1 >= self.count {
            return self.max;
        }
        if k < self.zeros {
            return 0.0;
        }
        let mut seen = self.zeros;
        for b in &self.buckets {
            seen += b.count;
            if k < seen {
                return b.value(self);
            }
        }
        self.max
    }

    fn index(&self, value: f64) -> i32 {
        // ln of a positive finite double lies within +-745, so the index fits an i32 for
        // every accuracy allowed (at most 745 / ln((1 + 1e-6) / (1 - 1e-6)) = 3.7e8).
        (value.ln() / self.ln_gamma).ceil() as i32
    }

    fn note_extremes(&mut self, lo: f64, hi: f64) {
        if self.count == 0 {
            (self.min, self.max) = (lo, hi);
        } else {
            self.min = self.min.min(lo);
            self.max = self.max.max(hi);
        }
    }

    /// The sketch as bytes: the form a database keeps it in. Equal sketches give equal bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_varint(&mut out, u64::from(self.ppm));
        put_varint(&mut out, self.count);
        if self.count == 0 {
            return out;
        }
        put_varint(&mut out, self.zeros);
        out.extend_from_slice(&self.min.to_le_bytes());
        out.extend_from_slice(&self.max.to_le_bytes());
        put_varint(&mut out, self.buckets.len() as u64);
        let mut prev = 0i64;
        for b in &self.buckets {
            let delta = i64::from(b.index) - prev;
            prev = i64::from(b.index);
            put_varint(&mut out, ((delta << 1) ^ (delta >> 63)) as u64);
            put_varint(&mut out, b.count);
            match b.same {
                Some(v) => {
                    out.push(1);
                    out.extend_from_slice(&v.to_le_bytes());
                }
                None => out.push(0),
            }
        }
        out
    }

    /// Reads what [`Sketch::encode`] wrote, and nothing else: at most [`MAX_ENCODED`] bytes,
    /// every count and value checked against the rest, before anything is allocated for it.
    pub fn decode(bytes: &[u8]) -> Result<Sketch, SketchError> {
        if bytes.len() > MAX_ENCODED {
            return Err(damaged(format!(
                "{} bytes, more than the {MAX_ENCODED} a sketch may have",
                bytes.len()
            )));
        }
        let mut r = Reader { bytes, at: 0 };
        if r.byte()? != FORMAT {
            return Err(damaged("not a sketch of format 1".into()));
        }
        let ppm =
            u32::try_from(r.varint()?).map_err(|_| damaged("accuracy out of range".into()))?;
        let mut s = Sketch::new(ppm).map_err(|e| damaged(e.to_string()))?;
        s.count = r.varint()?;
        if s.count > 0 {
            s.zeros = r.varint()?;
            s.min = r.float()?;
            s.max = r.float()?;
            let signed = s.min.is_sign_negative() || s.max.is_sign_negative();
            if s.zeros > s.count || signed || !(s.min <= s.max && s.max.is_finite()) {
                return Err(damaged(
                    "its count, zeros, minimum and maximum disagree".into(),
                ));
            }
            let n = r.varint()?;
            // Three bytes at least per bucket: no allocation the input cannot back.
            if n > (bytes.len() - r.at) as u64 / 3 {
                return Err(damaged(format!("{n} buckets in {} bytes", bytes.len())));
            }
            s.buckets.reserve(n as usize);
            let (mut index, mut held) = (0i64, s.zeros);
            for i in 0..n {
                let z = r.varint()?;
                let delta = (z >> 1) as i64 ^ -((z & 1) as i64);
                index = index
                    .checked_add(delta)
                    .filter(|x| (i == 0 || delta > 0) && i32::try_from(*x).is_ok())
                    .ok_or_else(|| damaged("bucket indices out of order".into()))?;
                let count = r.varint()?;
                held = held
                    .checked_add(count)
                    .filter(|_| count > 0)
                    .ok_or_else(|| damaged("a bucket's count is out of range".into()))?;
                let same = match r.byte()? {
                    0 => None,
                    1 => Some(r.float()?),
                    _ => return Err(damaged("a bucket's flag is neither 0 nor 1".into())),
                };
                let index = index as i32;
                if let Some(v) = same {
                    if !(v > 0.0 && v.is_finite() && s.index(v) == index) {
                        return Err(damaged("a bucket's value lies outside it".into()));
                    }
                }
                s.buckets.push(Bucket { index, count, same });
            }
            if held != s.count {
                return Err(damaged("its buckets do not add up to its count".into()));
            }
            // The extremes lie in the outer buckets (or among the zeros).
            let ends = match (s.buckets.first(), s.buckets.last()) {
                (Some(first), Some(last)) => {
                    s.index(s.max) == last.index
                        && if s.zeros > 0 {
                            s.min == 0.0
                        } else {
                            s.index(s.min) == first.index
                        }
                }
                _ => s.min == 0.0 && s.max == 0.0,
            };
            if !ends {
                return Err(damaged(
                    "its minimum or maximum lies outside its buckets".into(),
                ));
            }
        }
        if r.at != bytes.len() {
            return Err(damaged(format!(
                "{} bytes after its end",
                bytes.len() - r.at
            )));
        }
        Ok(s)
    }
}

impl Bucket {
    /// The bucket's value: its one value, else the point within the accuracy of every value
    /// in it, `2 gamma^i / (gamma + 1)`, kept within the sketch's extremes.
    fn value(&self, s: &Sketch) -> f64 {
        self.same.unwrap_or_else(|| {
            let upper = (f64::from(self.index) * s.ln_gamma).exp();
            let gamma = s.ln_gamma.exp();
            (2.0 * upper / (gamma + 1.0)).clamp(s.min, s.max)
        })
    }
}

fn damaged(why: String) -> SketchError {
    SketchError::Damaged { why }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, SketchError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| damaged("it ends early".into()))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, SketchError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                break;
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                // One encoding per number: a last byte of 0 after others is a longer form.
                if b == 0 && shift > 0 {
                    return Err(damaged("a number not in its shortest form".into()));
                }
                return Ok(v);
            }
        }
        Err(damaged("a number longer than 64 bits".into()))
    }

    fn float(&mut self) -> Result<f64, SketchError> {
        let end = self.at + 8;
        let raw = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| damaged("it ends early".into()))?;
        self.at = end;
        let mut b = [0u8; 8];
        b.copy_from_slice(raw);
        Ok(f64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::super::stats::{percentile, sort_f64};
    use super::*;

    /// A seeded generator (splitmix64): the same values on every run and machine.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// Uniform in (0, 1).
        fn unit(&mut self) -> f64 {
            ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        /// A normal deviate (Box-Muller).
        fn normal(&mut self) -> f64 {
            (-2.0 * self.unit().ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
        }
    }

    /// Data sets with the shapes a fleet's figures have, and some no figure should have.
    fn data_sets() -> Vec<(&'static str, Vec<f64>)> {
        let mut r = Rng(7);
        let fleet_like: Vec<f64> = (0..5_000)
            .map(|_| 38.0 * (1.0 + 0.08 * r.normal().clamp(-2.0, 2.0)))
            .collect();
        // A fleet with a slow minority: 97 % near 38 MiB/s, 3 % at full speed's 1 MiB/s.
        let bimodal: Vec<f64> = (0..5_000)
            .map(|i| {
                let c = if i % 33 == 0 { 1.0 } else { 38.0 };
                c * (1.0 + 0.05 * r.normal())
            })
            .collect();
        let wide: Vec<f64> = (0..5_000)
            .map(|_| 10f64.powf(-4.0 + 22.0 * r.unit()))
            .collect();
        let links: Vec<f64> = (0..1_000)
            .map(|i| [480.0, 480.0, 480.0, 12.0, 5000.0][i % 5])
            .collect();
        let with_zeros: Vec<f64> = (0..1_000)
            .map(|i| if i % 4 == 0 { 0.0 } else { (i % 7) as f64 })
            .collect();
        let latency_ms: Vec<f64> = (0..5_000)
            .map(|_| 0.05 * (3.0 * r.normal()).exp())
            .collect();
        vec![
            ("fleet-like, 8 % spread", fleet_like),
            ("a slow minority", bimodal),
            ("1e-4 to 1e18", wide),
            ("link speeds", links),
            ("error counts with zeros", with_zeros),
            ("latencies, log-normal", latency_ms),
            ("one value", vec![42.5]),
            ("two values", vec![3.0, 1e9]),
            ("all equal", vec![480.0; 100]),
            ("extremes", vec![f64::MIN_POSITIVE, 5e-324, 1.0, f64::MAX]),
        ]
    }

    fn sketch_of(values: &[f64], ppm: u32) -> Sketch {
        let mut s = Sketch::new(ppm).unwrap();
        for v in values {
            s.insert(*v).unwrap();
        }
        s
    }

    #[test]
    fn every_percentile_is_within_the_stated_accuracy_of_the_exact_one() {
        let ps = [
            0.0, 0.1, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0,
        ];
        for ppm in [VALUE_PPM, 1_000, 20_000] {
            let alpha = f64::from(ppm) / 1e6;
            for (name, values) in data_sets() {
                let s = sketch_of(&values, ppm);
                let mut sorted = values.clone();
                sort_f64(&mut sorted);
                assert_eq!(s.count(), values.len() as u64, "{name}");
                assert_eq!(s.min(), sorted.first().copied(), "{name}");
                assert_eq!(s.max(), sorted.last().copied(), "{name}");
                for p in ps {
                    let exact = percentile(&sorted, p).unwrap();
                    let got = s.percentile(p).unwrap();
                    // One part in 1e12 for the float arithmetic of the bucket's value.
                    assert!(
                        (got - exact).abs() <= exact * (alpha + 1e-12),
                        "{name} at {ppm} ppm: p{p} {got} against {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn few_distinct_values_stay_exact() {
        for (name, values) in data_sets() {
            let mut distinct = values.clone();
            sort_f64(&mut distinct);
            distinct.dedup();
            if distinct.len() > 10 {
                continue;
            }
            let s = sketch_of(&values, VALUE_PPM);
            let mut sorted = values.clone();
            sort_f64(&mut sorted);
            for p in [0.0, 1.0, 33.3, 50.0, 80.0, 99.0, 100.0] {
                assert_eq!(
                    s.percentile(p),
                    percentile(&sorted, p),
                    "{name}: p{p} is exact where each bucket holds one value"
                );
            }
        }
    }

    #[test]
    fn its_pairs_are_the_order_statistics_it_reads_and_a_weight_is_that_many_values() {
        use super::super::stats::weighted_percentile;
        for (name, values) in data_sets() {
            let s = sketch_of(&values, VALUE_PPM);
            let pairs = s.pairs();
            assert_eq!(pairs.iter().map(|p| p.1).sum::<u64>(), s.count(), "{name}");
            for p in [0.0, 0.1, 1.0, 5.0, 33.3, 50.0, 95.0, 99.9, 100.0] {
                assert_eq!(
                    weighted_percentile(&pairs, p),
                    s.percentile(p),
                    "{name} p{p}"
                );
            }
            // A value put in 3 times at once is the same sketch as put in 3 times.
            let mut once = Sketch::new(VALUE_PPM).unwrap();
            let mut thrice = Sketch::new(VALUE_PPM).unwrap();
            for v in values.iter().take(200) {
                once.insert_n(*v, 3).unwrap();
                for _ in 0..3 {
                    thrice.insert(*v).unwrap();
                }
            }
            assert_eq!(once.encode(), thrice.encode(), "{name}");
        }
    }

    #[test]
    fn a_merge_gives_the_same_bytes_whatever_the_order() {
        for (name, values) in data_sets() {
            let whole = sketch_of(&values, VALUE_PPM);
            let parts: Vec<Sketch> = values
                .chunks(values.len().div_ceil(7))
                .map(|c| sketch_of(c, VALUE_PPM))
                .collect();
            let mut forward = Sketch::new(VALUE_PPM).unwrap();
            for p in &parts {
                forward.merge(p).unwrap();
            }
            let mut backward = Sketch::new(VALUE_PPM).unwrap();
            for p in parts.iter().rev() {
                backward.merge(p).unwrap();
            }
            // Pairs first, then the pairs' sums: a tree, as days merge into weeks.
            let mut tree: Vec<Sketch> = parts.clone();
            while tree.len() > 1 {
                tree = tree
                    .chunks(2)
                    .map(|pair| {
                        let mut m = pair[0].clone();
                        if let Some(b) = pair.get(1) {
                            m.merge(b).unwrap();
                        }
                        m
                    })
                    .collect();
            }
            let tree = tree
                .pop()
                .unwrap_or_else(|| Sketch::new(VALUE_PPM).unwrap());
            for (how, s) in [
                ("forward", &forward),
                ("backward", &backward),
                ("tree", &tree),
            ] {
                assert_eq!(s.encode(), whole.encode(), "{name}: merged {how}");
                assert_eq!(s, &whole, "{name}: merged {how}");
            }
        }
    }

    #[test]
    fn its_size_grows_with_the_figures_range_not_with_the_reports() {
        let mut r = Rng(11);
        let mut sizes = Vec::new();
        for n in [1_000, 10_000, 100_000] {
            let values: Vec<f64> = (0..n)
                .map(|_| 38.0 * (1.0 + 0.08 * r.normal().clamp(-2.0, 2.0)))
                .collect();
            let s = sketch_of(&values, VALUE_PPM);
            sizes.push((n, s.buckets(), s.encode().len()));
        }
        // +-16 % around the centre is ln(1.16 / 0.84) / ln(1.01005) = 32.3 buckets wide.
        for (n, buckets, bytes) in &sizes {
            assert!(*buckets <= 34, "{n} values: {buckets} buckets");
            assert!(*bytes <= 34 * 12 + 40, "{n} values: {bytes} bytes");
        }
    }

    #[test]
    fn counts_at_most_a_value_err_only_within_its_bucket() {
        let gamma = (1.0 + 0.005) / (1.0 - 0.005);
        for (name, values) in data_sets() {
            let s = sketch_of(&values, VALUE_PPM);
            let exact_at_most = |x: f64| values.iter().filter(|v| **v <= x).count() as u64;
            let mut probes: Vec<f64> = values.iter().step_by(97).copied().collect();
            probes.extend([0.0, 0.5, 1.0, 39.0, 480.0, 1e20]);
            for x in probes {
                let got = s.count_at_most(x);
                assert!(
                    exact_at_most(x / gamma) <= got && got <= exact_at_most(x * gamma),
                    "{name}: at most {x}: {got}, exact {}",
                    exact_at_most(x)
                );
            }
        }
    }

    #[test]
    fn what_a_figure_cannot_be_is_refused() {
        let mut s = Sketch::new(VALUE_PPM).unwrap();
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -1e-300] {
            assert!(matches!(s.insert(v), Err(SketchError::Value { .. })), "{v}");
        }
        assert_eq!(s.count(), 0, "a refused value leaves the sketch unchanged");
        s.insert(-0.0).unwrap();
        assert_eq!(s.encode(), sketch_of(&[0.0], VALUE_PPM).encode());
        for ppm in [0, 100_001, u32::MAX] {
            assert_eq!(Sketch::new(ppm), Err(SketchError::Accuracy { ppm }));
        }
        let other = Sketch::new(1_000).unwrap();
        assert_eq!(
            s.merge(&other),
            Err(SketchError::Mismatch {
                ours: VALUE_PPM,
                theirs: 1_000
            })
        );
        assert_eq!(Sketch::new(VALUE_PPM).unwrap().percentile(50.0), None);
    }

    #[test]
    fn a_stored_sketch_reads_back_equal_and_nothing_else_is_taken() {
        for (name, values) in data_sets() {
            let s = sketch_of(&values, VALUE_PPM);
            let bytes = s.encode();
            assert_eq!(Sketch::decode(&bytes).as_ref(), Ok(&s), "{name}");
            // A truncation is refused (200 places along it and the last byte), as is a byte
            // more.
            let step = (bytes.len() / 200).max(1);
            for cut in (0..bytes.len()).step_by(step).chain([bytes.len() - 1]) {
                assert!(
                    Sketch::decode(&bytes[..cut]).is_err(),
                    "{name}: {cut} bytes"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Sketch::decode(&longer).is_err(), "{name}: a byte more");
            // A changed byte is refused, or reads as a sketch that encodes to those bytes:
            // never a panic, never a sketch that disagrees with itself.
            let mut r = Rng(bytes.len() as u64);
            for _ in 0..500 {
                let mut b = bytes.clone();
                let at = (r.next() % b.len() as u64) as usize;
                b[at] ^= 1 << (r.next() % 8);
                if let Ok(d) = Sketch::decode(&b) {
                    assert_eq!(d.encode(), b, "{name}: byte {at}");
                }
            }
        }
        let empty = Sketch::new(1_000).unwrap();
        assert_eq!(Sketch::decode(&empty.encode()), Ok(empty));
    }

    #[test]
    fn a_hostile_sketch_is_refused_with_what_is_wrong() {
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("nothing", vec![], "ends early"),
            ("another format", vec![2, 0x88, 0x27, 0], "format"),
            ("accuracy 0", vec![1, 0, 0], "accuracy"),
            (
                "a varint of 11 bytes",
                [vec![1u8], vec![0xff; 10], vec![1]].concat(),
                "64 bits",
            ),
            (
                "a billion buckets claimed in a few bytes",
                {
                    let mut b = vec![1u8, 0x88, 0x27, 5, 0];
                    b.extend_from_slice(&1.0f64.to_le_bytes());
                    b.extend_from_slice(&2.0f64.to_le_bytes());
                    put_varint(&mut b, 1_000_000_000);
                    b
                },
                "buckets in",
            ),
            (
                "more than the limit",
                vec![0; MAX_ENCODED + 1],
                "more than the",
            ),
        ];
        for (name, bytes, words) in cases {
            match Sketch::decode(&bytes) {
                Err(SketchError::Damaged { why }) => {
                    assert!(why.contains(words), "{name}: {why}")
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
