//! Every codec round-trips (property tests); every decoder survives random and truncated
//! input with an error, never a panic; Golomb coding costs what the SBC paper's formula
//! (5) says; DGC's format reaches its compression bound.

use compress::codec::{elias, golomb, zero_run, BitReader, BitWriter};
use proptest::prelude::*;
use tensor::Rng;

fn sparse_dense(n: usize, density: f64, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            if r.uniform() < density {
                r.normal() as f32 + 0.1
            } else {
                0.0
            }
        })
        .collect()
}

proptest! {
    // No failure files: a failing case is printed, and test runs write nothing into the tree.
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn zero_run_round_trips(n in 0usize..200_000, density in 0.0f64..0.05, seed in any::<u64>()) {
        let d = sparse_dense(n, density, seed);
        prop_assert_eq!(zero_run::decode(&zero_run::encode(&d), n).unwrap(), d);
    }

    /// The message length from the indices alone (what the exchange on tensors reports)
    /// is the encoding's, escapes included (densities down to one in 10^5 leave runs over
    /// 65,534).
    #[test]
    fn zero_run_length_from_indices_is_the_encodings(n in 0usize..400_000, density in 0.0f64..0.002, seed in any::<u64>()) {
        let d = sparse_dense(n, density, seed);
        let indices: Vec<u32> = (0..n as u32).filter(|&i| d[i as usize] != 0.0).collect();
        prop_assert_eq!(zero_run::encoded_len(&indices), zero_run::encode(&d).len());
    }

    #[test]
    fn golomb_round_trips(n in 1usize..100_000, density in 0.0001f64..0.5, seed in any::<u64>()) {
        let d = sparse_dense(n, density, seed);
        let pos: Vec<u32> = d.iter().enumerate().filter(|(_, &v)| v != 0.0).map(|(i, _)| i as u32).collect();
        let b = golomb::optimal_b(density);
        let bytes = golomb::encode(&pos, b).unwrap();
        prop_assert_eq!(golomb::decode(&bytes, pos.len(), b, n).unwrap(), pos);
    }

    #[test]
    fn elias_round_trips(values in prop::collection::vec(1u64..u64::MAX / 2, 0..200)) {
        let mut w = BitWriter::new();
        for &v in &values { elias::write(&mut w, v).unwrap(); }
        let bytes = w.finish();
        let mut r = BitReader::new(&bytes);
        for &v in &values { prop_assert_eq!(elias::read(&mut r).unwrap(), v); }
    }

    #[test]
    fn qsgd_buckets_round_trip(d in 1usize..2000, s in 1u32..256, seed in any::<u64>()) {
        let mut r = Rng::new(seed);
        let mut entries = Vec::new();
        for i in 0..d { if r.below(4) == 0 { entries.push((i as u32, r.below(2) == 1, 1 + r.below(s as usize) as u32)); } }
        let bucket = elias::QuantizedBucket { norm: r.normal().abs() as f32, entries };
        let mut w = BitWriter::new();
        elias::encode_qsgd(&mut w, &bucket, d).unwrap();
        let bytes = w.finish();
        prop_assert_eq!(elias::decode_qsgd(&mut BitReader::new(&bytes), d, s).unwrap(), bucket);
    }
}

#[test]
fn decoders_survive_random_and_truncated_input() {
    let mut r = Rng::new(42);
    for len in 0..300 {
        for _ in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|_| r.below(256) as u8).collect();
            let _ = zero_run::decode(&bytes, 1000);
            let _ = golomb::decode(&bytes, 50, 3, 1000);
            let _ = golomb::decode(&bytes, 50, 62, 1000);
            let _ = elias::decode_qsgd(&mut BitReader::new(&bytes), 512, 15);
            let mut br = BitReader::new(&bytes);
            while elias::read(&mut br).is_ok() {}
        }
    }
    // Valid streams cut short are errors, not partial results.
    let d = sparse_dense(5000, 0.01, 1);
    let full = zero_run::encode(&d);
    assert!(zero_run::decode(&full[..full.len() - 1], 5000).is_err());
    assert!(
        zero_run::decode(&full, 10).is_err(),
        "values beyond the tensor are rejected"
    );
    let pos: Vec<u32> = (0..5000).step_by(97).collect();
    let g = golomb::encode(&pos, 6).unwrap();
    assert!(golomb::decode(&g[..g.len() / 2], pos.len(), 6, 5000).is_err());
    // Bytes beyond the message are malformed too, not ignored.
    let mut longer = g.clone();
    longer.push(0);
    assert!(golomb::decode(&longer, pos.len(), 6, 5000).is_err());
    assert_eq!(golomb::decode(&g, pos.len(), 6, 5000).unwrap(), pos);
    // A zero-run message ends on a value, never on an escape record.
    let mut sparse = vec![0f32; 200_000];
    sparse[100_000] = 1.0;
    let z = zero_run::encode(&sparse);
    assert_eq!(z.len(), 2 + 2 + 4, "one escape, then the value's record");
    assert_eq!(zero_run::decode(&z, 200_000).unwrap(), sparse);
    assert!(zero_run::decode(&z[..2], 200_000).is_err());
}

#[test]
fn golomb_average_bits_match_formula_five() {
    for p in [0.001, 0.01, 0.1] {
        let n = 2_000_000;
        let d = sparse_dense(n, p, 7);
        let pos: Vec<u32> = d
            .iter()
            .enumerate()
            .filter(|(_, &v)| v != 0.0)
            .map(|(i, _)| i as u32)
            .collect();
        let b = golomb::optimal_b(p);
        let bits = golomb::encode(&pos, b).unwrap().len() as f64 * 8.0;
        let measured = bits / pos.len() as f64;
        let formula = golomb::expected_bits(p, b);
        eprintln!("p {p}: b* = {b}, {measured:.3} bits per position measured, {formula:.3} by formula (5)");
        assert!(
            (measured / formula - 1.0).abs() < 0.02,
            "p {p}: {measured:.3} bits vs formula {formula:.3} (b* = {b})"
        );
    }
    // The worked example: p = 0.01 gives b* = 6 and about 8.1 bits per position.
    assert_eq!(golomb::optimal_b(0.01), 6);
    assert!((golomb::expected_bits(0.01, 6) - 8.108).abs() < 0.01);
}

#[test]
fn elias_code_lengths_follow_the_recursion() {
    let len = |k: u64| {
        let mut w = BitWriter::new();
        elias::write(&mut w, k).unwrap();
        w.len_bits()
    };
    // ω(1) = 0, ω(2) = 100, ω(4) = 101000, ω(16) = 10100100000.
    assert_eq!((len(1), len(2), len(3), len(4), len(16)), (1, 3, 3, 6, 11));
    assert!(elias::write(&mut BitWriter::new(), 0).is_err());
}

#[test]
fn dgc_format_reaches_about_667x_at_density_one_in_a_thousand() {
    let n = 1_000_000;
    let mut r = Rng::new(3);
    let mut d = vec![0f32; n];
    let mut k = 0;
    while k < n / 1000 {
        let i = r.below(n);
        if d[i] == 0.0 {
            d[i] = 1.0;
            k += 1;
        }
    }
    let ratio = (4 * n) as f64 / zero_run::encode(&d).len() as f64;
    eprintln!("DGC zero-run format at density 0.001: {ratio:.1}x");
    assert!(ratio > 600.0 && ratio <= 667.0, "{ratio}");
}

#[test]
fn qsgd_buckets_with_gaps_past_the_index_range_are_errors() {
    // A peer controls the norm too: one that is not a finite value ≥ 0 is refused by
    // both decoders (a NaN would spread through the whole bucket).
    let empty_bucket = |norm: f32| {
        let mut w = BitWriter::new();
        w.bits(norm.to_bits() as u64, 32);
        elias::write(&mut w, 513).unwrap();
        w.finish()
    };
    for norm in [0.0, -0.0, 1.0, f32::MAX] {
        let bytes = empty_bucket(norm);
        assert!(elias::decode_qsgd(&mut BitReader::new(&bytes), 512, 15).is_ok());
    }
    for norm in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0, -0.5e-40] {
        let bytes = empty_bucket(norm);
        let err = elias::decode_qsgd(&mut BitReader::new(&bytes), 512, 15);
        assert!(err.is_err(), "norm {norm}: {err:?}");
        let mut out = vec![0f32; 512];
        let err = elias::decode_qsgd_add(&mut BitReader::new(&bytes), 15, &mut out);
        assert!(err.is_err(), "norm {norm}: {err:?}");
    }
    // A peer controls the gaps: one near 2^64 must be refused, not wrap or overflow.
    // (514 from −1 is index 513, one past the closing index 512 of a bucket of 512.)
    for gap in [514u64, u64::MAX / 2 + 7, u64::MAX] {
        let mut w = BitWriter::new();
        w.bits(1f32.to_bits() as u64, 32);
        elias::write(&mut w, gap).unwrap();
        w.bit(false);
        elias::write(&mut w, 1).unwrap();
        let bytes = w.finish();
        let err = elias::decode_qsgd(&mut BitReader::new(&bytes), 512, 15);
        assert!(err.is_err(), "gap {gap}: {err:?}");
        let mut out = vec![0f32; 512];
        let err = elias::decode_qsgd_add(&mut BitReader::new(&bytes), 15, &mut out);
        assert!(err.is_err(), "gap {gap}: {err:?}");
        assert!(out.iter().all(|&x| x == 0.0));
    }
}

/// A bucket ends with a gap to one past its last coordinate, so buckets can follow each
/// other in one message without a count; an empty bucket is its norm and that gap.
#[test]
fn qsgd_buckets_end_with_a_gap_past_their_last_coordinate() {
    let d = 128;
    let a = elias::QuantizedBucket {
        norm: 2.0,
        entries: vec![(0, false, 1), (127, true, 3)],
    };
    let empty = elias::QuantizedBucket {
        norm: 0.0,
        entries: vec![],
    };
    let mut w = BitWriter::new();
    elias::encode_qsgd(&mut w, &a, d).unwrap();
    // 32 + (ω(1) + 1 + ω(1)) + (ω(127) + 1 + ω(3)) + ω(1): ω(127) = 10 + 111 + 1111111 + 0.
    assert_eq!(w.len_bits(), 32 + 3 + (13 + 1 + 3) + 1);
    elias::encode_qsgd(&mut w, &empty, d).unwrap();
    elias::encode_qsgd(&mut w, &a, d).unwrap();
    let bytes = w.finish();
    let mut r = BitReader::new(&bytes);
    for want in [&a, &empty, &a] {
        assert_eq!(&elias::decode_qsgd(&mut r, d, 3).unwrap(), want);
    }
    assert!(r.remaining() < 8);
    // An index outside the bucket cannot be written.
    let outside = elias::QuantizedBucket {
        norm: 1.0,
        entries: vec![(128, false, 1)],
    };
    assert!(elias::encode_qsgd(&mut BitWriter::new(), &outside, d).is_err());
    // A stream that stops before the closing gap is truncated, not a shorter bucket.
    let mut w = BitWriter::new();
    w.bits(1f32.to_bits() as u64, 32);
    elias::write(&mut w, 5).unwrap();
    w.bit(false);
    elias::write(&mut w, 1).unwrap();
    let bytes = w.finish();
    assert!(elias::decode_qsgd(&mut BitReader::new(&bytes), d, 3).is_err());
}

#[test]
fn zero_run_refuses_non_finite_values_and_runs_past_the_tensor() {
    // The sender names a diverged gradient instead of sending it.
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let e = zero_run::encode_sparse(&[3, 7], &[1.0, bad]).unwrap_err();
        assert!(e.to_string().contains("inf or NaN"), "{e}");
    }
    // A receiver refuses a peer's non-finite value.
    let mut msg = Vec::new();
    msg.extend(2u16.to_le_bytes());
    msg.extend(f32::NAN.to_le_bytes());
    let e = zero_run::decode(&msg, 10).unwrap_err();
    assert!(e.to_string().contains("NaN"), "{e}");
    // Escape records that run past the tensor stop at once (not after 65,535 × more).
    let escapes: Vec<u8> = std::iter::repeat_n(u16::MAX.to_le_bytes(), 3)
        .flatten()
        .collect();
    let e = zero_run::decode(&escapes, 100_000).unwrap_err();
    assert!(e.to_string().contains("beyond the tensor's 100000"), "{e}");
}
