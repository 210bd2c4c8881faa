//! `tensor::sparsify`: the CPU side against plain references (a full sort, a filter), and
//! the GPU side against the CPU bit for bit (indices, value bits, accumulator bits), on
//! inputs with ties, zeros, NaN and sizes around the kernels' 4096-entry tiles.
//!
//! The GPU halves run when a GPU is present; without one they say so and pass, unless
//! `REQUIRE_GPU=1` (scripts/gpu-check.sh sets it).

use tensor::sparsify::{self, Accumulate, AccumulateRule, Selected};
use tensor::{cuda, Device, Rng, Tensor};

fn gpu() -> Option<Device> {
    cuda::gpu_for_tests()
}

/// Heavy-tailed values (normal × 2^normal) with planted ties of both signs and zeros.
fn gradient(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    let mut v: Vec<f32> = (0..n)
        .map(|_| (r.normal() * (r.normal() * 2.0).exp2()) as f32)
        .collect();
    for i in 0..n / 50 {
        let (a, b) = (r.below(n), r.below(n));
        v[b] = if i % 2 == 0 { v[a] } else { -v[a] };
    }
    for _ in 0..n / 20 {
        v[r.below(n)] = 0.0;
    }
    v
}

fn flat(v: &[f32], d: Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), v.len(), d).unwrap()
}

fn host(s: &Selected) -> (Vec<u32>, Vec<u32>) {
    let (i, v) = s.to_vecs().unwrap();
    (i, v.iter().map(|x| x.to_bits()).collect())
}

/// The k largest magnitudes by a full sort, ties to the lower index, zeros dropped.
fn sorted_topk(v: &[f32], k: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..v.len() as u32).collect();
    order.sort_by(|&a, &b| {
        v[b as usize]
            .abs()
            .total_cmp(&v[a as usize].abs())
            .then(a.cmp(&b))
    });
    let mut want: Vec<u32> = order[..k.min(v.len())]
        .iter()
        .copied()
        .filter(|&i| v[i as usize] != 0.0)
        .collect();
    want.sort_unstable();
    want
}

const SIZES: [usize; 6] = [1, 100, 4095, 4097, 100_003, 1_000_000];

fn ks(n: usize) -> Vec<usize> {
    vec![0, 1, 7, n / 1000 + 1, n / 3, n, n + 5]
}

#[test]
fn topk_magnitude_matches_a_full_sort_and_the_gpu_matches_the_cpu() {
    let dev = gpu();
    for (s, &n) in SIZES.iter().enumerate() {
        let v = gradient(n, s as u64 + 1);
        for k in ks(n) {
            let want = sorted_topk(&v, k);
            let cpu = host(&sparsify::topk_magnitude(&flat(&v, Device::Cpu), k).unwrap());
            assert_eq!(cpu.0, want, "cpu n {n} k {k}");
            let vals: Vec<u32> = want.iter().map(|&i| v[i as usize].to_bits()).collect();
            assert_eq!(cpu.1, vals, "cpu values n {n} k {k}");
            if let Some(d) = dev {
                let g = host(&sparsify::topk_magnitude(&flat(&v, d), k).unwrap());
                assert_eq!(g, cpu, "gpu vs cpu n {n} k {k}");
            }
        }
    }
}

#[test]
fn ties_at_the_kth_magnitude_go_to_the_lower_indices() {
    // 10,000 entries of equal magnitude (both signs), the k-th among them: the first
    // (k − bigger) by index win, across many tiles.
    let n = 40_000;
    let mut v = vec![0.5f32; n];
    for (i, x) in v.iter_mut().enumerate() {
        if i % 3 == 0 {
            *x = -0.5;
        }
        if i % 4 != 0 {
            *x = 0.25;
        }
        if i % 997 == 0 {
            *x = 2.0;
        }
    }
    let dev = gpu();
    for k in [1, 41, 100, 5000, 10_000, 10_040, 30_000] {
        let want = sorted_topk(&v, k);
        let cpu = host(&sparsify::topk_magnitude(&flat(&v, Device::Cpu), k).unwrap());
        assert_eq!(cpu.0, want, "k {k}");
        if let Some(d) = dev {
            assert_eq!(
                host(&sparsify::topk_magnitude(&flat(&v, d), k).unwrap()),
                cpu,
                "gpu k {k}"
            );
        }
    }
}

#[test]
fn nan_ranks_above_infinity_and_is_selected() {
    let v = [1.0, f32::NAN, -f32::INFINITY, 3.0, 0.0, -f32::NAN];
    let dev = gpu();
    for k in 1..=6 {
        let cpu = host(&sparsify::topk_magnitude(&flat(&v, Device::Cpu), k).unwrap());
        assert_eq!(cpu.0, sorted_topk(&v, k), "k {k}");
        if let Some(d) = dev {
            assert_eq!(
                host(&sparsify::topk_magnitude(&flat(&v, d), k).unwrap()),
                cpu,
                "gpu k {k}"
            );
        }
    }
    for t in [0.0, 1.0, 2.0, f32::INFINITY, f32::NAN] {
        let want: Vec<u32> = (0..v.len() as u32)
            .filter(|&i| {
                let a = v[i as usize].abs();
                (a >= t || a.is_nan()) && a != 0.0
            })
            .collect();
        let cpu = host(&sparsify::at_least(&flat(&v, Device::Cpu), t).unwrap());
        assert_eq!(cpu.0, want, "threshold {t}");
        if let Some(d) = dev {
            assert_eq!(
                host(&sparsify::at_least(&flat(&v, d), t).unwrap()),
                cpu,
                "gpu threshold {t}"
            );
        }
    }
}

#[test]
fn threshold_selection_count_and_kth_largest_agree_with_their_definitions() {
    let dev = gpu();
    for (s, &n) in SIZES.iter().enumerate() {
        let v = gradient(n, 100 + s as u64);
        let c = flat(&v, Device::Cpu);
        let mut mags: Vec<f32> = v.iter().map(|a| a.abs()).collect();
        mags.sort_by(|a, b| b.total_cmp(a));
        for kth in [1, n / 7 + 1, n] {
            let want = mags[kth - 1];
            let got = sparsify::kth_largest_magnitude(&c, kth).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "cpu n {n} kth {kth}");
            if let Some(d) = dev {
                let g = sparsify::kth_largest_magnitude(&flat(&v, d), kth).unwrap();
                assert_eq!(g.to_bits(), want.to_bits(), "gpu n {n} kth {kth}");
            }
            let t = want;
            let filt: Vec<u32> = (0..n as u32)
                .filter(|&i| v[i as usize].abs() >= t && v[i as usize] != 0.0)
                .collect();
            let cpu = host(&sparsify::at_least(&c, t).unwrap());
            assert_eq!(cpu.0, filt, "cpu at_least n {n} t {t}");
            assert_eq!(sparsify::count_at_least(&c, t).unwrap(), filt.len());
            if let Some(d) = dev {
                let gt = flat(&v, d);
                assert_eq!(
                    host(&sparsify::at_least(&gt, t).unwrap()),
                    cpu,
                    "gpu at_least n {n}"
                );
                assert_eq!(
                    sparsify::count_at_least(&gt, t).unwrap(),
                    filt.len(),
                    "gpu count n {n}"
                );
            }
        }
    }
    assert!(sparsify::kth_largest_magnitude(&flat(&[1.0], Device::Cpu), 2).is_err());
    assert!(sparsify::kth_largest_magnitude(&flat(&[1.0], Device::Cpu), 0).is_err());
}

#[test]
fn sample_zero_at_and_sum_of_squares() {
    let dev = gpu();
    let v = gradient(100_003, 9);
    let devices: Vec<Device> = std::iter::once(Device::Cpu).chain(dev).collect();
    for d in devices {
        let t = flat(&v, d);
        let s = sparsify::strided_sample(&t, 5, 97, 1000)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let want: Vec<f32> = (0..1000).map(|j| v[5 + j * 97]).collect();
        assert_eq!(s, want, "{d:?}");
        assert!(
            sparsify::strided_sample(&t, 5, 100, 1001).is_err(),
            "past the end"
        );
        let sq = sparsify::sum_of_squares(&t).unwrap();
        let want: f64 = v.iter().map(|&a| (a as f64) * (a as f64)).sum();
        assert!(((sq - want) / want).abs() < 1e-12, "{d:?}: {sq} vs {want}");
        // The same order on both devices: the same bits.
        assert_eq!(
            sq.to_bits(),
            sparsify::sum_of_squares_slice(&v).to_bits(),
            "{d:?}"
        );
        let sel = sparsify::topk_magnitude(&t, 500).unwrap();
        sparsify::zero_at(&t, &sel.indices).unwrap();
        let after = t.to_vec::<f32>().unwrap();
        let idx = sel.indices.to_vec::<u32>().unwrap();
        for (i, (&a, &b)) in after.iter().zip(&v).enumerate() {
            let chosen = idx.binary_search(&(i as u32)).is_ok();
            assert_eq!(
                a.to_bits(),
                if chosen { 0 } else { b.to_bits() },
                "{d:?} entry {i}"
            );
        }
    }
}

#[test]
fn bad_indices_and_ranges_are_errors_on_every_device() {
    let devices: Vec<Device> = std::iter::once(Device::Cpu).chain(gpu()).collect();
    for d in devices {
        let x = flat(&[1.0, 2.0, 3.0], d);
        let bad = Tensor::from_vec(vec![1u32, 3, 1_000_000], 3, d).unwrap();
        let e = sparsify::zero_at(&x, &bad).unwrap_err().to_string();
        assert!(e.contains("2 of 3 indices out of range"), "{d:?}: {e}");
        // A selection from a tensor of another length is refused before any kernel.
        let other = sparsify::topk_magnitude(&flat(&[5.0; 8], d), 2).unwrap();
        assert!(sparsify::zero_selected(&x, &other).is_err(), "{d:?}");
        let own = sparsify::topk_magnitude(&x, 1).unwrap();
        sparsify::zero_selected(&x, &own).unwrap();
        assert_eq!(x.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 0.0], "{d:?}");
        // Sample positions that overflow are an error, not a wrap or a panic.
        for (start, stride, count) in [(0, 1usize << 63, 3), (usize::MAX, 1, 2), (0, 0, 2)] {
            assert!(
                sparsify::strided_sample(&x, start, stride, count).is_err(),
                "{d:?}"
            );
        }
        // A threshold at or below zero passes every nonzero, as `|x| >= t` does.
        let z = flat(&[0.0, -1.0, 2.0, -0.0], d);
        for t in [0.0, -0.0, -1.0, f32::NEG_INFINITY] {
            let (idx, _) = sparsify::at_least(&z, t).unwrap().to_vecs().unwrap();
            assert_eq!(idx, vec![1, 2], "{d:?} threshold {t}");
        }
    }
}

/// Beyond 1,024 tiles of 4,096 entries each scan thread handles several tiles; ties at the
/// k-th magnitude spread over many of them.
#[test]
fn large_inputs_select_the_same_on_the_gpu() {
    let Some(d) = gpu() else { return };
    for (n, seed) in [(4_194_305usize, 31u64), (10_000_019, 32)] {
        let mut v = gradient(n, seed);
        // Quantise so that many entries share each magnitude.
        for x in v.iter_mut() {
            *x = (*x * 16.0).round() / 16.0;
        }
        let (c, g) = (flat(&v, Device::Cpu), flat(&v, d));
        for k in [n / 1000, n / 100, n / 7] {
            let cpu = host(&sparsify::topk_magnitude(&c, k).unwrap());
            assert_eq!(
                host(&sparsify::topk_magnitude(&g, k).unwrap()),
                cpu,
                "n {n} k {k}"
            );
        }
        for t in [0.5f32, 4.0] {
            let cpu = host(&sparsify::at_least(&c, t).unwrap());
            assert_eq!(
                host(&sparsify::at_least(&g, t).unwrap()),
                cpu,
                "n {n} threshold {t}"
            );
        }
        assert_eq!(
            sparsify::sum_of_squares(&g).unwrap().to_bits(),
            sparsify::sum_of_squares(&c).unwrap().to_bits(),
            "n {n}"
        );
    }
}

#[test]
fn accumulation_is_bit_for_bit_the_same_on_the_gpu() {
    let Some(d) = gpu() else { return };
    let n = 300_001;
    for rule in [
        AccumulateRule::Plain,
        AccumulateRule::Momentum,
        AccumulateRule::Nesterov,
    ] {
        for with_w in [false, true] {
            let a = Accumulate {
                rule,
                scale: 0.8125,
                momentum: 0.9,
                weight_decay: 1e-4,
            };
            let (g, w) = (gradient(n, 1), gradient(n, 2));
            let run = |dev: Device| -> (Vec<u32>, Vec<u32>) {
                let u = (rule != AccumulateRule::Plain).then(|| flat(&gradient(n, 3), dev));
                let v = flat(&gradient(n, 4), dev);
                let (gt, wt) = (flat(&g, dev), flat(&w, dev));
                for _ in 0..3 {
                    sparsify::accumulate(u.as_ref(), &v, &gt, with_w.then_some(&wt), a).unwrap();
                }
                let bits = |t: &Tensor| {
                    t.to_vec::<f32>()
                        .unwrap()
                        .iter()
                        .map(|x| x.to_bits())
                        .collect::<Vec<u32>>()
                };
                (u.as_ref().map(bits).unwrap_or_default(), bits(&v))
            };
            assert_eq!(run(d), run(Device::Cpu), "{rule:?} weights {with_w}");
        }
    }
}

#[test]
fn accumulation_refuses_mismatched_inputs() {
    let c = |n: usize| flat(&vec![1.0; n], Device::Cpu);
    let a = Accumulate {
        rule: AccumulateRule::Momentum,
        scale: 1.0,
        momentum: 0.9,
        weight_decay: 0.0,
    };
    let (u, v, g) = (c(4), c(4), c(4));
    assert!(
        sparsify::accumulate(None, &v, &g, None, a).is_err(),
        "no velocity"
    );
    assert!(
        sparsify::accumulate(Some(&u), &v, &c(5), None, a).is_err(),
        "length"
    );
    assert!(
        sparsify::accumulate(Some(&u), &v, &v, None, a).is_err(),
        "aliasing"
    );
    sparsify::accumulate(Some(&u), &v, &g, None, a).unwrap();
    // u = 0.9·1 + 1, v = 1 + u.
    assert_eq!(
        v.to_vec::<f32>().unwrap(),
        vec![1.0 + (0.9f32 * 1.0 + 1.0); 4]
    );
}

/// The CPU's Σ x² simulates only the GPU threads that get values; against the whole grid
/// (every lane, every block) it must give the same bits at any length.
#[test]
fn sum_of_squares_in_the_gpu_order_at_every_length() {
    let full = |v: &[f32]| -> f64 {
        let (blocks, threads) = (1024usize, 256usize);
        let mut acc = vec![0f64; blocks * threads];
        let lanes = acc.len();
        for (i, &x) in v.iter().enumerate() {
            acc[i % lanes] += (x as f64) * (x as f64);
        }
        let tree = |s: &mut [f64]| {
            let mut o = threads / 2;
            while o > 0 {
                for t in 0..o {
                    s[t] += s[t + o];
                }
                o /= 2;
            }
            s[0]
        };
        let partial: Vec<f64> = acc.chunks_mut(threads).map(tree).collect();
        let mut last: Vec<f64> = (0..threads)
            .map(|t| {
                (t..blocks)
                    .step_by(threads)
                    .fold(0.0, |a, b| a + partial[b])
            })
            .collect();
        tree(&mut last)
    };
    for n in [0, 1, 255, 257, 70_001, 262_144, 262_145, 600_000] {
        let v = gradient(n, n as u64);
        assert_eq!(
            sparsify::sum_of_squares_slice(&v).to_bits(),
            full(&v).to_bits(),
            "n {n}"
        );
    }
}
