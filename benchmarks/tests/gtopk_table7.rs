//! `gtopk_table7` end to end at a tiny size: ResNet-20 with 1 and 2 workers for each of
//! dense, Top-k and gTop-k (six real jobs of 3 steps), the projection against paper 002's
//! Table I computed here by hand, the bytes the sparse jobs sent, and the files. Also its
//! argument errors, which must come before any job starts.

mod common;

use serde_json::Value;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_gtopk_table7"),
        &[
            ("--preset fast", "--preset fast"),
            ("--workers 1", "--workers must be at least 2"),
            ("--models lenet5", "--models lenet5"),
            ("--steps 2 --skip 2", "leaves no timed step"),
        ],
    );
}

#[test]
fn six_jobs_measure_and_project_with_table_one() {
    let (dir, rows) = common::smoke_rows(env!("CARGO_BIN_EXE_gtopk_table7"), "gtopk-table7", &[]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    let f = |key: &str| {
        r[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {r}"))
    };
    // ResNet-20 (CIFAR, option A): the paper's 0.27 M parameters.
    assert_eq!(r["params"].as_u64(), Some(269_722), "{r}");
    for key in [
        "iteration_s",
        "throughput",
        "measured_dense",
        "measured_topk",
        "measured_gtopk",
    ] {
        assert!(f(key) > 0.0, "{key}: {r}");
    }
    // The projection: 32 workers, alpha = 0.436 ms, beta = 9 ns/byte, k = 270 pairs.
    let (a, b, n, k) = (0.436e-3, 9e-9, 269_722.0, 270.0);
    let close = |got: f64, want: f64| assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}");
    close(
        f("comm_dense_s"),
        62.0 * a + 2.0 * 31.0 / 32.0 * 4.0 * n * b,
    );
    close(f("comm_topk_s"), 5.0 * a + 31.0 * 8.0 * k * b);
    close(f("comm_gtopk_s"), 10.0 * (a + 8.0 * k * b));
    close(
        f("projected_dense"),
        32.0 * 4.0 / (f("iteration_s") + f("comm_dense_s")),
    );
    close(
        f("projected_gtopk"),
        32.0 * 4.0 / (f("step_gtopk_s") + f("comm_gtopk_s")),
    );
    close(
        f("projected_g_over_t"),
        f("projected_gtopk") / f("projected_topk"),
    );
    // The 2-worker sparse jobs sent one bucket at density 0.001: far fewer bytes than
    // the dense ring, which sends exactly its dense bytes.
    let ratio = |run: &str| {
        let text = std::fs::read_to_string(dir.join(run).join("summary.json")).expect(run);
        let v: Value = serde_json::from_str(&text).expect("summary.json");
        v["compression_ratio"].as_f64().unwrap_or(0.0)
    };
    assert!((ratio("resnet20-dense-2w") - 1.0).abs() < 1e-9);
    for run in ["resnet20-topk-2w", "resnet20-gtopk-2w"] {
        assert!(ratio(run) > 50.0, "{run}: {}", ratio(run));
    }
    common::assert_table(&dir, "table7", 1, &[]);
    let _ = std::fs::remove_dir_all(&dir);
}
