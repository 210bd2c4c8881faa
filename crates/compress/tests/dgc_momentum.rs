//! DGC's momentum correction, with and without momentum factor masking, vanilla (Eq. 7,
//! Alg. 3) and Nesterov (Alg. 4), against the algorithm written out step by step: the
//! direction sent, and the velocity `u` and accumulation `v` left behind. One rank, so
//! the exchange is the rank's own sparse vector and every value must match bit for bit.
//! Weight decay both ways: inside the accumulation (`decay=compressed`, bit for bit) and
//! as the reference code's `DGCSGD` applies it (`decay=dense`: a buffer of its own added
//! to the direction; equal to rounding, as our Nesterov form keeps the buffer m times
//! larger).

mod common;

use common::{built, heavy_tailed, job};
use compress::{Context, HostExchange, StepInfo, UpdateKind};

const SIZES: [usize; 2] = [1000, 37];
const DENSITY: f64 = 0.05;
const MOMENTUM: f32 = 0.9;
const DECAY: f32 = 1e-3;
const STEPS: usize = 6;

/// What one rank's DGC does to one tensor in one step, written out from the paper:
/// returns the sparse direction it sends.
struct Reference {
    u: Vec<f32>,
    v: Vec<f32>,
    /// `DGCSGD`'s weight-decay momentum buffer (with `dense_decay`).
    d: Vec<f32>,
    dense_decay: bool,
}

impl Reference {
    fn step(&mut self, g: &[f32], w: &[f32], nesterov: bool, masking: bool) -> Vec<f32> {
        for i in 0..g.len() {
            // The gradient (with weight decay, unless it is applied densely), then the
            // velocity and the accumulation.
            let gi = if self.dense_decay {
                g[i]
            } else {
                g[i] + DECAY * w[i]
            };
            if nesterov {
                // Alg. 4: u ← m(u + ∇), v ← v + u + ∇.
                self.u[i] = MOMENTUM * (self.u[i] + gi);
                self.v[i] += self.u[i] + gi;
            } else {
                // Eq. 7: u ← m·u + ∇, v ← v + u.
                self.u[i] = MOMENTUM * self.u[i] + gi;
                self.v[i] += self.u[i];
            }
        }
        // The k = ⌈density · n⌉ largest |v| (no ties in this data) are sent and cleared
        // from v, and with masking from u (Alg. 3, line 18).
        let k = (DENSITY * g.len() as f64).ceil() as usize;
        let mut order: Vec<usize> = (0..g.len()).collect();
        order.sort_by(|&a, &b| self.v[b].abs().total_cmp(&self.v[a].abs()));
        let mut sent = vec![0.0; g.len()];
        for &i in &order[..k] {
            sent[i] = self.v[i];
            self.v[i] = 0.0;
            if masking {
                self.u[i] = 0.0;
            }
        }
        if self.dense_decay {
            // dgc/optim/sgd.py: buf = m·buf + wd·w; d_p = grad + (Nesterov: wd·w + m·buf,
            // else buf).
            for i in 0..g.len() {
                self.d[i] = MOMENTUM * self.d[i] + DECAY * w[i];
                sent[i] += if nesterov {
                    DECAY * w[i] + MOMENTUM * self.d[i]
                } else {
                    self.d[i]
                };
            }
        }
        sent
    }
}

/// Per step and tensor: (the method's direction, the reference's); then the method's
/// final u and v per tensor, and the reference's.
type Run = (Vec<(Vec<f32>, Vec<f32>)>, Vec<Vec<f32>>, Vec<Vec<f32>>);

fn run(nesterov: bool, masking: bool, decay: &str) -> Run {
    let opts: Vec<String> = [
        format!("decay={decay}"),
        format!("density={DENSITY}"),
        "dense_below=0".into(),
        "momentum_correction=true".into(),
        format!("masking={masking}"),
        "clip=0".into(),
        "warmup_epochs=0".into(),
        "sampling=false".into(),
    ]
    .into();
    let ctx = Context {
        rank: 0,
        world: 1,
        seed: 3,
        momentum: MOMENTUM as f64,
        nesterov,
        weight_decay: DECAY as f64,
    };
    let mut out = job(1, |_, c| {
        let mut m = built("dgc", &opts, &ctx, SIZES.map(|n| [n]));
        let mut reference: Vec<Reference> = SIZES
            .iter()
            .map(|&n| Reference {
                u: vec![0.0; n],
                v: vec![0.0; n],
                d: vec![0.0; n],
                dense_decay: decay == "dense",
            })
            .collect();
        let mut directions = Vec::new();
        for step in 0..STEPS {
            m.begin_step(StepInfo {
                step: step as u64,
                epoch: step as f64,
            });
            for (p, &n) in SIZES.iter().enumerate() {
                let g = heavy_tailed(n, (10 * step + p) as u64 + 1);
                let w = heavy_tailed(n, (10 * step + p) as u64 + 500);
                let update = m
                    .exchange(HostExchange::new(c, p, &g).with_weights(&w))
                    .unwrap();
                assert_eq!(update.kind, UpdateKind::Direction);
                let want = reference[p].step(&g, &w, nesterov, masking);
                directions.push((update.values, want));
            }
        }
        let state = m.state().unwrap();
        let get = |key: String| state.iter().find(|(k, _)| *k == key).unwrap().1.clone();
        let got: Vec<Vec<f32>> = (0..SIZES.len())
            .flat_map(|p| [get(format!("u.{p}")), get(format!("v.{p}"))])
            .collect();
        let want: Vec<Vec<f32>> = reference.into_iter().flat_map(|r| [r.u, r.v]).collect();
        (directions, got, want)
    });
    out.remove(0)
}

#[test]
fn momentum_correction_follows_the_paper_with_and_without_masking_and_nesterov() {
    for nesterov in [false, true] {
        for masking in [false, true] {
            let (directions, got, want) = run(nesterov, masking, "compressed");
            for (i, (got, want)) in directions.iter().enumerate() {
                assert_eq!(
                    got,
                    want,
                    "nesterov {nesterov}, masking {masking}: step {}, tensor {}",
                    i / SIZES.len(),
                    i % SIZES.len()
                );
            }
            assert_eq!(got, want, "nesterov {nesterov}, masking {masking}: u, v");
        }
    }
}

/// Masking clears the velocity exactly where a value was sent, and only there; without
/// it the velocity keeps pushing the sent coordinates (the staleness §3.3 removes).
#[test]
fn masking_zeroes_the_velocity_at_the_sent_coordinates() {
    let (masked, masked_state, _) = run(false, true, "compressed");
    let (plain, plain_state, _) = run(false, false, "compressed");
    // The last step's direction of tensor 0 and the u after it.
    let last = (STEPS - 1) * SIZES.len();
    let (sent_m, u_m) = (&masked[last].0, &masked_state[0]);
    let (sent_p, u_p) = (&plain[last].0, &plain_state[0]);
    let k = (DENSITY * SIZES[0] as f64).ceil() as usize;
    assert_eq!(sent_m.iter().filter(|&&x| x != 0.0).count(), k);
    for i in 0..SIZES[0] {
        if sent_m[i] != 0.0 {
            assert_eq!(u_m[i], 0.0, "masked u at a sent coordinate {i}");
        } else {
            assert_ne!(u_m[i], 0.0, "masked u at an unsent coordinate {i}");
        }
    }
    let kept = (0..SIZES[0])
        .filter(|&i| sent_p[i] != 0.0 && u_p[i] != 0.0)
        .count();
    assert_eq!(kept, k, "without masking u stays where values were sent");
}

/// The default: weight decay as the reference's `DGCSGD` applies it, densely every step
/// with a momentum buffer of its own, outside the compressed velocity (which then holds
/// the gradient alone: `u` and `v` bit for bit as the reference's).
#[test]
fn weight_decay_is_applied_densely_by_default_as_the_reference_code_does() {
    for nesterov in [false, true] {
        let (directions, got, want) = run(nesterov, true, "dense");
        assert_eq!(got, want, "nesterov {nesterov}: u, v");
        for (i, (got, want)) in directions.iter().enumerate() {
            for (j, (&a, &b)) in got.iter().zip(want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1e-3),
                    "nesterov {nesterov}: step {}, tensor {}, entry {j}: {a} against {b}",
                    i / SIZES.len(),
                    i % SIZES.len()
                );
            }
            // Every weight decays every step: the direction is dense, not k entries.
            let nonzero = got.iter().filter(|&&x| x != 0.0).count();
            assert!(
                nonzero > got.len() / 2,
                "step {}: {nonzero} non-zero",
                i / SIZES.len()
            );
        }
    }
}
