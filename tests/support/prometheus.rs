//! Reading the operator's `/metrics` (Prometheus text format): a histogram's buckets, its
//! quantiles as Prometheus's `histogram_quantile` estimates them, and a counter's value. Shared by
//! the tests (`mod support`) and the scale benchmark (`#[path]`).
#![allow(dead_code)]

/// `(le, cumulative count)` of the unlabelled histogram `name`, in the order printed (ascending
/// `le`, `+Inf` last).
pub fn buckets(metrics: &str, name: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, count as u64))
        })
        .collect()
}

/// The `q` quantile (0 to 1) of a histogram's buckets, interpolated linearly inside the bucket
/// it falls in, as `histogram_quantile` does: None without observations; the highest finite
/// bound when it falls in the `+Inf` bucket.
pub fn quantile(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(le, count) in buckets {
        if count as f64 >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = (count - below) as f64;
            if inside == 0.0 {
                return Some(le);
            }
            return Some(lower + (le - lower) * (rank - below as f64) / inside);
        }
        (lower, below) = (le, count);
    }
    None
}

/// The value of the series `series` (name with its labels, as printed), 0 when absent.
pub fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE d histogram\n\
        d_bucket{le=\"0.01\"} 10\n\
        d_bucket{le=\"0.1\"} 90\n\
        d_bucket{le=\"1\"} 100\n\
        d_bucket{le=\"+Inf\"} 100\n\
        d_sum 3\nd_count 100\n\
        c_total{result=\"success\"} 7\nc_total{result=\"successes\"} 9\n";

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let b = buckets(TEXT, "d");
        assert_eq!(
            b,
            vec![(0.01, 10), (0.1, 90), (1.0, 100), (f64::INFINITY, 100)]
        );
        // rank 50 of 100: 40 of the 80 observations in (0.01, 0.1].
        let p50 = quantile(&b, 0.5).unwrap();
        assert!((p50 - 0.055).abs() < 1e-9, "{p50}");
        let p05 = quantile(&b, 0.05).unwrap();
        assert!((p05 - 0.005).abs() < 1e-9, "{p05}");
        let p99 = quantile(&b, 0.99).unwrap();
        assert!((p99 - 0.91).abs() < 1e-9, "{p99}");
    }

    #[test]
    fn the_inf_bucket_answers_the_highest_finite_bound_and_no_data_none() {
        let b = vec![(0.1, 1), (f64::INFINITY, 4)];
        assert_eq!(quantile(&b, 0.9), Some(0.1));
        assert_eq!(quantile(&[(0.1, 0), (f64::INFINITY, 0)], 0.5), None);
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn a_series_is_matched_whole() {
        assert_eq!(value(TEXT, "c_total{result=\"success\"}"), 7.0);
        assert_eq!(value(TEXT, "c_total{result=\"nothing\"}"), 0.0);
    }
}
