//! `time_to_accuracy --preset smoke` end to end on loopback (no namespaces): our rows as
//! real 2-worker jobs, the DDP row where PyTorch imports (skipped, saying why, where it
//! does not), the table's files and what each row measured. Also its argument errors,
//! which must come before any job starts.

mod common;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_time_to_accuracy"),
        &[
            ("--preset paper", "paper"),
            ("--rates 100", "--rates 100: give a rate as tc reads it"),
            (
                "--tasks bogus",
                "--tasks bogus: the tasks are resnet20 and lstm",
            ),
            (
                "--preset smoke --tasks lstm",
                "--tasks lstm has no smoke preset",
            ),
            ("--steps 0", "--workers and --steps must be at least 1"),
            ("--rows dense,bogus", "--rows bogus: no such row"),
        ],
    );
}

#[test]
fn the_smoke_preset_times_every_row_to_its_target() {
    let (dir, rows) = common::smoke_rows(
        env!("CARGO_BIN_EXE_time_to_accuracy"),
        "time-to-accuracy",
        &["--rows", "dense,dgc,ddp", "--steps", "24"],
    );
    let labels: Vec<&str> = rows.iter().filter_map(|r| r["row"].as_str()).collect();
    assert_eq!(labels, ["dense", "dgc", "ddp"]);
    common::assert_table(
        &dir,
        "resnet20",
        3,
        &["resnet20-unshaped.png", "resnet20-unshaped.svg"],
    );
    for r in &rows[..2] {
        // Ours: the time to the smoke target, a steady step rate, bytes and the split.
        assert_eq!(r["system"], "ours", "{r}");
        assert!(
            r["reached_seconds"].as_f64().is_some_and(|s| s > 0.0),
            "{r}"
        );
        assert!(
            r["steps_per_second"].as_f64().is_some_and(|s| s > 0.0),
            "{r}"
        );
        assert!(r["bytes_per_step"].as_f64().is_some_and(|b| b > 0.0), "{r}");
        assert!(r["compute_ms"].as_f64().is_some_and(|c| c > 0.0), "{r}");
        let curve = r["curve"].as_array().expect("a curve");
        // Evaluations every 10 steps and at the end: 10, 20, 24.
        assert_eq!(curve.len(), 3, "{r}");
        let t: Vec<f64> = curve.iter().map(|p| p[0].as_f64().unwrap()).collect();
        assert!(
            t.windows(2).all(|w| w[0] < w[1]),
            "training seconds grow: {t:?}"
        );
    }
    // DGC sends less than dense f32 per step.
    let bytes = |i: usize| rows[i]["bytes_per_step"].as_f64().unwrap();
    assert!(
        bytes(1) < bytes(0) / 5.0,
        "dgc {} vs dense {}",
        bytes(1),
        bytes(0)
    );
    let ddp = &rows[2];
    assert_eq!(ddp["system"], "pytorch-ddp");
    match ddp["skipped"].as_str() {
        Some(why) => assert!(why.contains("torch"), "{ddp}"),
        None => assert!(
            ddp["steps_per_second"].as_f64().is_some_and(|s| s > 0.0),
            "{ddp}"
        ),
    }
    // Both sides start from the weights our dense row wrote.
    assert!(dir
        .join("resnet20/unshaped/dense/initial.safetensors")
        .is_file());
    let _ = std::fs::remove_dir_all(&dir);
}
