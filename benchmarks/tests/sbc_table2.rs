//! `sbc_table2 --preset smoke` end to end on synthetic data: six real 4-worker jobs of 100 iterations,
//! the table's files, and compression ratios in the order the methods promise. Also its
//! argument errors, which must come before any job starts.

mod common;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_sbc_table2"),
        &[
            ("--row cifar10", "--row is for --preset paper"),
            ("--preset paper --row imagenet", "--row imagenet"),
            ("--preset paper", "needs --data-dir with MNIST's IDX files"),
            ("--preset fast", "--preset fast"),
            ("--optimizer lamb", "lamb"),
            ("--steps 0", "--steps 0: must be at least 1"),
            ("--eval-samples 0", "--eval-samples 0: must be at least 1"),
        ],
    );
}

#[test]
fn six_jobs_write_the_table_and_ratios_follow_the_methods() {
    let (dir, rows) = common::smoke_rows(env!("CARGO_BIN_EXE_sbc_table2"), "sbc-table2", &[]);
    let names: Vec<&str> = rows.iter().filter_map(|r| r["method"].as_str()).collect();
    assert_eq!(
        names,
        [
            "Baseline",
            "Gradient Dropping",
            "Federated Averaging",
            "SBC (1)",
            "SBC (2)",
            "SBC (3)"
        ]
    );
    // The MNIST row's optimizer is Adam (paper 003, Table III); gradient dropping then
    // runs without DGC's momentum correction, which is momentum SGD's.
    for r in &rows {
        assert_eq!(r["optimizer"], "adam", "{r}");
    }
    let gd = rows[1]["method_config"].as_str().unwrap_or_default();
    assert!(gd.contains("momentum_correction=false"), "{gd}");
    let msg = |i: usize| rows[i]["message_compression_ratio"].as_f64().unwrap_or(0.0);
    for r in &rows {
        let acc = r["accuracy"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&acc), "{r}");
        assert_eq!(r["steps"].as_u64(), Some(100), "{r}");
    }
    assert!(
        (msg(0) - 1.0).abs() < 1e-9,
        "dense sends everything: {}",
        msg(0)
    );
    // 32-bit values and 16-bit run lengths at 0.1 %: at most ~667x.
    assert!(
        (300.0..700.0).contains(&msg(1)),
        "gradient dropping {}",
        msg(1)
    );
    // One dense averaging per 100 steps.
    assert!(
        (90.0..=110.0).contains(&msg(2)),
        "federated averaging {}",
        msg(2)
    );
    // No value bits, Golomb-coded positions: beyond gradient dropping at the same density;
    // SBC (3) sends what SBC (2) sends, ten times less often.
    assert!(msg(3) > 3.0 * msg(1), "SBC (1) {} vs {}", msg(3), msg(1));
    assert!(
        msg(5) > 5.0 * msg(4),
        "SBC (3) {} vs SBC (2) {}",
        msg(5),
        msg(4)
    );
    common::assert_table(
        &dir,
        "table2",
        6,
        &["curves.png", "curves.svg", "sbc3/summary.json"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
