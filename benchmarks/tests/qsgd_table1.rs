//! `qsgd_table1 --preset smoke` end to end on synthetic data: four real 4-worker jobs of 40 steps (32-bit
//! and QSGD at 2, 4 and 8 bits), the table's files, and wire compression in the order the
//! bit widths imply, with the default `--norm max` (the paper's scaling). Also its argument errors,
//! which must come before any job starts.

mod common;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_qsgd_table1"),
        &[
            ("--preset fast", "--preset fast"),
            (
                "--preset paper",
                "--preset paper needs --data-dir with CIFAR-10's binary batches",
            ),
            ("--workers 1", "--workers must be at least 2"),
            ("--workers 0", "--workers 0: must be at least 1"),
            ("--steps 0", "--steps 0: must be at least 1"),
            ("--norm l1", "l1"),
            (
                "--synthetic --data-dir /tmp",
                "--data-dir /tmp would be ignored",
            ),
        ],
    );
}

#[test]
fn four_jobs_write_the_table_and_fewer_bits_send_fewer_bytes() {
    let (dir, rows) = common::smoke_rows(
        env!("CARGO_BIN_EXE_qsgd_table1"),
        "qsgd-table1",
        // Checkpoints off through the tables' common flag, which reaches every job.
        &["--checkpoint-every", "0"],
    );
    let runs: Vec<&str> = rows.iter().filter_map(|r| r["run"].as_str()).collect();
    assert_eq!(runs, ["32bit", "QSGD 2bit", "QSGD 4bit", "QSGD 8bit"]);
    // LeNet-5 (Caffe): 20 5x5 filters, 50 5x5x20, 800 -> 500 -> 10, with biases.
    let lenet = 20 * 25 + 20 + 50 * 20 * 25 + 50 + 800 * 500 + 500 + 500 * 10 + 10;
    for r in &rows {
        assert_eq!(r["steps"].as_u64(), Some(40), "{r}");
        assert_eq!(r["params"].as_u64(), Some(lenet as u64), "{r}");
        let acc = r["top1"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&acc), "{r}");
        assert!(r["speedup"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    }
    assert_eq!(rows[0]["speedup"].as_f64(), Some(1.0));
    let ratio = |i: usize| rows[i]["compression_ratio"].as_f64().unwrap_or(0.0);
    assert!((ratio(0) - 1.0).abs() < 1e-9, "32-bit: {}", ratio(0));
    // 2 bits in buckets of 128 < 4 bits in 512 < 8 bits in 512 < 32 bits. Scaled by the
    // max, 8-bit Elias messages take about 12.6 bits a value (2.5x the gradient, 1.3-1.5x
    // on the wire with 4 ranks' allgather).
    assert!(
        ratio(1) > ratio(2) && ratio(2) > ratio(3) && ratio(3) > 1.2,
        "{} {} {}",
        ratio(1),
        ratio(2),
        ratio(3)
    );
    // The table's default scaling, max, reached every QSGD run (the method's own default,
    // l2, is the compress crate's tests').
    for run in ["qsgd-2bit", "qsgd-4bit", "qsgd-8bit"] {
        let s = std::fs::read_to_string(dir.join(run).join("summary.json")).expect("summary");
        assert!(s.contains("norm=max"), "{run}: {s}");
    }
    for run in ["32bit", "qsgd-2bit", "qsgd-4bit", "qsgd-8bit"] {
        assert!(dir.join(run).join("summary.json").is_file(), "{run}");
        assert!(!dir.join(run).join("checkpoint").exists(), "{run}");
    }
    common::assert_table(
        &dir,
        "table1",
        4,
        &["curves.png", "curves.svg", "qsgd-4bit/summary.json"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
