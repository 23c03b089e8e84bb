//! What each rank of a collective does, as a list of steps: a step's
//! sends (RDMA WRITEs to peers) and the messages it must have received
//! before the rank moves on. A rank starts step k + 1 once every send of
//! step k has completed and every message step k waits for has arrived,
//! as a collective library's progress loop does.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// (peer rank, bytes): one message each, as WRITEs of at most the
    /// fabric's message size, the last with immediate data.
    pub sends: Vec<(usize, u64)>,
    /// Peer ranks a message must have come from (one each).
    pub recvs: Vec<usize>,
}

/// Per rank, its steps in order.
pub type Schedule = Vec<Vec<Step>>;

/// Ring all-reduce of `size` bytes over `n` ranks: reduce-scatter, then
/// all-gather, 2(n - 1) steps of size/n each; rank r sends to r + 1 and
/// hears from r - 1 in every step.
pub fn ring_allreduce(n: usize, size: u64) -> Schedule {
    ring(n, size, 2 * (n - 1))
}

/// Ring all-gather (or reduce-scatter: the same traffic) of `size` bytes
/// in all: n - 1 steps of size/n.
pub fn ring_gather(n: usize, size: u64) -> Schedule {
    ring(n, size, n - 1)
}

fn ring(n: usize, size: u64, steps: usize) -> Schedule {
    ring_of_chunks(n, size.div_ceil(n as u64), steps)
}

/// A ring of `n` ranks that sends `chunk` bytes to the next rank in each
/// of `steps` steps (one channel of a ring whose other hops are not on
/// this fabric: see `collective::rails`).
pub fn ring_of_chunks(n: usize, chunk: u64, steps: usize) -> Schedule {
    (0..n)
        .map(|r| {
            let step = Step { sends: vec![((r + 1) % n, chunk)], recvs: vec![(r + n - 1) % n] };
            vec![step; steps]
        })
        .collect()
}

/// Tree all-reduce over a binary tree of the ranks (rank r's parent is
/// (r - 1) / 2), pipelined in chunks of at most `chunk` bytes: each chunk
/// is reduced up (a rank sends it to its parent once its children's
/// parts have arrived), then broadcast down (a rank forwards it to its
/// children once it has it). The root turns each chunk round at once.
pub fn tree_allreduce(n: usize, size: u64, chunk: u64) -> Schedule {
    let chunks: Vec<u64> = split(size, chunk);
    let children = |r: usize| -> Vec<usize> { [2 * r + 1, 2 * r + 2].into_iter().filter(|&c| c < n).collect() };
    (0..n)
        .map(|r| {
            let kids = children(r);
            let send_kids = |c: u64| kids.iter().map(|&k| (k, c)).collect::<Vec<_>>();
            let mut steps = Vec::new();
            if r == 0 {
                for &c in &chunks {
                    steps.push(Step { sends: Vec::new(), recvs: kids.clone() });
                    steps.push(Step { sends: send_kids(c), recvs: Vec::new() });
                }
            } else {
                let parent = (r - 1) / 2;
                for &c in &chunks {
                    steps.push(Step { sends: Vec::new(), recvs: kids.clone() });
                    steps.push(Step { sends: vec![(parent, c)], recvs: Vec::new() });
                }
                for &c in &chunks {
                    steps.push(Step { sends: Vec::new(), recvs: vec![parent] });
                    steps.push(Step { sends: send_kids(c), recvs: Vec::new() });
                }
            }
            steps.retain(|s| !s.sends.is_empty() || !s.recvs.is_empty());
            steps
        })
        .collect()
}

/// `size` in pieces of at most `chunk` (at least one piece).
fn split(size: u64, chunk: u64) -> Vec<u64> {
    let chunk = chunk.max(1);
    let mut v: Vec<u64> = (0..size / chunk).map(|_| chunk).collect();
    if size % chunk != 0 || v.is_empty() {
        v.push(size % chunk);
    }
    v
}

/// One schedule over `hosts` hosts made of a schedule per group: group g
/// (its hosts, in rank order, disjoint from the others) runs `of(g)`,
/// whose rank i is host `groups[g][i]`. Hosts in no group have no steps.
pub fn on_groups(hosts: usize, groups: &[Vec<usize>], of: impl Fn(usize) -> Schedule) -> Schedule {
    let mut all = vec![Vec::new(); hosts];
    for (g, members) in groups.iter().enumerate() {
        for (i, steps) in of(g).into_iter().enumerate() {
            all[members[i]] = steps
                .into_iter()
                .map(|st| Step {
                    sends: st.sends.into_iter().map(|(p, b)| (members[p], b)).collect(),
                    recvs: st.recvs.into_iter().map(|p| members[p]).collect(),
                })
                .collect();
        }
    }
    all
}

/// Messages each ordered pair (from, to) carries over the whole schedule.
pub fn messages(s: &Schedule) -> BTreeMap<(usize, usize), u64> {
    let mut m = BTreeMap::new();
    for (r, steps) in s.iter().enumerate() {
        for (peer, _) in steps.iter().flat_map(|st| &st.sends) {
            *m.entry((r, *peer)).or_default() += 1;
        }
    }
    m
}

/// Whether every message sent is waited for by its receiver and the
/// other way round, pair by pair (a schedule that would hang is not).
pub fn balanced(s: &Schedule) -> bool {
    let mut expected: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    for (r, steps) in s.iter().enumerate() {
        for peer in steps.iter().flat_map(|st| &st.recvs) {
            *expected.entry((*peer, r)).or_default() += 1;
        }
    }
    expected == messages(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_allreduce_has_two_n_minus_one_steps_of_a_nth() {
        let s = ring_allreduce(4, 4096);
        assert_eq!(s.len(), 4);
        assert!(s.iter().all(|steps| steps.len() == 6));
        assert_eq!(s[3][0], Step { sends: vec![(0, 1024)], recvs: vec![2] });
        assert!(balanced(&s));
        assert_eq!(messages(&s).get(&(0, 1)), Some(&6));
        assert_eq!(ring_gather(4, 4096)[0].len(), 3);
    }

    #[test]
    fn tree_reduces_up_and_broadcasts_down_chunk_by_chunk() {
        let s = tree_allreduce(5, 3000, 1000);
        assert!(balanced(&s));
        // Rank 1 (children 3, 4; parent 0): 3 chunks up, 3 down.
        assert_eq!(s[1].len(), 12);
        assert_eq!(s[1][0], Step { sends: vec![], recvs: vec![3, 4] });
        assert_eq!(s[1][1], Step { sends: vec![(0, 1000)], recvs: vec![] });
        assert_eq!(s[1][6], Step { sends: vec![], recvs: vec![0] });
        assert_eq!(s[1][7], Step { sends: vec![(3, 1000), (4, 1000)], recvs: vec![] });
        // A leaf sends each chunk up and waits for it to come down.
        assert_eq!(s[4].len(), 6);
        assert!(s[4][..3].iter().all(|st| st.sends == vec![(1, 1000)]));
        assert_eq!(split(2500, 1000), vec![1000, 1000, 500]);
        assert_eq!(split(0, 1000), vec![0]);
    }

    #[test]
    fn groups_run_their_own_schedules_on_their_hosts() {
        // Two rings of two over hosts {0, 2} and {1, 3}.
        let s = on_groups(4, &[vec![0, 2], vec![1, 3]], |_| ring_of_chunks(2, 100, 2));
        assert!(balanced(&s));
        assert_eq!(s[1][0], Step { sends: vec![(3, 100)], recvs: vec![3] });
        assert_eq!(messages(&s).keys().copied().collect::<Vec<_>>(), vec![(0, 2), (1, 3), (2, 0), (3, 1)]);
    }

    #[test]
    fn an_unbalanced_schedule_is_seen() {
        let mut s = ring_allreduce(3, 300);
        s[0].pop();
        assert!(!balanced(&s));
    }
}
