//! Which live member of a group (scheduler or migrator replicas) owns which bucket. Every
//! replica that sees the same members computes the same answer, so they split the buckets
//! without talking to each other: each member owns ⌊B/N⌋ or ⌈B/N⌉ of the B buckets, and a
//! join or a leave moves only some of them.
//!
//! Each bucket ranks the members by a hash of (member, bucket) — rendezvous hashing — and
//! goes to the best-ranked member with room left under its quota. The hash is written out
//! here rather than taken from a library, so replicas of different versions never disagree
//! during a rolling upgrade.

use std::fmt;

use crate::{Bucket, BucketCount};

/// The buckets of one group, split among its live members as one replica sees them.
#[derive(Clone, PartialEq, Eq)]
pub struct Ownership {
    /// This replica's member id.
    me: String,
    /// Live members, sorted.
    members: Vec<String>,
    /// Per bucket, the index of its owner in `members`; empty without members.
    owners: Vec<usize>,
}

impl fmt::Debug for Ownership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ownership")
            .field("me", &self.me)
            .field("members", &self.members)
            .field("mine", &self.mine().len())
            .finish()
    }
}

impl Ownership {
    /// `members` in any order, duplicates ignored. `me` owns nothing unless it is among them.
    pub fn new(me: impl Into<String>, buckets: BucketCount, members: Vec<String>) -> Self {
        let mut members = members;
        members.sort();
        members.dedup();
        let owners = assign(buckets, &members);
        Self {
            me: me.into(),
            members,
            owners,
        }
    }

    /// Before the first heartbeat answered: this replica alone, owning every bucket. A
    /// replica that cannot see its peers keeps working rather than idling; the leases keep
    /// two replicas from working one shard.
    pub fn alone(me: impl Into<String>, buckets: BucketCount) -> Self {
        let me = me.into();
        Self::new(me.clone(), buckets, vec![me])
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The member owning `bucket`, if any member is live.
    pub fn owner(&self, bucket: Bucket) -> Option<&str> {
        let i = *self.owners.get(bucket.get() as usize)?;
        self.members.get(i).map(String::as_str)
    }

    pub fn owns(&self, bucket: Bucket) -> bool {
        self.owner(bucket) == Some(self.me.as_str())
    }

    /// The buckets this replica owns, in order.
    pub fn mine(&self) -> Vec<Bucket> {
        (0..self.owners.len() as u32)
            .map(Bucket::from_stored)
            .filter(|b| self.owns(*b))
            .collect()
    }
}

/// Per bucket, the index of its owner in `members` (sorted, unique).
fn assign(buckets: BucketCount, members: &[String]) -> Vec<usize> {
    let n = members.len();
    if n == 0 {
        return Vec::new();
    }
    let total = buckets.get() as usize;
    // The first `total % n` members (in sorted order) take one bucket more than the rest.
    let quota = |i: usize| total / n + usize::from(i < total % n);
    let mut load = vec![0usize; n];
    let mut owners = Vec::with_capacity(total);
    let mut ranked: Vec<usize> = (0..n).collect();
    for bucket in 0..total as u32 {
        ranked.sort_by_key(|&i| std::cmp::Reverse((score(&members[i], bucket), i)));
        // The quotas add up to `total`, so some member always has room.
        let owner = ranked
            .iter()
            .copied()
            .find(|&i| load[i] < quota(i))
            .unwrap_or(ranked[0]);
        load[owner] += 1;
        owners.push(owner);
    }
    owners
}

/// FNV-1a of the member id, mixed with the bucket by the splitmix64 finalizer.
fn score(member: &str, bucket: u32) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for byte in member.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    let mut z = h ^ u64::from(bucket).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("scheduler-{i:x}-7f3a")).collect()
    }

    fn count(o: &Ownership) -> usize {
        o.mine().len()
    }

    #[test]
    fn every_bucket_has_one_owner_and_shares_differ_by_at_most_one() {
        for b in [1u32, 7, 16, 64, 256] {
            let buckets = BucketCount::new(b).unwrap();
            for n in 1..=9 {
                let all = members(n);
                let views: Vec<Ownership> = all
                    .iter()
                    .map(|m| Ownership::new(m.clone(), buckets, all.clone()))
                    .collect();
                let shares: Vec<usize> = views.iter().map(count).collect();
                assert_eq!(shares.iter().sum::<usize>(), b as usize, "{b} buckets, {n}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1, "{b} buckets over {n}: {shares:?}");
                for bucket in buckets.all() {
                    let owners = views.iter().filter(|v| v.owns(bucket)).count();
                    assert_eq!(owners, 1, "bucket {bucket:?}");
                }
            }
        }
    }

    #[test]
    fn every_replica_computes_the_same_owners_whatever_order_it_sees_members_in() {
        let buckets = BucketCount::new(16).unwrap();
        let all = members(3);
        let mut reversed = all.clone();
        reversed.reverse();
        let a = Ownership::new(all[0].clone(), buckets, all.clone());
        let b = Ownership::new(all[1].clone(), buckets, reversed);
        for bucket in buckets.all() {
            assert_eq!(a.owner(bucket), b.owner(bucket));
        }
    }

    #[test]
    fn a_join_moves_only_part_of_the_buckets() {
        let buckets = BucketCount::new(64).unwrap();
        let before = Ownership::new("x", buckets, members(3));
        let after = Ownership::new("x", buckets, members(4));
        let moved = buckets
            .all()
            .filter(|b| before.owner(*b) != after.owner(*b))
            .count();
        // A quarter must move to the newcomer; a full reshuffle would move about three quarters.
        assert!(moved < 40, "{moved} of 64 buckets moved");
    }

    #[test]
    fn a_replica_not_among_the_members_owns_nothing_and_alone_owns_all() {
        let buckets = BucketCount::new(16).unwrap();
        assert!(
            Ownership::new("gone", buckets, members(2))
                .mine()
                .is_empty()
        );
        assert_eq!(Ownership::alone("me", buckets).mine().len(), 16);
        assert_eq!(
            Ownership::new("me", buckets, Vec::new()).owner(Bucket::from_stored(0)),
            None
        );
    }
}
