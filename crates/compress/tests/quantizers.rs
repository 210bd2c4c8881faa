//! The quantizers and the methods' message formats: QSGD is unbiased and within its
//! variance bound; TernGrad is unbiased; SBC binarizes as the paper says; every message
//! round-trips, and every decoder survives random and truncated input.

mod common;

use common::heavy_tailed;
use compress::methods::qsgd::{self, Coding};
use compress::methods::{onebit, sbc, terngrad};
use compress::{build, help_text, Context, MethodSpec};
use tensor::Rng;

#[test]
fn qsgd_is_unbiased_and_within_its_variance_bound() {
    let d = 512;
    let v = heavy_tailed(d, 5);
    let norm2: f64 = v.iter().map(|&x| (x as f64).powi(2)).sum();
    for s in [1u32, 3, 15, 255] {
        let mut rng = Rng::new(s as u64);
        let trials = 20_000;
        let mut mean = vec![0f64; d];
        let mut err2 = 0f64;
        for _ in 0..trials {
            let q = qsgd::quantize(&v, s, &mut rng);
            let mut out = vec![0f32; d];
            qsgd::dequantize_add(&q, s, &mut out);
            for i in 0..d {
                mean[i] += out[i] as f64 / trials as f64;
                err2 += (out[i] as f64 - v[i] as f64).powi(2) / trials as f64;
            }
        }
        // Unbiased: the mean's error is within 5 standard errors of the per-coordinate
        // quantization noise (bounded by unit²/4 with unit = ‖v‖/s).
        let unit = norm2.sqrt() / s as f64;
        let se = (unit * unit / 4.0 / trials as f64).sqrt();
        for i in 0..d {
            assert!(
                (mean[i] - v[i] as f64).abs() <= 5.0 * se + 1e-7,
                "s={s} coordinate {i}: mean {} vs {}",
                mean[i],
                v[i]
            );
        }
        let bound = (d as f64 / (s * s) as f64).min((d as f64).sqrt() / s as f64) * norm2;
        assert!(
            err2 <= bound,
            "s={s}: E|Q(v)-v|² = {err2} above the bound {bound}"
        );
        // And not trivially: quantization does add variance.
        assert!(err2 > 0.0);
    }
}

#[test]
fn qsgd_scaled_by_the_max_is_unbiased_with_less_variance_and_more_nonzeros() {
    let d = 512;
    let v = heavy_tailed(d, 5);
    let max = v.iter().fold(0f64, |m, &x| m.max((x as f64).abs()));
    let s = 3u32;
    let trials = 20_000;
    let (mut mean, mut err2) = (vec![0f64; d], [0f64; 2]);
    let mut nonzeros = [0usize; 2];
    let mut rng = Rng::new(9);
    for _ in 0..trials {
        for (k, scale) in [qsgd::Scale::L2, qsgd::Scale::Max].into_iter().enumerate() {
            let q = qsgd::quantize_with(&v, s, scale, &mut rng);
            nonzeros[k] += q.entries.len();
            let mut out = vec![0f32; d];
            qsgd::dequantize_add(&q, s, &mut out);
            for i in 0..d {
                if k == 1 {
                    mean[i] += out[i] as f64 / trials as f64;
                }
                err2[k] += (out[i] as f64 - v[i] as f64).powi(2) / trials as f64;
            }
        }
    }
    // Unbiased: within 5 standard errors (noise per coordinate ≤ unit²/4, unit = max/s).
    let unit = max / s as f64;
    let se = (unit * unit / 4.0 / trials as f64).sqrt();
    for i in 0..d {
        assert!(
            (mean[i] - v[i] as f64).abs() <= 5.0 * se + 1e-7,
            "coordinate {i}"
        );
    }
    // The max is at most the 2-norm: finer levels, less variance, more values sent.
    assert!(err2[1] < err2[0], "{err2:?}");
    assert!(nonzeros[1] > nonzeros[0], "{nonzeros:?}");
    // A NaN is not hidden by the max: the encoder refuses it.
    let mut bad = v.clone();
    bad[7] = f32::NAN;
    let e = qsgd::encode_with(&bad, 2, 128, Coding::Elias, qsgd::Scale::Max, &mut rng).unwrap_err();
    assert!(e.to_string().contains("inf or"), "{e}");
}

#[test]
fn qsgd_messages_round_trip_with_both_codings() {
    let v = heavy_tailed(10_000, 6);
    for coding in [Coding::Elias, Coding::Fixed] {
        for (bits, bucket) in [(2, 128), (4, 512), (8, 8192)] {
            let (bytes, _) = qsgd::encode(&v, bits, bucket, coding, &mut Rng::new(1)).unwrap();
            // The same quantization, decoded directly.
            let mut rng = Rng::new(1);
            let s = (1 << bits) - 1;
            let mut want = vec![0f32; v.len()];
            for (c, o) in v.chunks(bucket).zip(want.chunks_mut(bucket)) {
                qsgd::dequantize_add(&qsgd::quantize(c, s, &mut rng), s, o);
            }
            let mut got = vec![0f32; v.len()];
            qsgd::decode_add(&bytes, bits, bucket, coding, &mut got).unwrap();
            assert_eq!(got, want, "{coding:?} {bits} bits, d={bucket}");
            if coding == Coding::Fixed {
                let buckets = v.len().div_ceil(bucket);
                assert_eq!(
                    bytes.len(),
                    (buckets * 32 + v.len() * (1 + bits as usize)).div_ceil(8)
                );
            }
        }
    }
}

#[test]
fn terngrad_is_unbiased_and_round_trips() {
    let v = heavy_tailed(300, 8);
    let mut rng = Rng::new(3);
    let trials = 20_000;
    let mut mean = vec![0f64; v.len()];
    let s = v.iter().fold(0f32, |m, x| m.max(x.abs())) as f64;
    for _ in 0..trials {
        let (bytes, _) = terngrad::encode(&v, &mut rng).unwrap();
        assert_eq!(bytes.len(), 4 + (2 * v.len()).div_ceil(8));
        let mut out = vec![0f32; v.len()];
        terngrad::decode_add(&bytes, &mut out).unwrap();
        for (m, &o) in mean.iter_mut().zip(&out) {
            *m += o as f64 / trials as f64;
        }
    }
    let se = s / 2.0 / (trials as f64).sqrt();
    for (m, &x) in mean.iter().zip(&v) {
        assert!((m - x as f64).abs() < 5.0 * se, "{m} vs {x}");
    }
}

#[test]
fn onebit_reconstructs_with_the_two_means() {
    let a = vec![1.0f32, 3.0, -2.0, -4.0, 0.0, 5.0];
    let (bytes, q) = onebit::encode(&a, 0);
    assert_eq!(q, vec![2.25, 2.25, -3.0, -3.0, 2.25, 2.25]);
    let mut out = vec![0f32; a.len()];
    onebit::decode_add(&bytes, 0, &mut out).unwrap();
    assert_eq!(out, q);
    // Buckets of 2: each pair has its own means.
    let (bytes, q) = onebit::encode(&a, 2);
    assert_eq!(q, vec![2.0, 2.0, -3.0, -3.0, 2.5, 2.5]);
    let mut out = vec![0f32; a.len()];
    onebit::decode_add(&bytes, 2, &mut out).unwrap();
    assert_eq!(out, q);
}

#[test]
fn sbc_binarizes_the_side_with_the_larger_mean() {
    // Positive side (top 2 of 10 at p = 0.2): 5, 4 → mean 4.5; negative: −9, −1 → −5.
    let a = vec![5.0f32, -9.0, 4.0, 0.5, -1.0, 0.1, 3.0, -0.5, 0.2, 0.0];
    let (mean, pos) = sbc::binarize(&a, 0.2);
    assert_eq!((mean, pos.clone()), (-5.0, vec![1, 4]));
    let bytes = sbc::encode(mean, &pos, a.len()).unwrap();
    let mut out = vec![0f32; a.len()];
    assert_eq!(sbc::decode_add(&bytes, &mut out).unwrap(), 2);
    assert_eq!(out[1], -5.0);
    assert_eq!(out[4], -5.0);
    assert_eq!(out.iter().filter(|&&x| x != 0.0).count(), 2);
    let (mean, pos) = sbc::binarize(&[1.0, 2.0, -0.5, 3.0], 0.5);
    assert_eq!((mean, pos), (2.5, vec![1, 3]));
}

#[test]
fn sbc_positions_cost_what_the_golomb_formula_says() {
    // At p = 1 % of 1 M values, b* = 6 and formula (5) gives ≈ 7.6 bits per position.
    let n = 1_000_000;
    let v = heavy_tailed(n, 9);
    let (mean, pos) = sbc::binarize(&v, 0.01);
    let bytes = sbc::encode(mean, &pos, n).unwrap();
    let p = pos.len() as f64 / n as f64;
    let b = compress::codec::golomb::optimal_b(p);
    let want = compress::codec::golomb::expected_bits(p, b);
    let got = (bytes.len() - 9) as f64 * 8.0 / pos.len() as f64;
    assert!(
        (got - want).abs() / want < 0.03,
        "{got} bits per position vs formula {want}"
    );
}

#[test]
fn message_decoders_survive_random_and_truncated_input() {
    let mut r = Rng::new(11);
    let v = heavy_tailed(4096, 12);
    let (q, _) = qsgd::encode(&v, 4, 512, Coding::Elias, &mut Rng::new(2)).unwrap();
    let (qf, _) = qsgd::encode(&v, 4, 512, Coding::Fixed, &mut Rng::new(2)).unwrap();
    let (t, _) = terngrad::encode(&v, &mut Rng::new(3)).unwrap();
    let (o, _) = onebit::encode(&v, 100);
    let (mean, pos) = sbc::binarize(&v, 0.01);
    let s = sbc::encode(mean, &pos, v.len()).unwrap();
    let z = {
        let idx = compress::select::exact_topk(&v, 40);
        let vals: Vec<f32> = idx.iter().map(|&i| v[i as usize]).collect();
        compress::codec::zero_run::encode_sparse(&idx, &vals).unwrap()
    };
    type Decoder = Box<dyn Fn(&[u8]) -> bool>;
    let decoders: Vec<(&str, Vec<u8>, Decoder)> = vec![
        (
            "qsgd elias",
            q,
            Box::new(|b| qsgd::decode_add(b, 4, 512, Coding::Elias, &mut vec![0.0; 4096]).is_ok()),
        ),
        (
            "qsgd fixed",
            qf,
            Box::new(|b| qsgd::decode_add(b, 4, 512, Coding::Fixed, &mut vec![0.0; 4096]).is_ok()),
        ),
        (
            "terngrad",
            t,
            Box::new(|b| terngrad::decode_add(b, &mut vec![0.0; 4096]).is_ok()),
        ),
        (
            "onebit",
            o,
            Box::new(|b| onebit::decode_add(b, 100, &mut vec![0.0; 4096]).is_ok()),
        ),
        (
            "sbc",
            s,
            Box::new(|b| sbc::decode_add(b, &mut vec![0.0; 4096]).is_ok()),
        ),
        (
            "zero-run",
            z,
            Box::new(|b| compress::codec::zero_run::decode_add(b, &mut vec![0.0; 4096]).is_ok()),
        ),
    ];
    for (name, good, decode) in &decoders {
        assert!(decode(good), "{name}: a valid message must decode");
        for cut in [1, 2, 5, good.len() / 2] {
            if cut <= good.len() && *name != "zero-run" {
                assert!(
                    !decode(&good[..good.len() - cut]),
                    "{name}: truncated by {cut} accepted"
                );
            }
        }
        for _ in 0..300 {
            let len = r.below(2 * good.len() + 16);
            let junk: Vec<u8> = (0..len).map(|_| r.below(256) as u8).collect();
            let _ = decode(&junk); // must not panic
            let mut flipped = good.clone();
            if !flipped.is_empty() {
                let i = r.below(flipped.len());
                flipped[i] ^= 1 << r.below(8);
                let _ = decode(&flipped);
            }
        }
    }
}

#[test]
fn options_are_checked_against_the_method_table() {
    let ctx = Context {
        rank: 0,
        world: 2,
        seed: 1,
        momentum: 0.9,
        nesterov: false,
        weight_decay: 0.0,
    };
    let parse = |name: &str, opts: &[&str]| {
        MethodSpec::parse(
            name,
            &opts.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    let e = parse("topk", &["mode=sum"]).unwrap_err().to_string();
    assert!(e.contains("no option 'mode'") && e.contains("local"), "{e}");
    let e = parse("nope", &[]).unwrap_err().to_string();
    assert!(e.contains("unknown method") && e.contains("dgc"), "{e}");
    assert!(parse("dgc", &["density"]).is_err());
    let e = build(&parse("dgc", &["density=2"]).unwrap(), &ctx)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("(0, 1]"), "{e}");
    let e = build(&parse("dgc", &["momentum_correction=false"]).unwrap(), &ctx)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("masking"), "{e}");
    let e = build(&parse("qsgd", &["preset=3bit"]).unwrap(), &ctx)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("2bit"), "{e}");
    // 2³² + 4 bits is out of range, not 4 bits.
    for bits in ["17", "4294967300"] {
        let e = build(&parse("qsgd", &[&format!("bits={bits}")]).unwrap(), &ctx)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("1..=16"), "bits={bits}: {e}");
    }
    let m = build(&parse("sbc", &["preset=3"]).unwrap(), &ctx).unwrap();
    assert_eq!(m.describe(), "sbc(delay=100, density=0.01, masking=true)");
    let m = build(&parse("qsgd", &["preset=8bit-8192"]).unwrap(), &ctx).unwrap();
    assert!(
        m.describe().contains("bits=8, s=255, bucket=8192"),
        "{}",
        m.describe()
    );
    let m = build(&parse("dgc", &[]).unwrap(), &ctx).unwrap();
    assert!(
        m.describe()
            .contains("warmup_densities=[0.25, 0.0625, 0.015625, 0.004]"),
        "{}",
        m.describe()
    );
    for name in [
        "dense", "topk", "local", "dgc", "gtopk", "sbc", "qsgd", "terngrad", "onebit", "fedavg",
    ] {
        assert!(help_text().contains(name));
        build(&parse(name, &[]).unwrap(), &ctx).unwrap();
    }
}

/// FNV-1a of a message: a fingerprint of its exact bytes.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn qsgd_wire_format_is_pinned_to_the_byte() {
    // A speed-up of the quantizer or the coders must leave every byte as it is: the
    // messages of a fixed gradient and seed, fingerprinted with their lengths. Only a
    // deliberate format change updates these, and docs/compress.md's format with them.
    let v = heavy_tailed(20_000, 11);
    let cases = [
        (
            2,
            128,
            Coding::Elias,
            0xd301_6db0_dd8b_9ec4_u64,
            3_669_usize,
        ),
        (4, 512, Coding::Elias, 0xb8e6_f447_9bd2_8d97, 5_032),
        (8, 512, Coding::Elias, 0x6542_b550_d56b_1aa2, 17_785),
        (4, 512, Coding::Fixed, 0x0afd_52bd_fced_68ae, 12_660),
    ];
    let mut got = Vec::new();
    for (bits, bucket, coding, _, _) in cases {
        let (bytes, _) = qsgd::encode(&v, bits, bucket, coding, &mut Rng::new(99)).unwrap();
        got.push((fnv(&bytes), bytes.len()));
    }
    let want: Vec<(u64, usize)> = cases.iter().map(|c| (c.3, c.4)).collect();
    assert_eq!(got, want, "{got:#x?}");
}

#[test]
fn a_non_finite_gradient_is_refused_by_its_sender() {
    // A diverged gradient must fail where it is encoded, saying so, rather than reach the
    // receivers as a "malformed" message (QSGD's norm, TernGrad's scale) or, in
    // TernGrad, turn its NaN into zeros.
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut v = heavy_tailed(2_000, 13);
        v[1_500] = bad;
        let e = qsgd::encode(&v, 4, 512, Coding::Elias, &mut Rng::new(1)).unwrap_err();
        assert!(e.to_string().contains("bucket 2 of the gradient"), "{e}");
        assert!(e.to_string().contains("diverged"), "{e}");
        let e = terngrad::encode(&v, &mut Rng::new(1)).unwrap_err();
        assert!(e.to_string().contains("inf or NaN"), "{e}");
    }
    // Finite values whose bucket norm is beyond f32 are refused too.
    let big = vec![3e38f32; 512];
    assert!(qsgd::encode(&big, 4, 512, Coding::Elias, &mut Rng::new(1)).is_err());
}

/// QSGD and TernGrad draw from counter-based streams and keep no state; a checkpoint
/// written when they kept a generator (an `rng` entry) still loads, anything else is
/// refused.
#[test]
fn counter_based_quantizers_keep_no_state_and_accept_an_old_rng() {
    for name in ["qsgd", "terngrad"] {
        let ctx = common::ctx(0, 1);
        let mut m = common::built(name, &[] as &[&str], &ctx, [[100usize]]);
        assert!(m.state().unwrap().is_empty(), "{name}");
        m.load_state(&vec![("rng".into(), vec![0.0; 16])]).unwrap();
        let e = m
            .load_state(&vec![("residual.0".into(), vec![0.0; 100])])
            .unwrap_err();
        assert!(
            e.to_string().contains("holds 1 state tensors"),
            "{name}: {e}"
        );
    }
}
