//! What the collective benchmarks (`comm_bench`, `gtopk_fig9`) share: starting W local
//! worker processes of the current binary as one communicator job, and timing a
//! collective the way nccl-tests and the papers do, by its completion time on the
//! slowest rank.

use anyhow::Result;
use comm::Communicator;
use std::time::Instant;

/// Runs `world` copies of the current executable with `args`, as ranks of one job on the
/// loopback interface, through the trainer's launcher (its job variables, a fresh token,
/// rank 0's master listener bound here and inherited; workers unpinned, writing straight to
/// this process's output). When a worker fails the others are stopped at once and the
/// error names it; a worker dies with this process.
pub fn launch_local(world: usize, args: &[std::ffi::OsString]) -> Result<()> {
    train::launcher::launch_logging(
        world,
        train::config::PinCores::False,
        args,
        train::launcher::WorkerLogs::Inherit,
    )
}

/// The best over `reps` of a collective's completion time, after `warmup` untimed calls:
/// every rank times its own call from a barrier, and the slowest rank's time counts.
/// (Rank 0's own time is not the collective's: gTopKAllReduce ends with a broadcast from
/// rank 0, which returns once its messages are in the kernel's socket buffers, long
/// before the leaves have them.) Every rank must call it and gets the same answer.
pub fn slowest_best<F: FnMut(&mut Communicator) -> comm::Result<()>>(
    c: &mut Communicator,
    warmup: usize,
    reps: usize,
    f: F,
) -> Result<f64> {
    slowest_best_counted(c, warmup, reps, f).map(|t| t.seconds)
}

/// A collective's completion time, what its calls cost in page faults, and how many of
/// TopKAllReduce's sums gave up summing as the blocks arrived.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    /// The best completion time (slowest rank) over the timed calls.
    pub seconds: f64,
    /// Minor page faults per timed call in the rank that took the most, averaged over
    /// the calls (None where /proc/self/stat cannot be read). A fault is a first touch
    /// of memory the kernel had to map: buffers the allocator returned to the system
    /// between calls cost one per 4 KiB page when used again, time the α-β model
    /// leaves out.
    pub minor_faults: Option<f64>,
    /// TopKAllReduce calls, over all ranks and every call (warm-up included), that
    /// began summing as the blocks arrived and summed after the gather
    /// ([`Communicator::topk_arrival_stops`]; 0 for the other collectives).
    pub topk_arrival_stops: u64,
    /// TopKAllReduce calls, counted the same way, that summed after the gather without
    /// trying on arrival, after stops ([`Communicator::topk_arrival_skips`]).
    pub topk_arrival_skips: u64,
}

/// [`slowest_best`], also counting each rank's minor page faults in the timed calls and
/// its TopKAllReduce stops in all of them; the counts travel with the times.
pub fn slowest_best_counted<F: FnMut(&mut Communicator) -> comm::Result<()>>(
    c: &mut Communicator,
    warmup: usize,
    reps: usize,
    mut f: F,
) -> Result<Timed> {
    let stops_before = c.topk_arrival_stops();
    let skips_before = c.topk_arrival_skips();
    for _ in 0..warmup {
        f(c)?;
    }
    let mut best = f64::INFINITY;
    // NaN once any call has no count (NaN survives the sum).
    let mut faults = 0.0;
    let (mut stops, mut skips) = (0, 0);
    let reps = reps.max(1);
    for _ in 0..reps {
        c.barrier()?;
        let before = minor_faults();
        let t = Instant::now();
        f(c)?;
        let mine = t.elapsed().as_secs_f64();
        // NaN where this rank could not count: the max below then has no count.
        let my_faults = match (before, minor_faults()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64,
            _ => f64::NAN,
        };
        // This rank's stops so far: the last call's exchange carries them all.
        let my_stops = c.topk_arrival_stops() - stops_before;
        let my_skips = c.topk_arrival_skips() - skips_before;
        let mut msg = mine.to_le_bytes().to_vec();
        msg.extend(my_faults.to_le_bytes());
        msg.extend(my_stops.to_le_bytes());
        msg.extend(my_skips.to_le_bytes());
        let (mut slowest, mut most) = (0f64, 0f64);
        (stops, skips) = (0u64, 0u64);
        for (rank, b) in c.allgather_v(&msg)?.iter().enumerate() {
            let bytes: [u8; 32] = b
                .as_slice()
                .try_into()
                .map_err(|_| anyhow::anyhow!("rank {rank} sent a {}-byte time", b.len()))?;
            let (words, _) = bytes.as_chunks::<8>();
            slowest = slowest.max(f64::from_le_bytes(words[0]));
            stops = stops.saturating_add(u64::from_le_bytes(words[2]));
            skips = skips.saturating_add(u64::from_le_bytes(words[3]));
            let theirs = f64::from_le_bytes(words[1]);
            // Once a rank could not count, the call has no count (f64::max would
            // drop the NaN).
            most = if most.is_nan() || theirs.is_nan() {
                f64::NAN
            } else {
                most.max(theirs)
            };
        }
        best = best.min(slowest);
        faults += most;
    }
    Ok(Timed {
        seconds: best,
        minor_faults: (!faults.is_nan()).then(|| faults / reps as f64),
        topk_arrival_stops: stops,
        topk_arrival_skips: skips,
    })
}

/// This process's minor page faults so far (all threads), from /proc/self/stat; None
/// where it cannot be read or parsed (not Linux).
pub fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: fields are
    // counted after its closing one, where field 3 (the state) comes first.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(7)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::minor_faults;

    /// The counter moves when fresh memory is first touched (Linux only).
    #[test]
    fn touching_fresh_memory_counts_minor_faults() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let before = minor_faults().expect("/proc/self/stat has minflt");
        // Written with a non-zero byte, so every page is touched.
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = minor_faults().expect("/proc/self/stat has minflt");
        assert!(
            after > before,
            "{before} -> {after} faults for {} fresh bytes",
            v.len()
        );
    }
}
