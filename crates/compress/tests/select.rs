//! Selection: exact top-k against a full sort; DGC's sampled threshold keeps between
//! 0.8·k and 1.3·k on realistic, heavy-tailed gradients.

mod common;

use common::heavy_tailed;
use compress::select::{exact_topk, sampled_threshold};
use tensor::Rng;

#[test]
fn exact_topk_matches_a_full_sort() {
    let v = heavy_tailed(100_003, 1);
    for k in [0, 1, 100, 5000] {
        let got = exact_topk(&v, k);
        let mut order: Vec<u32> = (0..v.len() as u32).collect();
        order.sort_by(|&a, &b| {
            v[b as usize]
                .abs()
                .total_cmp(&v[a as usize].abs())
                .then(a.cmp(&b))
        });
        let mut want = order[..k].to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "k = {k}");
    }
}

#[test]
fn sampled_threshold_keeps_between_0_8_and_1_3_k() {
    for (seed, n) in [(2, 1_000_000), (3, 250_000), (4, 2_500_000)] {
        let v = heavy_tailed(n, seed);
        for density in [0.001, 0.01] {
            let k = (n as f64 * density) as usize;
            for fraction in [0.001, 0.01] {
                let got = sampled_threshold(&v, k, fraction, &mut Rng::new(seed * 31));
                assert!(
                    got.len() * 10 >= k * 8 && got.len() * 10 <= k * 13,
                    "n {n} k {k} sample {fraction}: kept {}",
                    got.len()
                );
                assert!(got.windows(2).all(|w| w[0] < w[1]));
                // What it keeps is large: at least as large as the k-th magnitude's half.
                let kth = {
                    let mut a: Vec<f32> = v.iter().map(|x| x.abs()).collect();
                    a.select_nth_unstable_by(n - k, |x, y| x.total_cmp(y));
                    a[n - k]
                };
                assert!(got.iter().all(|&i| v[i as usize].abs() >= 0.3 * kth));
            }
        }
    }
}
