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
use tensor::Tensor;

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

    /// Each bucket's name in messages: "parameter 7 (fc2.bias)" for a lone parameter,
    /// "bucket 1 (conv1.weight+conv1.bias)" for a group.
    pub fn labels(&self, params: &[ParamSpec]) -> Vec<String> {
        self.members
            .iter()
            .enumerate()
            .map(|(b, m)| match m.as_slice() {
                [one] => format!("parameter {one} ({})", params[*one].name),
                many => {
                    let names: Vec<&str> = many.iter().map(|&i| params[i].name.as_str()).collect();
                    format!("bucket {b} ({})", names.join("+"))
                }
            })
            .collect()
    }

    /// Bucket `b` as one tensor: a lone parameter's tensor itself, or its members'
    /// tensors flattened and concatenated in member order (a copy on their device).
    pub fn join(&self, b: usize, part: impl Fn(usize) -> Tensor) -> tensor::Result<Tensor> {
        match self.members[b].as_slice() {
            [one] => Ok(part(*one)),
            many => concat(many.iter().map(|&i| part(i))),
        }
    }

    /// Cuts bucket `b`'s tensor into its members' parts, each shaped `dims(member)`:
    /// (parameter, part). A lone parameter's tensor comes back as it is.
    pub fn split(
        &self,
        b: usize,
        t: Tensor,
        dims: impl Fn(usize) -> Vec<usize>,
    ) -> tensor::Result<Vec<(usize, Tensor)>> {
        match self.members[b].as_slice() {
            [one] => Ok(vec![(*one, t)]),
            many => {
                let flat = t.flatten_all()?;
                many.iter()
                    .map(|&i| {
                        let part = flat.narrow(0, self.place[i].1, self.sizes[i])?;
                        Ok((i, part.reshape(dims(i))?))
                    })
                    .collect()
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

/// Tensors flattened and concatenated in order: a copy on their device.
fn concat(parts: impl Iterator<Item = Tensor>) -> tensor::Result<Tensor> {
    let flat = parts
        .map(|t| t.flatten_all())
        .collect::<tensor::Result<Vec<_>>>()?;
    Tensor::cat(&flat, 0)
}

/// A bucket being filled during backward: its members' gradients (and weights, when the
/// method reads them) as they arrive, in member order.
struct Slot {
    grads: Vec<Option<Tensor>>,
    weights: Vec<Option<Tensor>>,
}

/// Collects gradients from the hooks and sends each bucket's exchange job when it is
/// complete.
pub struct Collector {
    buckets: Buckets,
    slots: Vec<Mutex<Slot>>,
    jobs: Sender<Job>,
}

impl Collector {
    pub fn new(buckets: Buckets, jobs: Sender<Job>) -> Collector {
        let slots = buckets
            .members
            .iter()
            .map(|m| {
                Mutex::new(Slot {
                    grads: vec![None; m.len()],
                    weights: vec![None; m.len()],
                })
            })
            .collect();
        Collector {
            buckets,
            slots,
            jobs,
        }
    }

    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }

    /// Parameter `i`'s gradient (and weights, when the method reads them). A send error
    /// means the compression thread has ended; the training thread reports its reason.
    pub fn deliver(&self, i: usize, grad: Tensor, weights: Option<Tensor>) {
        let b = self.buckets.place[i].0;
        let members = &self.buckets.members[b];
        if members.len() == 1 {
            let _ = self.jobs.send(Job::Exchange {
                index: b,
                grad,
                weights,
            });
            return;
        }
        let mut slot = self.slots[b].lock().unwrap_or_else(|e| e.into_inner());
        let pos = members.iter().position(|&m| m == i).unwrap_or(0);
        slot.grads[pos] = Some(grad);
        slot.weights[pos] = weights;
        if slot.grads.iter().any(Option::is_none) {
            return;
        }
        // Every slot emptied for the next step, before anything can fail.
        let grads: Vec<Tensor> = slot.grads.iter_mut().filter_map(Option::take).collect();
        let weights: Vec<Option<Tensor>> = slot.weights.iter_mut().map(Option::take).collect();
        let weights: Option<Vec<Tensor>> = weights.into_iter().collect();
        let job = concat(grads.into_iter())
            .and_then(|grad| {
                Ok(Job::Exchange {
                    index: b,
                    grad,
                    weights: weights.map(|w| concat(w.into_iter())).transpose()?,
                })
            })
            // The concatenation allocates on the device: its failure ends the thread
            // with an error naming the bucket.
            .unwrap_or_else(|e| Job::Fail(format!("joining bucket {b}'s gradients: {e}")));
        let _ = self.jobs.send(job);
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
        let specs: Vec<ParamSpec> = ["w", "b", "v"]
            .iter()
            .map(|n| ParamSpec::new(*n, &[1]))
            .collect();
        assert_eq!(off.labels(&specs)[2], "parameter 2 (v)");
        let grouped = Buckets::plan(&[3, 4, 5], 10);
        assert_eq!(
            grouped.labels(&specs),
            ["bucket 0 (w+b)", "parameter 2 (v)"]
        );
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

    fn values(t: &Tensor) -> Vec<f32> {
        t.to_vec::<f32>().expect("host values")
    }

    fn filled(v: f32, dims: &[usize]) -> Tensor {
        let n = dims.iter().product::<usize>();
        Tensor::from_vec(vec![v; n], dims.to_vec(), tensor::Device::Cpu).expect("a tensor")
    }

    #[test]
    fn join_and_split_are_inverse() {
        let b = Buckets::plan(&[2, 3, 1], 10);
        let dims = |i: usize| [vec![2], vec![3, 1], vec![1]][i].clone();
        let joined = b.join(0, |i| filled(i as f32, &dims(i))).expect("joined");
        assert_eq!(values(&joined), vec![0.0, 0.0, 1.0, 1.0, 1.0, 2.0]);
        let parts = b.split(0, joined, dims).expect("split");
        let got: Vec<(usize, Vec<usize>, Vec<f32>)> = parts
            .iter()
            .map(|(i, t)| (*i, t.dims().to_vec(), values(t)))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, vec![2], vec![0.0, 0.0]),
                (1, vec![3, 1], vec![1.0, 1.0, 1.0]),
                (2, vec![1], vec![2.0])
            ]
        );
        // A lone parameter is its own tensor, both ways.
        let alone = Buckets::plan(&[4, 4], 0);
        let t = filled(7.0, &[2, 2]);
        assert_eq!(alone.join(1, |_| t.clone()).expect("joined").id(), t.id());
        let back = alone.split(1, t.clone(), |_| vec![2, 2]).expect("split");
        assert_eq!(back[0].1.id(), t.id());
    }

    #[test]
    fn a_bucket_is_sent_once_its_last_member_arrives() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let c = Collector::new(Buckets::plan(&[2, 3, 100], 10), tx);
        let t = |v: &[f32]| Tensor::from_vec(v.to_vec(), v.len(), tensor::Device::Cpu).expect("t");
        c.deliver(1, t(&[3.0, 4.0, 5.0]), Some(t(&[-3.0, -4.0, -5.0])));
        assert!(rx.try_recv().is_err());
        c.deliver(0, t(&[1.0, 2.0]), Some(t(&[-1.0, -2.0])));
        match rx.try_recv() {
            Ok(Job::Exchange {
                index,
                grad,
                weights,
            }) => {
                assert_eq!(index, 0);
                assert_eq!(values(&grad), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
                let w = weights.expect("the bucket's weights");
                assert_eq!(values(&w), vec![-1.0, -2.0, -3.0, -4.0, -5.0]);
            }
            _ => panic!("no exchange job for the completed bucket"),
        }
        // Reset for the next step: a member delivered twice counts once, and the bucket
        // goes when the other one arrives.
        c.deliver(1, t(&[3.0, 4.0, 5.0]), None);
        c.deliver(1, t(&[6.0, 7.0, 8.0]), None);
        assert!(rx.try_recv().is_err());
        c.deliver(0, t(&[1.0, 2.0]), None);
        match rx.try_recv() {
            Ok(Job::Exchange { grad, weights, .. }) => {
                assert_eq!(values(&grad), vec![1.0, 2.0, 6.0, 7.0, 8.0]);
                assert!(weights.is_none());
            }
            _ => panic!("no exchange job for the second step's bucket"),
        }
        // A singleton goes at once.
        c.deliver(2, t(&[0.5; 100]), None);
        assert!(matches!(rx.try_recv(), Ok(Job::Exchange { index: 1, .. })));
    }
}
