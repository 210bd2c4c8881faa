//! The local work of the sparse collectives, which the α-β model leaves out: summing the
//! P received sparse vectors (TopKAllReduce) and the ⊤ merge that keeps the k largest
//! magnitudes (gTopKAllReduce, once per tree level). Each is timed against the simple
//! form of the same computation, measured in the same run, with equal results checked:
//! the sum against a left fold of two-way merges (O(P² k)), the sum of received messages
//! read in place against decoding them first, the sum done as the messages arrive
//! (all of its work, and what is left after the last one) against the sum after them
//! all, the ⊤ truncation against a
//! full sort by magnitude, and both against a plain copy of as many entries.

use anyhow::{ensure, Result};
use benchmarks::{best_of, random_sparse};
use clap::Parser;
use comm::{
    merge_sum_into, sum_all, sum_encoded, top_merge, top_merge_into, ArrivalSum, SparseVec,
    TopMergeScratch,
};
use std::time::Instant;

#[derive(Parser)]
#[command(
    about = "Time of the sparse collectives' local merges (sum of P sparse vectors; top-k merge) against the simple forms and a copy"
)]
struct Args {
    /// Gradient values (k = density × values per rank).
    #[arg(long, default_value_t = 16 << 20)]
    values: usize,
    #[arg(long, default_value_t = 0.001)]
    density: f64,
    /// World sizes to time the sum at.
    #[arg(long, value_delimiter = ',', default_value = "8,32")]
    world: Vec<usize>,
    /// Timed repetitions (the best is reported) after one warm-up.
    #[arg(long, default_value_t = 10)]
    repeats: usize,
}

fn fold(parts: &[SparseVec]) -> SparseVec {
    let (mut acc, mut next) = (SparseVec::default(), SparseVec::default());
    for p in parts {
        merge_sum_into(&acc, p, &mut next);
        std::mem::swap(&mut acc, &mut next);
    }
    acc
}

/// The ⊤ merge by its definition: sum, sort by magnitude, keep k, sort by index.
fn top_merge_by_sort(a: &SparseVec, b: &SparseVec, k: usize) -> SparseVec {
    let mut s = SparseVec::default();
    merge_sum_into(a, b, &mut s);
    let mut p: Vec<(u32, f32)> = s.indices.into_iter().zip(s.values).collect();
    if p.len() > k {
        p.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()).then(x.0.cmp(&y.0)));
        p.truncate(k);
        p.sort_by_key(|e| e.0);
    }
    SparseVec::new(p)
}

fn main() {
    benchmarks::exit_on_error(run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let n = args.values;
    let k = ((n as f64 * args.density).round() as usize).max(1);
    println!(
        "{n} values, density {}, k = {k} per rank; best of {} (ms)",
        args.density, args.repeats
    );
    println!("| work | entries | simple form ms | ours ms | simple / ours | copy ms |");
    println!("|---|---:|---:|---:|---:|---:|");
    for &p in &args.world {
        sums(&args, p, k)?;
    }
    top_merges(&args, k)
}

/// TopKAllReduce's sums at world `p`: of the P vectors, of the P received messages
/// (decoded first, or in place), and as the blocks arrive.
fn sums(args: &Args, p: usize, k: usize) -> Result<()> {
    let n = args.values;
    let ms = |t: f64| t * 1e3;
    let parts: Vec<SparseVec> = (0..p).map(|r| random_sparse(r, n, k)).collect();
    let total: usize = parts.iter().map(SparseVec::len).sum();
    let (a, b) = (fold(&parts), sum_all(&parts));
    ensure!(a == b, "sum_all differs from the fold at P = {p}");
    let t_fold = best_of(1, args.repeats, || {
        std::hint::black_box(fold(&parts));
        Ok(())
    })?;
    let t_sum = best_of(1, args.repeats, || {
        std::hint::black_box(sum_all(&parts));
        Ok(())
    })?;
    let t_copy = best_of(1, args.repeats, || {
        let mut c = SparseVec::default();
        for q in &parts {
            c.indices.extend_from_slice(&q.indices);
            c.values.extend_from_slice(&q.values);
        }
        std::hint::black_box(c);
        Ok(())
    })?;
    println!(
        "| sum of {p} vectors (TopKAllReduce) | {total} | {:.3} | {:.3} | {:.2} | {:.3} |",
        ms(t_fold),
        ms(t_sum),
        t_fold / t_sum,
        ms(t_copy)
    );
    // What TopKAllReduce does with the P messages it received: decoded into vectors,
    // then summed, against summed as they lie in the receive buffers.
    let wire: Vec<Vec<u8>> = parts.iter().map(SparseVec::encode).collect();
    let decode_then_sum = || -> Result<SparseVec> {
        let decoded = wire
            .iter()
            .map(|m| SparseVec::decode(m).map_err(anyhow::Error::msg))
            .collect::<Result<Vec<_>>>()?;
        Ok(sum_all(&decoded))
    };
    let in_place = || sum_encoded(&wire).map_err(|(i, e)| anyhow::anyhow!("message {i}: {e}"));
    ensure!(
        in_place()? == b,
        "sum_encoded differs from sum_all at P = {p}"
    );
    let t_decode = best_of(1, args.repeats, || {
        std::hint::black_box(decode_then_sum()?);
        Ok(())
    })?;
    let t_wire = best_of(1, args.repeats, || {
        std::hint::black_box(in_place()?);
        Ok(())
    })?;
    println!(
        "| sum of {p} received messages (decoded first / in place) | {total} | {:.3} | {:.3} | {:.2} | {:.3} |",
        ms(t_decode),
        ms(t_wire),
        t_decode / t_wire,
        ms(t_copy)
    );
    // TopKAllReduce's sum as its blocks arrive (Bruck's order on rank r: r, r+1, …,
    // wrapping; rank P/2's here, which wraps), against the sum after the gather of the received
    // messages: all of its work, and the part left once the last block's last read is
    // in (its last 1,448 bytes, a TCP segment: the rest of the sum, made as the
    // block's earlier bytes came, and the others merged as they came before it), which
    // is what the wire cannot hide.
    const SEGMENT: usize = 1448;
    let mut s = ArrivalSum::default();
    let r = p / 2;
    let order: Vec<usize> = (0..p).map(|j| (r + j) % p).collect();
    let mut arrival = |all: bool| -> Result<(f64, SparseVec)> {
        s.begin(p);
        let mut t = Instant::now();
        for &q in &order[..p - 1] {
            s.add(q, &wire[q]);
        }
        // As the collective does while the last block's bytes come in, a segment
        // at a time.
        s.settle();
        let last = &wire[order[p - 1]];
        let mut have = 0;
        while have + SEGMENT < last.len() {
            have += SEGMENT;
            s.add_partial(order[p - 1], &last[..have], last.len());
        }
        if !all {
            t = Instant::now();
        }
        s.add(order[p - 1], last);
        let sum = s
            .finish()
            .map_err(|(q, e)| anyhow::anyhow!("block of rank {q}: {e}"))?;
        Ok((t.elapsed().as_secs_f64(), sum))
    };
    ensure!(
        arrival(true)?.1 == b,
        "the arrival sum differs from sum_all at P = {p}"
    );
    let (mut t_all, mut t_last) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..args.repeats.max(1) {
        t_all = t_all.min(std::hint::black_box(arrival(true)?).0);
        t_last = t_last.min(std::hint::black_box(arrival(false)?).0);
    }
    println!(
        "| sum of {p} received messages as they arrive: all of it / after the last (the sum after the gather / this) | {total} | {:.3} | {:.3} / {:.3} | {:.2} / {:.2} | {:.3} |",
        ms(t_wire),
        ms(t_all),
        ms(t_last),
        t_wire / t_all,
        t_wire / t_last,
        ms(t_copy)
    );
    Ok(())
}

/// gTopKAllReduce's ⊤ merge of two ranks' k entries, and its sum alone.
fn top_merges(args: &Args, k: usize) -> Result<()> {
    let n = args.values;
    let ms = |t: f64| t * 1e3;
    let (a, b) = (random_sparse(0, n, k), random_sparse(1, n, k));
    ensure!(
        top_merge(&a, &b, k) == top_merge_by_sort(&a, &b, k),
        "top_merge differs from its definition"
    );
    let t_sort = best_of(1, args.repeats, || {
        std::hint::black_box(top_merge_by_sort(&a, &b, k));
        Ok(())
    })?;
    // Into buffers kept from call to call (the simple form, a sort, allocates its own:
    // the ratio counts both the selection and the reuse). gTopKAllReduce makes the same
    // sum as a child's message arrives (stream_merge.rs) and then the same cut.
    let (mut scratch, mut out) = (TopMergeScratch::default(), SparseVec::default());
    let t_sel = best_of(1, args.repeats, || {
        top_merge_into(&a, &b, k, &mut scratch, &mut out);
        std::hint::black_box(&out);
        Ok(())
    })?;
    ensure!(
        out == top_merge_by_sort(&a, &b, k),
        "top_merge_into differs from its definition"
    );
    // Its sum alone: what the ⊤ merge takes beyond it is the cut, the part gTopK waits
    // for after a child's last byte.
    let mut summed = SparseVec::default();
    let t_sum = best_of(1, args.repeats, || {
        merge_sum_into(&a, &b, &mut summed);
        std::hint::black_box(&summed);
        Ok(())
    })?;
    let t_copy = best_of(1, args.repeats, || {
        let mut c = a.clone();
        c.indices.extend_from_slice(&b.indices);
        c.values.extend_from_slice(&b.values);
        std::hint::black_box(c);
        Ok(())
    })?;
    println!(
        "| top-k merge of 2 × {k} (gTopKAllReduce, per level) | {} | {:.3} | {:.3} | {:.2} | {:.3} |",
        2 * k,
        ms(t_sort),
        ms(t_sel),
        t_sort / t_sel,
        ms(t_copy)
    );
    // The difference of two bests: an estimate, never below 0.
    println!(
        "| of which the sum (merge_sum_into) / the cut (the rest) | {} | - | {:.3} / {:.3} | - | - |",
        2 * k,
        ms(t_sum),
        ms((t_sel - t_sum).max(0.0))
    );
    Ok(())
}
