//! Starting a job on this machine: `train --workers N` re-executes itself N times with
//! RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a freshly generated token, prefixes
//! each worker's output lines with its rank, and waits. The first worker to fail ends
//! the job: the others are killed (rather than left waiting on a dead peer) and the error
//! names the rank and repeats its last lines of output.

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn token() -> Result<String> {
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
                eprintln!("{prefix}{line}");
            } else if let Some(p) = &progress {
                // Rank 0's lines drive the bar.
                p.observe(&line);
                p.line(&format!("{prefix}{line}"));
            } else {
                println!("{prefix}{line}");
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

/// Runs `workers` copies of this executable with `args`; returns when all have exited.
pub fn launch(workers: usize, args: &[String]) -> Result<()> {
    let exe = std::env::current_exe().context("locating the train executable")?;
    let port = free_port()?.to_string();
    let token = token()?;
    let progress = Arc::new(Progress::new());
    let mut children: Vec<(Child, Arc<Mutex<VecDeque<String>>>)> = Vec::new();
    for rank in 0..workers {
        let mut child = Command::new(&exe)
            .args(args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", workers.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("GRADEX_TOKEN", &token)
            .env("GRADEX_BIND_ADDR", "127.0.0.1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting worker {rank}"))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let prefix = if workers > 1 {
            format!("[rank {rank}] ")
        } else {
            String::new()
        };
        if let Some(out) = child.stdout.take() {
            let p = (rank == 0).then(|| progress.clone());
            pump(out, prefix.clone(), tail.clone(), false, p);
        }
        if let Some(err) = child.stderr.take() {
            pump(err, prefix, tail.clone(), true, None);
        }
        children.push((child, tail));
    }
    let mut done = vec![false; workers];
    loop {
        for rank in 0..workers {
            if done[rank] {
                continue;
            }
            if let Some(status) = children[rank].0.try_wait()? {
                done[rank] = true;
                if !status.success() {
                    for (other, (c, _)) in children.iter_mut().enumerate() {
                        if !done[other] {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                    }
                    // Let the pumps print what is left.
                    std::thread::sleep(Duration::from_millis(100));
                    let tail: Vec<String> = children[rank]
                        .1
                        .lock()
                        .map(|t| t.iter().cloned().collect())
                        .unwrap_or_default();
                    bail!(
                        "worker {rank} failed ({status}); the other workers were stopped. Its last output:\n  {}",
                        tail.join("\n  ")
                    );
                }
            }
        }
        if done.iter().all(|&d| d) {
            progress.finish();
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
