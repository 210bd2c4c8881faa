//! `comm_bench` end to end on 2 local workers at one small size: `--collectives` times
//! exactly the rows it names, in the JSON form the README documents, and TopKAllReduce's
//! allgather row moves the bytes of k (index, value) pairs per peer; `--trace` writes
//! every rank's steps of every call; bad flag values are refused before any worker
//! starts.

mod common;

use serde_json::Value;

/// comm_bench's rows with `args` and `--json`; it must succeed.
fn json_rows(args: &[&str]) -> Vec<Value> {
    let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let o = common::run(env!("CARGO_BIN_EXE_comm_bench"), &args);
    assert!(o.status.success(), "{}", common::text(&o));
    serde_json::from_slice(&o.stdout).expect("--json prints the rows")
}

fn names(rows: &[Value]) -> Vec<&str> {
    rows.iter()
        .map(|r| r["collective"].as_str().unwrap_or(""))
        .collect()
}

#[test]
fn collectives_pick_the_rows() {
    let rows = json_rows(&[
        "--world",
        "2",
        "--no-reference",
        "--sizes",
        "400000",
        "--repeats",
        "1",
        "--collectives",
        "topk_allreduce,allgather_v",
    ]);
    assert_eq!(names(&rows), ["topk_allreduce", "allgather_v"]);
    for r in &rows {
        assert_eq!(r["world"], 2);
        assert_eq!(r["bytes"], 400000);
        assert!(r["measured_s"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        assert!(r["predicted_s"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        assert!(r["alpha_s"].as_f64().is_some_and(|a| a > 0.0), "{r}");
        assert!(
            r["beta_s_per_byte"].as_f64().is_some_and(|b| b > 0.0),
            "{r}"
        );
        // Counted from /proc/self/stat on Linux (null elsewhere).
        let faults = r["minor_faults_per_call"].as_f64();
        assert!(
            faults.is_some_and(|f| f >= 0.0) || !cfg!(target_os = "linux"),
            "{r}"
        );
    }
    // k = 0.001 × 100,000 values = 100 pairs of 8 bytes, plus the 4-byte count: with 2
    // ranks the gather sends that one 804-byte block a call, in one framed message: the
    // block's length as a 2-byte LEB128 varint, the block, a 16-byte header; and nothing
    // else is counted (not the timing's own allgather between calls).
    let gbit = |r: &Value| r["gbit_per_s"].as_f64().unwrap_or(0.0);
    let t = rows[1]["measured_s"].as_f64().unwrap_or(1.0);
    let sent_bits = gbit(&rows[1]) * 1e9 * t;
    assert!(
        (sent_bits / 8.0 - 822.0).abs() < 0.5,
        "allgather_v sent {} bytes a call, expected 804, its 2-byte length and a 16-byte header",
        sent_bits / 8.0
    );
}

/// gTopK and its broadcast alone on 3 workers, traced: every call has every rank's
/// steps, in order on each rank, from 0 µs; the root waits for its first child's receipt
/// before its second (40 kB messages, over RECEIPT_MIN_BYTES), and gTopK's root cuts once
/// per child.
#[test]
fn trace_holds_every_ranks_steps_of_every_call() {
    let dir = tempfile_dir("comm_bench_trace");
    let path = dir.join("trace.csv");
    let rows = json_rows(&[
        "--world",
        "3",
        "--no-reference",
        "--sizes",
        "20000000",
        "--repeats",
        "2",
        "--collectives",
        "gtopk_allreduce,broadcast",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert_eq!(names(&rows), ["gtopk_allreduce", "broadcast"]);
    let text = std::fs::read_to_string(&path).expect("the trace file");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("collective,bytes,call,warmup,rank,event,peer,msg_bytes,t_us")
    );
    let steps: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // 1 warm-up call and 2 timed, each with steps of all 3 ranks.
    for coll in ["gtopk_allreduce", "broadcast"] {
        for call in ["0", "1", "2"] {
            let of_call: Vec<&Vec<&str>> = steps
                .iter()
                .filter(|s| s[0] == coll && s[2] == call)
                .collect();
            // Only the first call is comm_bench's warm-up.
            let warmup = if call == "0" { "1" } else { "0" };
            assert!(of_call.iter().all(|s| s[3] == warmup), "{coll} call {call}");
            for rank in ["0", "1", "2"] {
                let times: Vec<f64> = of_call
                    .iter()
                    .filter(|s| s[4] == rank)
                    .map(|s| s[8].parse().unwrap())
                    .collect();
                assert!(
                    !times.is_empty(),
                    "{coll} call {call}: no steps of rank {rank}"
                );
                assert!(times.windows(2).all(|w| w[0] <= w[1]), "{coll}: {times:?}");
                assert!(times.iter().all(|&t| t >= 0.0));
            }
            let at_root = |event: &str| {
                of_call
                    .iter()
                    .filter(|s| s[4] == "0" && s[5] == event)
                    .count()
            };
            assert_eq!(at_root("down_send"), 2, "{coll} call {call}");
            assert_eq!(at_root("down_receipt"), 1, "{coll} call {call}");
            if coll == "gtopk_allreduce" {
                assert_eq!(at_root("up_cut"), 2, "call {call}");
            }
        }
    }
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn an_unknown_collective_is_refused_before_any_worker_starts() {
    let o = common::run(
        env!("CARGO_BIN_EXE_comm_bench"),
        &["--world", "2", "--collectives", "allreduce,scatter"],
    );
    assert!(!o.status.success());
    assert!(
        common::text(&o).contains("invalid value 'scatter'"),
        "{}",
        common::text(&o)
    );
}

#[test]
fn an_unknown_time_for_the_topk_sum_is_refused_with_the_choices() {
    let o = common::run(
        env!("CARGO_BIN_EXE_comm_bench"),
        &["--world", "2", "--topk-sum", "sometimes"],
    );
    assert!(!o.status.success());
    let text = common::text(&o);
    assert!(text.contains("auto, arrival or after"), "{text}");
}

#[test]
fn a_world_of_one_is_refused_before_any_worker_starts() {
    let o = common::run(env!("CARGO_BIN_EXE_comm_bench"), &["--world", "1"]);
    assert!(!o.status.success());
    let text = common::text(&o);
    assert!(
        text.contains("--world 1: comm_bench needs at least 2 workers"),
        "{text}"
    );
}

/// Values the tool cannot measure fail at once, naming the flag and what it accepts
/// (were they accepted, 2 workers would start and run at the tiny size given).
#[test]
fn unmeasurable_sizes_densities_and_repeats_are_refused_before_any_worker_starts() {
    for (flags, want) in [
        (&["--density", "5"][..], "--density 5: must be in (0, 1]"),
        (&["--density", "0"], "--density 0: must be in (0, 1]"),
        (
            &["--sizes", "3"],
            "--sizes 3: a size is bytes of f32 values",
        ),
        (&["--sizes", "0"], "a multiple of 4 from 4 to"),
        (&["--repeats", "0"], "--repeats 0: must be at least 1"),
    ] {
        let mut args = vec!["--world", "2", "--no-reference", "--sizes", "4096"];
        args.extend(flags);
        let o = common::run(env!("CARGO_BIN_EXE_comm_bench"), &args);
        let text = common::text(&o);
        assert!(!o.status.success(), "{flags:?} succeeded: {text}");
        assert!(
            text.contains(want),
            "{flags:?}: expected '{want}' in: {text}"
        );
        assert!(!text.contains("fitted alpha"), "{flags:?} ran: {text}");
    }
}
