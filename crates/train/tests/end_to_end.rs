//! The `train` binary end to end, 2 worker processes on loopback, LeNet-5 on synthetic
//! data: every method trains (the loss falls, all ranks hold identical parameters, the
//! compression ratio is what the method's format implies, the run directory has every
//! file), communication overlaps backprop, a resumed run continues bit for bit, a dead
//! worker ends the job with an error naming it, and bad configurations fail early.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gradex-e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn train(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_train"));
    c.args(args).env("GRADEX_TIMEOUT_SECS", "20");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running train")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `train` with `args`, which must fail with `want` in its output.
fn refused(args: &[&str], want: &str) {
    let o = train(args, &[]);
    let t = text(&o);
    assert!(!o.status.success(), "{args:?} succeeded:\n{t}");
    assert!(t.contains(want), "{args:?}: expected '{want}' in:\n{t}");
    // Each layer of context says its piece once (the method's own errors begin with
    // "method configuration", which the caller must not add again).
    assert!(
        !t.contains("method configuration: method configuration"),
        "{args:?}: a doubled prefix in:\n{t}"
    );
}

const BASE: [&str; 12] = [
    "--model",
    "lenet5",
    "--dataset",
    "synthetic",
    "--workers",
    "2",
    "--batch-size",
    "16",
    "--synthetic-samples",
    "512",
    "--eval-samples",
    "128",
];

/// SBC(2) with a 4-step delay (the masking and Adam tests).
const SBC2_DELAY4: [&str; 6] = [
    "--method",
    "sbc",
    "--method-opt",
    "preset=2",
    "--method-opt",
    "delay=4",
];

fn records(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The records of one kind ("step" or "eval"), in file order.
fn records_of(dir: &Path, kind: &str) -> Vec<Value> {
    records(dir)
        .into_iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// Every tensor of a rank's checkpoint, by name.
fn checkpoint(dir: &Path, rank: usize) -> Vec<(String, Vec<f32>)> {
    train::checkpoint::load(&train::checkpoint::path(dir, rank))
        .unwrap()
        .tensors
        .into_iter()
        .map(|(n, v, _)| (n, v))
        .collect()
}

fn params(dir: &Path, rank: usize) -> Vec<(String, Vec<f32>)> {
    checkpoint(dir, rank)
        .into_iter()
        .filter(|(n, _)| n.starts_with("param/"))
        .collect()
}

#[test]
fn every_method_trains_with_identical_parameters_and_its_compression_ratio() {
    // (method, options, ratio range). LeNet-5 has 431,080 parameters in 8 tensors; with
    // 2 workers a dense ring sends 4 bytes per parameter per step from each rank.
    let cases: &[(&str, &[&str], f64, f64)] = &[
        ("dense", &[], 0.99, 1.01),
        // bfloat16 on the ring: 2 bytes a value.
        ("dense", &["wire=bf16"], 1.99, 2.01),
        ("topk", &["density=0.01"], 40.0, 55.0),
        ("dgc", &["density=0.01", "warmup_epochs=0"], 35.0, 80.0),
        ("gtopk", &["density=0.01"], 40.0, 55.0),
        ("sbc", &["preset=2", "delay=4"], 500.0, 3000.0),
        ("qsgd", &["preset=4bit"], 8.0, 20.0),
        ("local", &["density=0.01", "sync_every=8"], 5.0, 9.0),
        ("fedavg", &["delay=4"], 3.99, 4.01),
        // Rank 4: 431,080 values as 10,200 (every weight compressed, the biases dense).
        ("powersgd", &["rank=4", "start_iter=0"], 42.2, 42.3),
    ];
    for (method, opts, lo, hi) in cases {
        let dir = tmp(method);
        let out = dir.to_str().unwrap();
        let mut args: Vec<&str> = BASE.to_vec();
        args.extend([
            "--method",
            method,
            "--steps",
            "24",
            "--lr",
            "0.05",
            "--log-every",
            "4",
            "--out",
            out,
        ]);
        for o in *opts {
            args.extend(["--method-opt", o]);
        }
        let o = train(&args, &[]);
        assert!(o.status.success(), "{method}: {}", text(&o));
        for f in [
            "config.toml",
            "metrics.jsonl",
            "summary.json",
            "checkpoint/rank0.safetensors",
            "checkpoint/rank1.safetensors",
            "loss_by_epoch.svg",
            "loss_by_bytes.svg",
            "metric_by_epoch.svg",
            "metric_by_bytes.svg",
        ] {
            assert!(dir.join(f).exists(), "{method}: {f} missing");
        }
        for f in [
            "loss_by_epoch.png",
            "loss_by_bytes.png",
            "metric_by_epoch.png",
            "metric_by_bytes.png",
        ] {
            let bytes = std::fs::read(dir.join(f)).unwrap_or_default();
            assert!(
                bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
                "{method}: {f} missing or not a PNG"
            );
        }
        let recs = records(&dir);
        let steps: Vec<&Value> = recs.iter().filter(|r| r["kind"] == "step").collect();
        let (first, last) = (
            steps[0]["loss"].as_f64().unwrap(),
            steps[steps.len() - 1]["loss"].as_f64().unwrap(),
        );
        assert!(
            last < 0.9 * first,
            "{method}: loss {first} -> {last} did not fall"
        );
        assert!(
            recs.iter().any(|r| r["kind"] == "eval"),
            "{method}: no evaluation record"
        );
        // local: the last step (24) is a synchronisation step, so ranks agree there too.
        assert_eq!(
            params(&dir, 0),
            params(&dir, 1),
            "{method}: ranks hold different parameters"
        );
        let s = summary(&dir);
        for key in [
            "final_metric",
            "metric_name",
            "bytes_sent",
            "dense_bytes",
            "compression_ratio",
            "wall_seconds",
            "steps",
            "workers",
            "method",
        ] {
            assert!(!s[key].is_null(), "{method}: summary has no {key}");
        }
        let ratio = s["compression_ratio"].as_f64().unwrap();
        eprintln!(
            "{method:<6} loss {first:.3} -> {last:.3}, compression {ratio:.1}x, accuracy {}",
            s["final_metric"]
        );
        assert!(
            ratio >= *lo && ratio <= *hi,
            "{method}: compression ratio {ratio} outside [{lo}, {hi}]"
        );
        if *method == "fedavg" {
            // One dense average per 4 steps: a quarter of a dense method's messages and of
            // its values, however the synchronisation's own statistics are added in.
            let m = s["message_compression_ratio"].as_f64().unwrap();
            assert!((m - 4.0).abs() < 1e-9, "fedavg: message ratio {m}, not 4");
            for r in &steps {
                let d = r["density"].as_f64().unwrap();
                assert!(
                    (d - 0.25).abs() < 1e-9,
                    "fedavg: density {d}, not 0.25: {r}"
                );
            }
        }
        if *method == "dgc" {
            // Communication overlaps backprop: the first exchange of a step starts before
            // backward has finished (LeNet's last layers are ready long before conv1).
            let overlapping = steps
                .iter()
                .filter(|r| r["overlap_seconds"].as_f64().unwrap() > 0.0)
                .count();
            assert_eq!(
                overlapping,
                steps.len(),
                "some steps started exchanging only after backward"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn sbc_masks_the_momentum_of_what_it_sent() {
    // SBC(2) at 1 % with a 4-step delay, 8 steps: the last step synchronises, so with
    // masking each rank's momentum is zero at the ~1 % of positions it has just sent.
    let zeros = |masking: &str| -> (usize, usize) {
        let dir = tmp(&format!("sbc-mask-{masking}"));
        let mut args: Vec<&str> = BASE.to_vec();
        let mask = format!("masking={masking}");
        let out = dir.to_str().unwrap().to_string();
        args.extend(SBC2_DELAY4);
        args.extend([
            "--method-opt",
            &mask,
            "--momentum",
            "0.9",
            "--steps",
            "8",
            "--lr",
            "0.05",
            "--out",
            &out,
        ]);
        let o = train(&args, &[]);
        assert!(o.status.success(), "masking={masking}: {}", text(&o));
        assert_eq!(params(&dir, 0), params(&dir, 1), "masking={masking}");
        let (mut zero, mut total) = (0, 0);
        for rank in 0..2 {
            for (name, v) in checkpoint(&dir, rank) {
                if name.starts_with("optim/") {
                    zero += v.iter().filter(|x| **x == 0.0).count();
                    total += v.len();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        (zero, total)
    };
    let (on, total) = zeros("true");
    let (off, total_off) = zeros("false");
    eprintln!("momentum zeros: {on} with masking, {off} without, of {total}");
    assert_eq!(total, total_off);
    assert!(total > 0, "no momentum buffers in the checkpoints");
    // One side of at most 1 % per tensor is sent; dead units leave zeros in both runs.
    assert!(
        on >= off + total / 200,
        "masking left {on} zeros of {total} momentum values, {off} without it"
    );
}

/// The resume tests' job: BASE with DGC at 5 % after a one-epoch warm-up.
fn dgc_job() -> Vec<String> {
    let mut v: Vec<String> = BASE.iter().map(|s| s.to_string()).collect();
    v.extend(
        [
            "--method",
            "dgc",
            "--method-opt",
            "density=0.05",
            "--method-opt",
            "warmup_epochs=1",
            "--lr",
            "0.05",
        ]
        .map(String::from),
    );
    v
}

/// Runs `job` for 2 epochs straight, and for 1 epoch then `--resume`d to 2, and checks
/// that both end the same ([`assert_same_run`]); returns the two run directories
/// (`{prefix}straight`, `{prefix}resumed`).
fn straight_and_resumed(prefix: &str, job: Vec<String>) -> (PathBuf, PathBuf) {
    let (a, b) = (
        tmp(&format!("{prefix}straight")),
        tmp(&format!("{prefix}resumed")),
    );
    let run = |out: &Path, epochs: &str| {
        let mut args = job.clone();
        args.extend(["--epochs", epochs, "--out"].map(String::from));
        args.push(out.display().to_string());
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let o = train(&refs, &[]);
        assert!(o.status.success(), "{}", text(&o));
    };
    run(&a, "2");
    run(&b, "1");
    let o = train(
        &["--resume", "--epochs", "2", "--out", b.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_same_run(&a, &b);
    (a, b)
}

/// A checkpoint damaged on disk (bytes flipped in the middle of rank 0's newest) is set
/// aside by `--resume`, which says so and names the step it resumes from: the newest
/// generation every rank holds intact (rank 1 falls back to its previous one too). The
/// run then ends bit for bit as an uninterrupted one.
#[test]
fn a_damaged_checkpoint_is_set_aside_and_the_intact_generation_resumed() {
    let (a, b) = (tmp("damaged-straight"), tmp("damaged-resumed"));
    let run = |out: &Path, epochs: &str| {
        let mut args = dgc_job();
        args.extend(["--epochs", epochs, "--out"].map(String::from));
        args.push(out.display().to_string());
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let o = train(&refs, &[]);
        assert!(o.status.success(), "{}", text(&o));
    };
    run(&a, "3");
    run(&b, "2");
    let newest = train::checkpoint::path(&b, 0);
    let mut bytes = std::fs::read(&newest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid..mid + 16].iter_mut().for_each(|x| *x ^= 0xA5);
    std::fs::write(&newest, bytes).unwrap();
    let o = train(
        &["--resume", "--epochs", "3", "--out", b.to_str().unwrap()],
        &[],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let aside = b.join("checkpoint").join("rank0.safetensors.damaged");
    assert!(t.contains("set the damaged checkpoint"), "{t}");
    assert!(t.contains(&aside.display().to_string()), "{t}");
    assert!(t.contains("CRC-32"), "{t}");
    assert!(
        t.contains("resuming from its previous checkpoint (step 16)"),
        "{t}"
    );
    assert!(aside.exists(), "the damaged file is kept");
    assert_same_run(&a, &b);
}

/// The hierarchical exchange: 4 workers as 2 nodes of 2. Dense through the hierarchy
/// (each node's average, then the leaders' average) trains to the flat dense run's
/// parameters within f32 rounding, and with buckets to the same parameters bit for bit;
/// DGC through it leaves every rank with the same parameters, as do SBC (with and
/// without buckets) and FedAvg, which synchronise among the leaders after the step;
/// the bytes inside and across nodes are counted apart, the latter only what the leaders
/// exchanged. Wrong node sizes and methods are refused before any worker starts.
#[test]
fn the_hierarchical_exchange_matches_the_flat_one_and_counts_bytes_apart() {
    let run = |name: &str, method: &[&str], local: Option<&str>| -> PathBuf {
        let dir = tmp(name);
        let mut args = vec![
            "--model",
            "lenet5",
            "--dataset",
            "synthetic",
            "--workers",
            "4",
            "--batch-size",
            "8",
            "--synthetic-samples",
            "256",
            "--eval-samples",
            "64",
            "--steps",
            "12",
            "--lr",
            "0.05",
            "--out",
        ];
        let out = dir.display().to_string();
        args.push(&out);
        args.extend(method);
        if let Some(l) = local {
            args.extend(["--local-world-size", l]);
        }
        let o = train(&args, &[]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        dir
    };
    let flat = run("hier-flat", &["--method", "dense"], None);
    let hier = run("hier-dense", &["--method", "dense"], Some("2"));
    for rank in 0..4 {
        let (a, b) = (params(&flat, rank), params(&hier, rank));
        assert!(
            params(&hier, 0) == b,
            "rank {rank} differs from rank 0 in the hierarchy"
        );
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            let scale = x.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
            let worst = x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(
                worst <= 1e-4 * scale,
                "rank {rank} {name}: {worst} of {scale}"
            );
        }
    }
    let s = summary(&hier);
    let (intra, inter) = (
        s["intra_node_bytes_sent"].as_u64().unwrap(),
        s["inter_node_bytes_sent"].as_u64().unwrap(),
    );
    assert_eq!(intra + inter, s["bytes_sent"].as_u64().unwrap());
    assert!(inter > 0 && intra > 0, "{intra} {inter}");
    assert!(summary(&flat)["inter_node_bytes_sent"].is_null());

    // Buckets on the tensor path (the hierarchy's): a bucket's gradients concatenated on
    // the device and its update cut back into the members' shapes. The average of a
    // concatenation is the concatenation of the averages, bit for bit.
    let bucketed = run(
        "hier-dense-buckets",
        &["--method", "dense", "--bucket-elems", "1000"],
        Some("2"),
    );
    for rank in 0..4 {
        assert!(
            params(&bucketed, rank) == params(&hier, rank),
            "rank {rank}: buckets changed the dense result"
        );
    }

    let dgc = run(
        "hier-dgc",
        &["--method", "dgc", "--method-opt", "warmup_epochs=0"],
        Some("2"),
    );
    for rank in 1..4 {
        assert!(
            params(&dgc, rank) == params(&dgc, 0),
            "rank {rank}'s parameters"
        );
    }
    let s = summary(&dgc);
    let inter = s["inter_node_bytes_sent"].as_u64().unwrap();
    let intra = s["intra_node_bytes_sent"].as_u64().unwrap();
    // Across nodes DGC's pairs; inside them the dense node average and its broadcast.
    assert!(inter * 20 < intra, "{inter} across, {intra} inside");

    // Methods that synchronise after the step: the leaders do, and pass the weights (and
    // SBC's momentum mask) to their nodes; every rank ends with the same parameters.
    // With buckets too: there the weights synchronised are a bucket's concatenation,
    // written back to its members, and SBC's momentum mask is cut into theirs.
    let after_step: [(&str, &[&str]); 3] = [
        ("hier-sbc", &["--method", "sbc", "--method-opt", "delay=3"]),
        (
            "hier-sbc-buckets",
            &[
                "--method",
                "sbc",
                "--method-opt",
                "delay=3",
                "--bucket-elems",
                "1000",
            ],
        ),
        (
            "hier-fedavg",
            &["--method", "fedavg", "--method-opt", "delay=4"],
        ),
    ];
    for (name, opts) in after_step {
        let dir = run(name, opts, Some("2"));
        for rank in 1..4 {
            assert!(
                params(&dir, rank) == params(&dir, 0),
                "{name}: rank {rank}'s parameters"
            );
        }
        let s = summary(&dir);
        assert!(
            s["inter_node_bytes_sent"].as_u64().unwrap() > 0,
            "{name}: {s}"
        );
    }

    let base = [
        "--model",
        "lenet5",
        "--dataset",
        "synthetic",
        "--workers",
        "4",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = base.to_vec();
        v.extend(extra);
        v
    };
    refused(
        &with(&["--local-world-size", "3"]),
        "do not make whole nodes of 3",
    );
    refused(
        &with(&[
            "--local-world-size",
            "2",
            "--method",
            "dense",
            "--method-opt",
            "wire=f16",
        ]),
        "does not run over a subgroup: its 16-bit ring runs on the TCP communicator",
    );
}

/// SBC resumes bit for bit: its `W_sync` and residuals go to the checkpoint and back,
/// and a resume between two synchronisations continues them. With buckets too: the
/// weights synchronised after the step are a bucket's concatenation, written back to its
/// members, and the momentum mask is cut into theirs. And on the tensor path (the
/// hierarchical exchange, here one node of both workers, whose leader runs the method's
/// tensor code): the state saved from tensors and loaded back into them, for SBC with
/// buckets and for DGC.
#[test]
fn sbc_and_dgc_resume_bit_for_bit_with_buckets_and_on_tensors() {
    let sbc = |buckets: &str, extra: &[&str]| -> Vec<String> {
        let mut job: Vec<String> = BASE.iter().map(|s| s.to_string()).collect();
        job.extend(
            [
                "--method",
                "sbc",
                "--method-opt",
                "delay=7",
                "--method-opt",
                "density=0.02",
                "--bucket-elems",
                buckets,
            ]
            .map(String::from),
        );
        job.extend(extra.iter().map(|s| s.to_string()));
        job
    };
    let mut dgc_on_tensors = dgc_job();
    dgc_on_tensors.extend(["--local-world-size", "2"].map(String::from));
    let cases = [
        ("sbc-", sbc("0", &[])),
        ("sbc-buckets-", sbc("1000", &[])),
        ("sbc-tensors-", sbc("1000", &["--local-world-size", "2"])),
        ("dgc-tensors-", dgc_on_tensors),
    ];
    for (prefix, job) in cases {
        // Between two synchronisations the ranks' weights differ by design; the resume
        // is checked against the straight run rank by rank.
        straight_and_resumed(prefix, job);
    }
}

/// The temporary a failed or killed save left (a whole checkpoint's size, on a disk
/// that may be full) is removed when the run starts again; other files stay.
#[test]
fn a_resume_removes_the_temporaries_a_failed_save_left() {
    let dir = tmp("stale-tmp");
    let out = dir.to_str().unwrap();
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend(["--steps", "4", "--out", out]);
    let o = train(&args, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let ck = dir.join("checkpoint");
    let stale = ck.join("rank1.safetensors.tmp4242-00000000deadbeef");
    let other = ck.join("notes.txt");
    std::fs::write(&stale, vec![0u8; 4096]).unwrap();
    std::fs::write(&other, b"keep").unwrap();
    let o = train(&["--resume", "--steps", "6", "--out", out], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stale.exists(), "the stale temporary is still there");
    assert!(other.exists());
    assert!(
        text(&o).contains("removed 1 temporary checkpoint file"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resumed_run_continues_bit_for_bit() {
    // 512 samples / (2 workers × 16) = 16 steps per epoch.
    let (a, b) = straight_and_resumed("", dgc_job());

    // A checkpoint of another world size is refused, naming both.
    let out = b.to_str().unwrap();
    refused(
        &["--resume", "--workers", "1", "--out", out],
        "2-worker run; this run has 1",
    );
    // So is one of another epoch length (batch 32: 8 steps an epoch, not 16), which would
    // skip or repeat batches.
    refused(
        &[
            "--resume",
            "--batch-size",
            "32",
            "--epochs",
            "4",
            "--out",
            out,
        ],
        "16 batches per epoch; this run has 8",
    );
    // The same batches per epoch from another training set (520 samples: 260 per worker,
    // 16 batches of 16, as 512 give) shuffle and shard differently: refused as well.
    refused(
        &["--resume", "--synthetic-samples", "520", "--out", out],
        "training split of 512 samples; this run's has 520",
    );
    // A checkpoint that only rank 1 cannot use (intact, but without one of the model's
    // tensors; a damaged one is set aside instead, see
    // a_damaged_checkpoint_is_set_aside_and_the_intact_generation_resumed): every rank
    // refuses before any of them rewrites the run's files, so the new flag does not reach
    // config.toml and metrics.jsonl keeps its records.
    let d = tmp("half-read");
    copy_dir(&b, &d);
    let ck1 = train::checkpoint::path(&d, 1);
    let mut saved = train::checkpoint::load(&ck1).unwrap();
    saved
        .tensors
        .retain(|(name, _, _)| name != "param/fc2.bias");
    train::checkpoint::save(&ck1, &saved.tensors, &saved.position).unwrap();
    let (config, metrics) = (
        std::fs::read(d.join("config.toml")).unwrap(),
        std::fs::read(d.join("metrics.jsonl")).unwrap(),
    );
    refused(
        &["--resume", "--lr", "0.5", "--out", d.to_str().unwrap()],
        "rank 1 could not resume",
    );
    assert_eq!(std::fs::read(d.join("config.toml")).unwrap(), config);
    assert_eq!(std::fs::read(d.join("metrics.jsonl")).unwrap(), metrics);
    let _ = std::fs::remove_dir_all(d);
    // Resumed where it ended: nothing to train, the summary keeps the last logged loss.
    let before = summary(&b)["final_loss"].as_f64().unwrap();
    let o = train(&["--resume", "--out", b.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&b)["final_loss"].as_f64(), Some(before));

    // A job that died while its ranks were saving: rank 0 holds epoch 2's checkpoint,
    // rank 1 only epoch 1's. Both resume from epoch 1 and end where the straight run did.
    let c = tmp("torn");
    copy_dir(&a, &c);
    let ck = c.join("checkpoint");
    std::fs::rename(
        ck.join("rank1.prev.safetensors"),
        ck.join("rank1.safetensors"),
    )
    .unwrap();
    let o = train(
        &["--resume", "--epochs", "2", "--out", c.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("resuming from its previous checkpoint (step 16)"),
        "{}",
        text(&o)
    );
    assert_same_run(&a, &c);
    // Rank 0 made its previous generation (step 16) the current one before training on,
    // so its abandoned step-32 file did not become the previous generation: that is
    // step 16, which rank 1 holds too.
    let prev = train::checkpoint::read_position(&train::checkpoint::prev_path(&c, 0))
        .unwrap()
        .unwrap();
    assert_eq!(prev.step, 16);
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_run_stopped_inside_an_epoch_resumes_bit_for_bit() {
    // 16 steps per epoch: step 10 is inside the first, and the resumed run crosses into
    // the second (DGC's warm-up epoch ends there).
    let (a, b) = (tmp("steps-straight"), tmp("steps-resumed"));
    let args = |out: &Path, steps: &str, resume: bool| -> Vec<String> {
        let mut v = dgc_job();
        v.extend(["--log-every", "4", "--eval-every", "8", "--steps", steps].map(String::from));
        if resume {
            v.push("--resume".into());
        }
        v.extend(["--out".to_string(), out.display().to_string()]);
        v
    };
    for v in [
        args(&a, "24", false),
        args(&b, "10", false),
        args(&b, "24", true),
    ] {
        let refs: Vec<&str> = v.iter().map(|s| s.as_str()).collect();
        let o = train(&refs, &[]);
        assert!(o.status.success(), "{}", text(&o));
    }
    assert_same_run(&a, &b);
    // Interrupted (the test hook: one rank only, as if it alone had the signal) and
    // resumed: the ranks agree to stop at the next log line, step 8 inside the first
    // epoch or step 16 at its end (evaluated there, as the straight run is), and resume
    // bit for bit.
    for (hook, stop) in [("1:6", 8), ("0:13", 16)] {
        let c = tmp(&format!("interrupted-{stop}"));
        let v = args(&c, "24", false);
        let refs: Vec<&str> = v.iter().map(|s| s.as_str()).collect();
        let o = train(&refs, &[("GRADEX_INTERRUPT_STEP", hook)]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(130), "{t}");
        assert!(
            t.contains(&format!("interrupted after step {stop}: checkpoint saved")),
            "{t}"
        );
        assert!(!t.contains("error"), "{t}");
        assert!(
            !c.join("summary.json").exists(),
            "an unfinished run has no summary"
        );
        for rank in 0..2 {
            let saved = train::checkpoint::load(&train::checkpoint::path(&c, rank)).unwrap();
            assert_eq!(saved.position.step, stop, "rank {rank}");
        }
        // The stop comes after the step's evaluation (--eval-every 8), which the resumed
        // run does not repeat.
        let eval_steps = |d: &Path| -> Vec<u64> {
            records_of(d, "eval")
                .iter()
                .map(|r| r["step"].as_u64().unwrap())
                .collect()
        };
        let before: Vec<u64> = (1..=stop / 8).map(|i| 8 * i as u64).collect();
        assert_eq!(eval_steps(&c), before, "evaluations before the stop");
        let o = train(&["--resume", "--out", c.to_str().unwrap()], &[]);
        assert!(o.status.success(), "{}", text(&o));
        assert_same_run(&a, &c);
        assert_eq!(eval_steps(&c), eval_steps(&a));
        let _ = std::fs::remove_dir_all(c);
    }
    // `--epochs` on the command line replaces the recorded `steps = 24`: 2 epochs of 16.
    let o = train(
        &["--resume", "--epochs", "2", "--out", b.to_str().unwrap()],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&b)["steps"].as_u64(), Some(32));
    for d in [a, b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Batch norm's running statistics are each rank's own until an evaluation, which gives
/// every rank rank 0's: the metric is one model's and the checkpoints agree.
#[test]
fn ranks_evaluate_and_save_the_same_batch_norm_statistics() {
    let dir = tmp("bn-sync");
    let o = train(
        &[
            "--model",
            "resnet20",
            "--dataset",
            "synthetic",
            "--workers",
            "2",
            "--batch-size",
            "4",
            "--synthetic-samples",
            "32",
            "--eval-samples",
            "8",
            "--steps",
            "3",
            "--method",
            "dense",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let buffers = |rank| -> Vec<(String, Vec<f32>)> {
        checkpoint(&dir, rank)
            .into_iter()
            .filter(|(n, _)| n.starts_with("buffer/"))
            .collect()
    };
    let (b0, b1) = (buffers(0), buffers(1));
    assert!(b0.iter().any(|(n, _)| n.contains("running_mean")), "{b0:?}");
    assert_eq!(b0, b1);
    let _ = std::fs::remove_dir_all(dir);
}

/// Two run directories hold the same training: every checkpoint tensor bit for bit, the
/// same bytes sent and compression ratio, and the same training records in order.
fn assert_same_run(a: &Path, b: &Path) {
    for rank in 0..2 {
        let (ca, cb) = (checkpoint(a, rank), checkpoint(b, rank));
        assert_eq!(ca.len(), cb.len());
        for ((na, va), (nb, vb)) in ca.iter().zip(&cb) {
            assert_eq!(na, nb);
            assert!(va == vb, "rank {rank}: {na} differs after resuming");
        }
    }
    let (sa, sb) = (summary(a), summary(b));
    for k in [
        "steps",
        "bytes_sent",
        "bytes_received",
        "dense_bytes",
        "compression_ratio",
        "message_compression_ratio",
    ] {
        assert_eq!(sa[k], sb[k], "summary key {k}");
    }
    // The training records (the resumed run logs no step twice); timings differ.
    let steps = |d: &Path| -> Vec<(u64, u64, u64, u64, u64)> {
        records_of(d, "step")
            .iter()
            .map(|r| {
                let n = |k: &str| r[k].as_u64().unwrap();
                let bits = |k: &str| r[k].as_f64().unwrap().to_bits();
                (
                    n("step"),
                    n("bytes_sent"),
                    n("message_bytes"),
                    bits("loss"),
                    bits("density"),
                )
            })
            .collect()
    };
    // The interrupted run also logged the step it stopped at; every other record is the
    // straight run's, bytes, loss and density included (a record after a --steps stop
    // averages over the same window as the straight run's: the checkpoint carries it).
    let (ra, rb) = (steps(a), steps(b));
    assert!(rb.windows(2).all(|w| w[0].0 < w[1].0), "{rb:?}");
    let shared: Vec<_> = rb
        .iter()
        .filter(|r| ra.iter().any(|x| x.0 == r.0))
        .copied()
        .collect();
    assert_eq!(ra, shared, "metrics.jsonl step records");
}

#[test]
fn adam_trains_masks_its_first_moment_and_resumes_bit_for_bit() {
    // Paper 003 trains its LeNet with Adam: SBC(2) with a 4-step delay under Adam, 16
    // steps an epoch, so both epochs end on a synchronisation.
    let mut job: Vec<String> = BASE.iter().map(|s| s.to_string()).collect();
    job.extend(
        SBC2_DELAY4
            .into_iter()
            .chain(["--optimizer", "adam", "--lr", "0.001"])
            .map(String::from),
    );
    let (a, b) = straight_and_resumed("adam-", job);
    let steps = records_of(&a, "step");
    let loss = |r: &Value| r["loss"].as_f64().unwrap();
    let (first, last) = (loss(&steps[0]), loss(&steps[steps.len() - 1]));
    assert!(
        last < 0.9 * first,
        "adam: loss {first} -> {last} did not fall"
    );
    assert_eq!(params(&a, 0), params(&a, 1));
    // Adam's state per parameter: m, v and the step count (32); the last step synchronised,
    // so the first moment is zero at the ~1 % of positions sent, the second is not.
    let ck = checkpoint(&a, 0);
    let (mut m_zero, mut v_zero, mut total) = (0, 0, 0);
    for (name, v) in &ck {
        if name.starts_with("optim/") && name.ends_with("/m") {
            m_zero += v.iter().filter(|x| **x == 0.0).count();
            total += v.len();
        } else if name.starts_with("optim/") && name.ends_with("/v") {
            v_zero += v.iter().filter(|x| **x == 0.0).count();
        } else if name.starts_with("optim/") && name.ends_with("/step") {
            assert_eq!(v, &vec![0.0, 32.0], "{name}");
        }
    }
    assert!(total > 0, "no adam state in the checkpoint");
    assert!(
        m_zero >= v_zero + total / 200,
        "m: {m_zero} zeros, v: {v_zero}, of {total}"
    );
    // An SGD run cannot resume Adam's checkpoint: an error naming the tensor.
    let out = a.to_str().unwrap();
    refused(
        &[
            "--resume",
            "--optimizer",
            "sgd",
            "--epochs",
            "3",
            "--out",
            out,
        ],
        "another optimizer",
    );
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A two-worker job into `dir` that runs until killed: epochs of 312,500 steps with no
/// log lines in them, so that the workers print nothing after their start and a closed
/// pipe would not stop them either (a small --lr: at 0.1 this job diverges within 40
/// steps and ends by itself). Its standard output is piped, its errors dropped.
fn endless_job(dir: &Path) -> std::process::Child {
    endless_command(dir, "1000000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("running train")
}

/// [`endless_job`]'s command, logging every `log_every` steps, its standard output piped.
fn endless_command(dir: &Path, log_every: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_train"));
    // BASE's model, data, workers and batch, with many more samples.
    c.args(&BASE[..8])
        .args(["--synthetic-samples", "10000000"])
        .args([
            "--log-every",
            log_every,
            "--method",
            "dense",
            "--lr",
            "0.01",
        ])
        .arg("--out")
        .arg(dir)
        .env("GRADEX_TIMEOUT_SECS", "20")
        .stdout(std::process::Stdio::piped());
    c
}

/// Whether process `p` is running (gone, or a zombie waiting to be reaped, is not).
fn running(p: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{p}/stat"))
        .ok()
        .and_then(|s| s.rsplit(") ").next().map(|r| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Waits up to `secs` for every process of `pids` to be gone (or a zombie), failing
/// with "workers ... {what}".
fn all_gone_within(pids: &[u32], secs: u64, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while pids.iter().any(|&p| running(p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "workers {pids:?} {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The pids of `launcher`'s workers.
fn workers_of(launcher: &std::process::Child) -> Vec<u32> {
    let pid = launcher.id();
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// [`endless_command`] in a process group of its own (as a shell starts a job), its
/// errors piped; returns once a line of its output contains `until`, with the rest.
fn endless_in_own_group(
    dir: &Path,
    log_every: &str,
    until: &str,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut job = endless_command(dir, log_every)
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("running train");
    let mut lines = std::io::BufReader::new(job.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains(until))),
        "the job printed no line with {until:?}"
    );
    (job, lines)
}

/// Ctrl-C as a terminal sends it: SIGINT to the job's whole process group.
fn ctrl_c(job: &std::process::Child) {
    // SAFETY: kill with a process group this test created (`process_group(0)`).
    let rc = unsafe { libc::kill(-(job.id() as libc::pid_t), libc::SIGINT) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// Waits up to `secs` for `job` to exit.
fn exit_within(job: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(s) = job.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = job.kill();
            panic!("the job did not stop within {secs} s of the interrupt");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Ctrl-C stops every worker after the same step, each with its checkpoint, and the
/// launcher exits with 130; a second Ctrl-C stops a job at once, saving nothing.
/// Once the job has started, rank 0 has closed the master port it inherited from the
/// launcher (a stranger's connection is refused, not queued unread for the whole job), as
/// a hand-started rank 0 does.
#[test]
fn the_master_port_is_closed_once_the_job_has_started() {
    let dir = tmp("master-port");
    let (mut job, _lines) = endless_in_own_group(&dir, "1000000", "training lenet5");
    let workers = workers_of(&job);
    let var = |pid: u32, key: &str| -> Option<String> {
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        env.split(|&b| b == 0).find_map(|kv| {
            std::str::from_utf8(kv)
                .ok()?
                .strip_prefix(&format!("{key}="))
                .map(String::from)
        })
    };
    let rank0 = workers
        .iter()
        .copied()
        .find(|&p| var(p, "RANK").as_deref() == Some("0"))
        .expect("rank 0 among the launcher's children");
    let port: u16 = var(rank0, "MASTER_PORT").unwrap().parse().unwrap();
    let connected = std::net::TcpStream::connect(("127.0.0.1", port));
    let _ = job.kill();
    let _ = job.wait();
    all_gone_within(&workers, 10, "kept running");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        connected.is_err(),
        "rank 0 still accepts connections at the master port {port}"
    );
}

#[test]
fn ctrl_c_saves_a_checkpoint_and_a_second_stops_at_once() {
    let dir = tmp("ctrl-c");
    let (mut job, lines) = endless_in_own_group(&dir, "3", "step 3/");
    ctrl_c(&job);
    let status = exit_within(&mut job, 60);
    let out: Vec<String> = lines.map_while(Result::ok).collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{status}: {err}");
    assert!(err.contains("interrupted after step"), "{err}");
    assert!(!err.contains("error"), "{err}");
    let step0 = train::checkpoint::load(&train::checkpoint::path(&dir, 0))
        .unwrap()
        .position
        .step;
    let step1 = train::checkpoint::load(&train::checkpoint::path(&dir, 1))
        .unwrap()
        .position
        .step;
    assert_eq!(step0, step1, "the ranks stopped after different steps");
    assert!(step0.is_multiple_of(3) && step0 >= 3, "{step0}");
    // The line of the step it stopped at was logged: step 3's was read before the
    // Ctrl-C (a signal that beats step 3's agreement stops there), a later one's after.
    assert!(
        step0 == 3 || out.iter().any(|l| l.contains(&format!("step {step0}/"))),
        "{out:?}"
    );
    assert!(!dir.join("summary.json").exists());
    let _ = std::fs::remove_dir_all(&dir);

    // Twice: the first is not acted on before a log line, which never comes.
    let (mut job, _lines) = endless_in_own_group(&dir, "1000000", "training lenet5");
    let workers = workers_of(&job);
    ctrl_c(&job);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        job.try_wait().unwrap().is_none(),
        "one Ctrl-C stopped at once"
    );
    ctrl_c(&job);
    let status = exit_within(&mut job, 10);
    assert_eq!(status.code(), Some(130), "{status}");
    all_gone_within(&workers, 10, "kept running");
    assert!(!train::checkpoint::path(&dir, 0).exists());
    // It says so, once for the job (rank 0; the launcher adds nothing).
    let mut err = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(
        err.matches("interrupted again: stopped at once").count(),
        1,
        "{err}"
    );
    assert!(err.contains("holds no checkpoint of this run yet"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);

    // SIGTERM to the launcher alone (`kill PID`), which passes the stop on; a worker's
    // own SIGTERM a moment later (a scheduler signalling every process) is its first,
    // not a second: every rank still saves.
    // Logging every 20 steps (a second or so here): the workers are still training when
    // worker 1's own signal comes.
    let (mut job, _lines) = endless_in_own_group(&dir, "20", "step 20/");
    let workers = workers_of(&job);
    let term = |pid: u32| {
        // SAFETY: kill with a pid this test started (the launcher) or its child.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    };
    term(job.id());
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        running(workers[1]),
        "worker 1 stopped before its own signal"
    );
    term(workers[1]);
    let status = exit_within(&mut job, 60);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{status}: {err}");
    let steps: Vec<usize> = (0..2)
        .map(|r| {
            let p = train::checkpoint::read_position(&train::checkpoint::path(&dir, r));
            p.unwrap().expect("a checkpoint").step
        })
        .collect();
    assert_eq!(steps[0], steps[1], "{err}");
    assert!(
        err.contains(&format!("interrupted after step {}", steps[0])),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A launcher killed outright (SIGKILL: no chance to stop its workers itself) takes its
/// workers with it: they do not train on, unsupervised, into the run directory.
#[test]
fn workers_die_with_a_killed_launcher() {
    use std::io::{BufRead, BufReader};
    let dir = tmp("orphans");
    let mut launcher = endless_job(&dir);
    // Once rank 0 reports its plan, both workers are running.
    let mut lines = BufReader::new(launcher.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("training lenet5"))),
        "the job did not start"
    );
    let workers = workers_of(&launcher);
    assert_eq!(workers.len(), 2, "{workers:?}");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    all_gone_within(&workers, 10, "outlived their launcher");
    let _ = std::fs::remove_dir_all(dir);
}

/// A second run into a directory a running job holds is refused, naming the holder,
/// even before the first has written anything to refuse (a checkpoint, a summary); once
/// the first is gone (killed outright here) the directory is free again.
#[test]
fn a_run_directory_in_use_is_refused() {
    use std::io::{BufRead, BufReader};
    let dir = tmp("in-use");
    let out = dir.to_str().unwrap();
    let mut first = endless_job(&dir);
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("training lenet5"))),
        "the first job did not start"
    );
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend(["--method", "dense", "--steps", "2", "--out", out]);
    refused(&args, &format!("is in use by train process {}", first.id()));
    first.kill().unwrap();
    first.wait().unwrap();
    drop(lines);
    args.push("--overwrite");
    let o = train(&args, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}

/// `train ... | head -1`: a reader that goes away does not stop the run (its results are
/// in the run directory); printing used to panic on the closed pipe and kill the job.
#[test]
fn a_closed_standard_output_does_not_stop_the_run() {
    use std::io::{BufRead, BufReader};
    let dir = tmp("closed-stdout");
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_train"))
        .args(BASE)
        .args(["--method", "dense", "--lr", "0.01", "--steps", "24"])
        .args(["--log-every", "1", "--out"])
        .arg(&dir)
        .env("GRADEX_TIMEOUT_SECS", "20")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running train");
    let mut lines = BufReader::new(launcher.stdout.take().unwrap()).lines();
    assert!(lines.next().is_some_and(|l| l.is_ok()), "no first line");
    // Closed, as `head -1` closes it: 24 step lines are still to be printed.
    drop(lines);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut launcher.stderr.take().unwrap(), &mut err).unwrap();
    let status = launcher.wait().unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(summary(&dir)["steps"], 24, "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_dead_worker_ends_the_job_naming_it_and_the_checkpoint_resumes() {
    let dir = tmp("dead");
    let out = dir.to_str().unwrap();
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend([
        "--method",
        "topk",
        "--method-opt",
        "density=0.05",
        "--epochs",
        "3",
        "--lr",
        "0.05",
        "--out",
        out,
    ]);
    let started = std::time::Instant::now();
    let o = train(
        &args,
        &[("GRADEX_FAULT_RANK", "1"), ("GRADEX_FAULT_STEP", "20")],
    );
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("worker 1 failed"), "{t}");
    assert!(
        started.elapsed().as_secs() < 20,
        "the job took {:?} to end",
        started.elapsed()
    );
    // The checkpoint of epoch 1 (step 16) is intact and training resumes from it.
    let saved = train::checkpoint::load(&train::checkpoint::path(&dir, 0)).unwrap();
    assert_eq!(saved.position.step, 16);
    let o = train(&["--resume", "--out", out], &[]);
    assert!(o.status.success(), "{}", text(&o));
    // What the dead run logged after step 16 is gone, not logged twice.
    let steps: Vec<u64> = records_of(&dir, "step")
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    assert_eq!(summary(&dir)["steps"], 48);
    // Resumed again and dying on the way: no longer a finished run, so its summary of
    // step 48 is gone (compare_runs would take it for the finished run).
    let o = train(
        &["--resume", "--epochs", "4", "--out", out],
        &[("GRADEX_FAULT_RANK", "1"), ("GRADEX_FAULT_STEP", "52")],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(!dir.join("summary.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run shorter than DGC's density warm-up says that it never reaches the density
/// asked for; without the warm-up it says nothing.
#[test]
fn a_run_inside_the_warm_up_says_so() {
    let note = "density warm-up lasts 4 epochs";
    for (opts, said) in [
        (&[][..], true),
        (&["--method-opt", "warmup_epochs=0"][..], false),
    ] {
        let dir = tmp("warm-up");
        let mut args: Vec<&str> = BASE.to_vec();
        args.extend(["--method", "dgc", "--steps", "2", "--lr", "0.01"]);
        args.extend(opts);
        args.extend(["--out", dir.to_str().unwrap()]);
        let o = train(&args, &[]);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert_eq!(t.contains(note), said, "{opts:?}: {t}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A fresh run with fewer workers over an earlier run removes the earlier run's
/// checkpoints of the ranks it does not have.
#[test]
fn overwriting_with_fewer_workers_leaves_no_checkpoint_of_the_others() {
    let (dir, _) = dense_run("fewer", 2, &[]);
    assert!(train::checkpoint::path(&dir, 1).exists());
    let o = train(
        &[
            "--model",
            "lenet5",
            "--dataset",
            "synthetic",
            "--synthetic-samples",
            "512",
            "--eval-samples",
            "128",
            "--method",
            "dense",
            "--steps",
            "2",
            "--overwrite",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(train::checkpoint::path(&dir, 0).exists());
    assert!(!train::checkpoint::path(&dir, 1).exists());
    assert!(!train::checkpoint::prev_path(&dir, 1).exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_diverging_run_stops_with_an_error_naming_the_step_once() {
    let dir = tmp("diverging");
    let mut args: Vec<&str> = BASE.to_vec();
    let out = dir.to_str().unwrap().to_string();
    args.extend([
        "--method", "dense", "--lr", "1e30", "--steps", "20", "--out", &out,
    ]);
    let o = train(&args, &[]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("the loss is") && t.contains("too high?"), "{t}");
    // LeNet-5's recipe rate is named, the flag to give it with.
    assert!(t.contains("lenet5 usually trains at 0.01"), "{t}");
    assert!(t.contains("--lr 0.01"), "{t}");
    // The rank is named once per line: by the launcher's prefix and run()'s context.
    assert!(!t.contains("rank 0: rank 0"), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_configurations_fail_before_any_worker_starts() {
    let cases: &[(&str, &str)] = &[
        ("--method topk --method-opt mode=sum", "is an option of local"),
        ("--method dgc --clip 1", "--method-opt clip="),
        ("--model lenet5 --dataset cifar10 --data-dir /nonexistent", "expects 28×28"),
        ("--model vgg16 --dataset fashion-mnist", "expects [3, 32, 32]"),
        ("--method nope", "unknown method"),
        ("--resume --overwrite", "'--resume' cannot be used with '--overwrite'"),
        ("--eval-samples 0", "--eval-samples must be at least 1"),
        ("--dataset synthetic --model lenet5 --workers 4 --batch-size 32 --synthetic-samples 100", "less than one step's 128 samples"),
        ("--dataset mnist --model lenet5", "--dataset mnist needs --data-dir"),
        ("--dataset cifar10", "--dataset cifar10 needs --data-dir"),
        ("--dataset imagenet --model alexnet", "--dataset imagenet needs --data-dir"),
        ("--dataset imagenet --data-dir /nonexistent", "cannot list /nonexistent/train"),
        ("--pin-cores yes", "[possible values: auto, true, false]"),
        ("--backend nccl", "--backend nccl needs --device cuda"),
        ("--backend nccl --device cuda --method dense --method-opt wire=f16", "--backend nccl: --method dense [\"wire=f16\"] does not run over NCCL"),
        ("--backend mpi", "[possible values: tcp, nccl]"),
        ("--exchange tensors", "--exchange is gone: every device and backend takes one path"),
        ("--model lstm_lm --dataset fashion-mnist", "language models train on kjv, ptb or synthetic"),
        ("--model deepspeech --dataset kjv", "speech models train on speech, an4 or synthetic"),
        ("--model resnet20 --hidden 8", "--hidden: --model resnet20 is fixed"),
        ("--model lstm_lm --dataset synthetic --layers 3", "--layers: --model lstm_lm is fixed"),
        ("--schedule weird", "[possible values: constant, step, multistep, cosine]"),
        // A bad method option value: one error from the launcher, not one per worker.
        ("--method dgc --method-opt density=2", "method configuration: dgc: density 2 must be in (0, 1]"),
        ("--method dgc --optimizer adam", "--optimizer adam with dgc("),
        ("--method dense --optimizer adam --nesterov true", "--nesterov is SGD's"),
        ("--method dense --optimizer adam --adam-eps 0", "--adam-eps must be positive"),
        ("--optimizer lamb", "[possible values: sgd, adam]"),
    ];
    for (args, want) in cases {
        refused(&args.split_whitespace().collect::<Vec<_>>(), want);
    }
    let dir = tmp("badcfg");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("c.toml"),
        "model = \"lenet5\"\nlearning_rate = 0.1\n",
    )
    .unwrap();
    refused(
        &["--config", dir.join("c.toml").to_str().unwrap()],
        "learning_rate",
    );
    // A user's file in the run directory, where the run would write its own over it;
    // the file is left as it was.
    let own = "# my experiment\nmodel = \"lenet5\"\n";
    std::fs::write(dir.join("config.toml"), own).unwrap();
    refused(
        &[
            "--config",
            dir.join("config.toml").to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ],
        "is the file this run writes its configuration to",
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("config.toml")).unwrap(),
        own
    );
    // Permission to replace a run is per command, never a configuration key.
    std::fs::write(dir.join("o.toml"), "overwrite = true\n").unwrap();
    refused(
        &["--config", dir.join("o.toml").to_str().unwrap()],
        "overwrite = true is not a configuration key",
    );
    // A test text too short to evaluate is refused before training, not after an epoch.
    let words = "the cat sat on the mat and the dog sat on the log\n".repeat(20);
    std::fs::write(dir.join("ptb.train.txt"), &words).unwrap();
    std::fs::write(dir.join("ptb.valid.txt"), &words).unwrap();
    std::fs::write(dir.join("ptb.test.txt"), "").unwrap();
    refused(
        &[
            "--model",
            "lstm_lm",
            "--hidden",
            "8",
            "--dataset",
            "ptb",
            "--data-dir",
            dir.to_str().unwrap(),
            "--out",
            dir.join("run").to_str().unwrap(),
        ],
        "too few to evaluate",
    );
    // A config key takes the same values as its flag.
    std::fs::write(dir.join("b.toml"), "backend = \"mpi\"\n").unwrap();
    refused(
        &["--config", dir.join("b.toml").to_str().unwrap()],
        "expected `tcp` or `nccl`",
    );
    let _ = std::fs::remove_dir_all(&dir);
    // The workers' environment is checked by the launcher, once, before any starts; and
    // half of a job's variables is an error, not a job of one run here.
    for (env, want) in [
        (
            ("GRADEX_TIMEOUT_SECS", "abc"),
            "GRADEX_TIMEOUT_SECS=\"abc\" is not a finite number",
        ),
        (("RANK", "1"), "RANK is set without WORLD_SIZE"),
    ] {
        let o = train(&BASE, &[env]);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(want), "{env:?}: {t}");
        assert!(!t.contains("[rank"), "a worker started: {t}");
    }
    let o = train(&["--help"], &[]);
    let help = text(&o);
    assert!(help.contains("momentum_correction") && help.contains("--method-opt"));
    assert!(
        help.contains("Possible values") && help.contains("multistep"),
        "{help}"
    );
}

#[test]
fn mnist_from_unpacked_idx_files_evaluates_every_test_image() {
    // MNIST's layout, uncompressed: 70 training and 37 test images. With 2 workers and
    // batches of 16, each rank's test shard (18 and 19 images) ends in a smaller batch,
    // which evaluation must count.
    let dir = tmp("mnist");
    std::fs::create_dir_all(&dir).unwrap();
    let idx = |name: &str, n: usize, images: bool| {
        let mut b = vec![0u8, 0, 8, if images { 3 } else { 1 }];
        b.extend((n as u32).to_be_bytes());
        if images {
            b.extend(28u32.to_be_bytes());
            b.extend(28u32.to_be_bytes());
            b.extend((0..n * 28 * 28).map(|i| (i * 7 % 251) as u8));
        } else {
            b.extend((0..n).map(|i| (i % 10) as u8));
        }
        std::fs::write(dir.join(name), b).unwrap();
    };
    idx("train-images-idx3-ubyte", 70, true);
    idx("train-labels-idx1-ubyte", 70, false);
    idx("t10k-images-idx3-ubyte", 37, true);
    idx("t10k-labels-idx1-ubyte", 37, false);
    let out = dir.join("run");
    let o = train(
        &[
            "--model",
            "lenet5",
            "--dataset",
            "mnist",
            "--data-dir",
            dir.to_str().unwrap(),
            "--workers",
            "2",
            "--batch-size",
            "16",
            "--steps",
            "4",
            "--method",
            "dense",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let evals: Vec<Value> = records_of(&out, "eval");
    assert!(!evals.is_empty());
    for e in &evals {
        assert_eq!(e["eval_count"], 37, "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An ImageNet-layout folder (`train/<class>/`, `val/<class>/`) of `classes` classes of
/// PNG images, each class one colour with noise, so that it can be learnt.
fn image_folders(dir: &Path, classes: usize, train: usize, val: usize) {
    for (split, n) in [("train", train), ("val", val)] {
        for c in 0..classes {
            let folder = dir.join(split).join(format!("n{c:08}"));
            std::fs::create_dir_all(&folder).unwrap();
            for i in 0..n {
                let img = image::RgbImage::from_fn(40, 36, |x, y| {
                    let noise = ((x * 31 + y * 17 + i as u32 * 7) % 40) as u8;
                    image::Rgb([(c * 40) as u8 + noise, (255 - c * 40) as u8, noise * 3])
                });
                img.save(folder.join(format!("{split}_{i}.png"))).unwrap();
            }
        }
    }
}

#[test]
fn imagenet_folders_train_and_evaluate_top1_and_top5() {
    // 6 classes of 40x36 PNGs, read at LeNet-5's 28x28 (random resized crops for
    // training, the centre crop for evaluation): every validation image is counted, and
    // top-5 accuracy is recorded beside top-1 and is never below it.
    let dir = tmp("imagenet");
    image_folders(&dir, 6, 6, 3);
    let out = dir.join("run");
    let o = train(
        &[
            "--model",
            "lenet5",
            "--dataset",
            "imagenet",
            "--data-dir",
            dir.to_str().unwrap(),
            "--workers",
            "2",
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--method",
            "dense",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let evals: Vec<Value> = records_of(&out, "eval");
    assert_eq!(evals.len(), 2, "one evaluation per epoch");
    for e in &evals {
        assert_eq!(e["eval_count"], 18, "{e}");
        let (top1, top5) = (e["metric"].as_f64().unwrap(), e["top5"].as_f64().unwrap());
        assert!(top5 >= top1 && top5 <= 1.0, "{e}");
    }
    let s = summary(&out);
    assert_eq!(s["final_top5"], evals[1]["top5"], "{s}");
    assert!(text(&o).contains("(top-5 "), "{}", text(&o));

    // A validation split without one of the training classes is refused before any
    // worker starts, naming the class.
    std::fs::remove_dir_all(dir.join("val").join("n00000005")).unwrap();
    let o = train(
        &[
            "--model",
            "lenet5",
            "--dataset",
            "imagenet",
            "--data-dir",
            dir.to_str().unwrap(),
            "--workers",
            "2",
            "--steps",
            "1",
            "--out",
            dir.join("run2").to_str().unwrap(),
        ],
        &[],
    );
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("only in train/: [\"n00000005\"]"), "{t}");
    assert!(!t.contains("[rank"), "no worker should start: {t}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 2-worker dense LeNet-5 run of `steps` steps with `extra` flags, which must succeed:
/// its run directory and output.
fn dense_run(name: &str, steps: usize, extra: &[&str]) -> (PathBuf, Output) {
    let dir = tmp(name);
    let steps = steps.to_string();
    let mut args: Vec<&str> = BASE.to_vec();
    args.extend([
        "--method",
        "dense",
        "--steps",
        &steps,
        "--out",
        dir.to_str().unwrap(),
    ]);
    args.extend(extra);
    let o = train(&args, &[]);
    assert!(o.status.success(), "{name}: {}", text(&o));
    (dir, o)
}

/// Resuming with another method: every rank names the state that does not fit, not
/// "the compression thread has stopped" (what the next collective used to report).
#[test]
fn resuming_with_another_method_names_the_state_that_does_not_fit() {
    let (dir, _) = dense_run("other-method", 4, &[]);
    let o = train(
        &[
            "--resume",
            "--steps",
            "6",
            "--method",
            "topk",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("the checkpoint has no state") && t.contains("resumes with the --method"),
        "{t}"
    );
    assert!(!t.contains("compression thread has stopped"), "{t}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn buckets_change_the_number_of_collectives_not_the_dense_result() {
    // With 2 ranks a dense average is (a + b) / 2 whichever vector an element travels
    // in, so bucketing LeNet-5's small tensors (conv1's weight and bias share a bucket)
    // must leave every parameter bit-identical.
    let plain = dense_run("unbucketed", 8, &[]).0;
    let bucketed = dense_run("bucketed", 8, &["--bucket-elems", "1000"]).0;
    assert_eq!(params(&plain, 0), params(&bucketed, 0));
    assert_eq!(params(&bucketed, 0), params(&bucketed, 1));
    let _ = std::fs::remove_dir_all(&plain);
    let _ = std::fs::remove_dir_all(&bucketed);
}

// Pinning is implemented for Linux only (elsewhere the launcher says so and runs unpinned).
#[cfg(target_os = "linux")]
#[test]
fn launched_workers_are_pinned_to_their_own_cpus_unless_told_not_to() {
    let pinned = |o: &Output| -> Vec<(usize, String)> {
        let t = text(o);
        let mut v: Vec<(usize, String)> = t
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("[rank ")?;
                let (rank, msg) = rest.split_once("] pinned to CPUs ")?;
                Some((rank.parse().ok()?, msg.trim().to_string()))
            })
            .collect();
        v.sort();
        v
    };
    let run = |name: &str, extra: &[&str]| {
        let (dir, o) = dense_run(name, 2, extra);
        let _ = std::fs::remove_dir_all(&dir);
        o
    };
    // The launcher's rule: CPUs in its affinity, capped by a cgroup quota.
    let available = train::affinity::capacity(&train::affinity::available().unwrap());
    let auto = pinned(&run("auto", &[]));
    assert_eq!(
        auto.len(),
        if available >= 2 { 2 } else { 0 },
        "auto with 2 workers on {available} CPUs: {auto:?}"
    );
    let on = pinned(&run("pinned", &["--pin-cores", "true"]));
    assert_eq!(on.len(), 2, "one line per worker: {on:?}");
    let cpus = |s: &str| -> Vec<usize> { s.split(',').map(|c| c.parse().unwrap()).collect() };
    let (a, b) = (cpus(&on[0].1), cpus(&on[1].1));
    assert!(!a.is_empty() && !b.is_empty());
    if available >= 2 {
        assert!(a.iter().all(|c| !b.contains(c)), "shares overlap: {on:?}");
    }
    let off = pinned(&run("unpinned", &["--pin-cores", "false"]));
    assert!(off.is_empty(), "--pin-cores false still pinned: {off:?}");
}

#[test]
fn eval_every_adds_mid_epoch_evaluations_without_changing_training() {
    // 512 samples over 2 ranks in batches of 16: 16 steps an epoch.
    // (At the default rate of 0.1 these synthetic images diverge by step 29.)
    let (plain, _) = dense_run("eval-at-epochs", 40, &["--lr", "0.02"]);
    let (fine, o) = dense_run("eval-every-6", 40, &["--lr", "0.02", "--eval-every", "6"]);
    let evals: Vec<Value> = records_of(&fine, "eval");
    let steps: Vec<u64> = evals.iter().filter_map(|r| r["step"].as_u64()).collect();
    // Every 6th step, the epochs' ends (16, 32) and the last step, each once.
    assert_eq!(steps, [6, 12, 16, 18, 24, 30, 32, 36, 40], "{}", text(&o));
    let epochs: Vec<f64> = evals.iter().filter_map(|r| r["epoch"].as_f64()).collect();
    assert_eq!(epochs[0], 6.0 / 16.0);
    assert_eq!(epochs[2], 1.0);
    // The run stops half-way through its third epoch.
    assert_eq!(epochs.last(), Some(&2.5));
    let column = |key: &str| -> Vec<f64> {
        let v: Vec<f64> = evals.iter().filter_map(|r| r[key].as_f64()).collect();
        assert_eq!(v.len(), evals.len(), "every eval record has {key}");
        v
    };
    let walls = column("wall_seconds");
    assert!(walls.windows(2).all(|w| w[0] <= w[1]), "{walls:?}");
    // The training time leaves every evaluation out: below the wall time, by more at
    // each evaluation, and growing.
    let trains = column("train_seconds");
    assert!(trains.windows(2).all(|w| w[0] < w[1]), "{trains:?}");
    let gaps: Vec<f64> = walls.iter().zip(&trains).map(|(w, t)| w - t).collect();
    assert!(
        gaps[0] > 0.0 && gaps.windows(2).all(|g| g[0] < g[1]),
        "{gaps:?}"
    );
    // A fresh run leaves its starting model beside its records.
    assert!(fine.join("initial.safetensors").is_file());
    // Evaluating reads the weights and nothing else: the same training, bit for bit.
    assert_eq!(params(&plain, 0), params(&fine, 0));
    let _ = std::fs::remove_dir_all(&plain);
    let _ = std::fs::remove_dir_all(&fine);
}

#[test]
fn checkpoints_come_every_nth_epoch_and_where_the_run_ends_or_never() {
    // 16 steps an epoch (as above): a 56-step run ends inside its fourth epoch. Every
    // epoch would save at 16, 32, 48 and 56; every second at 32 and 56.
    let (every2, _) = dense_run(
        "checkpoint-every-2",
        56,
        &["--lr", "0.02", "--checkpoint-every", "2"],
    );
    let step = |f: PathBuf| {
        train::checkpoint::read_position(&f)
            .unwrap()
            .map(|p| p.step)
    };
    for rank in 0..2 {
        // The run's end, and before it the second epoch's end, not the third's.
        assert_eq!(step(train::checkpoint::path(&every2, rank)), Some(56));
        assert_eq!(step(train::checkpoint::prev_path(&every2, rank)), Some(32));
    }
    let (never, _) = dense_run(
        "checkpoint-never",
        40,
        &["--lr", "0.02", "--checkpoint-every", "0"],
    );
    assert!(never.join("summary.json").is_file());
    assert!(!never.join("checkpoint").exists());
    // Nothing to continue from, and the error says why.
    let o = train(
        &[
            "--resume",
            "--out",
            never.to_str().unwrap(),
            "--steps",
            "48",
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--checkpoint-every 0 writes none")
            && text(&o).contains("--overwrite starts the run afresh"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&every2);
    let _ = std::fs::remove_dir_all(&never);
}

#[test]
fn a_fresh_run_refuses_an_earlier_runs_directory_unless_told_to_overwrite() {
    let (dir, _) = dense_run("earlier-run", 4, &[]);
    let out = dir.to_str().unwrap();
    let metrics = std::fs::read(dir.join("metrics.jsonl")).unwrap();
    let saved = params(&dir, 1);
    let again = |extra: &[&str]| {
        let mut args: Vec<&str> = BASE.to_vec();
        args.extend([
            "--method", "dense", "--steps", "2", "--lr", "0.05", "--out", out,
        ]);
        args.extend(extra);
        train(&args, &[])
    };
    let o = again(&[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("holds an earlier run") && text(&o).contains("--overwrite replaces it"),
        "{}",
        text(&o)
    );
    // Nothing of the earlier run was touched: its records and every rank's checkpoint.
    assert_eq!(std::fs::read(dir.join("metrics.jsonl")).unwrap(), metrics);
    assert_eq!(params(&dir, 1), saved);
    assert_eq!(summary(&dir)["steps"], 4);
    let o = again(&["--overwrite"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(summary(&dir)["steps"], 2);
    // The permission was for that command: a run from the recorded file has none.
    let recorded = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(recorded.contains("overwrite = false"), "{recorded}");
    // A run that died before its first checkpoint and summary left only its log, which
    // a fresh run replaces without being asked.
    std::fs::remove_file(dir.join("summary.json")).unwrap();
    std::fs::remove_dir_all(dir.join("checkpoint")).unwrap();
    let o = again(&[]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
