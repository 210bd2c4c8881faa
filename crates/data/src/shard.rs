//! Splitting samples among workers: each of `world` workers gets a contiguous range of a
//! (shuffled) order; ranges are disjoint, cover everything, and differ in size by at most
//! one. This is the SBC paper's "split the training data among the clients".

/// The range of positions `0..n` that worker `rank` of `world` owns.
pub fn shard_range(n: usize, world: usize, rank: usize) -> std::ops::Range<usize> {
    let world = world.max(1);
    let (base, extra) = (n / world, n % world);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// The elements of `order` that worker `rank` owns.
pub fn shard_indices(order: &[usize], world: usize, rank: usize) -> Vec<usize> {
    order[shard_range(order.len(), world, rank)].to_vec()
}
