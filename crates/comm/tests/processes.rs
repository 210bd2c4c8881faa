//! Collectives in real worker processes on loopback, started the way every launcher of
//! local workers starts them (`comm::prepare_local_worker`: the job's variables, rank 0
//! inheriting the master listener): every collective against its serial computation
//! for world sizes 1–8, and a worker killed with SIGKILL in the middle of a job.
//!
//! Each test re-runs its own executable, filtered to itself, once per rank; a worker
//! knows it is one by `COMM_PROCESS_WORKER`, and reports through its exit status and
//! its output, which the parent shows when it fails.

use comm::{sum_all, Communicator, ReduceOp, SparseVec};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{data, gtopk_serial_of, sparse};

const WORKER: &str = "COMM_PROCESS_WORKER";

/// Starts `world` workers running test `test` of this executable as the ranks of one job,
/// with `GRADEX_TIMEOUT_SECS` = `timeout_secs`; stdout and stderr captured.
fn start_job(test: &str, world: usize, timeout_secs: u32) -> Vec<Child> {
    let master = comm::bind_loopback_master().expect("a loopback master listener");
    let exe = std::env::current_exe().expect("this test's executable");
    (0..world)
        .map(|rank| {
            let mut command = Command::new(&exe);
            comm::prepare_local_worker(&mut command, rank, world, &master, "process-token")
                .expect("the worker's job variables");
            command
                .args(["--exact", test, "--nocapture", "--test-threads", "1"])
                .env(WORKER, "1")
                .env("GRADEX_TIMEOUT_SECS", timeout_secs.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect()
}

/// Waits for a worker; its status, stdout and stderr.
fn finish(child: Child) -> (std::process::ExitStatus, String, String) {
    let out = child.wait_with_output().expect("the worker's output");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_collective_in_worker_processes_for_worlds_1_to_8() {
    if std::env::var_os(WORKER).is_some() {
        return every_collective_as_one_rank();
    }
    for world in 1..=8 {
        let children = start_job(
            "every_collective_in_worker_processes_for_worlds_1_to_8",
            world,
            30,
        );
        for (rank, child) in children.into_iter().enumerate() {
            let (status, out, err) = finish(child);
            assert!(
                status.success(),
                "world {world}, rank {rank} failed ({status}):\n{out}\n{err}"
            );
        }
    }
}

/// One rank's part: each collective, checked against what a serial computation over
/// every rank's input (which each rank can make) gives.
fn every_collective_as_one_rank() {
    let mut c = Communicator::from_env().expect("joins the job from the environment");
    let (p, r) = (c.world_size(), c.rank());
    c.barrier().unwrap();

    // broadcast, from the last rank: large enough for the receipts between children.
    let root = p - 1;
    let msg: Vec<u8> = (0..40_000).map(|i| (i * 7 + root) as u8).collect();
    let got = c
        .broadcast(root, if r == root { &msg } else { &[] })
        .unwrap();
    assert_eq!(got, msg, "broadcast");

    // allreduce, sum and average, against the sum in f64.
    for n in [0, 1, 7, 10_001] {
        let mut sum = data(r, n);
        c.allreduce(&mut sum, ReduceOp::Sum).unwrap();
        let mut avg = data(r, n);
        c.allreduce(&mut avg, ReduceOp::Average).unwrap();
        let all: Vec<Vec<f32>> = (0..p).map(|q| data(q, n)).collect();
        for i in 0..n {
            let want: f64 = all.iter().map(|d| d[i] as f64).sum();
            assert!(
                (sum[i] as f64 - want).abs() < 1e-4,
                "allreduce sum, n {n}, i {i}"
            );
            assert!(
                (avg[i] as f64 - want / p as f64).abs() < 1e-4,
                "allreduce average"
            );
        }
    }

    // allgather_v of buffers of different lengths, one of them empty.
    let block = |q: usize| -> Vec<u8> { (0..q * 1000).map(|i| (i + q) as u8).collect() };
    let all = c.allgather_v(&block(r)).unwrap();
    assert_eq!(all, (0..p).map(block).collect::<Vec<_>>(), "allgather_v");

    // send/recv around the ring, in both directions.
    if p > 1 {
        let (right, left) = ((r + 1) % p, (r + p - 1) % p);
        let note = |from: usize, to: usize| format!("{from} to {to}").into_bytes();
        if r % 2 == 0 {
            c.send(right, &note(r, right)).unwrap();
            assert_eq!(c.recv(left).unwrap(), note(left, r), "recv");
        } else {
            assert_eq!(c.recv(left).unwrap(), note(left, r), "recv");
            c.send(right, &note(r, right)).unwrap();
        }
        c.barrier().unwrap();
    }

    // TopKAllReduce: the sum of every rank's vector, bit for bit as summed in rank order.
    let parts: Vec<SparseVec> = (0..p).map(|q| sparse(q, 5000, 300)).collect();
    let got = c.topk_allreduce(&parts[r]).unwrap();
    let want = sum_all(&parts);
    assert_eq!(got.indices, want.indices, "topk_allreduce");
    let bits = |v: &SparseVec| v.values.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want), "topk_allreduce values");

    // gTopKAllReduce against the tree's definition.
    for k in [1, 30, 300] {
        let got = c.gtopk_allreduce(&parts[r], k).unwrap();
        assert_eq!(
            got,
            gtopk_serial_of(p, k, |q| sparse(q, 5000, 300)),
            "gtopk k {k}"
        );
    }
    c.barrier().unwrap();
}

/// A worker killed with SIGKILL while the others wait on it in an allreduce: each of
/// them returns an error naming it, well within the timeout (a dead peer's sockets
/// close at once), and exits normally.
#[test]
fn a_killed_worker_process_fails_the_others_naming_it() {
    const TIMEOUT_SECS: u32 = 20;
    const VICTIM: usize = 2;
    if std::env::var_os(WORKER).is_some() {
        let mut c = Communicator::from_env().expect("joins the job from the environment");
        c.barrier().unwrap();
        if c.rank() == VICTIM {
            println!("WORKER-READY");
            std::thread::sleep(Duration::from_secs(3 * TIMEOUT_SECS as u64));
            panic!("the victim was not killed");
        }
        let start = Instant::now();
        let mut d = vec![1.0f32; 1 << 20];
        let e = c
            .allreduce(&mut d, ReduceOp::Sum)
            .expect_err("an allreduce with a killed rank");
        println!("WORKER-ERROR after {:?}: {e}", start.elapsed());
        return;
    }
    let mut children = start_job(
        "a_killed_worker_process_fails_the_others_naming_it",
        4,
        TIMEOUT_SECS,
    );
    // Killed once it has joined and passed the barrier, so that the others are in the
    // allreduce (or about to be) when it dies.
    let mut victim = children.remove(VICTIM);
    let mut lines = BufReader::new(victim.stdout.take().expect("the victim's stdout")).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("WORKER-READY"))),
        "the victim never reached the allreduce"
    );
    let killed = Instant::now();
    victim.kill().expect("SIGKILL to the victim");
    let status = victim.wait().expect("the victim's status");
    assert!(!status.success(), "the victim exited by itself: {status}");
    for (i, child) in children.into_iter().enumerate() {
        let rank = if i < VICTIM { i } else { i + 1 };
        let (status, out, err) = finish(child);
        assert!(status.success(), "rank {rank} ({status}):\n{out}\n{err}");
        let report = out
            .lines()
            .find(|l| l.contains("WORKER-ERROR"))
            .unwrap_or_else(|| panic!("rank {rank} reported no error:\n{out}\n{err}"));
        assert!(
            report.contains(&format!("rank {VICTIM}")),
            "rank {rank} did not name rank {VICTIM}: {report}"
        );
    }
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(TIMEOUT_SECS as u64 / 2),
        "the survivors took {took:?} after the kill (timeout {TIMEOUT_SECS} s)"
    );
}
