//! One owner per workload (pure): which of the JobQueues that name one scale target
//! scales it, and whether a KEDA `ScaledObject` claims it. The reads are
//! in `cluster_reads`; the reconcile turns a claim into a
//! [`TargetState`](super::scaling::TargetState) the scaler refuses.

use k8s_openapi::api::autoscaling::v2::CrossVersionObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::Value;

use super::scaling::TargetRef;
use crate::crd::JobQueue;

/// Whether two references name one object: the group, the kind and the name (one object
/// is served under several versions).
fn same_object(a: &TargetRef, b: &TargetRef) -> bool {
    a.group == b.group && a.kind == b.kind && a.name == b.name
}

/// The target `jq` scales, when its `spec.workers` names a valid one.
fn target_of(jq: &JobQueue) -> Option<TargetRef> {
    let r = &jq.spec.workers.as_ref()?.scale_target_ref;
    TargetRef::parse(&r.api_version, &r.kind, &r.name).ok()
}

/// Oldest first: the creation time (none: last), then the namespace and the name.
fn seniority(jq: &JobQueue) -> (bool, Option<Timestamp>, String, String) {
    let created = jq.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (
        created.is_none(),
        created,
        jq.namespace().unwrap_or_default(),
        jq.name_any(),
    )
}

/// The JobQueue (`namespace/name`) that owns `target`, when it is not `me`: of the
/// queues of `me`'s namespace that scale it (`me` included, whether `queues` holds it
/// yet or not), the oldest. `None`: `me` owns it.
pub fn other_owner<'a>(
    me: &JobQueue,
    target: &TargetRef,
    queues: impl IntoIterator<Item = &'a JobQueue>,
) -> Option<String> {
    let (ns, name) = (me.namespace(), me.name_any());
    let mine = seniority(me);
    let oldest = queues
        .into_iter()
        .filter(|q| q.namespace() == ns && q.name_any() != name)
        .filter(|q| target_of(q).is_some_and(|t| same_object(&t, target)))
        .map(|q| (seniority(q), q))
        .filter(|(s, _)| *s < mine)
        .min_by(|a, b| a.0.cmp(&b.0))?;
    let (_, _, ns, name) = oldest.0;
    Some(format!("{ns}/{name}"))
}

/// The name of the first KEDA ScaledObject of `list` (the items of a LIST, as JSON)
/// whose `spec.scaleTargetRef` names `target`; KEDA's defaults apply (`apps/v1`,
/// `Deployment`). Paused or not: a paused ScaledObject still owns its target.
pub fn claiming_scaled_object<'a>(
    target: &TargetRef,
    items: impl IntoIterator<Item = &'a Value>,
) -> Option<String> {
    items.into_iter().find_map(|item| {
        let r = item.pointer("/spec/scaleTargetRef")?;
        let text = |key: &str, default: &str| {
            r.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(default)
                .to_string()
        };
        let reference = CrossVersionObjectReference {
            api_version: Some(text("apiVersion", "apps/v1")),
            kind: text("kind", "Deployment"),
            name: text("name", ""),
        };
        if !target.is_targeted_by(&reference) {
            return None;
        }
        item.pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::Resource;
    use serde_json::json;

    use super::*;
    use crate::crd::{JobQueueSpec, WorkersSpec};

    fn deployment(name: &str) -> TargetRef {
        TargetRef::parse("apps/v1", "Deployment", name).unwrap()
    }

    /// A queue in `ns` created `created` seconds after an epoch (none: not yet known),
    /// scaling `kind/target` of `api_version` (no workers: `None`).
    fn queue(
        ns: &str,
        name: &str,
        created: Option<i64>,
        target: Option<(&str, &str, &str)>,
    ) -> JobQueue {
        let mut spec = JobQueueSpec::new("redis://r:6379", name);
        spec.workers = target.map(|(api_version, kind, target)| {
            serde_json::from_value::<WorkersSpec>(json!({
                "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
                "maxReplicas": 5,
            }))
            .unwrap()
        });
        let mut jq = JobQueue::new(name, spec);
        let meta = jq.meta_mut();
        meta.namespace = Some(ns.into());
        meta.uid = Some(format!("uid-{ns}-{name}"));
        meta.creation_timestamp =
            created.map(|s| Time(Timestamp::from_second(1_700_000_000 + s).unwrap()));
        jq
    }

    const W: Option<(&str, &str, &str)> = Some(("apps/v1", "Deployment", "w"));

    #[test]
    fn the_oldest_queue_owns_the_target() {
        let w = deployment("w");
        let a = queue("ns", "a", Some(10), W);
        let rows: Vec<(&str, JobQueue, Vec<JobQueue>, Option<&str>)> = vec![
            ("alone", a.clone(), vec![a.clone()], None),
            ("alone, not in the cache yet", a.clone(), vec![], None),
            (
                "an older one",
                a.clone(),
                vec![a.clone(), queue("ns", "b", Some(5), W)],
                Some("ns/b"),
            ),
            (
                "a younger one",
                a.clone(),
                vec![a.clone(), queue("ns", "b", Some(20), W)],
                None,
            ),
            (
                "the same second: the name decides",
                queue("ns", "b", Some(10), W),
                vec![a.clone(), queue("ns", "b", Some(10), W)],
                Some("ns/a"),
            ),
            (
                "the same second, the first name",
                a.clone(),
                vec![queue("ns", "b", Some(10), W)],
                None,
            ),
            (
                "the oldest of several",
                queue("ns", "d", Some(30), W),
                vec![
                    queue("ns", "b", Some(20), W),
                    queue("ns", "c", Some(5), W),
                    queue("ns", "e", Some(1), Some(("apps/v1", "Deployment", "x"))),
                ],
                Some("ns/c"),
            ),
            (
                "another namespace's is another object",
                a.clone(),
                vec![queue("other", "b", Some(1), W)],
                None,
            ),
            (
                "another kind or group is another object",
                a.clone(),
                vec![
                    queue("ns", "b", Some(1), Some(("apps/v1", "StatefulSet", "w"))),
                    queue(
                        "ns",
                        "c",
                        Some(1),
                        Some(("example.com/v1", "Deployment", "w")),
                    ),
                ],
                None,
            ),
            (
                "another version is the same object",
                a.clone(),
                vec![queue(
                    "ns",
                    "b",
                    Some(1),
                    Some(("apps/v1beta2", "Deployment", "w")),
                )],
                Some("ns/b"),
            ),
            (
                "a queue without workers owns nothing",
                a.clone(),
                vec![queue("ns", "b", Some(1), None)],
                None,
            ),
            (
                "a creation time not yet known is the youngest",
                queue("ns", "z", None, W),
                vec![queue("ns", "b", Some(99), W)],
                Some("ns/b"),
            ),
            (
                "one known is older than one not",
                a.clone(),
                vec![queue("ns", "b", None, W)],
                None,
            ),
        ];
        for (what, me, queues, want) in rows {
            assert_eq!(other_owner(&me, &w, &queues).as_deref(), want, "{what}");
        }
    }

    #[test]
    fn scaled_objects_claim_their_target_with_keda_defaults() {
        let so = |name: &str, r: Value| json!({"metadata": {"name": name}, "spec": {"scaleTargetRef": r}});
        let rows: Vec<(&str, Vec<Value>, Option<&str>)> = vec![
            ("none", vec![], None),
            (
                "KEDA's defaults: a Deployment",
                vec![so("s", json!({"name": "w"}))],
                Some("s"),
            ),
            (
                "explicit",
                vec![so(
                    "s",
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}),
                )],
                Some("s"),
            ),
            ("another name", vec![so("s", json!({"name": "x"}))], None),
            (
                "another kind",
                vec![so("s", json!({"kind": "StatefulSet", "name": "w"}))],
                None,
            ),
            (
                "another group",
                vec![so(
                    "s",
                    json!({"apiVersion": "example.com/v1", "kind": "Deployment", "name": "w"}),
                )],
                None,
            ),
            (
                "the second of two",
                vec![so("a", json!({"name": "x"})), so("b", json!({"name": "w"}))],
                Some("b"),
            ),
            (
                "paused, still the owner",
                vec![json!({
                    "metadata": {"name": "p", "annotations": {"autoscaling.keda.sh/paused": "true"}},
                    "spec": {"scaleTargetRef": {"name": "w"}},
                })],
                Some("p"),
            ),
            (
                "no scaleTargetRef",
                vec![json!({"metadata": {"name": "s"}, "spec": {}})],
                None,
            ),
        ];
        for (what, items, want) in rows {
            assert_eq!(
                claiming_scaled_object(&deployment("w"), &items).as_deref(),
                want,
                "{what}"
            );
        }
        // A ScaledObject on a StatefulSet claims the StatefulSet.
        let sts = TargetRef::parse("apps/v1", "StatefulSet", "w").unwrap();
        let items = [so("s", json!({"kind": "StatefulSet", "name": "w"}))];
        assert_eq!(claiming_scaled_object(&sts, &items).as_deref(), Some("s"));
    }
}
