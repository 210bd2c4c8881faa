//! Which threads run the CPU kernels: the thread that calls them, as one of its own
//! pool's workers.
//!
//! The kernels are rayon parallel iterators. Called from a thread outside any rayon pool,
//! every kernel is handed to the global pool's threads while the caller sleeps on a latch,
//! then wakes it: two thread switches per kernel, some hundreds per training step, and
//! with several workers on a few cores each switch waits for a core. PyTorch's CPU ops
//! run on the calling thread, which takes part in its own parallel regions (OpenMP's
//! master thread does). [`run_kernels_here`] makes a thread do the same: it becomes
//! worker 0 of a pool of its own (`use_current_thread`), so a kernel's work starts on the
//! caller, with the pool's other threads, if any, stealing parts of it; with one thread
//! every kernel runs inline. The measurement that motivated it is in docs/tensor.md.
//!
//! Each thread that runs kernels in a loop of its own (the trainer's training thread and
//! its compression thread) gets its own pool, so that none waits on a pool whose only
//! worker is another thread that may be blocked elsewhere (a worker of a pool only takes
//! other threads' jobs while it waits inside a rayon call). Threads that never call this
//! use rayon's global pool as before.

use crate::{Error, Result};

/// Makes the calling thread worker 0 of a new pool of `threads` threads (None:
/// `RAYON_NUM_THREADS`, else the CPUs this thread may run on, as rayon's default), so
/// that the kernels it calls run on it and on the pool's `threads − 1` other threads.
/// Returns the pool's size. A thread already in a pool keeps it (the pool's size is
/// returned): a library caller that set up its own pool is left alone.
///
/// The pool lives as long as the process (rayon leaks a pool that holds a thread it did
/// not start); its other threads inherit the caller's CPU affinity, so pin first.
pub fn run_kernels_here(threads: Option<usize>) -> Result<usize> {
    if rayon::current_thread_index().is_some() {
        return Ok(rayon::current_num_threads());
    }
    let builder = rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .thread_name(|i| format!("kernels-{i}"));
    let builder = match threads {
        Some(n) => builder.num_threads(n),
        None => builder,
    };
    let pool = builder
        .build()
        .map_err(|e| Error::Msg(format!("starting the CPU kernels' thread pool: {e}")))?;
    let n = pool.current_num_threads();
    // Dropping the handle would end the pool's other threads; the registry itself is
    // kept alive by this thread's membership either way.
    std::mem::forget(pool);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::run_kernels_here;

    /// After the call, the thread is worker 0 of a pool of the size asked, a parallel
    /// iterator's work runs on it (with one thread, all of it), and a second call keeps
    /// the pool.
    #[test]
    fn the_caller_becomes_worker_zero_and_runs_its_kernels() {
        std::thread::spawn(|| {
            assert_eq!(rayon::current_thread_index(), None);
            assert_eq!(run_kernels_here(Some(1)).unwrap(), 1);
            assert_eq!(rayon::current_thread_index(), Some(0));
            use rayon::prelude::*;
            let me = std::thread::current().id();
            let on_caller = (0..1000)
                .into_par_iter()
                .filter(|_| std::thread::current().id() == me)
                .count();
            assert_eq!(on_caller, 1000);
            assert_eq!(run_kernels_here(Some(3)).unwrap(), 1);
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            assert_eq!(run_kernels_here(Some(2)).unwrap(), 2);
            use rayon::prelude::*;
            let sum: u64 = (0..10_000u64).into_par_iter().sum();
            assert_eq!(sum, 49_995_000);
        })
        .join()
        .unwrap();
    }
}
