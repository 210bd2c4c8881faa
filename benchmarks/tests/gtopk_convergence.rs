//! `gtopk_convergence --preset smoke`: dense, Top-k and gTop-k S-SGD on both tasks (a CNN
//! and the LSTM) as real 4-worker jobs on synthetic data, k over the whole model, the
//! table's files and claim columns, and each sparse job's compression. Also its argument
//! errors, which must come before any job starts.

mod common;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_gtopk_convergence"),
        &[
            ("--preset fast", "--preset fast"),
            ("--tasks gan", "--tasks gan"),
            ("--densities 0", "--densities 0"),
            ("--selection layer", "layer"),
            ("--preset paper", "--data-dir"),
            ("--preset smoke --ptb-dir /tmp", "would be ignored"),
            (
                "--ptb-dir /nonexistent",
                "needs PTB-layout text in /nonexistent",
            ),
        ],
    );
}

#[test]
fn the_smoke_preset_runs_three_methods_on_both_tasks() {
    let (dir, rows) = common::smoke_rows(
        env!("CARGO_BIN_EXE_gtopk_convergence"),
        "gtopk-convergence",
        &["--checkpoint-every", "0"],
    );
    let jobs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["task"].as_str().unwrap(), r["method"].as_str().unwrap()))
        .collect();
    assert_eq!(
        jobs,
        [
            ("ResNet-20", "dense"),
            ("ResNet-20", "topk"),
            ("ResNet-20", "gtopk"),
            ("LSTM", "dense"),
            ("LSTM", "topk"),
            ("LSTM", "gtopk"),
        ]
    );
    for r in &rows {
        assert_eq!(r["selection"], "model", "{r}");
        let sparse = r["method"] != "dense";
        assert_eq!(r["claim"].is_string(), sparse, "{r}");
        if sparse {
            // Past the short warm-up, far fewer bytes than a dense ring.
            let ratio = r["compression_ratio"].as_f64().unwrap_or(0.0);
            assert!(ratio > 3.0, "{r}");
        }
    }
    // One bucket: the sparse jobs' configurations hold every parameter in it.
    let job = std::fs::read_to_string(dir.join("resnet20-gtopk-0.001/job.toml")).unwrap();
    assert!(job.contains("bucket_elems = 1099511627776"), "{job}");
    let curves = std::fs::read_to_string(dir.join("curves.csv")).unwrap();
    assert!(
        curves.starts_with("job,epoch,metric\n") && curves.lines().count() > 6,
        "{curves}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
