//! Buckets: consecutive small parameters exchanged as one tensor, so a network of many
//! small tensors (batch-norm scales and shifts, biases) issues fewer collectives, each a
//! round of messages that every rank must take part in. A bucket is handed to the
//! compression thread when the last of its members' gradients is final.
//!
//! Parameters are grouped in index order: a parameter with fewer than `limit` elements
//! joins the open bucket while the bucket stays within `limit` elements; any other
//! parameter is a bucket of its own. `limit` 0 turns bucketing off (one bucket per
//! parameter, the method sees the parameters themselves).
//!
//! Bucketing changes what a method compresses (one vector instead of several), so it is
//! the user's choice (`--bucket-elems`). For DGC with a limit at or below `dense_below`,
//! nothing changes but the number of collectives: those tensors travel dense either way,
//! and the average of a concatenation is the concatenation of the averages.

use crate::exchanger::Job;
use compress::ParamSpec;
use crossbeam_channel::Sender;
use std::sync::Mutex;

pub struct Buckets {
    /// Parameter indices of each bucket, in index order.
    pub members: Vec<Vec<usize>>,
    /// For each parameter: its bucket and its offset in the bucket's vector.
    pub place: Vec<(usize, usize)>,
    sizes: Vec<usize>,
}

impl Buckets {
    pub fn plan(sizes: &[usize], limit: usize) -> Buckets {
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut open: Option<(usize, usize)> = None; // (bucket, elements so far)
        let mut place = Vec::with_capacity(sizes.len());
        for (i, &n) in sizes.iter().enumerate() {
            if n < limit {
                if let Some((b, total)) = open.filter(|&(_, t)| t + n <= limit) {
                    members[b].push(i);
                    place.push((b, total));
                    open = Some((b, total + n));
                    continue;
                }
                members.push(vec![i]);
                place.push((members.len() - 1, 0));
                open = Some((members.len() - 1, n));
            } else {
                members.push(vec![i]);
                place.push((members.len() - 1, 0));
                open = None;
            }
        }
        Buckets {
            members,
            place,
            sizes: sizes.to_vec(),
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// What the method is told about each bucket: a single parameter keeps its name and
    /// shape; a group is a vector named after its members.
    pub fn specs(&self, params: &[ParamSpec]) -> Vec<ParamSpec> {
        self.members
            .iter()
            .map(|m| match m.as_slice() {
                [one] => params[*one].clone(),
                many => ParamSpec::new(
                    many.iter()
                        .map(|&i| params[i].name.as_str())
                        .collect::<Vec<_>>()
                        .join("+"),
                    &[many.iter().map(|&i| self.sizes[i]).sum::<usize>()],
                ),
            })
            .collect()
    }

    /// Concatenates the members' vectors of bucket `b`.
    pub fn join(&self, b: usize, part: impl Fn(usize) -> Vec<f32>) -> Vec<f32> {
        match self.members[b].as_slice() {
            [one] => part(*one),
            many => many.iter().flat_map(|&i| part(i)).collect(),
        }
    }

    /// Cuts bucket `b`'s vector into its members' parts: (parameter, values).
    pub fn split(&self, b: usize, mut values: Vec<f32>) -> Vec<(usize, Vec<f32>)> {
        match self.members[b].as_slice() {
            [one] => vec![(*one, values)],
            many => {
                let mut out = Vec::with_capacity(many.len());
                for &i in many.iter().rev() {
                    let rest = values.split_off(values.len().saturating_sub(self.sizes[i]));
                    out.push((i, rest));
                }
                out.reverse();
                out
            }
        }
    }

    /// Sorts positions in bucket `b`'s vector into its members: (parameter, positions
    /// within it), only members that got any, in member order. A position past the
    /// bucket's end is dropped (a method only names positions of what it was given).
    pub fn split_positions(&self, b: usize, positions: &[u32]) -> Vec<(usize, Vec<usize>)> {
        let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
        for &p in positions {
            let p = p as usize;
            let member = self.members[b].iter().copied().find(|&i| {
                let off = self.place[i].1;
                p >= off && p < off + self.sizes[i]
            });
            if let Some(i) = member {
                let local = p - self.place[i].1;
                match out.iter_mut().find(|(j, _)| *j == i) {
                    Some((_, v)) => v.push(local),
                    None => out.push((i, vec![local])),
                }
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out
    }
}

/// A bucket being filled during backward.
struct Slot {
    grad: Vec<f32>,
    weights: Vec<f32>,
    arrived: Vec<bool>,
    pending: usize,
    /// A member arrived with the wrong length (a failed conversion).
    bad: bool,
}

/// Collects gradients from the hooks and sends each bucket's exchange job when it is
/// complete.
pub struct Collector {
    buckets: Buckets,
    slots: Vec<Mutex<Slot>>,
    jobs: Sender<Job>,
    reads_weights: bool,
}

impl Collector {
    pub fn new(buckets: Buckets, jobs: Sender<Job>, reads_weights: bool) -> Collector {
        let slots = buckets
            .members
            .iter()
            .map(|m| {
                Mutex::new(Slot {
                    grad: Vec::new(),
                    weights: Vec::new(),
                    arrived: vec![false; m.len()],
                    pending: m.len(),
                    bad: false,
                })
            })
            .collect();
        Collector {
            buckets,
            slots,
            jobs,
            reads_weights,
        }
    }

    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Parameter `i`'s gradient (and weights, when the method reads them). A send error
    /// means the compression thread has ended; the training thread reports its reason.
    pub fn deliver(&self, i: usize, grad: Vec<f32>, weights: Vec<f32>) {
        let (b, offset) = self.buckets.place[i];
        let members = &self.buckets.members[b];
        if members.len() == 1 {
            let _ = self.jobs.send(Job::Exchange {
                index: b,
                weights,
                grad,
            });
            return;
        }
        let total: usize = members.iter().map(|&m| self.buckets.sizes[m]).sum();
        let mut slot = self.slots[b].lock().unwrap_or_else(|e| e.into_inner());
        if slot.pending == members.len() {
            slot.grad = vec![0.0; total];
            slot.weights = if self.reads_weights {
                vec![0.0; total]
            } else {
                Vec::new()
            };
        }
        let n = self.buckets.sizes[i];
        if grad.len() == n {
            slot.grad[offset..offset + n].copy_from_slice(&grad);
        } else {
            slot.bad = true;
        }
        if self.reads_weights && weights.len() == self.buckets.sizes[i] {
            slot.weights[offset..offset + weights.len()].copy_from_slice(&weights);
        }
        let pos = members.iter().position(|&m| m == i).unwrap_or(0);
        if !slot.arrived[pos] {
            slot.arrived[pos] = true;
            slot.pending -= 1;
        }
        if slot.pending == 0 {
            // A bad member makes the whole bucket an empty vector, which the method
            // rejects with an error naming the bucket, as it would a lone parameter.
            let grad = if slot.bad {
                Vec::new()
            } else {
                std::mem::take(&mut slot.grad)
            };
            slot.grad = Vec::new();
            slot.bad = false;
            let weights = std::mem::take(&mut slot.weights);
            slot.arrived.iter_mut().for_each(|a| *a = false);
            slot.pending = members.len();
            let _ = self.jobs.send(Job::Exchange {
                index: b,
                weights,
                grad,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_neighbours_share_a_bucket_within_the_limit() {
        // conv 2304, bn 16, bn 16, conv 2304, bn 16, bn 16, fc 640, fc 10, big 5000
        let b = Buckets::plan(&[2304, 16, 16, 2304, 16, 16, 640, 10, 5000], 1000);
        assert_eq!(
            b.members,
            vec![vec![0], vec![1, 2], vec![3], vec![4, 5, 6, 7], vec![8]]
        );
        assert_eq!(b.place[7], (3, 672));
        let off = Buckets::plan(&[3, 4, 5], 0);
        assert_eq!(off.members, vec![vec![0], vec![1], vec![2]]);
        // The limit caps a bucket: 600 + 600 > 1000 starts a new one.
        let capped = Buckets::plan(&[600, 600, 300], 1000);
        assert_eq!(capped.members, vec![vec![0], vec![1, 2]]);
    }

    #[test]
    fn positions_split_into_their_members() {
        let b = Buckets::plan(&[2, 3, 1], 10);
        // Bucket 0 is [p0 p0 p1 p1 p1 p2]: positions 1, 2, 4 and 5.
        assert_eq!(
            b.split_positions(0, &[1, 2, 4, 5, 9]),
            vec![(0, vec![1]), (1, vec![0, 2]), (2, vec![0])]
        );
        assert!(b.split_positions(0, &[]).is_empty());
        let alone = Buckets::plan(&[4, 4], 0);
        assert_eq!(alone.split_positions(1, &[3, 0]), vec![(1, vec![3, 0])]);
    }

    #[test]
    fn join_and_split_are_inverse() {
        let b = Buckets::plan(&[2, 3, 1], 10);
        let joined = b.join(0, |i| vec![i as f32; [2, 3, 1][i]]);
        assert_eq!(joined, vec![0.0, 0.0, 1.0, 1.0, 1.0, 2.0]);
        let parts = b.split(0, joined);
        assert_eq!(
            parts,
            vec![
                (0, vec![0.0, 0.0]),
                (1, vec![1.0, 1.0, 1.0]),
                (2, vec![2.0])
            ]
        );
    }

    #[test]
    fn a_bucket_is_sent_once_its_last_member_arrives() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let c = Collector::new(Buckets::plan(&[2, 3, 100], 10), tx, false);
        c.deliver(1, vec![3.0, 4.0, 5.0], Vec::new());
        assert!(rx.try_recv().is_err());
        c.deliver(0, vec![1.0, 2.0], Vec::new());
        match rx.try_recv() {
            Ok(Job::Exchange { index, grad, .. }) => {
                assert_eq!(index, 0);
                assert_eq!(grad, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
            }
            _ => panic!("no exchange job for the completed bucket"),
        }
        // A member of the wrong length empties its bucket's gradient.
        c.deliver(1, vec![3.0], Vec::new());
        c.deliver(0, vec![1.0, 2.0], Vec::new());
        assert!(
            matches!(rx.try_recv(), Ok(Job::Exchange { index: 0, grad, .. }) if grad.is_empty())
        );
        // Reset for the next step: a singleton goes at once.
        c.deliver(2, vec![0.5; 100], Vec::new());
        assert!(matches!(rx.try_recv(), Ok(Job::Exchange { index: 1, .. })));
    }
}
