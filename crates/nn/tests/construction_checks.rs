//! Inputs that PyTorch refuses are refused here too, where PyTorch refuses them, and
//! losses keep PyTorch's meaning at the edges.

use nn::layers::{Conv2d, Rnn, RnnKind, RnnState};
use nn::loss::{ctc_loss, CtcReduction};
use nn::Ctx;
use tensor::{Conv2dOptions, Device, Rng, Tensor};

#[test]
fn grouped_convolutions_need_channels_the_groups_divide() {
    let opts = |groups| Conv2dOptions {
        groups,
        ..Conv2dOptions::default()
    };
    let mut rng = Rng::new(1);
    let e = Conv2d::new(5, 4, (3, 3), opts(2), true, &mut rng)
        .err()
        .expect("5 channels in 2 groups");
    assert!(e.to_string().contains("divisible by groups = 2"), "{e}");
    assert!(Conv2d::kaiming(4, 6, (3, 3), opts(4), false, &mut rng).is_err());
    assert!(Conv2d::new(4, 6, (3, 3), opts(2), true, &mut rng).is_ok());
}

#[test]
fn a_recurrent_state_of_the_wrong_size_is_an_error() {
    let mut rng = Rng::new(2);
    let gru = Rnn::new(RnnKind::Gru, 3, 4, 1, false, 0.0, &mut rng).unwrap();
    let x = Tensor::zeros(vec![5, 2, 3], tensor::DType::F32, Device::Cpu).unwrap();
    let state = |layers: usize| RnnState {
        h: Tensor::zeros(vec![layers, 2, 4], tensor::DType::F32, Device::Cpu).unwrap(),
        c: None,
    };
    let mut ctx = Ctx::eval();
    assert!(gru.forward_seq(&x, Some(&state(1)), &mut ctx).is_ok());
    let e = gru
        .forward_seq(&x, Some(&state(2)), &mut ctx)
        .expect_err("two layers of state for one");
    assert!(e.to_string().contains("initial state"), "{e}");
}

/// `zero_infinity` zeroes an unalignable sample's +inf loss, not a NaN one: a diverged
/// run must show as NaN (PyTorch: `where(res == inf, 0, res)`).
#[test]
fn ctc_zero_infinity_leaves_nan_alone() {
    let ln = |p: f32| p.ln();
    // T = 2, N = 1, C = 3; target [1].
    let lp = |first: f32| {
        Tensor::from_vec(
            vec![first, ln(0.5), ln(0.25), ln(0.5), ln(0.25), ln(0.25)],
            vec![2, 1, 3],
            Device::Cpu,
        )
        .unwrap()
    };
    let loss = |t: &Tensor| {
        ctc_loss(t, &[vec![1]], &[2], CtcReduction::Mean, true)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    };
    assert!(loss(&lp(ln(0.25))).is_finite());
    assert!(loss(&lp(f32::NAN)).is_nan());
}

/// Sequence lengths are checked on every network, not only on a bidirectional one with
/// ragged lengths: a list for another batch, or a length past the padding, was accepted
/// by a unidirectional GRU.
#[test]
fn sequence_lengths_are_checked_on_every_network() {
    let mut rng = Rng::new(3);
    let x = Tensor::zeros(vec![5, 2, 3], tensor::DType::F32, Device::Cpu).unwrap();
    let mut ctx = Ctx::eval();
    for bidirectional in [false, true] {
        let gru = Rnn::new(RnnKind::Gru, 3, 4, 1, bidirectional, 0.0, &mut rng).unwrap();
        assert!(gru
            .forward_seq_lengths(&x, None, Some(&[5, 3]), &mut ctx)
            .is_ok());
        for bad in [&[5, 5, 5][..], &[7, 5], &[0, 5]] {
            let e = gru
                .forward_seq_lengths(&x, None, Some(bad), &mut ctx)
                .expect_err("a wrong length list");
            assert!(e.to_string().contains("sequence lengths"), "{bad:?}: {e}");
        }
    }
}

/// As `torch.nn.LSTM(dropout=2.0)` raises in its constructor, so does ours; a one-layer
/// network used to accept it and never apply it.
#[test]
fn recurrent_dropout_outside_0_to_1_is_refused_at_construction() {
    let mut rng = Rng::new(4);
    assert!(Rnn::new(RnnKind::Lstm, 4, 4, 1, false, 2.0, &mut rng).is_err());
    assert!(Rnn::new(RnnKind::Gru, 4, 4, 2, false, -0.1, &mut rng).is_err());
    assert!(Rnn::new(RnnKind::Lstm, 4, 4, 2, false, 1.0, &mut rng).is_ok());
}

#[test]
fn a_tied_decoder_needs_a_matrix() {
    let mut rng = Rng::new(5);
    let v = Tensor::zeros(vec![5], tensor::DType::F32, Device::Cpu).unwrap();
    let e = nn::layers::Linear::tied(v, true, &mut rng)
        .err()
        .expect("a vector is no weight matrix");
    assert!(e.to_string().contains("[outputs, inputs]"), "{e}");
    assert_eq!(nn::init::fans(&[]), (1, 1));
}
