//! fio's `random_distribution`: which blocks random I/O picks.
//!
//! - `random`: every block equally likely (the default).
//! - `zipf:θ`: the block of rank k is picked with probability ∝ 1/k^θ (θ > 0, ≠ 1), by
//!   the method fio uses (Gray et al., "Quickly generating billion-record synthetic
//!   databases"), its normalising sum taken over at most 10M ranks as fio does.
//! - `pareto:h`: rank `(n-1)·u^(log h / log(1-h))` for a uniform u (0 < h < 1), as fio.
//! - `normal:dev` (fio's `gauss`): the mean of 12 uniform ranks (a bell around the
//!   middle), shifted by up to ±dev/2 % of the blocks, as fio computes it.
//!
//! As in fio, ranks are scattered over the file by a hash, so the hot blocks are not
//! all at its start.

/// The distribution of random offsets.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Dist {
    #[default]
    Uniform,
    Zipf(f64),
    Pareto(f64),
    Normal(f64),
}

/// fio's cap on the ranks summed for zipf's normalisation (`ZIPF_MAX_GEN`).
const ZIPF_MAX_GEN: u64 = 10_000_000;

/// A sampler of block numbers in [0, n).
pub struct Picker {
    n: u64,
    kind: Kind,
}

enum Kind {
    Uniform,
    Zipf {
        zetan: f64,
        alpha: f64,
        eta: f64,
        half_pow: f64,
    },
    Pareto {
        pow: f64,
    },
    Normal {
        stddev: u64,
    },
}

impl Dist {
    /// Check the parameter (the error says what is allowed).
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Dist::Uniform => Ok(()),
            Dist::Zipf(t) if t > 0.0 && t.is_finite() && (t - 1.0).abs() > 1e-9 => Ok(()),
            Dist::Zipf(t) => Err(format!(
                "random_distribution=zipf:{t}: theta must be > 0 and not 1 (e.g. zipf:1.2)"
            )),
            Dist::Pareto(h) if h > 0.0 && h < 1.0 => Ok(()),
            Dist::Pareto(h) => Err(format!(
                "random_distribution=pareto:{h}: h must be between 0 and 1 (e.g. pareto:0.2)"
            )),
            Dist::Normal(d) if (0.0..=100.0).contains(&d) => Ok(()),
            Dist::Normal(d) => Err(format!(
                "random_distribution=normal:{d}: the deviation is a percentage, 0 to 100"
            )),
        }
    }
}

impl Picker {
    /// A sampler over `n` blocks (n >= 1).
    pub fn new(dist: Dist, n: u64) -> Self {
        let n = n.max(1);
        let kind = match dist {
            Dist::Uniform => Kind::Uniform,
            Dist::Zipf(theta) => {
                let zeta = |m: u64| (1..=m).map(|k| 1.0 / (k as f64).powf(theta)).sum::<f64>();
                let zetan = zeta(n.min(ZIPF_MAX_GEN));
                let zeta2 = zeta(2.min(n));
                let alpha = 1.0 / (1.0 - theta);
                let eta = if n > 1 {
                    (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
                } else {
                    0.0
                };
                Kind::Zipf {
                    zetan,
                    alpha,
                    eta,
                    half_pow: 0.5f64.powf(theta),
                }
            }
            Dist::Pareto(h) => Kind::Pareto {
                pow: h.ln() / (1.0 - h).ln(),
            },
            Dist::Normal(dev) => Kind::Normal {
                stddev: ((n as f64 * dev / 100.0).ceil() as u64).min(n / 2),
            },
        };
        Picker { n, kind }
    }

    /// The next block, from a uniform 64-bit random number.
    pub fn pick(&self, r: u64) -> u64 {
        let n = self.n;
        let rank = match self.kind {
            Kind::Uniform => return r % n,
            Kind::Zipf {
                zetan,
                alpha,
                eta,
                half_pow,
            } => {
                let u = unit(r);
                let uz = u * zetan;
                if uz < 1.0 {
                    0
                } else if uz < 1.0 + half_pow {
                    1
                } else {
                    let v = (n as f64 * (eta * u - eta + 1.0).powf(alpha)) as u64;
                    v.min(n - 1)
                }
            }
            Kind::Pareto { pow } => (((n - 1) as f64) * unit(r).powf(pow)) as u64,
            Kind::Normal { stddev } => {
                // 12 uniform ranks from one 64-bit number's stream (central limit)
                let mut x = r | 1;
                let mut sum = 0u64;
                for _ in 0..12 {
                    x = scatter(x);
                    sum += x % (n + 1);
                }
                let mut v = sum.div_ceil(12) as i64;
                if stddev > 0 {
                    x = scatter(x);
                    let mut dev = (stddev as f64 * unit(x)) as i64 - (stddev / 2) as i64;
                    while dev + v >= n as i64 {
                        dev /= 2;
                    }
                    v = (v + dev).max(0);
                }
                v as u64
            }
        };
        scatter(rank) % n
    }
}

/// A uniform number in [0, 1) from 53 random bits.
fn unit(r: u64) -> f64 {
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// Spread ranks over the file (a 64-bit mix; fio hashes its ranks the same way).
fn scatter(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Share of all picks that land on the most picked `frac` of the blocks.
    fn top_share(dist: Dist, n: u64, picks: u64, frac: f64) -> f64 {
        let p = Picker::new(dist, n);
        let mut counts = vec![0u64; n as usize];
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..picks {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = p.pick(x);
            assert!(b < n);
            counts[b as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top = (n as f64 * frac) as usize;
        counts[..top].iter().sum::<u64>() as f64 / picks as f64
    }

    #[test]
    fn skewed_distributions_concentrate_on_few_blocks() {
        let n = 10_000;
        let uniform = top_share(Dist::Uniform, n, 400_000, 0.1);
        assert!(uniform < 0.15, "uniform top 10 %: {uniform}");
        let zipf = top_share(Dist::Zipf(1.2), n, 400_000, 0.1);
        assert!(zipf > 0.8, "zipf:1.2 top 10 %: {zipf}");
        let mild = top_share(Dist::Zipf(0.8), n, 400_000, 0.1);
        assert!(mild > 0.4 && mild < zipf, "zipf:0.8 top 10 %: {mild}");
        // pareto:0.2 is fio's "80/20": about 80 % of the I/O on 20 % of the blocks
        let pareto = top_share(Dist::Pareto(0.2), n, 400_000, 0.2);
        assert!(
            pareto > 0.7 && pareto < 0.9,
            "pareto:0.2 top 20 %: {pareto}"
        );
    }

    #[test]
    fn parameters_are_checked_and_tiny_files_work() {
        assert!(Dist::Zipf(1.0).validate().is_err());
        assert!(Dist::Zipf(0.0).validate().is_err());
        assert!(Dist::Pareto(1.0).validate().is_err());
        assert!(Dist::Zipf(1.2).validate().is_ok() && Dist::Pareto(0.5).validate().is_ok());
        assert!(Dist::Normal(101.0).validate().is_err() && Dist::Normal(5.0).validate().is_ok());
        for d in [
            Dist::Zipf(1.2),
            Dist::Pareto(0.2),
            Dist::Normal(5.0),
            Dist::Uniform,
        ] {
            let p = Picker::new(d, 1);
            assert!((0..1000u64).all(|r| p.pick(r.wrapping_mul(0x9E37_79B9_7F4A_7C15)) == 0));
        }
    }
}
