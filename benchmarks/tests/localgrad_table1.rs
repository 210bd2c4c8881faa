//! `localgrad_table1` end to end on synthetic data: eight real 4-worker jobs of 40 steps,
//! the table's files, which rows end with the ranks' weights apart (the local-gradient
//! modes without averaging) and which together, and what the averaging costs in bytes.
//! Also its argument errors, which must come before any job starts.

use serde_json::Value;

mod common;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_localgrad_table1"),
        &[
            ("--preset fast", "--preset fast"),
            ("--preset paper", "--preset paper needs --data-dir"),
            ("--sync-every 0", "--sync-every must be at least 1"),
            ("--eval-every 0", "--eval-every 0: must be at least 1"),
            ("--steps 0", "--steps 0: must be at least 1"),
            ("--eval-samples 0", "--eval-samples 0: must be at least 1"),
            ("--target 0", "--target must be a positive number"),
            (
                "--checkpoint-every 0",
                "--checkpoint-every 0 leaves no checkpoint",
            ),
        ],
    );
}

#[test]
fn eight_jobs_write_the_table_and_only_unsynchronised_local_modes_drift() {
    let (dir, rows) = common::smoke_rows(env!("CARGO_BIN_EXE_localgrad_table1"), "localgrad", &[]);
    let names: Vec<&str> = rows.iter().filter_map(|r| r["model"].as_str()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "baseline+drop",
            "baseline+drop+Error",
            "baseline+drop+Error+sync",
            "baseline+drop+Partial",
            "baseline+drop+Partial+sync",
            "baseline+drop+Sum",
            "baseline+drop+Sum+sync",
        ]
    );
    let f = |i: usize, key: &str| rows[i][key].as_f64().unwrap_or(f64::NAN);
    for r in &rows {
        assert_eq!(r["steps"].as_u64(), Some(40), "{r}");
        let acc = r["metric"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&acc), "{r}");
        assert!(r["test_cross_entropy"].as_f64().is_some(), "{r}");
    }
    // The baseline reaches 97 % of its own final accuracy, at the latest at its last
    // evaluation, within its training time.
    let to_target = f(0, "seconds_to_target");
    assert!(
        to_target > 0.0 && to_target <= f(0, "training_seconds"),
        "{to_target} s of {} s",
        f(0, "training_seconds")
    );
    assert!([10, 20, 30, 32, 40]
        .map(Some)
        .contains(&rows[0]["step_at_target"].as_u64()));
    // Dense and plain gradient dropping apply the same update on every rank; the
    // local modes do not, until an averaging (at step 40, a multiple of 20).
    for i in [0, 1, 3, 5, 7] {
        assert_eq!(f(i, "rank_drift"), 0.0, "{}", names[i]);
    }
    for i in [2, 4, 6] {
        assert!(
            f(i, "rank_drift") > 1e-6,
            "{}: {}",
            names[i],
            f(i, "rank_drift")
        );
    }
    // 1 % of the values (after a 10-step warm-up) as index + value through an
    // allgather, against a dense ring: well above 1x; two dense averagings in 40
    // steps cost the "+sync" rows part of it.
    assert!((f(0, "compression_ratio") - 1.0).abs() < 1e-9);
    for i in [1, 2, 4, 6] {
        assert!(f(i, "compression_ratio") > 5.0, "{}", names[i]);
    }
    for i in [3, 5, 7] {
        assert!(
            f(i, "compression_ratio") < 0.9 * f(i - 1, "compression_ratio"),
            "{}: {} vs {}",
            names[i],
            f(i, "compression_ratio"),
            f(i - 1, "compression_ratio")
        );
    }
    let evals: Vec<Value> = std::fs::read_to_string(dir.join("baseline/metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .filter(|r: &Value| r["kind"] == "eval")
        .collect();
    // Steps 10, 20, 30 mid-epoch, 32 (4,096 synthetic images / 4 ranks / 32 per
    // batch) at the epoch's end, and 40 at the end, on a clock that only goes forward.
    let steps: Vec<u64> = evals.iter().filter_map(|r| r["step"].as_u64()).collect();
    assert_eq!(steps, [10, 20, 30, 32, 40]);
    let walls: Vec<f64> = evals
        .iter()
        .filter_map(|r| r["wall_seconds"].as_f64())
        .collect();
    assert!(
        walls.len() == 5 && walls.windows(2).all(|w| w[0] <= w[1]),
        "{walls:?}"
    );
    common::assert_table(
        &dir,
        "table1",
        8,
        &[
            "curves.png",
            "curves.svg",
            "baseline-drop-partial-sync/summary.json",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--optimizer adam`, the paper's optimizer: every job trains with Adam at 0.001, and
/// the rows say so.
#[test]
fn the_adam_rows_train_with_adam() {
    let (dir, rows) = common::smoke_rows(
        env!("CARGO_BIN_EXE_localgrad_table1"),
        "localgrad-adam",
        &["--optimizer", "adam", "--steps", "20", "--eval-every", "20"],
    );
    assert_eq!(rows.len(), 8);
    for r in &rows {
        assert_eq!(r["optimizer"], "adam", "{r}");
    }
    let job = std::fs::read_to_string(dir.join("baseline/job.toml")).unwrap();
    assert!(
        job.contains("optimizer = \"adam\"") && job.contains("lr = 0.001"),
        "{job}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
