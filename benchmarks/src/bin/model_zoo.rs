//! The papers' models: parameter counts, gradient sizes against the sizes the papers
//! state, and (`--time`) one forward+backward step of each on the CPU. The steps of
//! ResNet-20 and of the language models are compared with PyTorch's, measured in the same
//! run by `reference/resnet20_time.py` and `reference/lstm_lm_time.py`.
//!
//! `cargo run --release -p benchmarks --bin model_zoo -- --json` prints a JSON array with
//! one object per model: `name`, `params`, `grad_mib` (params × 4 / 2²⁰), `paper_mib`
//! (where a paper states it, else null), and with `--time` also `batch` and `step_ms`,
//! and where PyTorch ran the same network `torch_step_ms` and `ours_over_torch_time`.

use anyhow::{bail, Context, Result};
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
    /// Also time one forward+backward step per model (ResNet-20 and the language models
    /// against PyTorch).
    #[arg(long)]
    time: bool,
    /// Only these models (comma-separated); default all.
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Batch size for the timing of the CIFAR-sized models (ResNet-n, VGG-16, LeNet-5).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Batch size (streams) for the timing of the language models; each sample is a
    /// 35-token window. 20 is the batch of the PyTorch word-LM example and of docs/train.md's
    /// King James Bible runs.
    #[arg(long, default_value_t = 20)]
    lm_batch: usize,
    /// Width of `lstm_lm` (default the paper's 1500), as the trainer's `--hidden`: the
    /// King James Bible runs of docs/train.md use 200. Dropout follows the trainer's default
    /// (the papers' 0.65 at 1500 and 0.5 at 650, none at other widths).
    #[arg(long)]
    lm_hidden: Option<usize>,
    /// Timed repetitions (the best is reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Threads (default: RAYON_NUM_THREADS, else all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Also PowerSGD's compression ratio at these ranks (e.g. 1,2,4): the values each
    /// tensor puts on the wire per step (PyTorch's rule: matrices of the first dimension
    /// by the rest, compressed where n·m / ((n + m)·r) ≥ 2, the others dense), beside what
    /// PyTorch's hook computes for the same shapes (`reference/powersgd_ratio.py`).
    #[arg(long, value_delimiter = ',')]
    powersgd: Vec<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// PowerSGD's wire at each rank for a model's parameter shapes: one JSON object per rank
/// with ours and (where PyTorch runs) the hook's figures.
fn powersgd_rows(shapes: &[Vec<usize>], ranks: &[usize]) -> Result<Vec<Value>> {
    let dense: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let torch = run_reference(
        "powersgd_ratio.py",
        &[
            format!("--shapes={}", serde_json::to_string(shapes)?),
            format!(
                "--ranks={}",
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ],
    )
    .map_err(|e| eprintln!("model_zoo: PyTorch's PowerSGD figures not computed ({e:#})"))
    .ok();
    ranks
        .iter()
        .map(|&rank| {
            let cfg = compress::methods::powersgd::PowerSgdConfig {
                rank,
                start_iter: 0,
                min_compression_rate: 2.0,
                error_feedback: true,
                warm_start: true,
                batched: false,
                seed: 0,
            };
            let sent: usize = shapes
                .iter()
                .map(|s| compress::methods::powersgd::wire_values(s, &cfg))
                .sum();
            let theirs = torch.as_ref().and_then(|t| t[rank.to_string()].as_u64());
            Ok(json!({
                "rank": rank,
                "dense_values": dense,
                "sent_values": sent,
                "ratio": dense as f64 / sent as f64,
                "torch_sent_values": theirs,
            }))
        })
        .collect()
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
    /// Token ids `[35, batch]` (truncated BPTT length of the PTB setups) into a 2-layer
    /// LSTM of `hidden` units over an embedding of `emb` (the network PyTorch rebuilds).
    Tokens {
        vocab: usize,
        emb: usize,
        hidden: usize,
        tied: bool,
        dropout: f64,
    },
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

/// A tied word-level LSTM LM over PTB's 10,000 words (`models::lstm_lm`).
const fn word_lm(name: &'static str, paper_mib: Option<f64>, hidden: usize) -> Entry {
    Entry {
        name,
        paper_mib,
        input: Input::Tokens {
            vocab: 10_000,
            emb: hidden,
            hidden,
            tied: true,
            dropout: models::lstm_lm_dropout(hidden),
        },
    }
}

/// Every model of `models::MODELS`, with the gradient size a paper states and its input.
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
        word_lm("lstm_lm", Some(194.68), 1500),
        word_lm("lstm_lm_medium", None, 650),
        Entry {
            name: "char_lstm",
            paper_mib: None,
            input: Input::Tokens {
                vocab: 98,
                emb: 200,
                hidden: 200,
                tied: false,
                dropout: 0.0,
            },
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

/// Time steps of a language model's timing window (the PTB setups' truncated BPTT).
const BPTT: usize = 35;

/// A prepared training step, run once per timing repetition.
type StepFn<'m> = Box<dyn FnMut() -> Result<()> + 'm>;

/// One training step's forward and backward; returns the batch size used.
fn step<'m>(
    model: &'m dyn Module,
    input: Input,
    batch: usize,
    lm_batch: usize,
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
        Input::Tokens { vocab, .. } => {
            let (t, b) = (BPTT, lm_batch);
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

/// The entry's network, with `lstm_lm` at `--lm-hidden` where given (the entry's input
/// updated to match, and no paper size for a width the paper did not use).
fn build(e: &mut Entry, lm_hidden: Option<usize>, rng: &mut Rng) -> Result<Box<dyn Module>> {
    if let (Some(h), "lstm_lm") = (lm_hidden, e.name) {
        if h == 0 {
            bail!("--lm-hidden must be at least 1");
        }
        // The paper's size holds at the paper's width only.
        let paper = matches!(e.input, Input::Tokens { hidden, .. } if hidden == h);
        *e = word_lm(e.name, e.paper_mib.filter(|_| paper), h);
        let Input::Tokens {
            vocab,
            hidden,
            dropout,
            ..
        } = e.input
        else {
            bail!("{} is not a language model", e.name);
        };
        return Ok(Box::new(models::lstm_lm(vocab, hidden, dropout, rng)?));
    }
    Ok(models::by_name(e.name, rng)?)
}

/// The PyTorch script that times the same network's step, and its arguments; None where
/// there is no reference for the model.
fn reference(e: &Entry, args: &Args, threads: usize) -> Option<(&'static str, Vec<String>)> {
    let mut a = vec![
        "--threads".to_string(),
        threads.to_string(),
        "--repeats".into(),
        args.repeats.to_string(),
    ];
    match e.input {
        Input::Image { .. } if e.name == "resnet20" => {
            a.extend(["--batch".into(), args.batch.to_string()]);
            Some(("resnet20_time.py", a))
        }
        Input::Tokens {
            vocab,
            emb,
            hidden,
            tied,
            dropout,
        } => {
            a.extend([
                "--batch".into(),
                args.lm_batch.to_string(),
                "--bptt".into(),
                BPTT.to_string(),
                "--vocab".into(),
                vocab.to_string(),
                "--emb".into(),
                emb.to_string(),
                "--hidden".into(),
                hidden.to_string(),
                "--dropout".into(),
                dropout.to_string(),
            ]);
            if tied {
                a.push("--tied".into());
            }
            Some(("lstm_lm_time.py", a))
        }
        _ => None,
    }
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let threads = init_threads(args.threads)?;
    if args.lm_batch == 0 || args.batch == 0 {
        bail!("--batch and --lm-batch must be at least 1");
    }
    let mut rows: Vec<Value> = Vec::new();
    for mut e in zoo() {
        if !args.models.is_empty() && !args.models.iter().any(|m| m == e.name) {
            continue;
        }
        let mut rng = Rng::new(0);
        let model = build(&mut e, args.lm_hidden, &mut rng)
            .with_context(|| format!("building {}", e.name))?;
        let params = model.param_count();
        let grad_mib = params as f64 * 4.0 / (1u64 << 20) as f64;
        let mut row = json!({"name": e.name, "params": params, "grad_mib": (grad_mib * 100.0).round() / 100.0, "paper_mib": e.paper_mib});
        if let Input::Tokens { hidden, .. } = e.input {
            row["hidden"] = json!(hidden);
        }
        if !args.powersgd.is_empty() {
            if args.powersgd.contains(&0) {
                bail!("--powersgd: ranks are at least 1");
            }
            let shapes: Vec<Vec<usize>> = model
                .named_params()
                .iter()
                .map(|p| p.tensor.dims().to_vec())
                .collect();
            row["powersgd"] = json!(powersgd_rows(&shapes, &args.powersgd)?);
        }
        if args.time {
            let (batch, mut f) =
                step(model.as_ref(), e.input, args.batch, args.lm_batch, &mut rng)?;
            let t = best_of(1, args.repeats, &mut f)?;
            row["batch"] = json!(batch);
            row["step_ms"] = json!(t * 1e3);
            eprintln!(
                "model_zoo: {} step at batch {batch}: {:.1} ms",
                e.name,
                t * 1e3
            );
            if let Some((script, ref_args)) = reference(&e, &args, threads) {
                let torch = match run_reference(script, &ref_args) {
                    // A parameter count that differs means the script built another
                    // network: its time would compare nothing.
                    Ok(v) if v["params"].as_u64() != Some(params as u64) => {
                        eprintln!(
                            "model_zoo: {script} built {} parameters, ours {params}: no comparison for {}",
                            v["params"], e.name
                        );
                        None
                    }
                    Ok(v) => v["torch_ms"].as_f64(),
                    Err(err) => {
                        eprintln!("model_zoo: PyTorch reference unavailable ({err:#})");
                        None
                    }
                };
                row["torch_step_ms"] = json!(torch);
                row["ours_over_torch_time"] = json!(torch.map(|tm| t * 1e3 / tm));
            }
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    println!("threads: {threads}");
    println!(
        "{:<16} {:>12} {:>10} {:>10} {:>7} {:>10} {:>10} {:>11}",
        "model", "params", "grad MiB", "paper MiB", "batch", "step ms", "torch ms", "ours/torch"
    );
    for r in &rows {
        let opt = |v: &Value, p: usize| v.as_f64().map_or("-".to_string(), |x| format!("{x:.p$}"));
        println!(
            "{:<16} {:>12} {:>10.2} {:>10} {:>7} {:>10} {:>10} {:>11}",
            r["name"].as_str().unwrap_or("?"),
            r["params"].as_u64().unwrap_or(0),
            r["grad_mib"].as_f64().unwrap_or(0.0),
            opt(&r["paper_mib"], 2),
            r.get("batch").map_or("-".to_string(), |b| b.to_string()),
            opt(r.get("step_ms").unwrap_or(&Value::Null), 1),
            opt(r.get("torch_step_ms").unwrap_or(&Value::Null), 1),
            opt(r.get("ours_over_torch_time").unwrap_or(&Value::Null), 2),
        );
    }
    if !args.powersgd.is_empty() {
        println!("\nPowerSGD per step (values on the wire; min_compression_rate 2):");
        println!(
            "{:<16} {:>5} {:>12} {:>12} {:>9} {:>14}",
            "model", "rank", "dense", "sent", "ratio", "PyTorch's sent"
        );
        for r in &rows {
            for p in r["powersgd"].as_array().into_iter().flatten() {
                println!(
                    "{:<16} {:>5} {:>12} {:>12} {:>8.1}x {:>14}",
                    r["name"].as_str().unwrap_or("?"),
                    p["rank"].as_u64().unwrap_or(0),
                    p["dense_values"].as_u64().unwrap_or(0),
                    p["sent_values"].as_u64().unwrap_or(0),
                    p["ratio"].as_f64().unwrap_or(f64::NAN),
                    p["torch_sent_values"]
                        .as_u64()
                        .map_or("-".to_string(), |v| v.to_string()),
                );
            }
        }
    }
    Ok(())
}
