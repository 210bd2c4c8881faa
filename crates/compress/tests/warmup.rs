//! gTop-k's density warm-up (paper 002 §V: 0.25, 0.0725, 0.015 and 0.004 over the first
//! 4 epochs, then the density): what a rank sends follows the epoch of the step.

mod common;

use common::{ctx, job};
use compress::{build, HostExchange, MethodSpec, ParamSpec, StepInfo};

#[test]
fn gtopk_warms_up_through_the_papers_densities() {
    let sent = job(2, |rank, c| {
        let opts: Vec<String> = vec!["density=0.001".into(), "warmup_epochs=4".into()];
        let mut m = build(&MethodSpec::parse("gtopk", &opts).unwrap(), &ctx(rank, 2)).unwrap();
        m.init(&[ParamSpec::new("w", &[10_000])]).unwrap();
        let g: Vec<f32> = (0..10_000)
            .map(|i| ((i * 7919) % 10_007) as f32 - 5000.0)
            .collect();
        [0.0, 1.5, 2.0, 3.99, 4.0, 9.0]
            .iter()
            .enumerate()
            .map(|(step, &epoch)| {
                m.begin_step(StepInfo {
                    step: step as u64,
                    epoch,
                });
                m.exchange(HostExchange::new(c, 0, &g))
                    .unwrap()
                    .stats
                    .sent_values
            })
            .collect::<Vec<_>>()
    });
    // ⌈ρ·n⌉ of 10,000 values at each stage, then 0.1 %.
    assert_eq!(sent[0], vec![2500, 725, 150, 40, 10, 10]);
    assert_eq!(sent[0], sent[1]);
}
