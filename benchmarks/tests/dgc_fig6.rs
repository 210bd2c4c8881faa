//! `dgc_fig6` end to end at a tiny size: LeNet-5 profiled by three one-node jobs (dense,
//! TernGrad, DGC; 3 steps), the message sizes the formats imply, the communication
//! model against the α-β forms computed here by hand, and the files. Also its argument
//! errors, which must come before any job starts.

mod common;

use serde_json::Value;

#[test]
fn wrong_arguments_fail_before_any_job() {
    common::bad_arguments(
        env!("CARGO_BIN_EXE_dgc_fig6"),
        &[
            ("--preset fast", "--preset fast"),
            ("--models lenet", "--models lenet: not a model"),
            ("--gbps 0", "--gbps must be positive"),
            ("--steps 1 --skip 1", "leaves no timed step"),
        ],
    );
}

#[test]
fn three_profiles_and_the_model_give_the_speedups() {
    let (dir, rows) = common::smoke_rows(env!("CARGO_BIN_EXE_dgc_fig6"), "dgc-fig6", &[]);
    // 3 methods x 2 rates x 7 node counts.
    assert_eq!(rows.len(), 42, "{rows:?}");
    let row = |method: &str, gbps: f64, nodes: u64| -> &Value {
        rows.iter()
            .find(|r| {
                r["method"] == method
                    && r["gbps"].as_f64() == Some(gbps)
                    && r["nodes"].as_u64() == Some(nodes)
            })
            .unwrap_or_else(|| panic!("no row {method} {gbps} {nodes}"))
    };
    let f = |r: &Value, key: &str| r[key].as_f64().unwrap_or(f64::NAN);
    let n = 431_080.0; // LeNet-5's parameters
    let (dense, tern, dgc) = (
        row("dense", 1.0, 64),
        row("terngrad", 1.0, 64),
        row("dgc", 1.0, 64),
    );
    // Messages: dense 4 bytes a value; TernGrad 2 bits a value and a scale; DGC 0.1 %
    // of the values at 4 + 2 bytes (value and 16-bit run length), with a small header.
    assert_eq!(f(dense, "message_bytes"), 4.0 * n);
    let t = f(tern, "message_bytes");
    assert!(
        t >= n / 4.0 && t < n / 4.0 * 1.01,
        "TernGrad sends {t} bytes"
    );
    let d = f(dgc, "message_bytes");
    assert!(
        d > 0.001 * n * 4.0 && d < 0.001 * n * 8.0,
        "DGC sends {d} bytes"
    );
    // The model at 1 Gbit/s (beta = 8 ns/byte), alpha = 0.436 ms, 64 nodes: the dense
    // ring 2(N-1) alpha + 2(N-1)/N 4n beta; the allgathers log2(N) alpha + (N-1) m beta.
    let (a, b) = (0.436e-3, 8e-9);
    let close = |got: f64, want: f64| assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}");
    close(
        f(dense, "comm_s"),
        126.0 * a + 2.0 * 63.0 / 64.0 * 4.0 * n * b,
    );
    close(f(tern, "comm_s"), 6.0 * a + 63.0 * t.round() * b);
    close(f(dgc, "comm_s"), 6.0 * a + 63.0 * d.round() * b);
    // Speed-up: N x one node's dense iteration / (this method's iteration + comm);
    // dense on one node is 1 by definition, and 10 Gbit/s never slows anything down.
    let t1 = f(dense, "step_s");
    for r in &rows {
        let nodes = r["nodes"].as_u64().unwrap_or(0) as f64;
        close(
            f(r, "speedup"),
            nodes * t1 / (f(r, "step_s") + f(r, "comm_s")),
        );
    }
    assert!((f(row("dense", 10.0, 1), "speedup") - 1.0).abs() < 1e-12);
    for m in ["dense", "terngrad", "dgc"] {
        assert!(f(row(m, 10.0, 64), "speedup") >= f(row(m, 1.0, 64), "speedup"));
    }
    common::assert_table(
        &dir,
        "fig6",
        42,
        &[
            "fig6_1gbps.png",
            "fig6_10gbps.svg",
            "lenet5-dgc/summary.json",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
