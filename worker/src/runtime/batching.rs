//! How claims and ends gather into script calls: in arrival order, each call within a count
//! and a payload size, and, where a command must keep to one slot (a Cluster), of one shard.

/// `items` in batches, in arrival order, each within `most` items and `most_bytes` of payload
/// (an item larger than that alone), and each of one shard when `by_shard`; otherwise a batch
/// mixes shards. `key` gives an item's shard and bytes.
pub(super) fn batches<T>(
    items: Vec<T>,
    by_shard: bool,
    most: usize,
    most_bytes: usize,
    key: impl Fn(&T) -> (u8, usize),
) -> Vec<Vec<T>> {
    let mut out: Vec<(Vec<T>, u8, usize)> = Vec::new();
    for item in items {
        let (shard, bytes) = key(&item);
        let shard = if by_shard { shard } else { 0 };
        match out.iter_mut().find(|(batch, s, held)| *s == shard && batch.len() < most && *held + bytes <= most_bytes) {
            Some((batch, _, held)) => {
                batch.push(item);
                *held += bytes;
            }
            None => out.push((vec![item], shard, bytes)),
        }
    }
    out.into_iter().map(|(batch, _, _)| batch).collect()
}
