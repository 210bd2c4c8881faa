//! A diverged gradient (inf or NaN) fails at the rank whose gradient it is, with an error
//! that says so, in every sparsifying method: it must neither hide in an accumulator
//! (the NaN that no threshold selects) nor reach the peers as a "malformed" message.

mod common;

use common::{ctx, heavy_tailed, job};
use compress::{
    build, HostAfterStep, HostExchange, MethodSpec, ParamSpec, StepInfo, TensorExchange,
};

/// One exchange of an `n`-element gradient holding `bad` at one position, on one rank;
/// the error's text, or `None` when the exchange succeeded.
fn exchange_error(method: &str, opts: &[&str], n: usize, bad: f32) -> Option<String> {
    exchange_error_on(method, opts, n, bad, false)
}

/// [`exchange_error`], on CPU tensors (`Method::exchange_tensor`) with `tensors`.
fn exchange_error_on(
    method: &str,
    opts: &[&str],
    n: usize,
    bad: f32,
    tensors: bool,
) -> Option<String> {
    let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    job(1, |rank, c| {
        let mut m = build(&MethodSpec::parse(method, &opts).unwrap(), &ctx(rank, 1)).unwrap();
        m.init(&[ParamSpec::new("w", &[n])]).unwrap();
        m.begin_step(StepInfo {
            step: 0,
            epoch: 0.0,
        });
        let mut g = heavy_tailed(n, 3);
        g[7] = bad;
        let weights = vec![0.0f32; n];
        if tensors {
            use tensor::{Device, Tensor};
            m.place(Device::Cpu).unwrap();
            let g = Tensor::from_vec(g, n, Device::Cpu).unwrap();
            let w = Tensor::from_vec(weights, n, Device::Cpu).unwrap();
            return m
                .exchange_tensor(TensorExchange::new(c, 0, &g).with_weights(&w))
                .err()
                .map(|e| e.to_string());
        }
        m.exchange(HostExchange::new(c, 0, &g).with_weights(&weights))
            .err()
            .map(|e| e.to_string())
    })
    .pop()
    .unwrap()
}

#[test]
fn sparsifying_methods_refuse_a_diverged_gradient_at_the_sender() {
    for bad in [f32::NAN, f32::INFINITY] {
        // DGC with its default sampled threshold on a tensor large enough to sample
        // (1,000 of a million kept): a NaN never passes `|v| ≥ t`.
        let cases: [(&str, &[&str], usize); 4] = [
            ("dgc", &["density=0.001", "warmup_epochs=0"], 1_000_000),
            (
                "dgc",
                &["density=0.001", "warmup_epochs=0", "sampling=false"],
                10_000,
            ),
            ("topk", &["density=0.01"], 10_000),
            ("local", &["density=0.01"], 10_000),
        ];
        for (method, opts, n) in cases {
            let e = exchange_error(method, opts, n, bad)
                .unwrap_or_else(|| panic!("{method} {opts:?} accepted {bad}"));
            assert!(
                e.contains("diverged") || e.contains("inf or NaN"),
                "{method} {opts:?} {bad}: {e}"
            );
        }
        // DGC on tensors (the GPU's path) refuses it the same way.
        for (opts, n) in [
            (&["density=0.001", "warmup_epochs=0"][..], 1_000_000),
            (
                &["density=0.001", "warmup_epochs=0", "sampling=false"][..],
                10_000,
            ),
        ] {
            let e = exchange_error_on("dgc", opts, n, bad, true)
                .unwrap_or_else(|| panic!("dgc on tensors {opts:?} accepted {bad}"));
            assert!(
                e.contains("inf or NaN"),
                "dgc on tensors {opts:?} {bad}: {e}"
            );
        }
        let e = exchange_error("gtopk", &["density=0.01"], 10_000, bad).unwrap();
        assert!(e.contains("diverged"), "gtopk {bad}: {e}");
        let e = exchange_error_on("gtopk", &["density=0.01"], 10_000, bad, true).unwrap();
        assert!(e.contains("diverged"), "gtopk on tensors {bad}: {e}");
        for method in ["topk", "local"] {
            let e = exchange_error_on(method, &["density=0.01"], 10_000, bad, true).unwrap();
            assert!(e.contains("diverged"), "{method} on tensors {bad}: {e}");
        }
    }
}

/// SBC exchanges weight updates after the step: a diverged weight fails there, at its
/// own rank, instead of staying in the residual (NaN) or making every receiver refuse
/// the message (inf).
#[test]
fn sbc_refuses_a_diverged_weight_update_at_the_sender() {
    for bad in [f32::NAN, f32::INFINITY] {
        let e = job(1, |rank, c| {
            let opts = vec!["delay=1".to_string(), "density=0.01".to_string()];
            let mut m = build(&MethodSpec::parse("sbc", &opts).unwrap(), &ctx(rank, 1)).unwrap();
            let n = 1000;
            m.init(&[ParamSpec::new("w", &[n])]).unwrap();
            m.begin_step(StepInfo {
                step: 0,
                epoch: 0.0,
            });
            let w0 = heavy_tailed(n, 5);
            m.exchange(HostExchange::new(c, 0, &heavy_tailed(n, 6)).with_weights(&w0))
                .unwrap();
            let mut w = w0.clone();
            w[3] = bad;
            m.after_step(HostAfterStep::new(c, 0, &mut w))
                .err()
                .map(|e| e.to_string())
        })
        .pop()
        .unwrap()
        .unwrap_or_else(|| panic!("sbc accepted {bad}"));
        assert!(
            e.contains("diverged") && e.contains("parameter 0"),
            "{bad}: {e}"
        );
    }
}

/// A peer that sends inf where gTop-k's other ranks refuse their own (an older build, a
/// corrupted but well-formed frame): the ⊤ merge ranks inf first, so it would be
/// broadcast and applied on every rank. The receiver refuses it.
#[test]
fn gtopk_refuses_a_peers_non_finite_value() {
    let n = 1000;
    let out = job(2, |rank, c| {
        if rank == 1 {
            let bad = comm::SparseVec::new(vec![(3, f32::INFINITY)]);
            // Rank 0 fails after the collective; rank 1's own result is the same inf.
            return c.gtopk_allreduce(&bad, 10).map(|_| None).unwrap_or(None);
        }
        let opts = vec!["density=0.01".to_string()];
        let mut m = build(&MethodSpec::parse("gtopk", &opts).unwrap(), &ctx(rank, 2)).unwrap();
        m.init(&[ParamSpec::new("w", &[n])]).unwrap();
        m.begin_step(StepInfo {
            step: 0,
            epoch: 0.0,
        });
        m.exchange(HostExchange::new(c, 0, &heavy_tailed(n, 4)))
            .err()
            .map(|e| e.to_string())
    });
    let e = out[0].as_ref().expect("rank 0 must refuse the peer's inf");
    assert!(e.contains("inf") && e.contains("a peer diverged"), "{e}");
}
