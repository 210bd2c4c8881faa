//! DGC's local gradient clipping (paper 000, App. C): `clip` is the threshold on the
//! averaged gradient, and each of N ranks clips its own mean gradient at `clip · √N` (the
//! paper's `N^-1/2 · clip` on its 1/N share of the sum), so that N independent gradients
//! that each pass the local test average to about `clip`.

mod common;

use common::{ctx, job};
use compress::{build, HostExchange, MethodSpec, ParamSpec, StepInfo};

/// The averaged update of one DGC step on 4 ranks whose gradients are all `value`
/// everywhere (1,000 elements), with everything sent and no momentum: the clipped
/// gradient itself.
fn averaged_update(value: f32) -> Vec<f32> {
    let outs = job(4, |rank, c| {
        let opts: Vec<String> = [
            "density=1",
            "dense_below=0",
            "momentum_correction=false",
            "masking=false",
            "sampling=false",
            "warmup_epochs=0",
            "clip=1",
        ]
        .map(String::from)
        .to_vec();
        let mut m = build(&MethodSpec::parse("dgc", &opts).unwrap(), &ctx(rank, 4)).unwrap();
        m.init(&[ParamSpec::new("w", &[1000])]).unwrap();
        m.begin_step(StepInfo {
            step: 0,
            epoch: 0.0,
        });
        m.exchange(HostExchange::new(c, 0, &vec![value; 1000]))
            .unwrap()
            .values
    });
    assert!(outs.windows(2).all(|w| w[0] == w[1]), "ranks disagree");
    outs.into_iter().next().unwrap()
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt()
}

#[test]
fn each_rank_clips_its_mean_gradient_at_clip_times_root_n() {
    let per = |norm: f64| (norm / 1000f64.sqrt()) as f32;
    // Norm 1.5: above clip = 1 but within clip·√4 = 2, so it passes untouched (the
    // threshold clip/√N would have cut it to 0.5).
    let u = averaged_update(per(1.5));
    assert!((norm(&u) - 1.5).abs() < 1e-4, "norm {}", norm(&u));
    // Norm 3: cut to 2.
    let u = averaged_update(per(3.0));
    assert!((norm(&u) - 2.0).abs() < 1e-4, "norm {}", norm(&u));
}

/// A tensor DGC sends dense (a bias below `dense_below`), on 4 ranks whose gradients are
/// all 100 everywhere (norm 100·√10 ≈ 316), with `clip=0.1`: by default it is left
/// unclipped; `clip_dense=averaged` clips the averaged tensor at 0.1, as the reference
/// code's memory would after the allreduce; `local` each rank's gradient at 0.1·√4
/// before it.
#[test]
fn tensors_sent_dense_are_clipped_as_clip_dense_says() {
    let norm_of = |clip_dense: Option<&str>| {
        let outs = job(4, |rank, c| {
            let mut opts: Vec<String> = ["clip=0.1", "dense_below=1000", "warmup_epochs=0"]
                .map(String::from)
                .to_vec();
            opts.extend(clip_dense.map(|s| format!("clip_dense={s}")));
            let mut m = build(&MethodSpec::parse("dgc", &opts).unwrap(), &ctx(rank, 4)).unwrap();
            m.init(&[ParamSpec::new("b", &[10])]).unwrap();
            m.begin_step(StepInfo {
                step: 0,
                epoch: 0.0,
            });
            m.exchange(HostExchange::new(c, 0, &[100.0; 10]))
                .unwrap()
                .values
        });
        assert!(outs.windows(2).all(|w| w[0] == w[1]), "ranks disagree");
        norm(&outs[0])
    };
    for (given, want) in [
        (None, 100.0 * 10f64.sqrt()),
        (Some("averaged"), 0.1),
        (Some("local"), 0.2),
        (Some("true"), 0.2),
        (Some("off"), 100.0 * 10f64.sqrt()),
        (Some("false"), 100.0 * 10f64.sqrt()),
    ] {
        let got = norm_of(given);
        assert!(
            (got - want).abs() < 1e-4 * want,
            "clip_dense {given:?}: norm {got}, want {want}"
        );
    }
}
