//! The papers' models: parameter counts, gradient sizes against the sizes the papers
//! state, and (`--time`) one forward+backward step of each on the CPU. ResNet-20's step
//! is compared with PyTorch's, measured in the same run by `reference/resnet20_time.py`.
//!
//! `cargo run --release -p benchmarks --bin model_zoo -- --json` prints a JSON array with
//! one object per model: `name`, `params`, `grad_mib` (params × 4 / 2²⁰), `paper_mib`
//! (where a paper states it, else null), and with `--time` also `batch` and `step_ms`.

use anyhow::{Context, Result};
use benchmarks::{best_of, init_threads, run_reference};
use clap::Parser;
use nn::loss::{ctc_loss, CtcReduction};
use nn::models;
use nn::{Ctx, Module};
use serde_json::{json, Value};
use tensor::{DType, Device, Rng, Tensor};

#[derive(Parser)]
#[command(about = "Parameter counts of the papers' models against the papers, and CPU step times")]
struct Args {
    /// Also time one forward+backward step per model (and ResNet-20 against PyTorch).
    #[arg(long)]
    time: bool,
    /// Only these models (comma-separated); default all.
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Batch size for the timing of the CIFAR-sized models (ResNet-n, VGG-16, LeNet-5).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Timed repetitions (the best is reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Threads (default: RAYON_NUM_THREADS, else all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// What a model eats, for the timing step.
#[derive(Clone, Copy)]
enum Input {
    /// Per-sample image shape and class count; `large` models time at batch 2.
    Image {
        shape: [usize; 3],
        classes: usize,
        large: bool,
    },
    /// Token ids `[35, batch]` (truncated BPTT length of the PTB setups).
    Tokens { vocab: usize },
    /// Spectrograms `[batch, 1, 161, frames]`.
    Spectrogram { frames: usize },
}

struct Entry {
    name: &'static str,
    paper_mib: Option<f64>,
    input: Input,
}

const fn image(
    name: &'static str,
    paper_mib: Option<f64>,
    shape: [usize; 3],
    classes: usize,
    large: bool,
) -> Entry {
    Entry {
        name,
        paper_mib,
        input: Input::Image {
            shape,
            classes,
            large,
        },
    }
}

/// Every model of `models::NAMES`, with the gradient size a paper states and its input.
fn zoo() -> Vec<Entry> {
    vec![
        image("resnet20", None, [3, 32, 32], 10, false),
        image("resnet32", None, [3, 32, 32], 10, false),
        image("resnet44", None, [3, 32, 32], 10, false),
        image("resnet56", None, [3, 32, 32], 10, false),
        image("resnet110", None, [3, 32, 32], 10, false),
        image("resnet50", Some(97.49), [3, 224, 224], 1000, true),
        image("alexnet", Some(232.56), [3, 227, 227], 1000, true),
        image("vgg16", None, [3, 32, 32], 10, false),
        image("lenet5", None, [1, 28, 28], 10, false),
        Entry {
            name: "lstm_lm",
            paper_mib: Some(194.68),
            input: Input::Tokens { vocab: 10_000 },
        },
        Entry {
            name: "lstm_lm_medium",
            paper_mib: None,
            input: Input::Tokens { vocab: 10_000 },
        },
        Entry {
            name: "char_lstm",
            paper_mib: None,
            input: Input::Tokens { vocab: 98 },
        },
        Entry {
            name: "deepspeech",
            paper_mib: Some(488.08),
            input: Input::Spectrogram { frames: 100 },
        },
        Entry {
            name: "an4_lstm",
            paper_mib: None,
            input: Input::Spectrogram { frames: 100 },
        },
    ]
}

/// A prepared training step, run once per timing repetition.
type StepFn<'m> = Box<dyn FnMut() -> Result<()> + 'm>;

/// One training step's forward and backward; returns the batch size used.
fn step<'m>(
    model: &'m dyn Module,
    input: Input,
    batch: usize,
    rng: &mut Rng,
) -> Result<(usize, StepFn<'m>)> {
    let mut ctx = Ctx::train(1);
    Ok(match input {
        Input::Image {
            shape,
            classes,
            large,
        } => {
            let b = if large { 2 } else { batch };
            let x = Tensor::randn(
                vec![b, shape[0], shape[1], shape[2]],
                0.0,
                1.0,
                DType::F32,
                Device::Cpu,
                rng,
            )?;
            let y = Tensor::from_vec(
                (0..b).map(|i| (i % classes) as u32).collect::<Vec<_>>(),
                b,
                Device::Cpu,
            )?;
            (
                b,
                Box::new(move || {
                    model
                        .forward(&x, &mut ctx)?
                        .cross_entropy(&y, None)?
                        .backward()?;
                    Ok(())
                }),
            )
        }
        Input::Tokens { vocab } => {
            let (t, b) = (35, 4);
            let ids: Vec<u32> = (0..t * b).map(|_| rng.below(vocab) as u32).collect();
            let x = Tensor::from_vec(ids.clone(), vec![t, b], Device::Cpu)?;
            let y = Tensor::from_vec(ids, t * b, Device::Cpu)?;
            (
                b,
                Box::new(move || {
                    model
                        .forward(&x, &mut ctx)?
                        .reshape(vec![t * b, vocab])?
                        .cross_entropy(&y, None)?
                        .backward()?;
                    Ok(())
                }),
            )
        }
        Input::Spectrogram { frames } => {
            let b = 2;
            let x = Tensor::randn(
                vec![b, 1, 161, frames],
                0.0,
                1.0,
                DType::F32,
                Device::Cpu,
                rng,
            )?;
            let targets = vec![vec![3u32, 5, 7, 9, 11]; b];
            (
                b,
                Box::new(move || {
                    let logits = model.forward(&x, &mut ctx)?;
                    let t = logits.dims()[0];
                    ctc_loss(
                        &logits.log_softmax(2)?,
                        &targets,
                        &vec![t; b],
                        CtcReduction::Mean,
                        true,
                    )?
                    .backward()?;
                    Ok(())
                }),
            )
        }
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    let threads = init_threads(args.threads)?;
    let mut rows: Vec<Value> = Vec::new();
    for e in zoo() {
        if !args.models.is_empty() && !args.models.iter().any(|m| m == e.name) {
            continue;
        }
        let mut rng = Rng::new(0);
        let model =
            models::by_name(e.name, &mut rng).with_context(|| format!("building {}", e.name))?;
        let params = model.param_count();
        let grad_mib = params as f64 * 4.0 / (1u64 << 20) as f64;
        let mut row = json!({"name": e.name, "params": params, "grad_mib": (grad_mib * 100.0).round() / 100.0, "paper_mib": e.paper_mib});
        if args.time {
            let (batch, mut f) = step(model.as_ref(), e.input, args.batch, &mut rng)?;
            let t = best_of(1, args.repeats, &mut f)?;
            row["batch"] = json!(batch);
            row["step_ms"] = json!(t * 1e3);
            eprintln!(
                "model_zoo: {} step at batch {batch}: {:.1} ms",
                e.name,
                t * 1e3
            );
        }
        rows.push(row);
    }
    let mut torch = None;
    if args.time && rows.iter().any(|r| r["name"] == "resnet20") {
        let ref_args = vec![
            "--threads".into(),
            threads.to_string(),
            "--batch".into(),
            args.batch.to_string(),
            "--repeats".into(),
            args.repeats.to_string(),
        ];
        match run_reference("resnet20_time.py", &ref_args) {
            Ok(v) => torch = v["torch_ms"].as_f64(),
            Err(e) => eprintln!("model_zoo: PyTorch reference unavailable ({e:#})"),
        }
        if let Some(r) = rows.iter_mut().find(|r| r["name"] == "resnet20") {
            r["torch_step_ms"] = json!(torch);
            r["ours_over_torch_time"] =
                json!(torch.and_then(|t| r["step_ms"].as_f64().map(|o| o / t)));
        }
    }
    if args.json {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    println!("threads: {threads}");
    println!(
        "{:<16} {:>12} {:>10} {:>10} {:>7} {:>10} {:>10}",
        "model", "params", "grad MiB", "paper MiB", "batch", "step ms", "torch ms"
    );
    for r in &rows {
        let opt = |v: &Value, p: usize| v.as_f64().map_or("-".to_string(), |x| format!("{x:.p$}"));
        println!(
            "{:<16} {:>12} {:>10.2} {:>10} {:>7} {:>10} {:>10}",
            r["name"].as_str().unwrap_or("?"),
            r["params"].as_u64().unwrap_or(0),
            r["grad_mib"].as_f64().unwrap_or(0.0),
            opt(&r["paper_mib"], 2),
            r.get("batch").map_or("-".to_string(), |b| b.to_string()),
            opt(r.get("step_ms").unwrap_or(&Value::Null), 1),
            opt(r.get("torch_step_ms").unwrap_or(&Value::Null), 1),
        );
    }
    Ok(())
}
