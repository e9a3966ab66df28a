//! Partitioned queues: which hash tag each partition has, and which partition a job goes
//! to. Pure functions, no Redis: every client (in any language) that follows the rules
//! below finds the same partitions.
//!
//! A partitioned queue `T` with `N` partitions is `N` ordinary queues of the protocol,
//! each with a hash tag of its own, so each lives in one Cluster slot and the Lua scripts
//! need no change. The tags come from one sequence of candidates:
//!
//! - candidate 0 is `T` itself, candidate k (k ≥ 1) is `T~k` (e.g. `emails~17`);
//! - the slot of a candidate is CRC16-XMODEM of its text mod 16384 (what Redis Cluster
//!   computes for a key `P:{candidate}:…`);
//! - partition i of N (0 ≤ i < N) is the first candidate whose slot s has
//!   `floor(s · N / 16384) = i`, i.e. lies in the i-th N-th of the slot space.
//!
//! So one partition is exactly the unpartitioned queue (`T`), a Cluster whose slots are
//! split evenly over its masters puts the partitions evenly on them, and, because the
//! candidates are tried in one order for every N, when N divides M every tag of the
//! N-partition layout is also a tag of the M-partition layout (partition j of N is the
//! earlier of partitions jM/N … (j+1)M/N − 1 of M): shrinking 6 → 3 keeps three of the
//! six queues, growing 3 → 6 adds three.
//!
//! A job goes to partition `floor(h · N / 2^64)` with `h = fmix64(fnv1a64(key))`, where
//! the key is the job's id (so deduplication by id holds while N is fixed) or a
//! caller-given partition key (so jobs of one key keep their order). FNV-1a 64: offset
//! basis 0xcbf29ce484222325, prime 0x100000001b3, over the key's bytes; fmix64 is
//! MurmurHash3's finalizer (`h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33;
//! h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33`), which mixes FNV's weak high bits, on which the
//! range split depends, for short keys that differ in their last bytes.

use super::error::{Error, Result};
use super::keys::validate_tag;

/// The number of Redis Cluster hash slots.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The most partitions a queue may have: each worker waits on one connection per
/// partition, and a tag must be found for each of the N slot ranges.
pub const MAX_PARTITIONS: usize = 1024;

/// The Redis Cluster slot of a hash tag's text (the part between the braces): CRC16
/// (XMODEM: polynomial 0x1021, initial value 0) mod 16384.
pub fn tag_slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % CLUSTER_SLOTS
}

/// Which N-th of the slot space `slot` lies in: `floor(slot · n / 16384)`.
pub fn slot_range(slot: u16, n: usize) -> usize {
    usize::from(slot) * n / usize::from(CLUSTER_SLOTS)
}

/// Candidate `k` of the tag sequence: `tag` itself, then `tag~1`, `tag~2`, …
pub fn candidate_tag(tag: &str, k: u64) -> String {
    if k == 0 {
        tag.to_string()
    } else {
        format!("{tag}~{k}")
    }
}

/// A partition count is 1 to [`MAX_PARTITIONS`].
pub fn validate_partitions(n: usize) -> Result<()> {
    if (1..=MAX_PARTITIONS).contains(&n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            what: "partition count",
            reason: format!("{n} is not between 1 and {MAX_PARTITIONS}"),
        })
    }
}

/// The hash tags of the `n` partitions of queue `tag`, partition 0 first (see the module
/// documentation). Deterministic; `partition_tags(tag, 1) == [tag]`. Fails on a bad tag
/// or count, or when a partition tag would be longer than a tag may be.
pub fn partition_tags(tag: &str, n: usize) -> Result<Vec<String>> {
    validate_tag(tag)?;
    validate_partitions(n)?;
    let mut tags: Vec<Option<String>> = vec![None; n];
    let mut left = n;
    // Each range is 16384/N ≥ 16 slots wide and CRC16 spreads the candidates evenly, so
    // the search ends after about N·ln N candidates; the bound only guards the loop.
    for k in 0..(u64::from(CLUSTER_SLOTS) * 1024) {
        let candidate = candidate_tag(tag, k);
        let range = slot_range(tag_slot(candidate.as_bytes()), n);
        if tags[range].is_none() {
            validate_tag(&candidate)?;
            tags[range] = Some(candidate);
            left -= 1;
            if left == 0 {
                return Ok(tags.into_iter().map(|t| t.expect("all found")).collect());
            }
        }
    }
    Err(Error::InvalidArgument {
        what: "partition count",
        reason: format!("no tag found for every one of {n} slot ranges of {tag:?}"),
    })
}

/// FNV-1a, 64 bits, over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// MurmurHash3's 64-bit finalizer.
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The partition (0 to n − 1) of a job with this id or partition key:
/// `floor(fmix64(fnv1a64(key)) · n / 2^64)`. `n` must be at least 1.
pub fn partition_of(key: &[u8], n: usize) -> usize {
    ((u128::from(fmix64(fnv1a64(key))) * n as u128) >> 64) as usize
}

/// The partitions a client works with while a queue is resized: producers route to the
/// `route` layout, workers and tools drain every tag of the `route` and `drain` layouts
/// (the old layout's queues empty out while no new job goes to them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLayout {
    /// Every partition tag to claim from, stats and reap: the `drain` layout's tags in
    /// order, then those of the `route` layout that are not among them.
    pub tags: Vec<String>,
    /// For each partition of the `route` layout, its index in `tags`.
    pub route: Vec<usize>,
}

impl PartitionLayout {
    /// Route to `route` partitions and drain `drain` (same as `route` when not resizing;
    /// either may be the larger).
    pub fn new(tag: &str, route: usize, drain: usize) -> Result<PartitionLayout> {
        let mut tags = partition_tags(tag, drain)?;
        let routed = partition_tags(tag, route)?;
        let mut route = Vec::with_capacity(routed.len());
        for t in routed {
            let at = match tags.iter().position(|x| *x == t) {
                Some(at) => at,
                None => {
                    tags.push(t);
                    tags.len() - 1
                }
            };
            route.push(at);
        }
        Ok(PartitionLayout { tags, route })
    }

    /// The index in `tags` that a job with this id or partition key goes to.
    pub fn route_of(&self, key: &[u8]) -> usize {
        self.route[partition_of(key, self.route.len())]
    }
}

/// The field of queue `T`'s own `meta` (`P:{T}:meta`) that records its partition count:
/// the layout producers route to. Not read by any script. `T` is candidate 0 of the tag
/// sequence and so a partition of every layout: whatever the count, its `meta` is where
/// a client that knows only the tag finds it.
pub const PARTITIONS_FIELD: &str = "partitions";

/// The field of `P:{T}:meta` that records, while the queue is resized, the partition count
/// of the layout being drained (present only then).
pub const DRAIN_PARTITIONS_FIELD: &str = "drain_partitions";

/// The partition layout a queue records in its own `meta` ([`PARTITIONS_FIELD`],
/// [`DRAIN_PARTITIONS_FIELD`]), written by the operator from `spec.partitions` and by
/// `jobqueue configure --partitions`, so every client finds the count from the tag alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRecord {
    /// The layout new jobs go to.
    pub partitions: usize,
    /// While resizing: the earlier layout whose queues are still drained (claimed from,
    /// counted, reaped) though no new job goes to them.
    pub drain: Option<usize>,
}

impl PartitionRecord {
    /// A record of `partitions`, with no resize under way.
    pub fn new(partitions: usize) -> PartitionRecord {
        PartitionRecord {
            partitions,
            drain: None,
        }
    }

    /// The record as `meta` holds it: `partitions`, and `drain_partitions` while draining
    /// (`None`: the field is absent).
    pub fn to_fields(&self) -> (String, Option<String>) {
        (
            self.partitions.to_string(),
            self.drain
                .filter(|d| *d != self.partitions)
                .map(|d| d.to_string()),
        )
    }

    /// The record in `meta`'s two fields as stored (`None`: absent). No `partitions` field:
    /// no record (a queue from before the record, or one never partitioned); a value that
    /// is not a count from 1 to [`MAX_PARTITIONS`] is an error naming the field and `meta`.
    pub fn from_fields(
        meta: &str,
        partitions: Option<&str>,
        drain: Option<&str>,
    ) -> Result<Option<PartitionRecord>> {
        let count = |field: &str, text: &str| -> Result<usize> {
            text.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_PARTITIONS).contains(n))
                .ok_or_else(|| Error::InvalidArgument {
                    what: "partition record",
                    reason: format!(
                        "field {field} of {meta} holds {text:?}, not a partition count from 1 \
                         to {MAX_PARTITIONS}"
                    ),
                })
        };
        let Some(partitions) = partitions else {
            if let Some(drain) = drain {
                return Err(Error::InvalidArgument {
                    what: "partition record",
                    reason: format!(
                        "{meta} holds {DRAIN_PARTITIONS_FIELD} {drain:?} but no \
                         {PARTITIONS_FIELD} field"
                    ),
                });
            }
            return Ok(None);
        };
        let partitions = count(PARTITIONS_FIELD, partitions)?;
        let drain = drain
            .map(|d| count(DRAIN_PARTITIONS_FIELD, d))
            .transpose()?
            .filter(|d| *d != partitions);
        Ok(Some(PartitionRecord { partitions, drain }))
    }

    /// The layout clients work with: route to `partitions`, drain `drain` too.
    pub fn layout(&self, tag: &str) -> Result<PartitionLayout> {
        PartitionLayout::new(tag, self.partitions, self.drain.unwrap_or(self.partitions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // The reference values of the Redis Cluster specification.
        assert_eq!(tag_slot(b"123456789"), 0x31C3 % CLUSTER_SLOTS);
        assert_eq!(tag_slot(b""), 0);
        // `CLUSTER KEYSLOT foo` = 12182, `CLUSTER KEYSLOT bar` = 5061.
        assert_eq!(tag_slot(b"foo"), 12182);
        assert_eq!(tag_slot(b"bar"), 5061);
    }

    #[test]
    fn one_partition_is_the_queue_itself() {
        for tag in ["emails", "a", "jobs:eu-west", "x~1"] {
            assert_eq!(partition_tags(tag, 1).unwrap(), [tag]);
        }
        let layout = PartitionLayout::new("emails", 1, 1).unwrap();
        assert_eq!(layout.tags, ["emails"]);
        assert_eq!(layout.route_of(b"any"), 0);
    }

    #[test]
    fn each_tag_lies_in_its_nth_of_the_slot_space() {
        for tag in ["emails", "q", "orders:eu"] {
            for n in 1..=64 {
                let tags = partition_tags(tag, n).unwrap();
                assert_eq!(tags.len(), n);
                for (i, t) in tags.iter().enumerate() {
                    let slot = tag_slot(t.as_bytes());
                    assert_eq!(
                        slot_range(slot, n),
                        i,
                        "{tag} n={n} partition {i}: {t} slot {slot}"
                    );
                    // The same test without the division: i·16384 ≤ s·n < (i+1)·16384.
                    let (s, n16) = (usize::from(slot) * n, usize::from(CLUSTER_SLOTS));
                    assert!(i * n16 <= s && s < (i + 1) * n16, "{t}: slot {slot} of {n}");
                }
                let mut unique = tags.clone();
                unique.sort();
                unique.dedup();
                assert_eq!(unique.len(), n, "{tag} n={n}: {tags:?}");
            }
        }
    }

    #[test]
    fn tags_are_deterministic_and_documented() {
        assert_eq!(
            partition_tags("emails", 6).unwrap(),
            partition_tags("emails", 6).unwrap()
        );
        // Each tag is the first candidate of the sequence in its range: recompute it the
        // way the module documentation says, independently of the search loop.
        let tags = partition_tags("emails", 6).unwrap();
        for (i, t) in tags.iter().enumerate() {
            let first = (0..)
                .map(|k| candidate_tag("emails", k))
                .find(|c| usize::from(tag_slot(c.as_bytes())) * 6 / 16384 == i)
                .unwrap();
            assert_eq!(*t, first);
        }
        assert!(
            tags.iter()
                .all(|t| t == "emails" || t.starts_with("emails~"))
        );
        // Pinned (computed by an independent implementation), so a client in another
        // language can be checked against it.
        assert_eq!(
            tags,
            [
                "emails~10",
                "emails",
                "emails~2",
                "emails~12",
                "emails~1",
                "emails~4"
            ]
        );
        assert_eq!(
            partition_tags("emails", 3).unwrap(),
            ["emails", "emails~2", "emails~1"]
        );
    }

    #[test]
    fn a_divisor_layout_keeps_a_subset_of_the_tags() {
        for (n, m) in [(3, 6), (2, 6), (1, 6), (4, 8), (16, 64)] {
            let small = partition_tags("orders", n).unwrap();
            let big = partition_tags("orders", m).unwrap();
            for t in &small {
                assert!(big.contains(t), "{n} → {m}: {t} not in {big:?}");
            }
        }
        // 6 → 3: the three kept queues are the ones producers route to.
        let layout = PartitionLayout::new("orders", 3, 6).unwrap();
        assert_eq!(layout.tags, partition_tags("orders", 6).unwrap());
        assert_eq!(layout.route.len(), 3);
        for (j, &at) in layout.route.iter().enumerate() {
            assert!(at == 2 * j || at == 2 * j + 1, "{:?}", layout.route);
        }
    }

    #[test]
    fn a_non_divisor_layout_drains_the_union() {
        let layout = PartitionLayout::new("orders", 4, 6).unwrap();
        let four = partition_tags("orders", 4).unwrap();
        assert_eq!(&layout.tags[..6], partition_tags("orders", 6).unwrap());
        for (j, &at) in layout.route.iter().enumerate() {
            assert_eq!(layout.tags[at], four[j]);
        }
        let mut unique = layout.tags.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), layout.tags.len());
        // Growing: route to the larger layout, drain the smaller one too.
        let grow = PartitionLayout::new("orders", 6, 3).unwrap();
        assert_eq!(grow.tags.len(), 6);
        assert_eq!(grow.route.len(), 6);
    }

    #[test]
    fn bad_counts_and_tags_are_refused() {
        let err = partition_tags("emails", 0).unwrap_err().to_string();
        assert!(
            err.contains("partition count") && err.contains("0 is not between 1 and 1024"),
            "{err}"
        );
        assert!(partition_tags("emails", MAX_PARTITIONS + 1).is_err());
        assert!(partition_tags("{emails}", 3).is_err());
        // A tag that fits alone but not with its `~k` suffix.
        let long = "t".repeat(255);
        assert!(partition_tags(&long, 1).is_ok());
        assert!(partition_tags(&long, 4).is_err());
        assert_eq!(
            partition_tags("emails", MAX_PARTITIONS).unwrap().len(),
            MAX_PARTITIONS
        );
    }

    #[test]
    fn fnv1a64_has_its_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fmix64(0), 0);
        // Pinned, so another client's implementation can be checked against it.
        assert_eq!(partition_of(b"job-1", 6), 3);
    }

    #[test]
    fn the_same_key_goes_to_the_same_partition() {
        for n in 1..=64 {
            for i in 0..200 {
                let id = format!("job-{i}");
                let p = partition_of(id.as_bytes(), n);
                assert!(p < n);
                assert_eq!(p, partition_of(id.as_bytes(), n));
            }
        }
        let layout = PartitionLayout::new("emails", 6, 6).unwrap();
        assert_eq!(layout.route_of(b"j1"), layout.route_of(b"j1"));
    }

    #[test]
    fn ids_spread_over_the_partitions() {
        let n = 6;
        let mut counts = vec![0usize; n];
        for i in 0..60_000 {
            counts[partition_of(format!("{i}").as_bytes(), n)] += 1;
        }
        // 10 000 expected each; 5 % leeway is over 10 standard deviations.
        for c in &counts {
            assert!((9_500..=10_500).contains(c), "{counts:?}");
        }
    }

    #[test]
    fn a_partition_record_reads_back_as_written() {
        let m = "jq:{emails}:meta";
        assert_eq!(PartitionRecord::from_fields(m, None, None).unwrap(), None);
        let r = PartitionRecord {
            partitions: 3,
            drain: Some(6),
        };
        let (p, d) = r.to_fields();
        assert_eq!((p.as_str(), d.as_deref()), ("3", Some("6")));
        assert_eq!(
            PartitionRecord::from_fields(m, Some(&p), d.as_deref()).unwrap(),
            Some(r)
        );
        // A drain of the route's own count is no drain.
        assert_eq!(
            PartitionRecord::from_fields(m, Some("4"), Some("4")).unwrap(),
            Some(PartitionRecord::new(4))
        );
        assert_eq!(PartitionRecord::new(4).to_fields().1, None);
        for (p, d) in [
            (Some("0"), None),
            (Some("abc"), None),
            (Some("1025"), None),
            (Some("2"), Some("-1")),
            (None, Some("3")),
        ] {
            let err = PartitionRecord::from_fields(m, p, d)
                .unwrap_err()
                .to_string();
            assert!(err.contains(m), "{err}");
        }
    }
}
