//! `method_zoo` end to end on synthetic data: every row of the table as a real 2-worker
//! job of 12 steps, the table's files, and each method's compression in the range its
//! format implies at that size. Also its argument errors, which must come before any job
//! starts.

mod common;

use serde_json::Value;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_method_zoo"),
        &[
            ("--preset paper", "paper"),
            ("--workers 1", "--workers must be at least 2"),
            ("--steps 0", "--steps 0: must be at least 1"),
            ("--methods dgc,bogus", "--methods bogus: no such row"),
            (
                "--synthetic --data-dir /tmp",
                "--data-dir /tmp would be ignored",
            ),
        ],
    );
}

#[test]
fn every_method_runs_and_the_table_has_a_row_each() {
    let (dir, rows) = common::synthetic_rows(
        env!("CARGO_BIN_EXE_method_zoo"),
        "method-zoo",
        &[
            // SBC(2) and FedAvg synchronise every 10 steps, PowerSGD compresses from 10.
            "--steps",
            "12",
            "--eval-samples",
            "32",
            "--checkpoint-every",
            "0",
        ],
    );
    // No paper's table: the claim columns are there, empty.
    for r in &rows {
        let obj = r.as_object().expect("a row is an object");
        assert!(
            obj.contains_key("claim") && obj.contains_key("holds"),
            "{r}"
        );
        assert!(r["claim"].is_null() && r["holds"].is_null(), "{r}");
    }
    let methods: Vec<&str> = rows.iter().filter_map(|r| r["method"].as_str()).collect();
    assert_eq!(
        methods,
        [
            "dense",
            "dense-f16",
            "dense-bf16",
            "topk",
            "local",
            "dgc",
            "gtopk",
            "sbc",
            "qsgd",
            "terngrad",
            "onebit",
            "fedavg",
            "powersgd",
            "signsgd",
            "signum",
            "efsignsgd",
            "randomk",
            "thresholdv"
        ]
    );
    let ratio = |m: &str| {
        rows.iter()
            .find(|r| r["method"] == m)
            .and_then(|r| r["message_compression_ratio"].as_f64())
            .unwrap_or(0.0)
    };
    for r in &rows {
        let acc = r["accuracy"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&acc), "{r}");
        assert!(r["step_ms"].as_f64().is_some_and(|s| s > 0.0), "{r}");
        assert!(r["bytes_sent"].as_u64().is_some_and(|b| b > 0), "{r}");
    }
    assert!((ratio("dense") - 1.0).abs() < 1e-9);
    assert!((ratio("dense-bf16") - 2.0).abs() < 1e-9);
    // One bit a value (and a scale a tensor for EF-signSGD).
    assert!(
        (31.0..=32.0).contains(&ratio("signsgd")),
        "{}",
        ratio("signsgd")
    );
    assert!(
        (31.0..=32.0).contains(&ratio("efsignsgd")),
        "{}",
        ratio("efsignsgd")
    );
    // 1 % of the values, 4 bytes each and no index.
    assert!(
        (95.0..=100.0).contains(&ratio("randomk")),
        "{}",
        ratio("randomk")
    );
    // The signSGD rows train at their own rate without the trainer's momentum.
    let sign = rows.iter().find(|r| r["method"] == "signsgd").unwrap();
    assert_eq!(
        (sign["lr"].as_f64(), sign["momentum"].as_f64()),
        (Some(0.001), Some(0.0))
    );
    let csv = std::fs::read_to_string(dir.join("zoo.csv")).expect("zoo.csv");
    assert_eq!(csv.lines().count(), 19, "{csv}");
    assert!(dir.join("curves.png").is_file());
    reuse_keeps_finished_jobs_and_reruns_changed_ones(&dir, &rows);
    let _ = std::fs::remove_dir_all(dir);
}

/// `--reuse` over the table's own directory keeps the finished jobs of the same
/// configuration (the rows come back equal, nothing runs) and runs a job whose
/// configuration changed.
fn reuse_keeps_finished_jobs_and_reruns_changed_ones(dir: &std::path::Path, rows: &[Value]) {
    let out = dir.to_string_lossy().to_string();
    let args = |steps: &'static str| {
        vec![
            "--synthetic",
            "--steps",
            steps,
            "--eval-samples",
            "32",
            "--checkpoint-every",
            "0",
            "--json",
            "--reuse",
            "--methods",
            "dense,topk",
            "--out",
        ]
    };
    let bin = env!("CARGO_BIN_EXE_method_zoo");
    let mut same = args("12");
    same.push(&out);
    let o = common::run(bin, &same);
    assert!(o.status.success(), "{}", common::text(&o));
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(log.matches("keeping the finished run").count(), 2, "{log}");
    let kept: Vec<Value> = serde_json::from_slice(&o.stdout).expect("rows");
    for k in &kept {
        let first = rows.iter().find(|r| r["method"] == k["method"]).unwrap();
        assert_eq!(k, first);
    }
    let mut changed = args("11");
    changed.push(&out);
    let o = common::run(bin, &changed);
    assert!(o.status.success(), "{}", common::text(&o));
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!log.contains("keeping the finished run"), "{log}");
}
