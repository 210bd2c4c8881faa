//! `dgc_table2 --preset smoke`: the table's three jobs (baseline, gradient dropping, DGC)
//! as real 4-worker jobs on synthetic data, the table's files with the claim columns.
//! Also its argument errors, which must come before any job starts.

mod common;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_dgc_table2"),
        &[
            ("--preset fast", "fast"),
            ("--preset paper", "needs --data-dir"),
            (
                "--preset smoke --data-dir /tmp",
                "--data-dir /tmp would be ignored",
            ),
            ("--workers 0", "--workers 0"),
            ("--max-steps 0", "--max-steps 0: must be at least 1"),
        ],
    );
}

#[test]
fn the_smoke_preset_runs_every_job_and_states_the_claims() {
    let (dir, rows) = common::smoke_rows(env!("CARGO_BIN_EXE_dgc_table2"), "dgc-table2", &[]);
    let methods: Vec<&str> = rows.iter().filter_map(|r| r["method"].as_str()).collect();
    assert_eq!(methods, ["baseline", "gradient dropping", "dgc"]);
    assert!(rows[0]["claim"].is_null(), "the baseline is the reference");
    assert!(rows[2]["claim"]
        .as_str()
        .unwrap()
        .contains("within 0.5 points"));
    for r in &rows {
        let acc = r["top1"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=100.0).contains(&acc), "{r}");
    }
    let csv = std::fs::read_to_string(dir.join("table2.csv")).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(",claim,holds"),
        "{csv}"
    );
    assert!(dir.join("curves.png").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}
