//! A log-linear latency histogram (HDR-style): 128 sub-buckets per power of two, so any
//! recorded value is reported within 0.8 %; min, max, mean and stdev are exact.

#[derive(Clone)]
pub struct Hist {
    counts: Vec<u64>,
    pub n: u64,
    pub min: u64,
    pub max: u64,
    sum: f64,
    sum_sq: f64,
}

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    pub fn new() -> Self {
        Hist {
            counts: vec![0; (64 - SUB_BITS as usize + 1) * SUB as usize],
            n: 0,
            min: u64::MAX,
            max: 0,
            sum: 0.0,
            sum_sq: 0.0,
        }
    }

    fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // >= SUB_BITS
        let shift = e - SUB_BITS;
        let mant = (v >> shift) & (SUB - 1);
        ((shift as u64 + 1) * SUB + mant) as usize
    }

    /// The middle of bucket `i`'s value range.
    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let shift = i / SUB - 1;
        let mant = i % SUB;
        let lo = (SUB + mant) << shift;
        lo + ((1u64 << shift) >> 1)
    }

    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let f = v as f64;
        self.sum += f;
        self.sum_sq += f * f;
    }

    pub fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }

    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }

    pub fn stdev(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        let var = (self.sum_sq - self.sum * self.sum / n) / (n - 1.0);
        var.max(0.0).sqrt()
    }

    /// How many recorded values are below `v` (to the histogram's 0.8 % resolution:
    /// values in `v`'s own bucket are not counted).
    pub fn count_below(&self, v: u64) -> u64 {
        if v > self.max {
            return self.n;
        }
        let i = Self::index(v).min(self.counts.len());
        self.counts[..i].iter().sum()
    }

    /// (bucket value, count) of every non-empty bucket, in value order: fio's json+ "bins".
    pub fn bins(&self) -> Vec<(u64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (Self::value(i).clamp(self.min, self.max), c))
            .collect()
    }

    /// The value at percentile `p` (0–100), clamped to [min, max].
    pub fn percentile(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

/// fio's default percentile list.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_small_and_close_large() {
        let mut h = Hist::new();
        for v in 1..=100u64 {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), 50);
        assert_eq!(h.count_below(50), 49);
        assert_eq!(h.count_below(1), 0);
        assert_eq!(h.count_below(1000), 100);
        assert_eq!(h.percentile(100.0), 100);
        assert_eq!(h.min, 1);
        assert!((h.mean() - 50.5).abs() < 1e-9);
        let mut h = Hist::new();
        for v in [1_000_000u64, 2_000_000, 3_000_000] {
            h.record(v);
        }
        let p = h.percentile(50.0) as f64;
        assert!((p - 2_000_000.0).abs() / 2_000_000.0 < 0.01, "{p}");
    }

    #[test]
    fn merge_adds() {
        let mut a = Hist::new();
        let mut b = Hist::new();
        a.record(10);
        b.record(1000);
        a.merge(&b);
        assert_eq!(a.n, 2);
        assert_eq!(a.max, 1000);
        assert_eq!(a.min, 10);
    }
}
