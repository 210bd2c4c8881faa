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

/// How a fake run went: its method, the metric it reports and its final value, the bytes
/// it sends a step against a dense 1,000, and whether its first epoch is a dense warm-up.
struct Fake {
    method: &'static str,
    metric: (&'static str, f64),
    per_step: u64,
    warm_up: bool,
}

/// A fake run of `method` that sends `per_step` bytes a step after a dense warm-up epoch.
fn warmed(method: &'static str, accuracy: f64, per_step: u64) -> Fake {
    Fake {
        method,
        metric: ("accuracy", accuracy),
        per_step,
        warm_up: true,
    }
}

/// A finished 2-epoch run as `fake` says (10 steps an epoch, a record every 5 steps).
fn fake_run(root: &Path, name: &str, fake: Fake) -> PathBuf {
    let Fake {
        method,
        metric: (metric_name, final_metric),
        per_step,
        warm_up,
    } = fake;
    let dense_steps = if warm_up { 10 } else { 0 };
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut lines = Vec::new();
    for step in [5usize, 10, 15, 20] {
        let epoch = step as f64 / 10.0;
        let sent = |s: usize| {
            1000 * s.min(dense_steps) as u64 + per_step * s.saturating_sub(dense_steps) as u64
        };
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
                    metric_name,
                    metric: final_metric * epoch / 2.0,
                    bytes_sent: sent(step),
                    ..Default::default()
                })
                .unwrap(),
            );
        }
    }
    std::fs::write(dir.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
    let sent = 1000 * dense_steps as u64 + per_step * (20 - dense_steps) as u64;
    let summary = Summary {
        final_metric,
        metric_name: metric_name.into(),
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
    let dense = fake_run(&root, "dense", warmed("dense", 0.90, 1000));
    let dgc = fake_run(&root, "dgc", warmed("dgc", 0.89, 4));
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
        for f in train::plot::chart_files(&out.join(chart.stem)) {
            assert!(f.is_file(), "{} missing", f.display());
        }
    }
    // One series per run, named by its label; 20,000 against 10,040 bytes is not far
    // enough apart for a log axis.
    let svg = std::fs::read_to_string(out.join("metric_by_bytes.svg")).unwrap();
    assert!(svg.contains("baseline") && svg.contains("DGC"), "{svg}");
    assert!(!svg.contains("log scale"), "{svg}");
    // The table form names the runs and the metric. A run sparse from its first step
    // (80 bytes against dense's 20,000) puts the bytes charts, and only those, on a log
    // axis.
    let sparse = fake_run(
        &root,
        "sparse",
        Fake {
            warm_up: false,
            ..warmed("topk", 0.85, 4)
        },
    );
    let o = common::run(
        BIN,
        &[
            dense.to_str().unwrap(),
            dgc.to_str().unwrap(),
            sparse.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let t = common::text(&o);
    assert!(
        o.status.success() && t.contains("accuracy") && t.contains("topk"),
        "{t}"
    );
    let chart = |stem: &str| std::fs::read_to_string(out.join(stem).with_extension("svg")).unwrap();
    for stem in ["metric_by_bytes", "loss_by_bytes"] {
        assert!(chart(stem).contains("log scale"), "{stem}: {}", chart(stem));
    }
    for stem in ["metric_by_epoch", "loss_by_epoch"] {
        assert!(
            !chart(stem).contains("log scale"),
            "{stem}: {}",
            chart(stem)
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn wrong_arguments_fail_before_anything_is_written() {
    let root = root("bad");
    let a = fake_run(&root, "a", warmed("dense", 0.9, 1000));
    let b = fake_run(&root, "b", warmed("dgc", 0.9, 4));
    let lm = fake_run(
        &root,
        "lm",
        Fake {
            metric: ("perplexity", 120.0),
            ..warmed("dense", 0.0, 1000)
        },
    );
    // Another run whose directory is also called "a".
    let other_a = fake_run(&root.join("elsewhere"), "a", warmed("dgc", 0.9, 4));
    let unfinished = root.join("unfinished");
    std::fs::create_dir_all(&unfinished).unwrap();
    // Stopped with a checkpoint (interrupted): the error says how to finish it.
    let stopped = root.join("stopped");
    let at = train::checkpoint::Position {
        step: 12,
        ..Default::default()
    };
    let w = ("param/w".to_string(), vec![1.0f32], vec![1]);
    train::checkpoint::save(&train::checkpoint::path(&stopped, 0), &[w], &at).unwrap();
    let stopped = stopped.to_string_lossy().into_owned();
    let resume_hint =
        format!("its checkpoint stands at step 12: `train --resume --out {stopped}` finishes it");
    // A typo'd path is not "an unfinished run": it is not there at all.
    let nonexistent = root.join("nonexist").to_string_lossy().into_owned();
    let file = root.join("a-file");
    std::fs::write(&file, "not a run").unwrap();
    let file = file.to_string_lossy().into_owned();
    let (a, b, lm, other_a, unfinished) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        lm.to_str().unwrap(),
        other_a.to_str().unwrap(),
        unfinished.to_str().unwrap(),
    );
    common::fails_before_any_job(
        BIN,
        &[
            (&[a, b, "--labels", "one"][..], "--labels names 1 runs"),
            (&[a, lm], "reports accuracy but"),
            (&[a, unfinished], "has no summary.json: not a finished run"),
            (&[a, &stopped], &resume_hint),
            (&[a, &nonexistent], "nonexist does not exist: no run there"),
            (&[a, &file], "is not a directory"),
            (&[a, b, "--after-epoch=-1"], "--after-epoch must be"),
            (
                &[a, other_a],
                "are both named \"a\": name the runs with --labels",
            ),
            (&[a, b, "--labels", "x,x"], "are both named \"x\""),
        ],
    );
    let _ = std::fs::remove_dir_all(&root);
}
