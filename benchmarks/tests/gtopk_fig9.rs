//! `gtopk_fig9` end to end at small sizes: two real measuring jobs (2 and 3 local
//! workers), the model rows against paper 002's Table I computed here by hand, the
//! measured rows exactly where a job ran, and the files. Also its argument errors, which
//! must come before anything is created.

mod common;

use serde_json::Value;

#[test]
fn wrong_arguments_fail_before_anything_runs() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_gtopk_fig9"),
        &[
            (
                "--worlds 1,2",
                "every measured world needs at least 2 workers",
            ),
            ("--density 0", "--density 0 must be in (0, 1]"),
            ("--right-world 1", "--right-world 1"),
            ("--sizes 2", "--size and --sizes are in bytes"),
            ("--repeats 0", "--repeats 0: must be at least 1"),
        ],
    );
}

#[test]
fn two_jobs_measure_and_the_model_follows_table_one() {
    let (dir, rows) = common::smoke_rows(env!("CARGO_BIN_EXE_gtopk_fig9"), "gtopk-fig9", &[]);
    let find = |panel: &str, world: u64, bytes: u64, c: &str| -> &Value {
        rows.iter()
            .find(|r| {
                r["panel"] == panel
                    && r["world"].as_u64() == Some(world)
                    && r["bytes"].as_u64() == Some(bytes)
                    && r["collective"] == c
            })
            .unwrap_or_else(|| panic!("no row {panel} {world} {bytes} {c}"))
    };
    // Left: model worlds 2..64 plus the measured 3, three collectives each; right: the
    // model's 32 workers and the largest measured job's 3, two sizes, two collectives.
    assert_eq!(rows.len(), 7 * 3 + 2 * 2 * 2, "{rows:?}");
    // Table I with the paper's alpha = 0.436 ms, beta = 9 ns/byte; 4 MB at density
    // 0.001 is k = 1,000 pairs of 8 bytes. TopK at 32: log2(32) alpha + 31 * 8k beta;
    // gTopK: 2 log2(32) (alpha + 8k beta); dense ring: 2(P-1) alpha + 2(P-1)/P m beta.
    let (a, b, k, m) = (0.436e-3, 9e-9, 1000.0, 4e6);
    let close = |v: &Value, want: f64| {
        let got = v.as_f64().unwrap_or(f64::NAN);
        assert!((got - want).abs() < 1e-9 * want.max(1.0), "{got} vs {want}");
    };
    close(
        &find("left", 32, 4_000_000, "topk_allreduce")["paper_model_s"],
        5.0 * a + 31.0 * 8.0 * k * b,
    );
    close(
        &find("left", 32, 4_000_000, "gtopk_allreduce")["paper_model_s"],
        10.0 * (a + 8.0 * k * b),
    );
    close(
        &find("left", 4, 4_000_000, "allreduce")["paper_model_s"],
        6.0 * a + 1.5 * m * b,
    );
    // Measurements exactly where a job ran, each with its own job's model.
    for r in &rows {
        let world = r["world"].as_u64().unwrap_or(0);
        let ran = (r["panel"] == "left" && (world == 2 || world == 3))
            || (r["panel"] == "right" && world == 3);
        if ran {
            assert!(r["measured_s"].as_f64().is_some_and(|t| t > 0.0), "{r}");
            assert!(
                r["measured_job_model_s"].as_f64().is_some_and(|t| t > 0.0),
                "{r}"
            );
        } else {
            assert!(r["measured_s"].is_null(), "{r}");
        }
        assert!(r["our_model_s"].as_f64().is_some_and(|t| t >= 0.0), "{r}");
    }
    common::assert_table(
        &dir,
        "fig9",
        rows.len(),
        &[
            "fig9_left_paper.png",
            "fig9_left_here.svg",
            "fig9_right_paper.svg",
            "fig9_right_here.png",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
