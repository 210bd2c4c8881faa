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
    mut f: F,
) -> Result<f64> {
    for _ in 0..warmup {
        f(c)?;
    }
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        c.barrier()?;
        let t = Instant::now();
        f(c)?;
        let mine = t.elapsed().as_secs_f64();
        let mut slowest = 0f64;
        for (rank, b) in c.allgather_v(&mine.to_le_bytes())?.iter().enumerate() {
            let bytes: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| anyhow::anyhow!("rank {rank} sent a {}-byte time", b.len()))?;
            slowest = slowest.max(f64::from_le_bytes(bytes));
        }
        best = best.min(slowest);
    }
    Ok(best)
}
