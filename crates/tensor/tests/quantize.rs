//! `tensor::quantize`: the CPU side against per-element references (the scalar functions
//! the compressors' host paths call), and the GPU side against the CPU bit for bit
//! (codes, scales, level bits, packed words), on sizes around the bucket and word edges;
//! the draws unbiased on the device within 5 standard errors over 20,000 keys.
//!
//! The GPU halves run when a GPU is present; without one they say so and pass, unless
//! `REQUIRE_GPU=1` (scripts/gpu-check.sh sets it).

use tensor::quantize::{self, BucketScale};
use tensor::{cuda, Device, Rng, Tensor};

fn gpu() -> Option<Device> {
    cuda::gpu_for_tests()
}

fn gradient(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|i| {
            if i % 17 == 0 {
                0.0
            } else {
                (r.normal() * (r.normal() * 2.0).exp2()) as f32
            }
        })
        .collect()
}

fn flat(v: &[f32], d: Device) -> Tensor {
    Tensor::from_vec(v.to_vec(), v.len(), d).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

const SIZES: [usize; 5] = [0, 1, 31, 1000, 70_001];

#[test]
fn terngrad_codes_follow_the_scalar_rule() {
    for n in SIZES {
        let v = gradient(n, n as u64);
        let s = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let key = quantize::counter_key(&[7, n as u64]);
        let want: Vec<u32> = v
            .iter()
            .enumerate()
            .map(|(i, &x)| quantize::terngrad_code(x, s, quantize::counter_uniform(key, i as u64)))
            .collect();
        let got = quantize::terngrad_codes(&flat(&v, Device::Cpu), s, key).unwrap();
        assert_eq!(got.to_vec::<u32>().unwrap(), want, "n {n}");
        if let Some(d) = gpu() {
            let g = quantize::terngrad_codes(&flat(&v, d), s, key).unwrap();
            assert_eq!(g.to_vec::<u32>().unwrap(), want, "GPU, n {n}");
        }
    }
}

#[test]
fn qsgd_quantize_follows_the_scalar_rule_on_both_devices() {
    for (n, bucket) in [(0, 4), (1, 4), (1000, 128), (1000, 999), (70_001, 512)] {
        let mut v = gradient(n, 3 + n as u64);
        // A bucket of zeros: scale 0, every level 0.
        if n >= 1000 {
            v[128..256].iter_mut().for_each(|x| *x = 0.0);
        }
        for scale in [BucketScale::L2, BucketScale::Max] {
            let key = quantize::counter_key(&[1, 2, 3]);
            let s = 15;
            let (scales, levels) =
                quantize::qsgd_quantize(&flat(&v, Device::Cpu), bucket, s, scale, key).unwrap();
            let want_scales: Vec<f64> = v
                .chunks(bucket)
                .map(|c| quantize::bucket_scale(c, scale))
                .collect();
            assert_eq!(scales, want_scales, "n {n} {scale:?}");
            let lv = levels.to_vec::<f32>().unwrap();
            for (i, &x) in v.iter().enumerate() {
                let norm = scales[i / bucket];
                let l = if norm > 0.0 {
                    quantize::qsgd_level(x, s, norm, quantize::counter_uniform(key, i as u64))
                } else {
                    0
                } as f32;
                assert_eq!(
                    lv[i],
                    if x < 0.0 { -l } else { l },
                    "n {n} {scale:?} element {i}"
                );
            }
            if let Some(d) = gpu() {
                let (gs, gl) =
                    quantize::qsgd_quantize(&flat(&v, d), bucket, s, scale, key).unwrap();
                let gs: Vec<u64> = gs.iter().map(|x| x.to_bits()).collect();
                let cs: Vec<u64> = scales.iter().map(|x| x.to_bits()).collect();
                assert_eq!(gs, cs, "GPU scales, n {n} {scale:?}");
                assert_eq!(bits(&gl), bits(&levels), "GPU levels, n {n} {scale:?}");
            }
        }
    }
}

#[test]
fn packing_on_the_gpu_equals_the_cpu() {
    let Some(d) = gpu() else { return };
    for bits in [1u32, 2, 4, 8] {
        for n in SIZES {
            let c: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
                .collect();
            let cpu =
                quantize::pack_codes(&Tensor::from_vec(c.clone(), n, Device::Cpu).unwrap(), bits)
                    .unwrap();
            let gpu =
                quantize::pack_codes(&Tensor::from_vec(c.clone(), n, d).unwrap(), bits).unwrap();
            let w = cpu.to_vec::<u32>().unwrap();
            assert_eq!(gpu.to_vec::<u32>().unwrap(), w, "{bits} bits, n {n}");
            let back = quantize::unpack_codes(&gpu, bits, n)
                .unwrap()
                .to_vec::<u32>()
                .unwrap();
            let mask = (1u32 << bits) - 1;
            assert!(
                back.iter().zip(&c).all(|(b, c)| *b == c & mask),
                "{bits} bits, n {n}"
            );
        }
    }
}

/// TernGrad's and QSGD's draws on the device are unbiased: over 20,000 keys the mean
/// dequantized value of each element is within 5 standard errors of the element.
#[test]
fn quantizers_are_unbiased_on_the_device() {
    let device = gpu().unwrap_or(Device::Cpu);
    let v = vec![0.3f32, -0.05, 0.7, -1.0, 0.0, 0.11, -0.6, 0.001];
    let x = flat(&v, device);
    let draws = 20_000u64;
    let s_tern = 1.0f32;
    let (mut tern, mut qsgd) = (vec![0f64; v.len()], vec![0f64; v.len()]);
    let (mut tern2, mut qsgd2) = (vec![0f64; v.len()], vec![0f64; v.len()]);
    let levels = 3u32;
    let mut norm = 0.0;
    for k in 0..draws {
        let key = quantize::counter_key(&[42, k]);
        let codes = quantize::terngrad_codes(&x, s_tern, key)
            .unwrap()
            .to_vec::<u32>()
            .unwrap();
        let (scales, l) =
            quantize::qsgd_quantize(&x, v.len(), levels, BucketScale::L2, key).unwrap();
        norm = scales[0];
        for (i, (c, l)) in codes.iter().zip(l.to_vec::<f32>().unwrap()).enumerate() {
            let t = match c {
                1 => s_tern as f64,
                2 => -(s_tern as f64),
                _ => 0.0,
            };
            let q = norm * l as f64 / levels as f64;
            tern[i] += t;
            tern2[i] += t * t;
            qsgd[i] += q;
            qsgd2[i] += q * q;
        }
    }
    let n = draws as f64;
    for (i, &x) in v.iter().enumerate() {
        for (what, sum, sq) in [("terngrad", tern[i], tern2[i]), ("qsgd", qsgd[i], qsgd2[i])] {
            let mean = sum / n;
            let se = ((sq / n - mean * mean).max(0.0) / n).sqrt();
            assert!(
                (mean - x as f64).abs() <= 5.0 * se + 1e-12,
                "{what} on {device:?}, element {i}: mean {mean} for {x} (standard error {se}, norm {norm})"
            );
        }
    }
}

#[test]
fn sign_sums_and_two_level_values_follow_the_slices() {
    for (n, bucket) in [(0, 5), (1, 5), (3000, 1000), (5000, 5000), (70_001, 2500)] {
        let v = gradient(n, 11 + n as u64);
        let want: Vec<[f64; 4]> = v.chunks(bucket).map(quantize::sign_sums_slice).collect();
        let got = quantize::sign_sums(&flat(&v, Device::Cpu), bucket).unwrap();
        assert_eq!(got, want, "n {n}");
        let codes: Vec<u32> = v.iter().map(|&x| (x >= 0.0) as u32).collect();
        let means: Vec<f32> = want
            .iter()
            .flat_map(|s| [(s[0] / s[1].max(1.0)) as f32, (s[2] / s[3].max(1.0)) as f32])
            .collect();
        let rebuilt: Vec<f32> = (0..n)
            .map(|i| means[2 * (i / bucket) + usize::from(codes[i] == 0)])
            .collect();
        let on = |d: Device| {
            let c = Tensor::from_vec(codes.clone(), n, d).unwrap();
            let m = Tensor::from_vec(means.clone(), means.len(), d).unwrap();
            quantize::two_level_values(&c, &m, bucket).unwrap()
        };
        assert_eq!(on(Device::Cpu).to_vec::<f32>().unwrap(), rebuilt, "n {n}");
        if let Some(d) = gpu() {
            let g = quantize::sign_sums(&flat(&v, d), bucket).unwrap();
            let bits =
                |s: &[[f64; 4]]| -> Vec<u64> { s.iter().flatten().map(|x| x.to_bits()).collect() };
            assert_eq!(bits(&g), bits(&want), "GPU sums, n {n}");
            assert_eq!(on(d).to_vec::<f32>().unwrap(), rebuilt, "GPU values, n {n}");
        }
    }
    // Sums in chunks of 1024 then across chunks: the order the kernels add in.
    let v = gradient(3000, 5);
    let mut want = [0f64; 4];
    for c in v.chunks(quantize::SIGN_CHUNK) {
        let p = quantize::sign_sums_slice(c);
        for k in 0..4 {
            want[k] += p[k];
        }
    }
    assert_eq!(quantize::sign_sums_slice(&v), want);
}
