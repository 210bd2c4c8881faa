//! Choosing a method by name with `key=value` options, validated against one table that
//! also produces the `--help` text. An option that belongs to another method, a value
//! that does not parse, or an unknown method is an error that lists what is valid.

use crate::{CompressError, Result};
use std::collections::BTreeMap;

/// One method's entry: its name, a one-line summary, and its options
/// `(key, default, meaning)`.
pub struct MethodInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [(&'static str, &'static str, &'static str)],
}

const SPARSE_COMMON: [(&str, &str, &str); 2] = [
    (
        "density",
        "0.001",
        "fraction of each tensor's entries sent per step (1 - drop ratio)",
    ),
    (
        "dense_below",
        "0",
        "tensors with fewer elements are exchanged dense",
    ),
];

/// Paper 001's drop-ratio warm-up, which both gradient-dropping methods take.
const DROP_WARMUP: (&str, &str, &str) = (
    "warmup_steps",
    "0",
    "T of the drop-ratio warm-up R_t = R^max(1, T/t) (0: off)",
);

pub const METHODS: &[MethodInfo] = &[
    MethodInfo {
        name: "dense",
        summary: "ring allreduce of the full gradient (the baseline)",
        options: &[(
            "wire",
            "f32",
            "f32, f16 or bf16 (a 16-bit ring allreduce: IEEE half or bfloat16)",
        )],
    },
    MethodInfo {
        name: "topk",
        summary: "gradient dropping (paper 001 Alg. 1): residual, top-k, TopKAllReduce",
        options: &[SPARSE_COMMON[0], SPARSE_COMMON[1], DROP_WARMUP],
    },
    MethodInfo {
        name: "local",
        summary: "gradient dropping combined with the local gradient (paper 001 Alg. 2)",
        options: &[
            SPARSE_COMMON[0],
            SPARSE_COMMON[1],
            (
                "mode",
                "partial",
                "sum, partial or error: how the local gradient is combined",
            ),
            (
                "sync_every",
                "500",
                "average the parameters every N steps (0: never)",
            ),
            DROP_WARMUP,
        ],
    },
    MethodInfo {
        name: "dgc",
        summary: "Deep Gradient Compression (paper 000 Alg. 3/4), each technique switchable",
        options: &[
            SPARSE_COMMON[0],
            (
                "dense_below",
                "1000",
                "tensors with fewer elements (biases, batch norm) go dense",
            ),
            (
                "dense_1d",
                "false",
                "every 1-D tensor (bias, batch norm) goes dense, whatever its size (the paper's Table 3 sizes)",
            ),
            (
                "momentum_correction",
                "true",
                "accumulate the velocity, not the gradient (Eq. 7)",
            ),
            (
                "masking",
                "true",
                "momentum factor masking (needs momentum_correction)",
            ),
            (
                "clip",
                "0",
                "clipping threshold on the averaged gradient; each rank clips its mean gradient per tensor at clip·N^1/2, the paper's N^-1/2 on its 1/N share (0: off)",
            ),
            (
                "clip_dense",
                "false",
                "clip the tensors sent dense too (the reference code clips only the compressed ones)",
            ),
            (
                "warmup_epochs",
                "4",
                "epochs of exponential sparsity warm-up (0: off)",
            ),
            (
                "warmup_densities",
                "0.25,0.0625,0.015625,0.004",
                "densities of the warm-up stages, evenly spread over warmup_epochs",
            ),
            (
                "sampling",
                "true",
                "sampled threshold (hierarchical selection); false: exact top-k",
            ),
            (
                "sample_fraction",
                "0.01",
                "fraction of entries sampled for the threshold",
            ),
        ],
    },
    MethodInfo {
        name: "gtopk",
        summary: "gTop-k S-SGD (paper 002 Alg. 4): local top-k, gTopKAllReduce, put-back",
        options: &[
            SPARSE_COMMON[0],
            SPARSE_COMMON[1],
            (
                "warmup_epochs",
                "0",
                "epochs of density warm-up (0: off; the paper's convergence runs: 4)",
            ),
            (
                "warmup_densities",
                "0.25,0.0725,0.015,0.004",
                "densities of the warm-up stages, evenly spread over warmup_epochs (the paper's)",
            ),
        ],
    },
    MethodInfo {
        name: "sbc",
        summary: "Sparse Binary Compression (paper 003): delay, binarization, Golomb positions",
        options: &[
            (
                "preset",
                "1",
                "1: no delay, p = 0.1 %; 2: 10 steps, 1 %; 3: 100 steps, 1 %",
            ),
            (
                "delay",
                "",
                "local steps between exchanges (overrides the preset)",
            ),
            (
                "density",
                "",
                "fraction p kept per side (overrides the preset)",
            ),
            (
                "masking",
                "true",
                "momentum masking: zero the optimizer's momentum where an exchange sent (§VII-A)",
            ),
        ],
    },
    MethodInfo {
        name: "qsgd",
        summary: "QSGD (paper 004): stochastic quantization per bucket, Elias coding",
        options: &[
            (
                "preset",
                "4bit",
                "2bit (d=128), 4bit (d=512), 8bit (d=512) or 8bit-8192",
            ),
            (
                "bits",
                "",
                "bits per level: s = 2^bits - 1 levels (overrides the preset)",
            ),
            ("bucket", "", "bucket size d (overrides the preset)"),
            (
                "coding",
                "elias",
                "elias (recursive code of gaps, signs, levels) or fixed",
            ),
            (
                "norm",
                "l2",
                "bucket scale: l2 (Lemma 3.1's analysed form) or max (the paper's experiments, §4)",
            ),
            (
                "min_size",
                "10000",
                "tensors with fewer elements are sent unquantized",
            ),
        ],
    },
    MethodInfo {
        name: "terngrad",
        summary: "TernGrad: stochastic ternary {-1, 0, 1} times the tensor's max magnitude",
        options: &[(
            "float_last",
            "0",
            "the last N parameter tensors go as f32 (Wen et al.'s AlexNet: its last layer, 2)",
        )],
    },
    MethodInfo {
        name: "onebit",
        summary: "1-bit SGD with error feedback: sign per value, two means per bucket",
        options: &[(
            "bucket",
            "0",
            "values sharing one pair of means (0: the whole tensor)",
        )],
    },
    MethodInfo {
        name: "powersgd",
        summary: "PowerSGD (Vogels et al.) as PyTorch's powerSGD_hook: rank-r P, Q by one power iteration, error feedback, warm start",
        options: &[
            ("rank", "1", "the approximation's rank r"),
            (
                "start_iter",
                "1000",
                "steps allreduced dense before compression starts (PyTorch's default)",
            ),
            (
                "min_compression_rate",
                "2",
                "matrices compressing less (n*m / ((n+m)*r)) go dense",
            ),
            ("error_feedback", "true", "keep what the approximation left out"),
            ("warm_start", "true", "start each step's Q from the last one"),
            (
                "batched",
                "false",
                "every tensor as one zero-padded square matrix (batched_powerSGD_hook)",
            ),
        ],
    },
    MethodInfo {
        name: "signsgd",
        summary: "signSGD with majority vote (Bernstein et al.): one bit a value, the update the sign of the ranks' summed signs (±1: the learning rate is the step)",
        options: &[],
    },
    MethodInfo {
        name: "signum",
        summary: "signum: signSGD on the rank's momentum m = beta*m + (1-beta)*g, majority vote",
        options: &[("momentum", "0.9", "beta of the method's own momentum, in [0, 1)")],
    },
    MethodInfo {
        name: "efsignsgd",
        summary: "EF-signSGD (Karimireddy et al.): (|p|_1/n)*sign(p) of p = g + e, error feedback, averaged",
        options: &[],
    },
    MethodInfo {
        name: "randomk",
        summary: "random-k: the same k random positions on every rank (from the seed), their residual values allreduced",
        options: &[(
            "density",
            "0.01",
            "fraction of each tensor's entries sent per step",
        )],
    },
    MethodInfo {
        name: "thresholdv",
        summary: "threshold-v: every residual entry with |e| >= v sent as a pair, TopKAllReduce",
        options: &[("threshold", "0.01", "v, the magnitude an entry must reach")],
    },
    MethodInfo {
        name: "fedavg",
        summary: "Federated Averaging: local steps, then dense parameter averaging",
        options: &[("delay", "10", "local steps between averagings")],
    },
];

pub fn method_info(name: &str) -> Result<&'static MethodInfo> {
    METHODS.iter().find(|m| m.name == name).ok_or_else(|| {
        CompressError::Config(format!(
            "unknown method '{name}'; choose one of: {}",
            METHODS
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// The text `--help` prints for `--method` and `--method-opt`.
pub fn help_text() -> String {
    let mut s = String::new();
    for m in METHODS {
        s.push_str(&format!("  {:<9} {}\n", m.name, m.summary));
        for (k, d, h) in m.options {
            let d = if d.is_empty() { "preset" } else { d };
            s.push_str(&format!("      {k}={d}: {h}\n"));
        }
    }
    s
}

/// A method name with its options, checked against [`METHODS`].
#[derive(Clone, Debug, PartialEq)]
pub struct MethodSpec {
    pub name: String,
    pub options: BTreeMap<String, String>,
}

impl MethodSpec {
    /// `name` and `key=value` strings; unknown keys are an error naming the valid ones.
    pub fn parse(name: &str, pairs: &[String]) -> Result<Self> {
        let info = method_info(name)?;
        let mut options = BTreeMap::new();
        for p in pairs {
            let (k, v) = p.split_once('=').ok_or_else(|| {
                CompressError::Config(format!("method option '{p}' is not of the form key=value"))
            })?;
            let (k, v) = (k.trim(), v.trim());
            if !info.options.iter().any(|o| o.0 == k) {
                let valid: Vec<_> = info.options.iter().map(|o| o.0).collect();
                let owner: Vec<_> = METHODS
                    .iter()
                    .filter(|m| m.options.iter().any(|o| o.0 == k))
                    .map(|m| m.name)
                    .collect();
                let hint = if owner.is_empty() {
                    String::new()
                } else {
                    format!(" ('{k}' is an option of {})", owner.join(", "))
                };
                return Err(CompressError::Config(format!(
                    "method {name} has no option '{k}'{hint}; its options are: {}",
                    if valid.is_empty() {
                        "none".to_string()
                    } else {
                        valid.join(", ")
                    }
                )));
            }
            if options.insert(k.to_string(), v.to_string()).is_some() {
                return Err(CompressError::Config(format!(
                    "method option '{k}' given twice"
                )));
            }
        }
        Ok(MethodSpec {
            name: info.name.to_string(),
            options,
        })
    }

    pub(crate) fn reader(&self) -> Opts<'_> {
        Opts { spec: self }
    }
}

/// Typed access to a spec's options with the table's defaults.
pub(crate) struct Opts<'a> {
    spec: &'a MethodSpec,
}

impl Opts<'_> {
    /// The given value, or the table's default (None when the default is empty).
    pub fn raw(&self, key: &'static str) -> Option<String> {
        if let Some(v) = self.spec.options.get(key) {
            return Some(v.clone());
        }
        let info = method_info(&self.spec.name).ok()?;
        info.options
            .iter()
            .find(|o| o.0 == key)
            .map(|o| o.1.to_string())
            .filter(|d| !d.is_empty())
    }
    fn bad(&self, key: &str, v: &str, want: &str) -> CompressError {
        CompressError::Config(format!(
            "{} option {key}={v}: expected {want}",
            self.spec.name
        ))
    }
    pub fn f64(&mut self, key: &'static str) -> Result<Option<f64>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(key, &v, "a number")),
        }
    }
    pub fn usize(&mut self, key: &'static str) -> Result<Option<usize>> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<usize>()
                .map(Some)
                .map_err(|_| self.bad(key, &v, "a non-negative integer")),
        }
    }
    pub fn bool(&mut self, key: &'static str) -> Result<bool> {
        match self.raw(key).as_deref() {
            Some("true") | Some("1") | Some("on") => Ok(true),
            Some("false") | Some("0") | Some("off") | None => Ok(false),
            Some(v) => Err(self.bad(key, v, "true or false")),
        }
    }
    pub fn f64_list(&mut self, key: &'static str) -> Result<Vec<f64>> {
        match self.raw(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    s.trim()
                        .parse::<f64>()
                        .map_err(|_| self.bad(key, &v, "numbers separated by commas"))
                })
                .collect(),
        }
    }
    pub fn choice(&mut self, key: &'static str, choices: &[&str]) -> Result<String> {
        let v = self.raw(key).unwrap_or_default();
        if choices.contains(&v.as_str()) {
            Ok(v)
        } else {
            Err(self.bad(key, &v, &format!("one of {}", choices.join(", "))))
        }
    }
}

/// A fraction in (0, 1].
pub(crate) fn check_density(method: &str, d: f64) -> Result<f64> {
    if d > 0.0 && d <= 1.0 {
        Ok(d)
    } else {
        Err(CompressError::Config(format!(
            "{method}: density {d} must be in (0, 1]"
        )))
    }
}
