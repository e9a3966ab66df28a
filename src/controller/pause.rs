//! Pausing and the fallback, decided from the object alone (pure): the annotations a
//! person sets to hold the workers (`jobqueue.dev/paused`, `jobqueue.dev/paused-replicas`,
//! as KEDA's `autoscaling.keda.sh/paused*`), the `spec.workers.fallback` that holds them
//! while the queue cannot be read, and the watch's filter that lets a change of either
//! annotation through (a change of the spec, not a status write).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use kube::Resource;

use super::scaling::Hold;
use crate::crd::{FallbackSpec, JobQueue};

/// The prefix of the operator's annotations.
pub const ANNOTATION_PREFIX: &str = "jobqueue.dev/";
/// `"true"` pauses scaling: the replicas are left as they are.
pub const PAUSED: &str = "jobqueue.dev/paused";
/// `"N"` scales the target to N and holds it there.
pub const PAUSED_REPLICAS: &str = "jobqueue.dev/paused-replicas";

/// What the pause annotations say: nothing (scale on the backlog), or a [`Hold`].
/// `paused-replicas` wins over `paused` (as KEDA's); `paused: "false"` is no pause; any
/// other value of either is a mistake, and scaling pauses until it is fixed (a typo
/// must not scale a workload the person meant to hold).
pub fn pause(annotations: &BTreeMap<String, String>) -> Option<Hold> {
    if let Some(value) = annotations.get(PAUSED_REPLICAS) {
        return Some(match value.trim().parse::<i32>() {
            Ok(n) if n >= 0 => Hold::Pinned(n),
            _ => Hold::Invalid(format!(
                "annotation {PAUSED_REPLICAS}: {value:?} is not a number of replicas \
                 (a non-negative integer)"
            )),
        });
    }
    let value = annotations.get(PAUSED)?;
    match value.trim() {
        v if v.eq_ignore_ascii_case("true") => Some(Hold::Paused),
        v if v.eq_ignore_ascii_case("false") => None,
        _ => Some(Hold::Invalid(format!(
            "annotation {PAUSED}: {value:?} is neither \"true\" nor \"false\""
        ))),
    }
}

/// The pause of `jq`, from its annotations.
pub fn pause_of(jq: &JobQueue) -> Option<Hold> {
    pause(jq.annotations_or_empty())
}

/// `spec.workers.fallback`, checked: the replicas to hold once the queue could not be
/// read `failures` times in a row, or `None` (no fallback, or not yet). A threshold
/// below 1 counts as 1 and negative replicas as no fallback (the CRD refuses both).
pub fn fallback(spec: Option<&FallbackSpec>, failures: u32) -> Option<Hold> {
    let spec = spec?;
    let threshold = spec.failure_threshold.max(1);
    if spec.replicas < 0 || failures < threshold {
        return None;
    }
    Some(Hold::Fallback {
        replicas: spec.replicas,
        threshold,
    })
}

/// The watch's filter (a `predicate_filter` key): a new value lets the object through.
/// The generation (a spec change) and the operator's annotations; not the status, the
/// resource version or other metadata.
pub fn spec_or_annotations(jq: &JobQueue) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    jq.meta().generation.hash(&mut hasher);
    for (key, value) in jq.annotations_or_empty() {
        if key.starts_with(ANNOTATION_PREFIX) {
            (key, value).hash(&mut hasher);
        }
    }
    Some(hasher.finish())
}

trait AnnotationsOrEmpty {
    fn annotations_or_empty(&self) -> &BTreeMap<String, String>;
}

impl AnnotationsOrEmpty for JobQueue {
    fn annotations_or_empty(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.meta().annotations.as_ref().unwrap_or(&EMPTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::JobQueueSpec;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_pause_annotations_from_a_table() {
        let invalid = |s: &str| Some(Hold::Invalid(s.to_string()));
        type Row = (Vec<(&'static str, &'static str)>, Option<Hold>);
        let rows: Vec<Row> = vec![
            (vec![], None),
            (vec![("other.io/paused", "true")], None),
            (vec![(PAUSED, "true")], Some(Hold::Paused)),
            (vec![(PAUSED, "True")], Some(Hold::Paused)),
            (vec![(PAUSED, " true ")], Some(Hold::Paused)),
            (vec![(PAUSED, "false")], None),
            (
                vec![(PAUSED, "maybe")],
                invalid(r#"annotation jobqueue.dev/paused: "maybe" is neither "true" nor "false""#),
            ),
            (
                vec![(PAUSED, "")],
                invalid(r#"annotation jobqueue.dev/paused: "" is neither "true" nor "false""#),
            ),
            (vec![(PAUSED_REPLICAS, "3")], Some(Hold::Pinned(3))),
            (vec![(PAUSED_REPLICAS, "0")], Some(Hold::Pinned(0))),
            // paused-replicas wins, whatever paused says.
            (
                vec![(PAUSED, "true"), (PAUSED_REPLICAS, "2")],
                Some(Hold::Pinned(2)),
            ),
            (
                vec![(PAUSED, "false"), (PAUSED_REPLICAS, "2")],
                Some(Hold::Pinned(2)),
            ),
            (
                vec![(PAUSED, "maybe"), (PAUSED_REPLICAS, "2")],
                Some(Hold::Pinned(2)),
            ),
            (
                vec![(PAUSED_REPLICAS, "-1")],
                invalid(
                    r#"annotation jobqueue.dev/paused-replicas: "-1" is not a number of replicas (a non-negative integer)"#,
                ),
            ),
            (
                vec![(PAUSED_REPLICAS, "maybe")],
                invalid(
                    r#"annotation jobqueue.dev/paused-replicas: "maybe" is not a number of replicas (a non-negative integer)"#,
                ),
            ),
            (
                vec![(PAUSED_REPLICAS, "2.5")],
                invalid(
                    r#"annotation jobqueue.dev/paused-replicas: "2.5" is not a number of replicas (a non-negative integer)"#,
                ),
            ),
            (
                vec![(PAUSED, "true"), (PAUSED_REPLICAS, "99999999999")],
                invalid(
                    r#"annotation jobqueue.dev/paused-replicas: "99999999999" is not a number of replicas (a non-negative integer)"#,
                ),
            ),
        ];
        for (pairs, want) in rows {
            assert_eq!(pause(&annotations(&pairs)), want, "{pairs:?}");
        }
    }

    #[test]
    fn the_fallback_from_a_table() {
        let spec = |failure_threshold: u32, replicas: i32| FallbackSpec {
            failure_threshold,
            replicas,
        };
        let held = |replicas: i32, threshold: u32| {
            Some(Hold::Fallback {
                replicas,
                threshold,
            })
        };
        let rows: &[(Option<FallbackSpec>, u32, Option<Hold>)] = &[
            (None, 0, None),
            (None, 100, None),
            (Some(spec(3, 2)), 0, None),
            (Some(spec(3, 2)), 2, None),
            (Some(spec(3, 2)), 3, held(2, 3)),
            // The same hold however long it lasts: its words do not change.
            (Some(spec(3, 2)), 40, held(2, 3)),
            (Some(spec(1, 0)), 1, held(0, 1)),
            // What the CRD refuses, were it applied without its rules.
            (Some(spec(0, 1)), 0, None),
            (Some(spec(0, 1)), 1, held(1, 1)),
            (Some(spec(0, 1)), 7, held(1, 1)),
            (Some(spec(1, -1)), 5, None),
        ];
        for (s, failures, want) in rows {
            assert_eq!(
                &fallback(s.as_ref(), *failures),
                want,
                "{s:?} after {failures}"
            );
        }
    }

    #[test]
    fn the_watch_passes_spec_and_annotation_changes_only() {
        let base = || {
            let mut jq = JobQueue::new("emails", JobQueueSpec::new("redis://r:6379", "emails"));
            jq.meta_mut().generation = Some(1);
            jq.meta_mut().resource_version = Some("10".into());
            jq
        };
        let key = spec_or_annotations;
        let with = |f: &dyn Fn(&mut JobQueue)| {
            let mut jq = base();
            f(&mut jq);
            key(&jq)
        };
        let annotate = |pairs: &'static [(&'static str, &'static str)]| {
            move |jq: &mut JobQueue| {
                jq.meta_mut().annotations = Some(annotations(pairs));
            }
        };
        let before = key(&base());
        assert!(before.is_some());
        // Through: a spec change, a pause set, changed or lifted, any jobqueue.dev/ key.
        assert_ne!(with(&|jq| jq.meta_mut().generation = Some(2)), before);
        assert_ne!(with(&annotate(&[(PAUSED, "true")])), before);
        assert_ne!(
            with(&annotate(&[(PAUSED_REPLICAS, "2")])),
            with(&annotate(&[(PAUSED_REPLICAS, "3")]))
        );
        assert_ne!(
            with(&annotate(&[(PAUSED, "true")])),
            with(&annotate(&[(PAUSED, "false")]))
        );
        // Filtered: a status write (new resource version), other annotations, labels.
        assert_eq!(
            with(&|jq| jq.meta_mut().resource_version = Some("11".into())),
            before
        );
        assert_eq!(with(&|jq| jq.status = Some(Default::default())), before);
        assert_eq!(
            with(&annotate(&[(
                "kubectl.kubernetes.io/last-applied-configuration",
                "{}"
            )])),
            before
        );
        assert_eq!(
            with(&|jq| {
                jq.meta_mut().labels = Some(annotations(&[("team", "mail")]));
            }),
            before
        );
    }
}
