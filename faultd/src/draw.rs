//! Seeded random draws, one pair per call.
//!
//! For: making every random choice faultd takes (the delay, which fault) a pure function of the seed, the route
//! and the call's arrival number on that route, so the same seed and the same request order give the same faults,
//! with no lock on the hot path. Not for: anything that must be unpredictable.
//!
//! The generator is SplitMix64 in counter mode: the n-th call's state is `seed ^ route_key + n * golden`, mixed.
//! It passes BigCrush as a stream, which is far more than delays and shares need, and the counter form means
//! concurrent calls never contend on a shared generator.

/// The uniform draws one call consumes: one for its delay, one for its fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallDraws {
    /// In (0, 1): the quantile of the delay distribution this call gets.
    pub latency: f64,
    /// In (0, 1): which fault band (errors, hang, reset, ...) this call falls into.
    pub fault: f64,
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform in the open interval (0, 1) from 53 random bits, so quantile functions never see 0 or 1.
fn unit(bits: u64) -> f64 {
    ((bits >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

impl CallDraws {
    /// The draws of call number `n` (0-based, in arrival order) on the route whose key is `route_key`.
    pub fn new(seed: u64, route_key: u64, n: u64) -> CallDraws {
        let base = (seed ^ mix(route_key)).wrapping_add(n.wrapping_mul(2).wrapping_mul(GOLDEN));
        CallDraws {
            latency: unit(mix(base.wrapping_add(GOLDEN))),
            fault: unit(mix(base.wrapping_add(GOLDEN.wrapping_mul(2)))),
        }
    }
}

/// A stable 64-bit key for a route name (FNV-1a), so a route's draws do not depend on which other routes exist.
pub fn route_key(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Which of a list of shares a fault draw `u` falls in, walking them in order: each share is `to`'s or, during a
/// ramp (`from` given and `weight` under 1), moved linearly from `from`'s (same order) by `weight`. `None` past
/// them all: the call gets no fault.
pub fn pick_share(from: Option<&[f64]>, to: &[f64], weight: f64, u: f64) -> Option<usize> {
    let mut upper = 0.0;
    for (i, &share_to) in to.iter().enumerate() {
        upper += match from.and_then(|f| f.get(i)) {
            Some(&share_from) if weight < 1.0 => share_from * (1.0 - weight) + share_to * weight,
            _ => share_to,
        };
        if u < upper {
            return Some(i);
        }
    }
    None
}

/// A delay in seconds moved from `from`'s to `to`'s by `weight` during a ramp (`from` given, `weight` under 1).
pub fn ramp_delay(from: Option<f64>, to: f64, weight: f64) -> f64 {
    match from {
        Some(f) if weight < 1.0 => f * (1.0 - weight) + to * weight,
        _ => to,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_route_and_call_number_give_the_same_draws() {
        assert_eq!(
            CallDraws::new(7, route_key("pricing"), 41),
            CallDraws::new(7, route_key("pricing"), 41)
        );
        assert_ne!(
            CallDraws::new(7, route_key("pricing"), 41),
            CallDraws::new(8, route_key("pricing"), 41)
        );
        assert_ne!(
            CallDraws::new(7, route_key("pricing"), 41),
            CallDraws::new(7, route_key("reviews"), 41)
        );
    }

    #[test]
    fn a_share_is_picked_in_order_and_moves_along_a_ramp() {
        assert_eq!(pick_share(None, &[0.2, 0.3], 1.0, 0.1), Some(0));
        assert_eq!(pick_share(None, &[0.2, 0.3], 1.0, 0.4), Some(1));
        assert_eq!(pick_share(None, &[0.2, 0.3], 1.0, 0.6), None);
        assert_eq!(
            pick_share(Some(&[0.0, 0.0]), &[0.2, 0.3], 0.5, 0.15),
            Some(1)
        );
        assert_eq!(ramp_delay(Some(1.0), 3.0, 0.5), 2.0);
    }

    #[test]
    fn draws_are_uniform_and_never_touch_zero_or_one() {
        let n = 100_000;
        let mut buckets = [0u32; 10];
        for i in 0..n {
            let d = CallDraws::new(1, 2, i);
            for u in [d.latency, d.fault] {
                assert!(u > 0.0 && u < 1.0);
                buckets[(u * 10.0) as usize] += 1;
            }
        }
        // 20k expected per decile; five binomial standard errors is about 670.
        for b in buckets {
            assert!((i64::from(b) - 20_000).abs() < 700, "{buckets:?}");
        }
    }
}
