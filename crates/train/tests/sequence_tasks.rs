//! The language-model and speech tasks end to end, 2 worker processes on loopback, small
//! networks on synthetic data: the loss falls, every rank holds the same parameters, the
//! evaluation reports perplexity or word error rate, and a resumed language-model run
//! (whose hidden state is carried between windows within an epoch) continues bit for bit.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gradex-seq-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_train"))
        .args(args)
        .env("GRADEX_TIMEOUT_SECS", "30")
        .output()
        .expect("running train")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn records(dir: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// Every tensor of a rank's checkpoint, by name (parameters only when `params_only`).
fn checkpoint(dir: &Path, rank: usize, params_only: bool) -> Vec<(String, Vec<f32>)> {
    train::checkpoint::load(&train::checkpoint::path(dir, rank))
        .unwrap()
        .tensors
        .into_iter()
        .filter(|(n, _, _)| !params_only || n.starts_with("param/"))
        .map(|(n, v, _)| (n, v))
        .collect()
}

/// A 2 × 32 LSTM language model on a 100-word synthetic bigram text (20,000 tokens).
const LM: [&str; 22] = [
    "--model",
    "lstm_lm",
    "--hidden",
    "32",
    "--dataset",
    "synthetic",
    "--synthetic-samples",
    "20000",
    "--workers",
    "2",
    "--batch-size",
    "8",
    "--bptt",
    "20",
    "--weight-decay",
    "0",
    "--momentum",
    "0",
    "--lr",
    "20",
    "--log-every",
    "21",
];

#[test]
fn the_language_model_learns_and_reports_perplexity() {
    // (method, its options or the trainer's clipping): gradient dropping and DGC (which
    // clips locally), both at 1 % density.
    let cases: &[(&str, &[&str])] = &[
        ("topk", &["--method-opt", "density=0.01", "--clip", "0.25"]),
        (
            "dgc",
            &[
                "--method-opt",
                "density=0.01",
                "--method-opt",
                "warmup_epochs=0",
                "--method-opt",
                "clip=0.25",
            ],
        ),
    ];
    for (method, opts) in cases {
        let dir = tmp(&format!("lm-{method}"));
        let mut args = LM.to_vec();
        args.extend([
            "--method",
            method,
            "--epochs",
            "3",
            "--out",
            dir.to_str().unwrap(),
        ]);
        args.extend(*opts);
        let o = train(&args);
        assert!(o.status.success(), "{method}: {}", text(&o));
        let evals = records(&dir, "eval");
        assert_eq!(evals.len(), 3, "{method}: one evaluation per epoch");
        assert!(evals.iter().all(|e| e["metric_name"] == "perplexity"));
        let s = summary(&dir);
        let ppl = s["final_metric"].as_f64().unwrap();
        let loss = s["final_loss"].as_f64().unwrap();
        let steps = records(&dir, "step");
        let first = steps[0]["loss"].as_f64().unwrap();
        eprintln!(
            "{method}: loss {first:.3} -> {loss:.3}, test perplexity {ppl:.2}, ratio {}",
            s["compression_ratio"]
        );
        // Uniform guessing over the 100 words is perplexity 100.
        assert!(ppl < 60.0, "{method}: test perplexity {ppl}");
        assert!(loss < first - 0.5, "{method}: loss {first} -> {loss}");
        assert_eq!(
            checkpoint(&dir, 0, true),
            checkpoint(&dir, 1, true),
            "{method}: ranks hold different parameters"
        );
        assert!(s["compression_ratio"].as_f64().unwrap() > 10.0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_resumed_language_model_run_continues_bit_for_bit() {
    let whole = tmp("lm-whole");
    let split = tmp("lm-split");
    let run = |dir: &Path, epochs: &str, resume: bool| {
        let mut args = LM.to_vec();
        args.extend([
            "--method",
            "topk",
            "--method-opt",
            "density=0.05",
            "--clip",
            "0.25",
        ]);
        args.extend(["--epochs", epochs, "--out", dir.to_str().unwrap()]);
        if resume {
            args.push("--resume");
        }
        let o = train(&args);
        assert!(o.status.success(), "{}", text(&o));
    };
    run(&whole, "2", false);
    run(&split, "1", false);
    run(&split, "2", true);
    for rank in 0..2 {
        assert_eq!(
            checkpoint(&whole, rank, false),
            checkpoint(&split, rank, false),
            "rank {rank}: the resumed run differs"
        );
    }
    let _ = std::fs::remove_dir_all(&whole);
    let _ = std::fs::remove_dir_all(&split);
}

#[test]
fn the_speech_model_trains_with_ctc_and_reports_word_error_rate() {
    let dir = tmp("speech");
    let o = train(&[
        "--model",
        "deepspeech",
        "--hidden",
        "16",
        "--layers",
        "1",
        "--conv-channels",
        "4",
        "--dataset",
        "synthetic",
        "--synthetic-samples",
        "32",
        "--eval-samples",
        "8",
        "--workers",
        "2",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--lr",
        "0.01",
        "--method",
        "gtopk",
        "--method-opt",
        "density=0.05",
        "--log-every",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let evals = records(&dir, "eval");
    assert_eq!(evals.len(), 2);
    let s = summary(&dir);
    assert_eq!(s["metric_name"], "wer");
    let wer = s["final_metric"].as_f64().unwrap();
    // Random labels: nothing to recognise, but the rate is a proper fraction of errors
    // (insertions can push it above 1, never below 0).
    assert!(wer.is_finite() && wer >= 0.0, "word error rate {wer}");
    let steps = records(&dir, "step");
    let (first, last) = (
        steps[0]["loss"].as_f64().unwrap(),
        steps[steps.len() - 1]["loss"].as_f64().unwrap(),
    );
    eprintln!("speech: CTC loss {first:.3} -> {last:.3}, wer {wer:.3}");
    assert!(last < first, "CTC loss {first} -> {last}");
    assert_eq!(checkpoint(&dir, 0, true), checkpoint(&dir, 1, true));
    let _ = std::fs::remove_dir_all(&dir);
}
