//! `compare_runs` on run directories written with the trainer's own record types (its
//! `Summary`, `StepRecord` and `EvalRecord`, so the files are as a run writes them): the
//! rows, the difference to the first run, the ratios after an epoch, the charts, and
//! the argument errors, which come before anything is written.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use train::metrics::{EvalRecord, StepRecord};
use train::Summary;

const BIN: &str = env!("CARGO_BIN_EXE_compare_runs");

/// A finished 2-epoch run of `method` reaching `accuracy`, sending `per_step` bytes a
/// step against a dense 1,000 (10 steps an epoch, a record every 5 steps).
fn fake_run(root: &Path, name: &str, method: &str, accuracy: f64, per_step: u64) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut lines = Vec::new();
    for step in [5usize, 10, 15, 20] {
        let epoch = step as f64 / 10.0;
        // Dense for the first epoch (a warm-up), `per_step` after it.
        let sent = |s: usize| 1000 * s.min(10) as u64 + per_step * s.saturating_sub(10) as u64;
        lines.push(
            serde_json::to_string(&StepRecord {
                kind: "step",
                step,
                epoch,
                loss: 2.0 / epoch,
                bytes_sent: sent(step),
                dense_bytes: 1000 * step as u64,
                message_bytes: sent(step) / 2,
                dense_message_bytes: 500 * step as u64,
                ..Default::default()
            })
            .unwrap(),
        );
        if step % 10 == 0 {
            lines.push(
                serde_json::to_string(&EvalRecord {
                    kind: "eval",
                    step,
                    epoch,
                    metric_name: "accuracy",
                    metric: accuracy * epoch / 2.0,
                    bytes_sent: sent(step),
                    ..Default::default()
                })
                .unwrap(),
            );
        }
    }
    std::fs::write(dir.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
    let sent = 1000 * 10 + per_step * 10;
    let summary = Summary {
        final_metric: accuracy,
        metric_name: "accuracy".into(),
        bytes_sent: sent,
        dense_bytes: 20_000,
        compression_ratio: Some(20_000.0 / sent as f64),
        message_compression_ratio: Some(20_000.0 / sent as f64),
        wall_seconds: 12.5,
        steps: 20,
        epochs: 2,
        workers: 4,
        method: method.into(),
        model: "resnet20".into(),
        dataset: "fashion-mnist".into(),
        ..Default::default()
    };
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .unwrap();
    dir
}

fn root(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("compare-runs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn rows_differences_ratios_after_warm_up_and_charts() {
    let root = root("ok");
    let dense = fake_run(&root, "dense", "dense", 0.90, 1000);
    let dgc = fake_run(&root, "dgc", "dgc", 0.89, 4);
    let out = root.join("cmp");
    let o = common::run(
        BIN,
        &[
            dense.to_str().unwrap(),
            dgc.to_str().unwrap(),
            "--labels",
            "baseline,DGC",
            "--after-epoch",
            "1",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", common::text(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).expect("--json prints the rows");
    let f = |i: usize, k: &str| rows[i][k].as_f64().unwrap_or(f64::NAN);
    assert_eq!(rows[0]["run"], "baseline");
    assert_eq!(rows[1]["run"], "DGC");
    assert_eq!(rows[1]["method"], "dgc");
    assert_eq!(f(0, "diff"), 0.0);
    assert!((f(1, "diff") + 0.01).abs() < 1e-12, "{}", rows[1]);
    // Whole run: 20,000 dense bytes over 10,040 sent; after the warm-up epoch the last
    // record (step 20) against the first at epoch 1 or later (step 10): 10,000 / 40.
    assert!((f(1, "compression_ratio") - 20_000.0 / 10_040.0).abs() < 1e-9);
    assert!((f(1, "compression_ratio_after") - 250.0).abs() < 1e-9);
    assert!((f(1, "message_compression_ratio_after") - 250.0).abs() < 1e-9);
    assert!((f(0, "compression_ratio_after") - 1.0).abs() < 1e-9);
    let csv = std::fs::read_to_string(out.join("compare.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.lines().nth(2).unwrap().starts_with("DGC,"), "{csv}");
    for chart in &train::plot::RUN_CHARTS {
        for ext in ["png", "svg"] {
            let f = out.join(chart.stem).with_extension(ext);
            assert!(f.is_file(), "{} missing", f.display());
        }
    }
    // One series per run, named by its label.
    let svg = std::fs::read_to_string(out.join("metric_by_bytes.svg")).unwrap();
    assert!(svg.contains("baseline") && svg.contains("DGC"), "{svg}");
    // The table form names the runs and the metric.
    let o = common::run(
        BIN,
        &[
            dense.to_str().unwrap(),
            dgc.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let t = common::text(&o);
    assert!(
        o.status.success() && t.contains("accuracy") && t.contains("dgc"),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn wrong_arguments_fail_before_anything_is_written() {
    let root = root("bad");
    let a = fake_run(&root, "a", "dense", 0.9, 1000);
    let b = fake_run(&root, "b", "dgc", 0.9, 4);
    let lm = fake_run(&root, "lm", "dense", 120.0, 1000);
    let mut s: Value =
        serde_json::from_str(&std::fs::read_to_string(lm.join("summary.json")).unwrap()).unwrap();
    s["metric_name"] = "perplexity".into();
    std::fs::write(lm.join("summary.json"), s.to_string()).unwrap();
    let unfinished = root.join("unfinished");
    std::fs::create_dir_all(&unfinished).unwrap();
    let (a, b, lm, unfinished) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        lm.to_str().unwrap(),
        unfinished.to_str().unwrap(),
    );
    common::fails_before_any_job(
        BIN,
        &[
            (&[a, b, "--labels", "one"][..], "--labels names 1 runs"),
            (&[a, lm], "reports accuracy but"),
            (&[a, unfinished], "has no summary.json: not a finished run"),
            (&[a, b, "--after-epoch=-1"], "--after-epoch must be"),
        ],
    );
    let _ = std::fs::remove_dir_all(&root);
}
