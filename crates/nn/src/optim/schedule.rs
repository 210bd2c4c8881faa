//! Learning-rate schedules as functions of the (fractional) epoch, plus linear warm-up
//! and reduce-on-plateau.

/// The learning rate at a point of training. `epoch` may be fractional (step / steps per
/// epoch) so warm-up and cosine move smoothly within an epoch.
#[derive(Clone, Debug, PartialEq)]
pub enum LrSchedule {
    Constant,
    /// × gamma every `every` epochs.
    Step {
        every: f64,
        gamma: f64,
    },
    /// × gamma at each milestone epoch (the ResNet CIFAR schedule: 0.1 at 50 % and 75 %).
    MultiStep {
        milestones: Vec<f64>,
        gamma: f64,
    },
    /// Cosine from the base rate to `min_lr` over `total` epochs.
    Cosine {
        total: f64,
        min_lr: f64,
    },
    /// Linear ramp from `start_factor`·base to base over `epochs`, then `after`.
    Warmup {
        epochs: f64,
        start_factor: f64,
        after: Box<LrSchedule>,
    },
}

impl LrSchedule {
    pub fn lr(&self, base: f64, epoch: f64) -> f64 {
        match self {
            LrSchedule::Constant => base,
            LrSchedule::Step { every, gamma } => base * gamma.powf((epoch / every).floor()),
            LrSchedule::MultiStep { milestones, gamma } => {
                base * gamma.powi(milestones.iter().filter(|&&m| epoch >= m).count() as i32)
            }
            LrSchedule::Cosine { total, min_lr } => {
                let t = (epoch / total).clamp(0.0, 1.0);
                min_lr + (base - min_lr) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
            }
            LrSchedule::Warmup {
                epochs,
                start_factor,
                after,
            } => {
                if epoch < *epochs {
                    base * (start_factor + (1.0 - start_factor) * epoch / epochs)
                } else {
                    after.lr(base, epoch)
                }
            }
        }
    }
}

/// Multiplies the rate by `factor` when the monitored metric (lower is better) has not
/// improved by more than `threshold` (relative) for `patience` evaluations.
#[derive(Clone, Debug)]
pub struct ReduceOnPlateau {
    pub factor: f64,
    pub patience: usize,
    pub threshold: f64,
    pub min_lr: f64,
    best: f64,
    bad: usize,
}

impl ReduceOnPlateau {
    pub fn new(factor: f64, patience: usize) -> Self {
        ReduceOnPlateau {
            factor,
            patience,
            threshold: 1e-4,
            min_lr: 0.0,
            best: f64::INFINITY,
            bad: 0,
        }
    }
    /// Feeds one evaluation; returns the new learning rate.
    pub fn observe(&mut self, metric: f64, lr: f64) -> f64 {
        if metric < self.best * (1.0 - self.threshold) {
            self.best = metric;
            self.bad = 0;
            return lr;
        }
        self.bad += 1;
        if self.bad > self.patience {
            self.bad = 0;
            return (lr * self.factor).max(self.min_lr);
        }
        lr
    }
}
