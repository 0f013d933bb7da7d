//! Owns the fleet's statistics: percentiles of a sorted sample, robust outliers by the
//! modified z-score (median absolute deviation), and medians per production day or week.

/// Modified z-score above which a value is an outlier (Iglewicz & Hoaglin's 3.5).
pub const OUTLIER_Z: f64 = 3.5;
/// 0.6745 makes the MAD of a normal sample estimate its standard deviation.
const MAD_SCALE: f64 = 0.6745;
/// With MAD = 0 (more than half the values identical, as link speeds are), Iglewicz &
/// Hoaglin's fallback scales the mean absolute deviation by 1.253314 instead.
const MEANAD_SCALE: f64 = 1.253314;

/// Percentile `p` (0..=100) of sorted values by linear interpolation between order
/// statistics (the spreadsheet / numpy default); `None` for no values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    percentile_of(sorted.len() as u64, p, |k| sorted[k as usize])
}

/// [`percentile`] of `n` values known only through `nth(k)`, the `k`th smallest from 0 (a
/// sketch's order statistics): one interpolation for the exact and the summarised fleet.
pub fn percentile_of(n: u64, p: f64, nth: impl Fn(u64) -> f64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let rank = (p / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
    let (lo, hi) = (rank.floor() as u64, rank.ceil() as u64);
    let (a, b) = (nth(lo), nth(hi));
    Some(a + (b - a) * (rank - lo as f64))
}

/// The median of values in any order; `None` for none.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    sort_f64(&mut v);
    percentile(&v, 50.0)
}

/// Sorts floats, NaN last (reports never hold NaN; this only keeps the sort total).
/// Unstable: floats equal by `total_cmp` have the same bits, so no order among them shows,
/// and the unstable sort needs no buffer (millions of values in a large fleet).
pub fn sort_f64(v: &mut [f64]) {
    v.sort_unstable_by(|a, b| a.total_cmp(b));
}

/// The modified z-score of each value, or `None` when the sample has no spread at all (every
/// value equal: nothing stands out). `sorted` is the same values sorted.
pub fn modified_z(values: &[f64], sorted: &[f64]) -> Option<Vec<f64>> {
    modified_z_against(values, sorted)
}

/// The modified z-score of each value against the median and spread of `baseline` (sorted),
/// or `None` when the baseline has no spread at all.
pub fn modified_z_against(values: &[f64], baseline: &[f64]) -> Option<Vec<f64>> {
    let norm = Norm::of(&baseline.iter().map(|v| (*v, 1)).collect::<Vec<_>>())?;
    Some(values.iter().map(|v| norm.z(*v)).collect())
}

/// What one report weighs in a fleet's norm (the baseline outliers are measured against, and
/// the passing figures limits are learned from), per device class: its `k` devices of a class
/// weigh `REPORT_WEIGHT / k` each. One report of 256 sticks is one vote, not 256. The least
/// common multiple of 1 to 16 keeps every weight of a real board (at most 16 devices of a
/// class) an exact integer, so sums of weights, and sketches of them, are exact.
pub const REPORT_WEIGHT: u64 = 720_720;

/// The weight of each of a report's `k` devices of one class.
pub fn device_weight(k: usize) -> u64 {
    (REPORT_WEIGHT / k.max(1) as u64).max(1)
}

/// Sorts `(value, weight)` pairs by value and joins equal values: the form
/// [`weighted_percentile`] and [`Norm::of`] take.
pub fn sort_weighted(v: &mut Vec<(f64, u64)>) {
    v.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    v.dedup_by(|next, kept| {
        let same = next.0.total_cmp(&kept.0).is_eq();
        if same {
            kept.1 += next.1;
        }
        same
    });
}

/// Percentile `p` of weighted values (sorted, as [`sort_weighted`] leaves them): a value of
/// weight `w` counts as `w` equal values, interpolated as [`percentile`] does. The exact
/// fleet gives it every value; the summarised fleet a sketch's buckets
/// ([`super::sketch::Sketch::pairs`]), so both read a figure the same way.
pub fn weighted_percentile(sorted: &[(f64, u64)], p: f64) -> Option<f64> {
    let mut upto = Vec::with_capacity(sorted.len());
    let mut total = 0u64;
    for (_, w) in sorted {
        total += w;
        upto.push(total);
    }
    percentile_of(total, p, |k| {
        let i = upto.partition_point(|&u| u <= k).min(sorted.len() - 1);
        sorted[i].0
    })
}

/// The centre and scale a modified z-score is taken against: the median, and the median
/// absolute deviation (or the mean absolute deviation when more than half the values are
/// equal) of weighted values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    pub median: f64,
    scale: f64,
}

impl Norm {
    /// The norm of `sorted` weighted values; `None` when they have no spread at all (every
    /// value equal: nothing stands out).
    pub fn of(sorted: &[(f64, u64)]) -> Option<Norm> {
        let median = weighted_percentile(sorted, 50.0)?;
        let mut dev: Vec<(f64, u64)> = sorted
            .iter()
            .map(|(v, w)| ((v - median).abs(), *w))
            .collect();
        sort_weighted(&mut dev);
        let mad = weighted_percentile(&dev, 50.0)?;
        let scale = if mad > 0.0 {
            mad / MAD_SCALE
        } else {
            let total: u64 = dev.iter().map(|d| d.1).sum();
            let mean_ad = dev.iter().map(|(d, w)| d * *w as f64).sum::<f64>() / total as f64;
            if mean_ad <= 0.0 {
                return None;
            }
            mean_ad * MEANAD_SCALE
        };
        Some(Norm { median, scale })
    }

    /// The modified z-score of `v`.
    pub fn z(&self, v: f64) -> f64 {
        (v - self.median) / self.scale
    }
}

/// Days since the Unix epoch of a timestamp (UTC), the trend's time axis.
pub fn epoch_day(t: chrono::DateTime<chrono::Utc>) -> i32 {
    t.timestamp().div_euclid(86_400) as i32
}

/// The first day of the bucket of `bucket_days` days that `day` falls in: a trend bucket
/// (1 or 7), or a summary's span (also 91 and 364: whole weeks, so spans nest).
pub fn bucket_start(day: i32, bucket_days: i32) -> i32 {
    // 1970-01-01 was a Thursday: shifting by 3 makes buckets of whole weeks start on Monday.
    let shift = if bucket_days % 7 == 0 { 3 } else { 0 };
    (day + shift).div_euclid(bucket_days) * bucket_days - shift
}

/// Median per bucket of `bucket_days` days (7-day buckets start on Mondays); `(start day,
/// count, median)`, oldest first.
pub fn bucket_medians(days: &[i32], values: &[f64], bucket_days: i32) -> Vec<(i32, usize, f64)> {
    let mut pairs: Vec<(i32, f64)> = days
        .iter()
        .zip(values)
        .map(|(d, v)| (bucket_start(*d, bucket_days), *v))
        .collect();
    // Unstable is exact here too: pairs equal by this order are the same bits.
    pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out = Vec::new();
    let mut i = 0;
    while i < pairs.len() {
        let start = pairs[i].0;
        let j = i + pairs[i..].iter().take_while(|p| p.0 == start).count();
        let vals: Vec<f64> = pairs[i..j].iter().map(|p| p.1).collect();
        out.push((start, j - i, percentile(&vals, 50.0).unwrap_or(f64::NAN)));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_order_statistics() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(5.0));
        assert_eq!(percentile(&v, 5.0), Some(1.2));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn modified_z_flags_the_far_value_only() {
        let v = [10.0, 10.5, 9.5, 10.2, 9.8, 10.1, 2.0];
        let mut s = v.to_vec();
        sort_f64(&mut s);
        let z = modified_z(&v, &s).unwrap();
        let flagged: Vec<usize> = (0..v.len()).filter(|&i| z[i].abs() > OUTLIER_Z).collect();
        assert_eq!(flagged, vec![6]);
    }

    #[test]
    fn zero_mad_falls_back_to_mean_absolute_deviation() {
        // 97 links at 480M and 3 at 12M: MAD is 0, the slow ones must still stand out.
        let mut v = vec![480.0; 97];
        v.extend([12.0; 3]);
        let mut s = v.clone();
        sort_f64(&mut s);
        let z = modified_z(&v, &s).unwrap();
        assert_eq!(z.iter().filter(|z| z.abs() > OUTLIER_Z).count(), 3);
        assert!(modified_z(&[5.0; 4], &[5.0; 4]).is_none());
    }

    #[test]
    fn a_weight_counts_as_that_many_equal_values() {
        let mut w = vec![(3.0, 2), (1.0, 1), (3.0, 1), (2.0, 1)];
        sort_weighted(&mut w);
        assert_eq!(w, vec![(1.0, 1), (2.0, 1), (3.0, 3)]);
        let flat = [1.0, 2.0, 3.0, 3.0, 3.0];
        for p in [0.0, 5.0, 25.0, 50.0, 62.5, 99.0, 100.0] {
            assert_eq!(weighted_percentile(&w, p), percentile(&flat, p), "p{p}");
        }
        assert_eq!(weighted_percentile(&[], 50.0), None);
        // A report of 256 sticks weighs about one report; one of 1 to 16 exactly one.
        for k in 1..=16 {
            assert_eq!(device_weight(k) * k as u64, REPORT_WEIGHT);
        }
        assert!(device_weight(256) * 256 <= REPORT_WEIGHT);
        assert!(device_weight(256) * 257 > REPORT_WEIGHT);
    }

    #[test]
    fn a_heavy_report_moves_the_norm_as_one_report() {
        // 20 reports of one stick near 10, then one report of 256 sticks at 0.01.
        let mut w: Vec<(f64, u64)> = (0..20)
            .map(|i| (10.0 + f64::from(i) * 0.05, REPORT_WEIGHT))
            .collect();
        w.extend((0..256).map(|_| (0.01, device_weight(256))));
        sort_weighted(&mut w);
        let norm = Norm::of(&w).unwrap();
        assert!((10.4..10.6).contains(&norm.median), "{norm:?}");
        assert!(norm.z(0.01).abs() > OUTLIER_Z);
        assert!(Norm::of(&[(5.0, 3)]).is_none());
    }

    #[test]
    fn weekly_buckets_start_on_monday() {
        // 2026-11-30 is a Monday: epoch day 20422.
        let monday = epoch_day("2026-11-30T12:00:00Z".parse().unwrap());
        let b = bucket_medians(&[monday - 1, monday, monday + 6], &[1.0, 2.0, 4.0], 7);
        assert_eq!(b, vec![(monday - 7, 1, 1.0), (monday, 2, 3.0)]);
    }
}
