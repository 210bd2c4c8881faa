//! Selection: DGC's sampled threshold keeps between 0.8·k and 1.3·k on realistic,
//! heavy-tailed gradients; exact top-k never chooses a zero. (Exact top-k against a full
//! sort, and the GPU against the CPU, are tested beside it in crates/tensor/tests/sparsify.rs.)

mod common;

use common::heavy_tailed;
use compress::select::{exact_topk, sampled_threshold};
use tensor::Rng;

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

#[test]
fn exact_topk_never_chooses_a_zero() {
    assert_eq!(exact_topk(&[0.0, -0.0, 3.0, 0.0, -1.0], 3), vec![2, 4]);
    assert_eq!(exact_topk(&[0.0; 10], 4), Vec::<u32>::new());
    assert_eq!(exact_topk(&[f32::NAN, 0.0], 2), vec![0]);
}

/// Fewer nonzeros than k: what is sent and counted is the nonzeros only (zeros used to
/// travel at 8 bytes each and count as sent values).
#[test]
fn an_all_zero_gradient_sends_no_values() {
    use compress::{build, HostExchange, MethodSpec, ParamSpec, StepInfo};
    let n = 10_000;
    let cases: [(&str, &[&str]); 5] = [
        ("topk", &["density=0.01"]),
        ("local", &["density=0.01"]),
        ("gtopk", &["density=0.01"]),
        (
            "dgc",
            &["density=0.01", "warmup_epochs=0", "sampling=false"],
        ),
        // DGC's first warm-up stage (25 %) takes the exact path.
        ("dgc", &["density=0.01", "warmup_epochs=1"]),
    ];
    for (method, opts) in cases {
        let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
        let sent = common::job(2, |rank, c| {
            let spec = MethodSpec::parse(method, &opts).unwrap();
            let mut m = build(&spec, &common::ctx(rank, 2)).unwrap();
            m.init(&[ParamSpec::new("w", &[n])]).unwrap();
            m.begin_step(StepInfo {
                step: 0,
                epoch: 0.0,
            });
            let u = m
                .exchange(HostExchange::new(c, 0, &vec![0.0; n]).with_weights(&vec![0.0; n]))
                .unwrap();
            assert!(u.values.iter().all(|&v| v == 0.0));
            u.stats.sent_values
        });
        assert_eq!(sent, vec![0, 0], "{method} {opts:?}");
    }
}
