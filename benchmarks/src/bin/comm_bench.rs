//! Collectives on local worker processes: dense allreduce, TopKAllReduce and
//! gTopKAllReduce (density 0.001) from 4 KiB to 128 MiB, each beside the α-β prediction
//! of paper 002's Table I (α, β fitted by a ping-pong of all rank pairs at once, in the
//! same run), the plain two-process socket copy as the loopback reference, and PyTorch's Gloo
//! allreduce on the same sizes (`reference/gloo_allreduce.py`). Ends with the model's
//! extrapolation to 16, 32 and 64 workers (paper 002's Figure 9 question).
//!
//! A collective's time is its completion time: the slowest rank's, each rank timing its
//! own call from a barrier (best of `--repeats`, after `--warmup` untimed calls). Gloo's
//! is taken the same way.
//!
//! `--collectives` picks the rows; `allgather_v` (not in the default set) is
//! TopKAllReduce's wire part alone: the allgather of the same messages, without the sum.
//! Likewise `broadcast` (not in the default set either) is gTopKAllReduce's way down
//! alone: rank 0's binomial-tree broadcast of a message of gTopK's size (k entries),
//! predicted ⌈log₂P⌉(α + nβ), half of gTopK's model; what gTopK takes beyond twice it
//! is its way up's merges and waits.
//! `--trace FILE` writes the timeline of every sparse row's calls (warm-up
//! included) as CSV: each step of each rank (`comm::TraceEvent`) in µs from the call's
//! first step on any rank, the ranks sharing this machine's monotonic clock.
//! `--topk-sum auto|arrival|after` chooses when TopKAllReduce sums (as its blocks arrive,
//! or after the gather; `comm::TopkSum`), so that one build compares the two.
//!
//! Each row also gives the minor page faults per timed call of the rank with the most
//! (`minor_faults_per_call`; `faults/call` in the table): memory the allocator returned
//! to the system between calls and the collective touched again, a cost the α-β model
//! leaves out. TopKAllReduce's rows also give how many of the sums (every rank's calls,
//! warm-up included: `calls` a rank) began as the blocks arrived and finished after the
//! gather, the bytes having come faster than the merges (`topk_arrival_stops`), and how
//! many summed after the gather without trying, after such stops (`topk_arrival_skips`;
//! both in the table's `stops/skips/sums`; only under `--topk-sum auto` at 5-8 ranks,
//! `comm::TopkSum::plan`).
//!
//! `comm_bench --world 4` launches 4 workers of itself on this machine; with RANK,
//! WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GRADEX_TOKEN already set (e.g. inside the
//! emulated network) it runs as one worker of that job.

use anyhow::{bail, Context, Result};
use benchmarks::collective::{launch_local, slowest_best_counted};
use benchmarks::{random_sparse, run_reference};
use clap::Parser;
use comm::{ping_pong, AlphaBeta, Collective, Communicator, ReduceOp, TopkSum};
use serde_json::{json, Value};

#[derive(Parser, Clone)]
#[command(
    about = "Dense and sparse collectives on local worker processes, measured against the alpha-beta model and Gloo"
)]
struct Args {
    /// Worker processes to launch.
    #[arg(long, default_value_t = 4)]
    world: usize,
    /// Transport: tcp. (nccl is not measured here: it needs a GPU per rank and these
    /// are multi-rank measurements; comm's tests/nccl.rs and the trainer's --backend
    /// nccl exercise it.)
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// Message sizes in bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4096,65536,1048576,16777216,67108864,134217728"
    )]
    sizes: Vec<usize>,
    /// Density of the sparse collectives (k = density × elements).
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// Timed repetitions per point (best reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Untimed calls of each collective at each size before the timed ones: a TCP
    /// connection's windows and buffers grow over its first transfers (at 100 Mbit/s, 8
    /// workers, TopK at 64 MiB was 1.46-1.76x its model as the best of 2 cold calls, 1.23x
    /// as the best of 5, 1.19x after one warm-up call). The Gloo reference runs as many.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// The collectives to time at each size. allgather_v is TopKAllReduce's wire part
    /// alone, the allgather of the same encoded sparse vectors (predicted by the same α-β
    /// form), so that the local work after the gather (checking and summing the P
    /// messages), which the model leaves out, shows as the difference between the two.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "socket_copy,allreduce,topk_allreduce,gtopk_allreduce"
    )]
    collectives: Vec<Row>,
    /// When TopKAllReduce sums: `auto` (as the blocks arrive while that keeps up with
    /// the wire, up to 8 ranks), `arrival` (always so) or `after` (once gathered). The
    /// same bits either way; for comparing their times.
    #[arg(long, default_value = "auto")]
    topk_sum: TopkSum,
    /// Skip the Gloo reference.
    #[arg(long)]
    no_reference: bool,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the rows as CSV here.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Write the steps of every call of the sparse rows (all ranks) here as CSV:
    /// collective, bytes, call, warmup (1 for the untimed calls), rank, event, peer,
    /// msg_bytes, t_us (from the call's first step on any rank). For finding where time
    /// goes beyond the model; the recording itself costs a clock read per step.
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
}

fn worker(args: &Args) -> Result<()> {
    let mut c = Communicator::from_env()?;
    let (rank, p) = (c.rank(), c.world_size());
    if p < 2 {
        bail!("comm_bench needs at least 2 workers");
    }
    // α and β from a ping-pong of every pair of ranks at once (rank 0's pair reports).
    let pp_sizes: Vec<usize> = (0..=12).map(|i| 1usize << (2 * i).min(27)).collect();
    let samples = ping_pong(&mut c, &pp_sizes, PING_PONG_REPS)?;
    let model = AlphaBeta::fit(&samples);
    let (mut rows, trace) = measure(&mut c, args, &model)?;
    c.barrier()?;
    if rank != 0 {
        return Ok(());
    }
    let gloo = gloo_reference(args, p);
    for r in rows.iter_mut().filter(|r| r["collective"] == "allreduce") {
        let g = gloo
            .as_ref()
            .and_then(|g| g["seconds"][r["bytes"].to_string()].as_f64());
        r["gloo_s"] = json!(g);
        r["ours_over_gloo"] = json!(g.and_then(|g| r["measured_s"].as_f64().map(|m| m / g)));
    }
    // The model every row's prediction came from, so that a plot of the JSON or CSV
    // alone can redraw it.
    for r in rows.iter_mut() {
        r["alpha_s"] = json!(model.alpha);
        r["beta_s_per_byte"] = json!(model.beta);
    }
    write_files(args, &rows, &trace)?;
    if args.json {
        println!("{}", Value::Array(rows));
        return Ok(());
    }
    print_report(args, p, &model, &samples, &rows);
    Ok(())
}

/// Every requested row at every size, on this rank: the rows (rank 0's are the table)
/// and, with `--trace`, every rank's steps of the sparse calls (on rank 0).
fn measure(
    c: &mut Communicator,
    args: &Args,
    model: &AlphaBeta,
) -> Result<(Vec<Value>, Vec<Step>)> {
    let (rank, p) = (c.rank(), c.world_size());
    let mut rows: Vec<Value> = Vec::new();
    // Rank 0's trace: every rank's steps, as `Step`s; the calls of each (row, size)
    // numbered on from those before (a size given twice).
    let mut trace: Vec<Step> = Vec::new();
    let mut traced_calls: std::collections::HashMap<(&str, usize), usize> = Default::default();
    // Calls per timed point, warm-up included: the byte counters see them all.
    let calls = (args.warmup + args.repeats.max(1)) as f64;
    for &bytes in &args.sizes {
        let n = (bytes / 4).max(1);
        let k = ((n as f64 * args.density).round() as usize).max(1);
        let wants = |r: Row| args.collectives.contains(&r);
        if wants(Row::SocketCopy) {
            // One-way time of `bytes` between ranks 0 and 1, all pairs busy.
            let copy = ping_pong(c, &[bytes], args.repeats)?;
            if let Some(&(_, t)) = copy.first() {
                rows.push(json!({"collective": "socket_copy", "world": 2, "bytes": bytes, "density": null, "measured_s": t, "predicted_s": model.alpha + bytes as f64 * model.beta, "gbit_per_s": bytes as f64 * 8.0 / t / 1e9}));
            }
        }
        if wants(Row::Allreduce) {
            let mut data = vec![1.0f32; n];
            let timed = slowest_best_counted(c, args.warmup, args.repeats, |c| {
                c.allreduce(&mut data, ReduceOp::Sum)
            })?;
            let t = timed.seconds;
            let busbw = bytes as f64 / t * 2.0 * (p as f64 - 1.0) / p as f64 * 8.0 / 1e9;
            rows.push(json!({"collective": "allreduce", "world": p, "bytes": bytes, "density": null, "measured_s": t, "predicted_s": model.allreduce(p, bytes), "gbit_per_s": busbw, "minor_faults_per_call": timed.minor_faults}));
        }
        let local = random_sparse(rank, n, k);
        let msg = local.encode();
        // The sparse rows: TopK, gTopK, TopK's gather and gTopK's broadcast alone.
        for row in [
            Row::TopkAllreduce,
            Row::GtopkAllreduce,
            Row::AllgatherV,
            Row::Broadcast,
        ] {
            if !wants(row) {
                continue;
            }
            let (name, kind, predicted) = match row {
                Row::TopkAllreduce => (
                    "topk_allreduce",
                    Collective::TopkAllreduce,
                    model.topk_allreduce(p, k),
                ),
                Row::GtopkAllreduce => (
                    "gtopk_allreduce",
                    Collective::GtopkAllreduce,
                    model.gtopk_allreduce(p, k),
                ),
                Row::AllgatherV => (
                    "allgather_v",
                    Collective::AllgatherV,
                    model.allgather(p, msg.len()),
                ),
                _ => (
                    "broadcast",
                    Collective::Broadcast,
                    model.broadcast(p, msg.len()),
                ),
            };
            // The bytes of the timed and warm-up calls alone: the timing's own exchange
            // between calls is an allgather, which would count in allgather_v's row.
            let mut sent_in_calls = 0u64;
            let tracing = args.trace.is_some();
            // (call, step) of this rank. The trace is emptied before each call and taken
            // after it, so that calls stay apart and the timing's own exchange between
            // calls (an allgather) is left out.
            let mut steps: Vec<(usize, comm::TraceEvent)> = Vec::new();
            let mut call = 0;
            // Each row starts with no earlier stops (TopkSum::Auto's backoff), so that its
            // time and counts are its size's alone.
            c.set_topk_sum(args.topk_sum);
            let timed = slowest_best_counted(c, args.warmup, args.repeats, |c| {
                c.set_trace(tracing);
                c.take_trace();
                let before = sent_total(c, kind);
                match row {
                    Row::TopkAllreduce => c.topk_allreduce(&local).map(|_| ()),
                    Row::GtopkAllreduce => c.gtopk_allreduce(&local, k).map(|_| ()),
                    Row::AllgatherV => c.allgather_v(&msg).map(|_| ()),
                    _ => c.broadcast(0, &msg).map(|_| ()),
                }?;
                sent_in_calls += sent_total(c, kind) - before;
                c.set_trace(false);
                steps.extend(c.take_trace().into_iter().map(|e| (call, e)));
                call += 1;
                Ok(())
            })?;
            let sent = sent_in_calls as f64 / calls;
            if tracing {
                let first = traced_calls.entry((name, bytes)).or_default();
                let row = TracedRow {
                    collective: name,
                    bytes,
                    first_call: *first,
                    warmup: args.warmup,
                };
                *first += call;
                gather_steps(c, &row, &steps, &mut trace)?;
            }
            let t = timed.seconds;
            // Of the p × calls sums, how many gave up summing as the blocks arrived.
            // Null where no sum could stop (see TopkSum::plan).
            // And how many did not try, after stops (TopkSum::Auto's backoff).
            let (stops, skips) = if row == Row::TopkAllreduce && args.topk_sum.plan(p).1 {
                (
                    json!(timed.topk_arrival_stops),
                    json!(timed.topk_arrival_skips),
                )
            } else {
                (Value::Null, Value::Null)
            };
            rows.push(json!({"collective": name, "world": p, "bytes": bytes, "density": args.density, "measured_s": t, "predicted_s": predicted, "gbit_per_s": sent * 8.0 / t / 1e9, "minor_faults_per_call": timed.minor_faults, "topk_arrival_stops": stops, "topk_arrival_skips": skips, "calls": calls as u64}));
        }
    }
    Ok((rows, trace))
}

/// Gloo's allreduce at the same sizes and world (PyTorch's reference script), after our
/// workers are done with the cores; None where it is not wanted or cannot run.
fn gloo_reference(args: &Args, p: usize) -> Option<Value> {
    if args.no_reference || !args.collectives.contains(&Row::Allreduce) {
        None
    } else {
        let sizes = args
            .sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        match run_reference(
            "gloo_allreduce.py",
            &[
                "--world".into(),
                p.to_string(),
                "--sizes".into(),
                sizes,
                "--repeats".into(),
                args.repeats.to_string(),
                "--warmup".into(),
                args.warmup.to_string(),
            ],
        ) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("comm_bench: Gloo reference unavailable ({e:#})");
                None
            }
        }
    }
}

/// `--csv` and `--trace`, where asked for.
fn write_files(args: &Args, rows: &[Value], trace: &[Step]) -> Result<()> {
    if let Some(path) = &args.csv {
        let mut s = String::from(
            "collective,world,bytes,density,measured_s,predicted_s,gbit_per_s,gloo_s,minor_faults_per_call,topk_arrival_stops,topk_arrival_skips,calls,alpha_s,beta_s_per_byte\n",
        );
        for r in rows {
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                r["collective"].as_str().unwrap_or(""),
                r["world"],
                r["bytes"],
                r["density"],
                r["measured_s"],
                r["predicted_s"],
                r["gbit_per_s"],
                r.get("gloo_s").unwrap_or(&Value::Null),
                r.get("minor_faults_per_call").unwrap_or(&Value::Null),
                r.get("topk_arrival_stops").unwrap_or(&Value::Null),
                r.get("topk_arrival_skips").unwrap_or(&Value::Null),
                r.get("calls").unwrap_or(&Value::Null),
                r["alpha_s"],
                r["beta_s_per_byte"]
            );
        }
        std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.trace {
        std::fs::write(path, trace_csv(trace))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The table: the fitted model and its samples, every row, and the model's
/// extrapolation to larger worlds.
fn print_report(
    args: &Args,
    p: usize,
    model: &AlphaBeta,
    samples: &[(usize, f64)],
    rows: &[Value],
) {
    println!(
        "world {p}, backend {}; fitted alpha = {:.1} us, beta = {:.3} ns/byte ({:.2} Gbit/s)",
        args.backend,
        model.alpha * 1e6,
        model.beta * 1e9,
        8.0 / model.beta / 1e9
    );
    // The samples behind the fit, so that a surprising α or β can be traced to them.
    let pp: Vec<String> = samples
        .iter()
        .map(|&(n, t)| format!("{n} B {:.1}", t * 1e6))
        .collect();
    println!(
        "ping-pong one-way us (best of {PING_PONG_REPS}): {}",
        pp.join(", ")
    );
    println!(
        "{:<16} {:>11} {:>12} {:>12} {:>8} {:>10} {:>10} {:>12} {:>16}",
        "collective",
        "bytes",
        "measured ms",
        "model ms",
        "Gbit/s",
        "gloo ms",
        "ours/gloo",
        "faults/call",
        "stops/skips/sums"
    );
    let f = |v: &Value, scale: f64| {
        v.as_f64()
            .map_or("-".into(), |x| format!("{:.3}", x * scale))
    };
    for r in rows {
        // TopK's stops and skips as "stopped/skipped/sums" (every rank's calls, warm-up
        // included).
        let stops = match (
            r.get("topk_arrival_stops").and_then(Value::as_u64),
            r.get("topk_arrival_skips").and_then(Value::as_u64),
            r["calls"].as_f64(),
        ) {
            (Some(n), Some(k), Some(calls)) => format!("{n}/{k}/{}", calls as usize * p),
            _ => "-".into(),
        };
        println!(
            "{:<16} {:>11} {:>12} {:>12} {:>8} {:>10} {:>10} {:>12} {:>16}",
            r["collective"].as_str().unwrap_or(""),
            r["bytes"],
            f(&r["measured_s"], 1e3),
            f(&r["predicted_s"], 1e3),
            f(&r["gbit_per_s"], 1.0),
            f(r.get("gloo_s").unwrap_or(&Value::Null), 1e3),
            f(r.get("ours_over_gloo").unwrap_or(&Value::Null), 1.0),
            r.get("minor_faults_per_call")
                .and_then(Value::as_f64)
                .map_or("-".into(), |x| format!("{x:.0}")),
            stops
        );
    }
    let m = *args.sizes.iter().max().unwrap_or(&(1 << 20));
    // k as the measured rows take it (rounded, at least 1).
    let k = (((m / 4).max(1) as f64 * args.density).round() as usize).max(1);
    println!(
        "\nmodel extrapolation for {m} bytes, density {}: ms (dense / TopK / gTopK)",
        args.density
    );
    let mut worlds = vec![p, 8, 16, 32, 64];
    worlds.sort_unstable();
    worlds.dedup();
    for w in worlds {
        println!(
            "  {w:>3} workers: {:>10.3} {:>10.3} {:>10.3}",
            model.allreduce(w, m) * 1e3,
            model.topk_allreduce(w, k) * 1e3,
            model.gtopk_allreduce(w, k) * 1e3
        );
    }
}

/// Round trips per ping-pong size for the α-β fit (the best counts).
const PING_PONG_REPS: usize = 5;

/// A row of the table: one measurement at each size.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum Row {
    /// The plain two-process socket copy (the loopback or link reference).
    #[value(name = "socket_copy")]
    SocketCopy,
    /// Dense ring allreduce of f32.
    #[value(name = "allreduce")]
    Allreduce,
    /// TopKAllReduce: allgather of every rank's k (index, value) pairs, summed.
    #[value(name = "topk_allreduce")]
    TopkAllreduce,
    /// gTopKAllReduce (paper 002, Alg. 3).
    #[value(name = "gtopk_allreduce")]
    GtopkAllreduce,
    /// TopKAllReduce's allgather alone, without the sum.
    #[value(name = "allgather_v")]
    AllgatherV,
    /// gTopKAllReduce's broadcast alone: rank 0's message of k entries down the tree.
    #[value(name = "broadcast")]
    Broadcast,
}

/// The row a trace's steps come from: their calls are numbered from `first_call`, the
/// first `warmup` of them untimed.
struct TracedRow {
    collective: &'static str,
    bytes: usize,
    first_call: usize,
    warmup: usize,
}

/// One step of one rank in a traced call (`--trace`).
struct Step {
    collective: &'static str,
    bytes: usize,
    call: usize,
    warmup: bool,
    rank: usize,
    what: String,
    peer: usize,
    msg_bytes: usize,
    t_ns: u64,
}

/// Every rank's `steps` of one row, appended to rank 0's `trace` (the others keep none).
/// A line of text per step, so that the exchange needs no binary format.
fn gather_steps(
    c: &mut Communicator,
    row: &TracedRow,
    steps: &[(usize, comm::TraceEvent)],
    trace: &mut Vec<Step>,
) -> Result<()> {
    let mine: String = steps
        .iter()
        .map(|(call, e)| format!("{call} {} {} {} {}\n", e.what, e.peer, e.bytes, e.t_ns))
        .collect();
    let all = c.allgather_v(mine.as_bytes())?;
    if c.rank() != 0 {
        return Ok(());
    }
    for (rank, text) in all.iter().enumerate() {
        let text = std::str::from_utf8(text).context("a rank's trace is not text")?;
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let [call, what, peer, msg_bytes, t_ns] = f[..] else {
                bail!("rank {rank}'s trace line {line:?} is not 5 fields");
            };
            let num = |x: &str| {
                x.parse::<u64>()
                    .with_context(|| format!("rank {rank}'s trace line {line:?}"))
            };
            let call = num(call)? as usize;
            trace.push(Step {
                collective: row.collective,
                bytes: row.bytes,
                call: row.first_call + call,
                warmup: call < row.warmup,
                rank,
                what: what.to_string(),
                peer: num(peer)? as usize,
                msg_bytes: num(msg_bytes)? as usize,
                t_ns: num(t_ns)?,
            });
        }
    }
    Ok(())
}

/// The trace as CSV, each step's time in µs from its call's first step on any rank.
fn trace_csv(trace: &[Step]) -> String {
    let mut first: std::collections::HashMap<(&str, usize, usize), u64> = Default::default();
    for s in trace {
        let t = first
            .entry((s.collective, s.bytes, s.call))
            .or_insert(s.t_ns);
        *t = (*t).min(s.t_ns);
    }
    let mut out = String::from("collective,bytes,call,warmup,rank,event,peer,msg_bytes,t_us\n");
    for s in trace {
        let t0 = first[&(s.collective, s.bytes, s.call)];
        out += &format!(
            "{},{},{},{},{},{},{},{},{:.3}\n",
            s.collective,
            s.bytes,
            s.call,
            u8::from(s.warmup),
            s.rank,
            s.what,
            s.peer,
            s.msg_bytes,
            (s.t_ns - t0) as f64 / 1e3
        );
    }
    out
}

/// Bytes this rank has sent in collectives of `kind`, headers included.
fn sent_total(c: &Communicator, kind: Collective) -> u64 {
    c.counters()
        .by_kind
        .get(&kind)
        .copied()
        .unwrap_or_default()
        .total_sent
}

/// The largest message measured: 2^32 f32 values. The sparse rows' indices are u32, so a
/// gradient of more values could not be addressed (and 16 GiB a rank is past any host
/// this runs on anyway).
const MAX_BYTES: usize = 4 << 32;

/// Refuses what the tool cannot measure, before any worker is launched (and again in
/// each worker, which parses the same arguments): a collective's message is a whole
/// number of f32 values, k = density × values must be a fraction of them, and the best
/// of 0 timed calls is no measurement.
fn validate(args: &Args) -> Result<()> {
    benchmarks::table::check_density("--density", args.density)?;
    benchmarks::table::check_counts(&[("--repeats", Some(args.repeats))])?;
    anyhow::ensure!(!args.sizes.is_empty(), "--sizes needs at least one size");
    for &bytes in &args.sizes {
        anyhow::ensure!(
            bytes >= 4 && bytes % 4 == 0 && bytes <= MAX_BYTES,
            "--sizes {bytes}: a size is bytes of f32 values, so a multiple of 4 from 4 to \
             {MAX_BYTES} (2^32 values, the most a u32 index reaches)"
        );
    }
    Ok(())
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    validate(&args)?;
    if args.backend != "tcp" {
        bail!(
            "--backend {:?}: comm_bench measures tcp only (NCCL needs a GPU per rank; it is exercised by comm's tests/nccl.rs and the trainer's --backend nccl)",
            args.backend
        );
    }
    if std::env::var("RANK").is_ok() {
        worker(&args)
    } else {
        // Checked here, before any worker starts: a ping-pong for the model needs a pair.
        anyhow::ensure!(
            args.world >= 2,
            "--world {}: comm_bench needs at least 2 workers (the alpha-beta fit is a ping-pong between two)",
            args.world
        );
        launch_local(args.world, &std::env::args_os().skip(1).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::{validate, Args};
    use clap::Parser;

    fn check(flags: &[&str]) -> Result<(), String> {
        let args =
            Args::try_parse_from(["comm_bench"].iter().chain(flags)).map_err(|e| e.to_string())?;
        validate(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn the_defaults_and_edge_values_are_accepted() {
        check(&[]).unwrap();
        check(&["--density", "1", "--sizes", "4,8", "--repeats", "1"]).unwrap();
    }

    #[test]
    fn what_cannot_be_measured_is_refused_naming_the_flag_and_range() {
        for (flags, want) in [
            (&["--density", "5"][..], "--density 5: must be in (0, 1]"),
            (&["--density", "0"], "--density 0: must be in (0, 1]"),
            (&["--density", "NaN"], "--density NaN: must be in (0, 1]"),
            (
                &["--sizes", "0"],
                "--sizes 0: a size is bytes of f32 values",
            ),
            (
                &["--sizes", "4096,3"],
                "--sizes 3: a size is bytes of f32 values",
            ),
            (&["--sizes", "4098"], "a multiple of 4 from 4 to"),
            (&["--sizes", "68719476740"], "--sizes 68719476740"),
            (&["--repeats", "0"], "--repeats 0: must be at least 1"),
        ] {
            let e = check(flags).expect_err(&format!("{flags:?} was accepted"));
            assert!(e.contains(want), "{flags:?}: expected '{want}' in: {e}");
        }
    }
}
