//! The data-parallel trainer: a worker loop whose compression thread overlaps backprop
//! ([`worker`], [`exchanger`]), the launcher that starts local workers ([`launcher`]),
//! the configuration and CLI ([`config`]), what a run writes ([`metrics`],
//! [`checkpoint`], [`plot`]), and what is trained on what ([`task`]).

pub mod affinity;
pub mod bucket;
pub mod checkpoint;
pub mod config;
pub mod exchanger;
pub mod help;
pub mod hierarchy;
pub mod interrupt;
pub mod launcher;
pub mod metrics;
pub mod plot;
pub mod progress;
pub mod task;
pub mod wer;
pub mod worker;

pub use config::{Args, Config};
pub use metrics::Summary;

use crate::progress::say_err;
use anyhow::{Context, Result};

/// Runs this process's part of a job: one worker when RANK/WORLD_SIZE are set, the whole
/// job (in this process) for one worker, or the launcher for several.
pub fn run(cfg: &Config, resume: bool, raw_args: &[std::ffi::OsString]) -> Result<Option<Summary>> {
    let (rank_set, world_set) = (
        std::env::var_os("RANK").is_some(),
        std::env::var_os("WORLD_SIZE").is_some(),
    );
    if rank_set != world_set {
        anyhow::bail!(
            "{} is set without {}: set both to run as one worker of a job (see docs/train.md), or neither to start a job here",
            if rank_set { "RANK" } else { "WORLD_SIZE" },
            if rank_set { "WORLD_SIZE" } else { "RANK" }
        );
    }
    let in_job = rank_set; // and world_set: both or neither, checked above
                           // From here a Ctrl-C or SIGTERM stops the run where its ranks agree, with a checkpoint
                           // (the `train` binary has installed it already; this is for library callers).
    interrupt::install().context("installing the Ctrl-C handler")?;
    if !in_job {
        comm::CommConfig::check_local_job_env().context("the workers' settings")?;
    }
    if in_job {
        // First of all: validation may initialise the CUDA driver, whose threads would
        // keep the whole CPU set (affinity is per thread, inherited at creation).
        if affinity::pin_from_env()
            .context("pinning this worker to its CPUs")?
            .is_some()
        {
            // What the kernel now allows, read back rather than what was asked for.
            match affinity::available() {
                Ok(cpus) => say_err(&format!("pinned to CPUs {}", affinity::format(&cpus))),
                Err(e) => say_err(&format!("pinned; reading the CPU set back failed: {e:#}")),
            }
        }
    }
    // In a job, the job's size is WORLD_SIZE (read by comm's own parser, which also names
    // a bad value): checks that depend on it (a step's samples, the method's world) and the
    // recorded config.toml use it, not this node's `--workers`.
    let mut job = if in_job {
        Some(comm::CommConfig::from_env().context("reading the job's variables")?)
    } else {
        None
    };
    let job_cfg;
    let cfg = match &job {
        Some(j) => {
            job_cfg = cfg.for_job(j.world)?;
            &job_cfg
        }
        None => cfg,
    };
    cfg.validate()?;
    // One job at a time in a run directory: two would interleave their metrics and
    // rotate each other's checkpoints (a second run started before the first had
    // written a checkpoint found nothing to refuse). Held until this returns; the
    // workers run under their launcher's lock.
    let _lock = if in_job {
        None
    } else {
        Some(RunLock::take(&cfg.out)?)
    };
    // A fresh run into an earlier one's directory fails before any data is loaded: every
    // local rank's checkpoints and the summary (each worker checks again, for a job that
    // another launcher started).
    if !in_job && !resume && !cfg.overwrite {
        checkpoint::earlier_run(&cfg.out, 0..cfg.workers, true)?;
    }
    if !in_job && cfg.workers > 1 {
        if cfg.backend == config::Backend::Nccl {
            // NCCL refuses two ranks on one GPU (ncclCommInitRank: duplicate GPU).
            let gpus = tensor::cuda::device_count();
            if cfg.workers > gpus {
                anyhow::bail!("--backend nccl needs a GPU per worker: --workers {} on a machine with {gpus} GPU(s); use --backend tcp to share GPUs", cfg.workers);
            }
        }
        // The workers' own lines pass through this process, which a second signal ends
        // at once: the job's note on where a resume continues is this process's.
        interrupt::watch_checkpoints(cfg.out.clone(), resume);
        launcher::launch(cfg.workers, cfg.pin_cores, raw_args)
            .map_err(|e| interrupt::in_run(e, &cfg.out, cfg.checkpoint_every > 0))?;
        let text = std::fs::read_to_string(cfg.out.join("summary.json"))
            .with_context(|| format!("reading {}", cfg.out.join("summary.json").display()))?;
        return Ok(Some(serde_json::from_str(&text)?));
    }
    let comm = if let Some(j) = &mut job {
        let c = comm::Communicator::connect(j).context("joining the job")?;
        // Rank 0's master listener (a launcher's, inherited) has served the rendezvous:
        // closed now, as a hand-started rank 0's is, instead of accepting strangers'
        // connections for the rest of the job without ever reading them.
        j.master_listener = None;
        comm::release_master_listeners();
        c
    } else {
        comm::Communicator::connect(&comm::CommConfig {
            max_frame: 1 << 34,
            ..comm::CommConfig::loopback(0, 1, 0, b"single")
        })?
    };
    let (rank, world) = (comm.rank(), comm.world_size());
    // GPUs are chosen by the index among the node's workers: `LOCAL_RANK` (a multi-node
    // launcher's, checked by comm's parser), else the job rank (one node: the same thing),
    // so that ranks placed round-robin over nodes do not pile onto one GPU.
    let local_rank = job.as_ref().and_then(|j| j.local_rank).unwrap_or(rank);
    // This thread runs the step's CPU kernels itself, as worker 0 of its own pool (after
    // the pinning above, which the pool's other threads inherit): handing each kernel to
    // another thread cost the step more than it gained (tensor's `cpu::threads`).
    tensor::cpu::run_kernels_here(None).context("setting up the training thread's kernels")?;
    let mut w = worker::Worker::new(cfg, rank, local_rank, world, comm)
        .with_context(|| format!("rank {rank}: setting up"))?;
    let summary = w.run(resume).with_context(|| format!("rank {rank}"))?;
    Ok(if rank == 0 { Some(summary) } else { None })
}

/// An exclusive lock on a run directory (`flock` on its `.lock` file, which names the
/// holder's pid): released when dropped, or by the kernel when the process dies, so a
/// killed run never leaves the directory locked.
struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    fn take(dir: &std::path::Path) -> Result<RunLock> {
        use std::io::{Read, Seek, Write};
        use std::os::fd::AsRawFd;
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the run directory {}", dir.display()))?;
        let path = dir.join(".lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let by = if holder.is_empty() {
                    "another train process".to_string()
                } else {
                    format!("train process {holder}")
                };
                anyhow::bail!(
                    "{} is in use by {by}: one run at a time in a run directory (another --out, or wait for it to end)",
                    dir.display()
                );
            }
            return Err(err).with_context(|| format!("locking {}", path.display()));
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(RunLock { _file: file })
    }
}
