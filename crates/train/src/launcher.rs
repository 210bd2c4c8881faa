//! Starting a job on this machine: `train --workers N` re-executes itself N times with
//! RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a freshly generated token (rank 0 also
//! inherits the master listener, bound here: GRADEX_MASTER_FD), prefixes
//! each worker's output lines with its rank, and waits. The first worker to fail ends
//! the job: the others are killed (rather than left waiting on a dead peer) and the error
//! names the rank and repeats its last lines of output. When several have failed by then
//! (peers of a dead worker fail with an error naming it), a crashed or abruptly exited
//! worker is named before one that reported an error.
//!
//! An interrupt (Ctrl-C, SIGTERM; see [`crate::interrupt`]) is not a failure: the
//! launcher passes it on to its workers and waits while they save their checkpoints.

use crate::affinity;
use crate::config::PinCores;
use crate::progress::{say, say_err, Progress};
use anyhow::{Context, Result};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A fresh random job token (16 bytes from the OS, hex), as the workers' shared secret.
pub fn token() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| anyhow::anyhow!("generating the job token: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Forwards a child's stream line by line with a prefix; keeps the last lines for an
/// error report.
fn pump(
    stream: impl std::io::Read + Send + 'static,
    prefix: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    to_stderr: bool,
    progress: Option<Arc<Progress>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
            if to_stderr {
                say_err(&format!("{prefix}{line}"));
            } else if let Some(p) = &progress {
                // Rank 0's lines drive the bar.
                p.observe(&line);
                p.line(&format!("{prefix}{line}"));
            } else {
                say(&format!("{prefix}{line}"));
            }
            if let Ok(mut t) = tail.lock() {
                if t.len() == 20 {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }
    });
}

/// The ranks an error line names as `rank N:` (how comm and the trainer name a rank).
fn ranks_named(line: &str) -> Vec<usize> {
    line.match_indices("rank ")
        .filter_map(|(i, m)| {
            let rest = &line[i + m.len()..];
            let digits = rest.find(|c: char| !c.is_ascii_digit())?;
            (digits > 0 && rest[digits..].starts_with(':'))
                .then(|| rest[..digits].parse().ok())
                .flatten()
        })
        .collect()
}

/// Each worker's CPU share (see [`affinity`]), or none when pinning is off (`pin`
/// false, or auto with more workers than CPUs) or unavailable.
fn cpu_shares(workers: usize, pin: PinCores) -> Vec<Option<Vec<usize>>> {
    if pin == PinCores::False || workers < 2 {
        return vec![None; workers];
    }
    let cpus = affinity::available().map(|c| {
        let capacity = affinity::capacity(&c);
        (c, capacity)
    });
    match cpus {
        Ok((_, capacity)) if pin == PinCores::Auto && workers > capacity => {
            say_err(&format!(
                "train: {workers} workers on {capacity} CPUs, not pinned (more workers than CPUs; --pin-cores true pins them anyway)"
            ));
            vec![None; workers]
        }
        Ok((cpus, capacity)) if !cpus.is_empty() => {
            let shares = affinity::plan_within(&cpus, capacity, workers);
            let list: Vec<String> = shares
                .iter()
                .enumerate()
                .map(|(r, s)| format!("{r}:{}", affinity::format(s)))
                .collect();
            say_err(&format!(
                "train: {workers} workers on {} CPUs, pinned (rank:CPUs) {} (--pin-cores false leaves it to the scheduler)",
                capacity.clamp(1, cpus.len()),
                list.join(" ")
            ));
            shares.into_iter().map(Some).collect()
        }
        Ok(_) => vec![None; workers],
        Err(e) => {
            say_err(&format!("train: workers not pinned to CPUs: {e:#}"));
            vec![None; workers]
        }
    }
}

/// Where the launcher copies its workers' standard output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerLogs {
    /// Standard output, with rank 0's step lines driving a progress bar on a terminal
    /// (`train`).
    Stdout,
    /// Standard error, leaving standard output to the caller's own results (the paper
    /// tables, whose `--json` output must parse).
    Stderr,
    /// Not copied: the workers inherit this process's standard output and error and write
    /// there unprefixed (the collective benchmarks, whose rank 0 prints the results). A
    /// failure's message then points at the output above instead of quoting its tail.
    Inherit,
}

/// The launched workers with their output tails. Dropped on any early return (a worker
/// that could not be started, a failed poll), it stops those still running, so no worker
/// outlives the launcher's error.
struct Workers(Vec<(Child, Arc<Mutex<VecDeque<String>>>)>);

impl Workers {
    /// Kills and reaps every worker still running.
    fn stop_running(&mut self) {
        for (c, _) in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop_running();
    }
}

/// Runs `workers` copies of this executable with `args`; returns when all have exited.
/// `pin` (auto, true or false: `--pin-cores`) decides whether each is pinned to its own
/// share of this process's CPUs. The workers' output goes to standard output.
pub fn launch(workers: usize, pin: PinCores, args: &[std::ffi::OsString]) -> Result<()> {
    launch_logging(workers, pin, args, WorkerLogs::Stdout)
}

/// [`launch`], with the workers' standard output copied to `logs` (or, with
/// [`WorkerLogs::Inherit`], written there by the workers themselves).
pub fn launch_logging(
    workers: usize,
    pin: PinCores,
    args: &[std::ffi::OsString],
    logs: WorkerLogs,
) -> Result<()> {
    let exe = std::env::current_exe().context("locating this executable, which the workers run")?;
    // Bound here and handed to rank 0 as it starts, so the port is held from now until
    // rank 0 accepts its peers: another job on this machine cannot take it meanwhile.
    let master = comm::bind_loopback_master().context("binding the job's master listener")?;
    let job = Job {
        exe,
        workers,
        args,
        logs,
        token: token()?,
        progress: Arc::new(match logs {
            WorkerLogs::Stdout => Progress::new(),
            WorkerLogs::Stderr | WorkerLogs::Inherit => Progress::off(),
        }),
    };
    // How long workers stopping for an interrupt may take, after the first has stopped,
    // before the launcher gives up on the rest: a peer stuck in a collective fails
    // within the communication timeout, and saving takes far less.
    let stop_grace = comm::CommConfig::local_job_timeout()
        .context("the workers' settings")?
        .saturating_mul(2)
        .saturating_add(Duration::from_secs(10));
    let mut children = Workers(Vec::new());
    for (rank, share) in cpu_shares(workers, pin).iter().enumerate() {
        children.0.push(job.spawn(rank, share.as_deref(), &master)?);
    }
    // Rank 0 has its own copy now.
    drop(master);
    job.supervise(children, stop_grace)
}

/// What every worker of a launch shares.
struct Job<'a> {
    exe: std::path::PathBuf,
    workers: usize,
    args: &'a [std::ffi::OsString],
    logs: WorkerLogs,
    token: String,
    progress: Arc<Progress>,
}

/// A worker's last lines of output, for the launcher's report of its failure.
type Tail = Arc<Mutex<VecDeque<String>>>;

impl Job<'_> {
    /// Starts worker `rank` on its CPUs (`cpus`; None: the scheduler's choice), with its
    /// output pumped as `logs` asks.
    fn spawn(
        &self,
        rank: usize,
        cpus: Option<&[usize]>,
        master: &std::net::TcpListener,
    ) -> Result<(Child, Tail)> {
        let mut command = Command::new(&self.exe);
        match cpus {
            Some(cpus) => command.env(affinity::ENV, affinity::format(cpus)),
            // Not the launcher's own GRADEX_CPUS either: that would put every worker on
            // the same CPUs while the plan says they are left to the scheduler.
            None => command.env_remove(affinity::ENV),
        };
        // A worker dies with the launcher (killed, or crashed) instead of training on,
        // unsupervised, into the same run directory. (The signal follows the thread that
        // started the worker, so `launch` must run on one that outlives the job, as the
        // main thread does.)
        // SAFETY: the closure runs in the child between fork and exec and only calls
        // prctl and signal, which are async-signal-safe.
        // SIGUSR1 (an interrupt passed on) is ignored until the worker installs its
        // handler, instead of killing it: the launcher sends it again until it stops.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::signal(libc::SIGUSR1, libc::SIG_IGN);
                Ok(())
            });
        }
        comm::prepare_local_worker(&mut command, rank, self.workers, master, &self.token)
            .context("the job's master listener")?;
        command.env(crate::interrupt::LAUNCHED_ENV, "1");
        let piped = self.logs != WorkerLogs::Inherit;
        let pipe = || {
            if piped {
                Stdio::piped()
            } else {
                Stdio::inherit()
            }
        };
        let mut child = command
            .args(self.args)
            .stdout(pipe())
            .stderr(pipe())
            .spawn()
            .with_context(|| format!("starting worker {rank}"))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let prefix = if self.workers > 1 {
            format!("[rank {rank}] ")
        } else {
            String::new()
        };
        if let Some(out) = child.stdout.take() {
            let to_stderr = self.logs == WorkerLogs::Stderr;
            let p = (rank == 0 && !to_stderr).then(|| self.progress.clone());
            pump(out, prefix.clone(), tail.clone(), to_stderr, p);
        }
        if let Some(err) = child.stderr.take() {
            pump(err, prefix, tail.clone(), true, None);
        }
        Ok((child, tail))
    }

    /// Waits for the workers: passes an interrupt on to them and waits for their saves
    /// (`Interrupted`), reports the first failure with its cause (stopping the others),
    /// or returns when all have succeeded.
    fn supervise(&self, mut children: Workers, stop_grace: Duration) -> Result<()> {
        let (workers, progress) = (self.workers, &self.progress);
        let mut status: Vec<Option<ExitStatus>> = vec![None; workers];
        let mut last_forward: Option<std::time::Instant> = None;
        let mut first_stop: Option<(usize, std::time::Instant)> = None;
        loop {
            for (s, (c, _)) in status.iter_mut().zip(&mut children.0) {
                if s.is_none() {
                    *s = c.try_wait()?;
                }
            }
            let interrupted = crate::interrupt::requested();
            if interrupted && last_forward.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                // The workers had the terminal's Ctrl-C too, but not a signal sent to the
                // launcher alone; again each second, for one that had not yet installed
                // its handler.
                for (s, (c, _)) in status.iter().zip(&children.0) {
                    if s.is_none() {
                        crate::interrupt::forward(c.id());
                    }
                }
                last_forward = Some(std::time::Instant::now());
            }
            let stopped = |s: &ExitStatus| stopped_by_interrupt(s, interrupted);
            let failed_other = status
                .iter()
                .any(|s| s.is_some_and(|s| !s.success() && !stopped(&s)));
            if !failed_other && status.iter().any(|s| s.is_some_and(|s| stopped(&s))) {
                let since = *first_stop.get_or_insert_with(|| {
                    let r = status
                        .iter()
                        .position(|s| s.is_some_and(|s| stopped(&s)))
                        .unwrap_or(0);
                    (r, std::time::Instant::now())
                });
                if let Some(end) = self.stopping(&mut children, &status, since, stop_grace) {
                    return end;
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            if status.iter().any(|s| s.is_some_and(|s| !s.success())) {
                return Err(self.failure(&mut children, &mut status, interrupted)?);
            }
            if status.iter().all(|s| s.is_some()) {
                progress.finish();
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Workers stopping for an interrupt (the first, `first`, at `since`): waits for the
    /// rest, which are saving; their end once all have stopped (`Interrupted`), or an
    /// error once the grace has passed with some still running (killed). None: still
    /// waiting.
    fn stopping(
        &self,
        children: &mut Workers,
        status: &[Option<ExitStatus>],
        (first, since): (usize, std::time::Instant),
        stop_grace: Duration,
    ) -> Option<Result<()>> {
        if since.elapsed() > stop_grace && status.iter().any(|s| s.is_none()) {
            let left: Vec<String> = (0..self.workers)
                .filter(|&r| status[r].is_none())
                .map(|r| r.to_string())
                .collect();
            children.stop_running();
            return Some(Err(anyhow::anyhow!(
                "worker(s) {} had not stopped {} s after worker {first} stopped for the interrupt, and were killed; `--resume` continues from the newest checkpoint every rank holds",
                left.join(", "),
                stop_grace.as_secs()
            )));
        }
        if status.iter().all(|s| s.is_some()) {
            self.progress.finish();
            let saved = status
                .iter()
                .flatten()
                .all(|s| s.code() == Some(crate::interrupt::EXIT_STATUS));
            return Some(Err(crate::interrupt::Interrupted {
                step: None,
                total: None,
                saved,
                out: std::path::PathBuf::new(),
            }
            .into()));
        }
        None
    }

    /// A worker has failed: stops the others and returns the error that names the likely
    /// cause first, with its last output.
    fn failure(
        &self,
        children: &mut Workers,
        status: &mut [Option<ExitStatus>],
        interrupted: bool,
    ) -> Result<anyhow::Error> {
        let logs = self.logs;
        let stopped = |s: &ExitStatus| stopped_by_interrupt(s, interrupted);
        // A worker that dies takes its peers down with it within moments (their
        // collectives fail naming it), so several may have exited by this poll. Give
        // the others a moment to finish exiting, then report the cause first.
        std::thread::sleep(Duration::from_millis(300));
        for (rank, (c, _)) in children.0.iter_mut().enumerate() {
            if status[rank].is_none() {
                status[rank] = c.try_wait()?;
            }
        }
        let mut failed: Vec<(usize, ExitStatus)> = status
            .iter()
            .enumerate()
            .filter_map(|(r, s)| s.filter(|s| !s.success()).map(|s| (r, s)))
            .collect();
        // Exit status 1 is a worker reporting an error (often a peer's death); a crash,
        // a signal or an abrupt exit is the likelier cause, so it is named first. Among
        // errors, one that blames another failed worker ("rank 1: receive: ...") comes
        // after that worker's own.
        let failed_ranks: Vec<usize> = failed.iter().map(|(r, _)| *r).collect();
        let blames_another = |r: usize| {
            let tail = children.0[r]
                .1
                .lock()
                .map(|t| t.clone())
                .unwrap_or_default();
            tail.iter()
                .rev()
                .find(|l| l.starts_with("error:"))
                .is_some_and(|l| {
                    ranks_named(l)
                        .into_iter()
                        .any(|q| q != r && failed_ranks.contains(&q))
                })
        };
        // A worker that stopped for an interrupt is not the cause: it comes last.
        failed.sort_by_key(|&(r, s)| (stopped(&s), s.code() == Some(1), blames_another(r), r));
        children.stop_running();
        // Let the pumps print what is left.
        std::thread::sleep(Duration::from_millis(100));
        let (rank, first) = failed[0];
        let tail: Vec<String> = children.0[rank]
            .1
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let others: Vec<String> = failed[1..]
            .iter()
            .map(|(r, s)| format!("worker {r} ({s})"))
            .collect();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!("; also failed: {}", others.join(", "))
        };
        let output = if logs == WorkerLogs::Inherit {
            "Its output is above.".to_string()
        } else if tail.is_empty() {
            "It printed nothing.".to_string()
        } else {
            format!("Its last output:\n  {}", tail.join("\n  "))
        };
        Ok(anyhow::anyhow!(
            "worker {rank} failed ({first}){also}; the other workers were stopped. {output}"
        ))
    }
}

/// Whether a worker's exit is its stop for an interrupt: the status it exits with after
/// saving, or (once the launcher was interrupted itself) death by the signal, which a
/// worker still starting had no handler for.
fn stopped_by_interrupt(s: &ExitStatus, launcher_interrupted: bool) -> bool {
    use std::os::unix::process::ExitStatusExt;
    s.code() == Some(crate::interrupt::EXIT_STATUS)
        || (launcher_interrupted
            && matches!(
                s.signal(),
                Some(libc::SIGINT | libc::SIGTERM | libc::SIGUSR1)
            ))
}

#[cfg(test)]
mod tests {
    use super::ranks_named;

    #[test]
    fn error_lines_name_ranks_as_rank_n_colon() {
        assert_eq!(
            ranks_named("error: rank 0: resuming: allgather: rank 12: receive: reset"),
            [0, 12]
        );
        assert!(ranks_named("error: rank1.safetensors: a header; ranks 3").is_empty());
    }
}
