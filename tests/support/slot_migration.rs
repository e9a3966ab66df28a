//! Moving one Cluster slot between the nodes of a [`RedisCluster`] key by key, as
//! `redis-cli --cluster reshard` does: `SETSLOT IMPORTING` on the target, `SETSLOT
//! MIGRATING` on the source, `MIGRATE … KEYS` in small batches, then `SETSLOT NODE` on
//! every node. Between the steps the slot's keys are split between two nodes.

use super::redis::RedisCluster;

fn my_id(cluster: &RedisCluster, node: usize) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut cluster.nodes[node].conn())
        .expect("CLUSTER MYID")
}

/// The slot of `key`.
pub fn slot_of(cluster: &RedisCluster, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.nodes[0].conn())
        .unwrap()
}

/// Mark `slot` as moving from node `src` to node `dst`.
pub fn begin(cluster: &RedisCluster, slot: u16, src: usize, dst: usize) {
    let (src_id, dst_id) = (my_id(cluster, src), my_id(cluster, dst));
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&src_id)
        .query(&mut cluster.nodes[dst].conn())
        .expect("SETSLOT IMPORTING");
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&dst_id)
        .query(&mut cluster.nodes[src].conn())
        .expect("SETSLOT MIGRATING");
}

/// Move up to `batch` keys of `slot` from `src` to `dst`; returns how many moved (0 when
/// the source holds none of the slot's keys any more).
pub fn migrate_batch(
    cluster: &RedisCluster,
    slot: u16,
    src: usize,
    dst: usize,
    batch: usize,
) -> usize {
    let mut conn = cluster.nodes[src].conn();
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(batch)
        .query(&mut conn)
        .unwrap();
    migrate_keys(cluster, src, dst, &keys)
}

/// Move those of `keys` that `src` holds to `dst` in one `MIGRATE`; returns how many
/// moved. Moving a queue's own keys before its job hashes is the order in which a
/// script finds the hashes of ids it holds missing for the longest time.
pub fn migrate_present(cluster: &RedisCluster, src: usize, dst: usize, keys: &[&str]) -> usize {
    let mut conn = cluster.nodes[src].conn();
    let present: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| {
            redis::cmd("EXISTS")
                .arg(k)
                .query::<i64>(&mut conn)
                .unwrap_or(0)
                == 1
        })
        .collect();
    migrate_keys(cluster, src, dst, &present)
}

fn migrate_keys<K: redis::ToRedisArgs>(
    cluster: &RedisCluster,
    src: usize,
    dst: usize,
    keys: &[K],
) -> usize {
    if keys.is_empty() {
        return 0;
    }
    let mut conn = cluster.nodes[src].conn();
    let _: redis::Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cluster.nodes[dst].port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(keys)
        .query(&mut conn)
        .expect("MIGRATE");
    keys.len()
}

/// Give `slot` to `dst` on every node (the target first, as redis-cli does).
pub fn finish(cluster: &RedisCluster, slot: u16, src: usize, dst: usize) {
    let dst_id = my_id(cluster, dst);
    let mut order = vec![dst, src];
    order.extend((0..cluster.nodes.len()).filter(|n| *n != src && *n != dst));
    for node in order {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&dst_id)
            .query(&mut cluster.nodes[node].conn())
            .expect("SETSLOT NODE");
    }
    // `redis-cli --cluster reshard` waits for the nodes to agree; so does this, and says
    // which node still names another owner when they do not.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let seen: Vec<Option<u16>> = (0..cluster.nodes.len())
            .map(|node| owner_seen_by(cluster, node, slot))
            .collect();
        if seen
            .iter()
            .all(|port| *port == Some(cluster.nodes[dst].port))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "slot {slot} given to port {}, but the nodes name the owners {seen:?}",
            cluster.nodes[dst].port
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The port of the master that `node` says holds `slot` (`CLUSTER SLOTS`).
pub fn owner_seen_by(cluster: &RedisCluster, node: usize, slot: u16) -> Option<u16> {
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut cluster.nodes[node].conn())
        .expect("CLUSTER SLOTS");
    ranges.iter().find_map(|range| {
        let redis::Value::Array(fields) = range else {
            return None;
        };
        let (Some(redis::Value::Int(lo)), Some(redis::Value::Int(hi))) =
            (fields.first(), fields.get(1))
        else {
            return None;
        };
        if !(*lo..=*hi).contains(&i64::from(slot)) {
            return None;
        }
        match fields.get(2) {
            Some(redis::Value::Array(master)) => match master.get(1) {
                Some(redis::Value::Int(port)) => u16::try_from(*port).ok(),
                _ => None,
            },
            _ => None,
        }
    })
}
