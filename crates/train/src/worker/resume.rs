//! Checkpoints from the worker's side: what a rank saves, how the ranks agree on the
//! generation they all hold, whether a checkpoint fits this run's data and batches, and
//! restoring from one.

use super::record::Window;
use super::{host_f32, Worker};
use crate::checkpoint::{self, Position, INITIAL_FILE};
use crate::progress::say_err;
use anyhow::{bail, Context, Result};
use tensor::{no_grad, Device, Tensor};

/// A checkpoint's name for an optimizer state entry: SGD's momentum keeps the name it had
/// before Adam (`optim/{i}`), so older checkpoints still resume; others add their key.
fn optim_name(index: usize, key: &str) -> String {
    if key == "momentum" {
        format!("optim/{index}")
    } else {
        format!("optim/{index}/{key}")
    }
}

impl Worker {
    /// The model's parameters and buffers on the host, named `param/<name>` and
    /// `buffer/<name>` (the names of PyTorch's state dict for the papers' models).
    fn model_tensors(&self) -> Result<Vec<(String, Vec<f32>, Vec<usize>)>> {
        let named = |prefix: &str, t: &nn::NamedTensor| -> Result<_> {
            Ok((
                format!("{prefix}/{}", t.name),
                host_f32(&t.tensor, &t.name)?,
                t.tensor.dims().to_vec(),
            ))
        };
        let params = self.params.iter().map(|p| named("param", p));
        params
            .chain(self.buffers.iter().map(|b| named("buffer", b)))
            .collect()
    }

    /// A fresh run's starting model (rank 0, after the broadcast), as `initial.safetensors`
    /// in the run directory: what a reference (PyTorch DDP in `time_to_accuracy`) loads to
    /// start from the same weights.
    pub(super) fn save_initial(&self) -> Result<()> {
        let file = self.cfg.out.join(INITIAL_FILE);
        checkpoint::save(&file, &self.model_tensors()?, &self.pos)
            .with_context(|| format!("writing the initial model to {}", file.display()))
    }

    pub(super) fn save_checkpoint(&self, window: &Window) -> Result<()> {
        let mut tensors = self.model_tensors()?;
        for (i, key, t) in self.opt.state() {
            let name = optim_name(i, key);
            let values = host_f32(&t, &name)?;
            tensors.push((name, values, t.dims().to_vec()));
        }
        for (k, v) in self.ex.state()? {
            let n = v.len();
            tensors.push((format!("method/{k}"), v, vec![n]));
        }
        for (k, t) in self.task.carried_state() {
            let name = format!("state/{k}");
            let values = host_f32(&t, &name)?;
            tensors.push((name, values, t.dims().to_vec()));
        }
        let pos = Position {
            world: self.world,
            loss: self.last_loss,
            log_window: window.to_values(),
            ..self.pos.clone()
        };
        checkpoint::save_generation(&self.cfg.out, self.rank, &tensors, &pos)?;
        self.note_for_a_second_signal(Some(pos.step));
        Ok(())
    }

    /// What a second Ctrl-C or SIGTERM says before the process exits (see `interrupt`):
    /// the step of this rank's newest checkpoint, or that there is none. Each rank of a
    /// hand-started job says its own; in a launched job the launcher says it (its
    /// workers' lines pass through it, and it ends at once too).
    pub(super) fn note_for_a_second_signal(&self, saved_step: Option<usize>) {
        if std::env::var_os(crate::interrupt::LAUNCHED_ENV).is_some() {
            return;
        }
        let line = crate::interrupt::note_for(&self.cfg.out, self.rank, saved_step);
        crate::interrupt::set_second_signal_note(&line);
    }

    /// The checkpoint file every rank can resume from: each rank reads both its
    /// generations whole, sets a damaged one aside (saying which, and why), and the ranks
    /// exchange the steps of what is intact and take the newest step all of them hold. A
    /// checkpoint of another world size is refused.
    pub(super) fn agree(&self) -> Result<std::path::PathBuf> {
        let out = &self.cfg.out;
        let files = [
            checkpoint::path(out, self.rank),
            checkpoint::prev_path(out, self.rank),
        ];
        let mut mine = [None, None];
        let mut set_aside = None;
        for (slot, f) in mine.iter_mut().zip(&files) {
            let p = match checkpoint::inspect(f)? {
                checkpoint::Found::Missing => continue,
                checkpoint::Found::Damaged(why) => {
                    let to = checkpoint::set_aside(f)?;
                    say_err(&format!(
                        "rank {}: set the damaged checkpoint {} aside as {} ({why})",
                        self.rank,
                        f.display(),
                        to.display()
                    ));
                    set_aside.get_or_insert(to);
                    continue;
                }
                checkpoint::Found::Intact(p) => p,
            };
            if p.world != 0 && p.world != self.world {
                bail!(
                    "{} was written by a {}-worker run; this run has {} (resume with --workers {})",
                    f.display(),
                    p.world,
                    self.world,
                    p.world
                );
            }
            *slot = Some(p.step);
        }
        // Each rank's two generations as 8-byte steps + 1 (0: no file).
        let encode = |s: Option<usize>| s.map_or(0u64, |s| s as u64 + 1).to_le_bytes();
        let all = self
            .ex
            .allgather([encode(mine[0]), encode(mine[1])].concat())?;
        let decoded: Vec<[Option<usize>; 2]> = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                let x = |g: usize| -> Result<Option<usize>> {
                    let raw = b.get(8 * g..8 * g + 8).with_context(|| {
                        format!(
                            "rank {r} sent {} bytes of checkpoint steps, not 16",
                            b.len()
                        )
                    })?;
                    let x = u64::from_le_bytes(raw.try_into()?);
                    Ok((x > 0).then(|| (x - 1) as usize))
                };
                Ok([x(0)?, x(1)?])
            })
            .collect::<Result<_>>()?;
        let step_of = |r: usize, g: usize| -> Option<usize> { decoded[r][g] };
        let holds = |r: usize, s: usize| step_of(r, 0) == Some(s) || step_of(r, 1) == Some(s);
        let chosen = mine
            .iter()
            .flatten()
            .copied()
            .filter(|&s| (0..self.world).all(|r| holds(r, s)))
            .max();
        let Some(step) = chosen else {
            let listing: Vec<String> = (0..self.world)
                .map(|r| match (step_of(r, 0), step_of(r, 1)) {
                    (None, None) => format!("rank {r}: none"),
                    (a, b) => format!(
                        "rank {r}: {}",
                        [a, b]
                            .iter()
                            .flatten()
                            .map(|s| format!("step {s}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })
                .collect();
            let none = decoded.iter().all(|g| g.iter().all(Option::is_none));
            let why = if none && self.cfg.checkpoint_every == 0 {
                " (a run with --checkpoint-every 0 writes none); without --resume, --overwrite starts the run afresh"
            } else {
                ""
            };
            bail!(
                "no checkpoint step that every rank holds under {} ({}){why}",
                out.join("checkpoint").display(),
                listing.join("; ")
            );
        };
        if mine[0] == Some(step) {
            Ok(files[0].clone())
        } else {
            let newest = match (mine[0], &set_aside) {
                (Some(s), _) => format!("(step {s}) is not held by every rank"),
                (None, Some(to)) => format!("was damaged and set aside as {}", to.display()),
                (None, None) => "is missing".to_string(),
            };
            say_err(&format!(
                "rank {}: resuming from its previous checkpoint (step {step}): its newest {newest}",
                self.rank
            ));
            // The previous generation becomes the current one, replacing the abandoned
            // newer file: otherwise the next save would rotate that file into the
            // previous slot and drop the step every rank holds, and a second crash
            // during that save would leave no common step.
            std::fs::rename(&files[1], &files[0])
                .with_context(|| format!("making {} the current checkpoint", files[1].display()))?;
            Ok(files[0].clone())
        }
    }

    /// A checkpoint's step and epoch are a place in the data only for the epochs that
    /// wrote it: resuming with another `--batch-size`, `--workers`,
    /// `--synthetic-samples` or data would skip or repeat batches (or, with the epoch's
    /// batches all "done", end the run at once), so it is an error. Batches per epoch
    /// alone do not tell: 4,096 and 4,100 samples give 2 workers 64 batches of 32 each,
    /// but shuffle differently; so the batch size and the training split's length are
    /// compared too, where the checkpoint records them.
    pub(super) fn check_epoch_length(
        &self,
        per_epoch: usize,
        batch_size: usize,
        train_len: usize,
    ) -> Result<()> {
        let p = &self.pos;
        let recorded = p.per_epoch;
        // Older checkpoints did not record it: their step must at least lie in their epoch.
        let fits = if recorded > 0 {
            recorded == per_epoch
        } else {
            p.step >= p.epoch * per_epoch && p.step - p.epoch * per_epoch <= per_epoch
        };
        if !fits {
            bail!(
                "the checkpoint stands at step {} (epoch {}) of a run with {} batches per epoch; this run has {per_epoch} (resume with the batch size, workers and data that wrote it)",
                p.step,
                p.epoch,
                if recorded > 0 { recorded.to_string() } else { "other".into() }
            );
        }
        if p.batch_size != 0 && p.batch_size != batch_size {
            bail!(
                "the checkpoint was written with --batch-size {}; this run has {batch_size} (resume with the batch size that wrote it)",
                p.batch_size
            );
        }
        if p.train_len != 0 && p.train_len != train_len {
            bail!(
                "the checkpoint was written on a training split of {} {}; this run's has {train_len} (resume with the data and --synthetic-samples that wrote it)",
                p.train_len,
                self.task.train_unit()
            );
        }
        Ok(())
    }

    /// Every rank's verdict on a step that must succeed everywhere before any rank acts on
    /// it (here: resuming, before rank 0 truncates `metrics.jsonl` and the ranks rewrite
    /// `config.toml`). A rank that failed gets its own error back; the others get one
    /// naming the first rank that failed and why. Ranks failing before this point (an
    /// error returned on the way) end their process, which the others see as a dead peer.
    pub(super) fn all_ranks_ok(&self, mine: Result<()>, what: &str) -> Result<()> {
        let msg = match &mine {
            Ok(()) => Vec::new(),
            // At least one byte, so that an empty message means success.
            Err(e) => format!("{e:#} ").into_bytes(),
        };
        // This rank's own error first: where it stopped the compression thread (a
        // method state that does not load), the allgather cannot run.
        let all = match self.ex.allgather(msg) {
            Ok(all) => all,
            Err(e) => return Err(mine.err().unwrap_or(e)),
        };
        mine?;
        if let Some((r, m)) = all.iter().enumerate().find(|(_, m)| !m.is_empty()) {
            bail!(
                "rank {r} could not {what}: {}",
                String::from_utf8_lossy(m).trim_end()
            );
        }
        Ok(())
    }

    /// Restores this rank from the checkpoint `file`: parameters and buffers, the
    /// optimizer's state, the method's state, the carried language-model state and the
    /// position (with the bytes the run had moved before it).
    pub(super) fn load_checkpoint(&mut self, file: &std::path::Path) -> Result<()> {
        let saved = checkpoint::load(file)?;
        no_grad(|| -> Result<()> {
            for p in &self.params {
                p.tensor.assign(&checkpoint::take(
                    &saved,
                    &format!("param/{}", p.name),
                    p.tensor.dims(),
                )?)?;
            }
            for b in &self.buffers {
                b.tensor.assign(&checkpoint::take(
                    &saved,
                    &format!("buffer/{}", b.name),
                    b.tensor.dims(),
                )?)?;
            }
            Ok(())
        })?;
        let mut method_state = Vec::new();
        let (mut carried_h, mut carried_c) = (None, None);
        for (name, data, shape) in &saved.tensors {
            if let Some(rest) = name.strip_prefix("optim/") {
                let (i, key) = rest.split_once('/').unwrap_or((rest, "momentum"));
                let i: usize = i
                    .parse()
                    .with_context(|| format!("checkpoint tensor {name}"))?;
                let p = self
                    .params
                    .get(i)
                    .with_context(|| format!("checkpoint tensor {name}: no parameter {i}"))?;
                let t = Tensor::from_vec(data.clone(), shape.clone(), p.tensor.device())?;
                self.opt
                    .load_state(i, key, t, p.tensor.dims())
                    .with_context(|| {
                        format!(
                            "checkpoint tensor {name}, for --optimizer {}",
                            self.opt.name()
                        )
                    })?;
            } else if let Some(k) = name.strip_prefix("method/") {
                method_state.push((k.to_string(), data.clone()));
            } else if let Some(k) = name.strip_prefix("state/") {
                let t = Tensor::from_vec(data.clone(), shape.clone(), Device::Cpu)?;
                match k {
                    "h" => carried_h = Some(t),
                    "c" => carried_c = Some(t),
                    _ => bail!("checkpoint tensor {name}: no such carried state"),
                }
            }
        }
        self.ex.load_state(method_state)?;
        if let Some(h) = carried_h {
            self.task.set_carried_state(h, carried_c)?;
        }
        self.pos = saved.position;
        self.traffic_base = (self.pos.bytes_sent, self.pos.bytes_received);
        Ok(())
    }
}
