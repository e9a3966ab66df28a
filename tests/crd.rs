//! The JobQueue CRD: the committed YAML matches the code, the schema's CEL rules accept
//! good specs and refuse bad ones (evaluated locally with kube's CEL validator, as the
//! API server would), and the example manifest is valid.

use std::process::Command;

use clap::Parser;

use jobqueue::controller::validate;
use jobqueue::crd::{DurabilityMode, JobQueue, JobQueueSpec};
use kube::CustomResourceExt;
use kube::core::cel::{ScopeContext, Validator, WarningKind, analyze_rule, compile_schema};
use serde_json::{Value, json};

fn schema() -> Value {
    let crd = JobQueue::crd();
    let version = &crd.spec.versions[0];
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the CRD has a schema");
    serde_json::to_value(schema).unwrap()
}

fn object(spec: Value) -> Value {
    json!({
        "apiVersion": "jobqueue.dev/v1alpha1",
        "kind": "JobQueue",
        "metadata": {"name": "emails", "namespace": "default"},
        "spec": spec,
    })
}

/// The CEL verdict on `obj` (an update of `old` when given): the failed rules' messages.
fn cel(obj: &Value, old: Option<&Value>) -> Result<(), Vec<String>> {
    Validator::new()
        .validate(&schema(), obj, old)
        .map_err(|errors| errors.iter().map(|e| e.to_string()).collect())
}

fn minimal() -> Value {
    json!({"redis": {"url": "redis://redis:6379"}, "hashTag": "emails"})
}

#[test]
fn the_committed_crd_matches_the_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_jobqueue"))
        .arg("crd")
        .output()
        .expect("run jobqueue crd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/jobqueue.yaml"))
            .expect("crds/jobqueue.yaml exists");
    assert!(
        printed == committed,
        "crds/jobqueue.yaml is out of date: run `jobqueue crd > crds/jobqueue.yaml` (or `make crds`)"
    );
    // And it is the CRD itself, readable back.
    let parsed: Value = serde_saphyr::from_str(&printed).expect("the CRD is valid YAML");
    assert_eq!(parsed["metadata"]["name"], "jobqueues.jobqueue.dev");
}

#[test]
fn names_columns_and_subresources() {
    let crd = JobQueue::crd();
    assert_eq!(crd.spec.group, "jobqueue.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "JobQueue");
    assert_eq!(crd.spec.names.short_names, Some(vec!["jq".to_string()]));
    let categories = crd.spec.names.categories.clone().unwrap_or_default();
    // Not in `all`: `kubectl delete all --all` must not delete queues.
    assert_eq!(categories, vec!["jobqueue".to_string()]);
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some(),
        "status subresource"
    );
    let columns: Vec<(&str, i32)> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.priority.unwrap_or(0)))
        .collect();
    // Due, Orphaned and Oldest (the age of the oldest pending job) only in `kubectl get
    // -o wide` (priority 1): usually zero, or absent.
    assert_eq!(
        columns,
        [
            ("Pending", 0),
            ("Processing", 0),
            ("Dead", 0),
            ("Due", 1),
            ("Orphaned", 1),
            ("Oldest", 1),
            ("Partitions", 1),
            ("Replicas", 0),
            ("Ready", 0),
            ("Age", 0)
        ]
    );
}

#[test]
fn schema_defaults_are_the_code_defaults() {
    let defaulted = kube::core::cel::apply_defaults(&schema(), &object(minimal()));
    let spec: JobQueueSpec = serde_json::from_value(defaulted["spec"].clone()).unwrap();
    assert_eq!(spec, JobQueueSpec::new("redis://redis:6379", "emails"));
    assert_eq!(defaulted["spec"]["keyPrefix"], "jq");
    assert_eq!(defaulted["spec"]["visibilityTimeout"], "30s");
    assert_eq!(defaulted["spec"]["reaper"]["interval"], "10s");
}

#[test]
fn good_specs_pass() {
    let good = [
        minimal(),
        json!({
            "redis": {
                "urlSecretRef": {"name": "redis", "key": "url"},
                "passwordSecretRef": {"name": "redis", "key": "password"},
                "cluster": true,
                "tls": {"caSecretRef": {"name": "redis-ca", "key": "ca.crt"}}
            },
            "hashTag": "emails-eu",
            "keyPrefix": "app",
            "visibilityTimeout": "1m30s",
            "maxAttempts": 3,
            "retry": {"initial": "500ms", "max": "10m", "multiplier": 1.5},
            "completedRetention": "0s",
            "deadLetter": {"retention": "0s", "maxLength": 0},
            "reaper": {"interval": "2s", "batchSize": 1000},
            "workers": {
                "scaleTargetRef": {"name": "email-workers"},
                "minReplicas": 0,
                "maxReplicas": 10,
                "targetBacklogPerReplica": 50,
                "scaleDownStabilization": "5m"
            }
        }),
    ];
    // the priority mode, and a schedule with every job option
    let mut options = minimal();
    options["priorityMode"] = json!("weighted");
    options["schedules"] = json!([{
        "name": "hourly", "every": "1h", "payload": "{}",
        "maxAttempts": 3, "backoffInitial": "250ms", "backoffMax": "1m",
        "backoffMultiplier": 1.5, "priority": 9, "timeout": "2m", "visibility": "30s",
        "rateKey": "customer-42"
    }]);
    let mut strict = minimal();
    strict["priorityMode"] = json!("strict");
    strict["schedules"] = json!([{"name": "low", "cron": "0 3 * * *", "priority": 0}]);
    for spec in good.into_iter().chain([options, strict]) {
        assert_eq!(cel(&object(spec.clone()), None), Ok(()), "{spec}");
    }
    // The Rust defaults too, through the generated client-side check.
    let jq = JobQueue::new("emails", JobQueueSpec::new("redis://redis:6379", "emails"));
    jq.validate_cel()
        .expect("the default spec passes the CRD's rules");
}

#[test]
fn bad_specs_are_refused_with_their_message() {
    let with = |patch: Value| {
        let mut spec = minimal();
        json_patch_merge(&mut spec, &patch);
        object(spec)
    };
    let cases = [
        (json!({"hashTag": ""}), "hashTag must not be empty"),
        (
            json!({"hashTag": "{emails}"}),
            "hashTag must not contain braces",
        ),
        (json!({"hashTag": "a}b"}), "hashTag must not contain braces"),
        (
            json!({"rateLimit": {"max": 0, "per": "1s"}}),
            "rateLimit.max must be between 1 and 1000000",
        ),
        (
            json!({"rateLimit": {"max": 10, "per": "0s"}}),
            "rateLimit.per must be a positive duration",
        ),
        (
            json!({"rateLimitPerKey": {"max": 5, "per": "abc"}}),
            "rateLimit.per must be a positive duration",
        ),
        (json!({"keyPrefix": "j{q"}), "keyPrefix must be non-empty"),
        (
            json!({"visibilityTimeout": "0s"}),
            "visibilityTimeout must be a positive duration",
        ),
        (
            json!({"visibilityTimeout": "-30s"}),
            "visibilityTimeout must be a positive duration",
        ),
        (
            json!({"reaper": {"interval": "0s"}}),
            "reaper.interval must be a positive duration",
        ),
        (
            json!({"retry": {"initial": "0ms"}}),
            "retry.initial must be a positive duration",
        ),
        (
            json!({"completedRetention": "-1s"}),
            "completedRetention must not be negative",
        ),
        (
            json!({"redis": {"url": null}}),
            "exactly one of url, urlSecretRef and sentinel must be set",
        ),
        (
            json!({"redis": {"urlSecretRef": {"name": "r", "key": "url"}}}),
            "exactly one of url, urlSecretRef and sentinel must be set",
        ),
        (
            json!({"redis": {"url": "http://redis:6379"}}),
            "url must start with redis:// or rediss://",
        ),
        (
            json!({"workers": {"scaleTargetRef": {"name": "w"}, "minReplicas": 5, "maxReplicas": 2}}),
            "minReplicas must not exceed maxReplicas",
        ),
        (
            json!({"partitions": 0}),
            "partitions must be between 1 and 256",
        ),
        (
            json!({"partitions": 257}),
            "partitions must be between 1 and 256",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "cron": "* * * * *"}]}),
            "a schedule has exactly one of every and cron",
        ),
        (
            json!({"schedules": [{"name": "s"}]}),
            "a schedule has exactly one of every and cron",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "timeZone": "UTC"}]}),
            "timeZone applies to cron",
        ),
        (
            json!({"schedules": [{"name": "a b", "every": "1m"}]}),
            "a schedule name is 1..200 characters",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "0s"}]}),
            "every must be a positive duration",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "missed": "all"}]}),
            "missed must be skip or once",
        ),
        (
            json!({"priorityMode": "fair"}),
            "priorityMode must be strict or weighted",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "priority": 12}]}),
            "a schedule's priority must be between 0 and 9",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "maxAttempts": 0}]}),
            "a schedule's maxAttempts must be between 1 and 1000000",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "backoffMultiplier": 0.5}]}),
            "a schedule's backoffMultiplier must be a number from 1 to 1000",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "backoffInitial": "-1s"}]}),
            "a schedule's backoffInitial must be a duration, not negative",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "backoffMax": "soon"}]}),
            "a schedule's backoffMax must be a duration, not negative",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "timeout": "0s"}]}),
            "a schedule's timeout must be a positive duration",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "visibility": "30"}]}),
            "a schedule's visibility must be a positive duration",
        ),
        (
            json!({"schedules": [{"name": "s", "every": "1m", "rateKey": ""}]}),
            "a schedule's rateKey must not be empty",
        ),
    ];
    for (patch, message) in cases {
        let obj = with(patch.clone());
        let errors = cel(&obj, None).expect_err(&format!("{patch} must be refused"));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{patch}: expected {message:?}, got {errors:?}"
        );
    }
}

#[test]
fn a_malformed_duration_is_refused() {
    let mut spec = minimal();
    spec["visibilityTimeout"] = json!("soon");
    assert!(cel(&object(spec), None).is_err());
}

#[test]
fn the_visibility_timeout_is_a_duration_or_auto_with_its_bounds() {
    let mut spec = minimal();
    spec["visibilityTimeout"] = json!("auto");
    spec["visibilityAuto"] = json!({"min": "10s", "max": "5m", "margin": 3});
    assert_eq!(cel(&object(spec), None), Ok(()));
    let mut spec = minimal();
    spec["visibilityTimeout"] = json!("automatic");
    let errors = cel(&object(spec), None).expect_err("not a duration, not auto");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("visibilityTimeout must be a positive duration or auto")),
        "{errors:?}"
    );
    let mut spec = minimal();
    spec["visibilityTimeout"] = json!("auto");
    spec["visibilityAuto"] = json!({"min": "soon"});
    let errors = cel(&object(spec), None).expect_err("a bound that is not a duration");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("visibilityAuto.min must be a positive duration")),
        "{errors:?}"
    );
}

#[test]
fn the_hash_tag_is_immutable() {
    let old = object(minimal());
    let mut spec = minimal();
    spec["hashTag"] = json!("invoices");
    let errors = cel(&object(spec), Some(&old)).expect_err("changing hashTag is refused");
    assert!(
        errors.iter().any(|e| e.contains("hashTag is immutable")),
        "{errors:?}"
    );
    // Other fields may change.
    let mut spec = minimal();
    spec["visibilityTimeout"] = json!("2m");
    assert_eq!(cel(&object(spec), Some(&old)), Ok(()));

    // Through the generated client-side check, too.
    let a = JobQueue::new("q", JobQueueSpec::new("redis://r:6379", "emails"));
    let b = JobQueue::new("q", JobQueueSpec::new("redis://r:6379", "invoices"));
    assert!(b.validate_cel_update(&a).is_err());
    assert!(a.validate_cel_update(&a).is_ok());
}

#[test]
fn every_rule_is_in_scope_and_within_the_cost_budget() {
    let schema = schema();
    let compiled = compile_schema(&schema);
    assert!(
        !compiled.has_errors(),
        "{:?}",
        compiled.compilation_errors()
    );
    let mut rules = Vec::new();
    collect_rules(&schema, &mut rules);
    assert!(rules.len() >= 15, "{rules:?}");
    for rule in rules {
        let warnings = analyze_rule(&rule, &compiled, ScopeContext::CrdValidation);
        let serious: Vec<_> = warnings
            .iter()
            .filter(|w| matches!(w.kind, WarningKind::CostExceeded | WarningKind::WrongScope))
            .collect();
        assert!(serious.is_empty(), "{rule}: {serious:?}");
    }
}

#[test]
fn the_example_is_valid() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/jobqueue.yaml"
    ))
    .unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("valid YAML");
    let queues: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "JobQueue").collect();
    assert_eq!(queues.len(), 1, "the example holds one JobQueue");
    let obj = queues[0];
    assert_eq!(obj["apiVersion"], "jobqueue.dev/v1alpha1");

    let schema = schema();
    let problems = spec_problems(&obj["spec"], &schema);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(cel(obj, None), Ok(()));

    let jq: JobQueue = serde_json::from_value(obj.clone()).expect("a JobQueue");
    let plan = validate::plan(&jq.spec).expect("the controller accepts it");
    assert_eq!(plan.tag, "emails");
    assert_eq!(plan.settings.visibility_timeout.as_secs(), 60);

    // The Secret it names is in the example too.
    let secret = docs.iter().find(|d| d["kind"] == "Secret").unwrap();
    assert_eq!(
        secret["metadata"]["name"],
        obj["spec"]["redis"]["urlSecretRef"]["name"]
    );
}

#[test]
fn the_chart_ships_the_committed_crd() {
    // The chart templates the CRD (templates/crd.yaml, under crds.install, so `helm
    // upgrade` updates it): everything from `spec:` on is crds/jobqueue.yaml verbatim.
    let root = env!("CARGO_MANIFEST_DIR");
    let committed = std::fs::read_to_string(format!("{root}/crds/jobqueue.yaml")).unwrap();
    let chart = std::fs::read_to_string(format!(
        "{root}/charts/jobqueue-operator/templates/crd.yaml"
    ))
    .expect("the chart templates the CRD");
    let spec_at = committed.find("\nspec:\n").expect("the CRD has a spec") + 1;
    let (head, body) = committed.split_at(spec_at);
    assert!(
        chart.ends_with(&format!("{body}{{{{- end }}}}\n")),
        "charts/jobqueue-operator/templates/crd.yaml differs from crds/jobqueue.yaml: run `make crds`"
    );
    for line in head.lines().filter(|l| *l != "---") {
        assert!(
            chart.lines().any(|l| l == line),
            "the chart's CRD lacks {line:?}: run `make crds`"
        );
    }
    assert!(
        chart.contains("{{- if .Values.crds.install }}"),
        "the chart's CRD is not under crds.install"
    );
}

/// Every `examples/*.yaml`, parsed: (file name, documents).
fn example_files() -> Vec<(String, Vec<Value>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut files: Vec<(String, Vec<Value>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{name} is not valid YAML: {e}"));
            (name, docs.into_iter().filter(|d| !d.is_null()).collect())
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// A Secret of `docs` named `name` that has `key` in data or stringData.
fn has_secret_key(docs: &[Value], name: &str, key: &str) -> bool {
    docs.iter().any(|d| {
        d["kind"] == "Secret"
            && d["metadata"]["name"] == name
            && (d["stringData"].get(key).is_some() || d["data"].get(key).is_some())
    })
}

#[test]
fn every_example_queue_is_valid_and_its_secrets_are_there() {
    let schema = schema();
    let mut queues = Vec::new();
    for (file, docs) in example_files() {
        for obj in docs.iter().filter(|d| d["kind"] == "JobQueue") {
            let what = format!("{file}: JobQueue {}", obj["metadata"]["name"]);
            assert_eq!(obj["apiVersion"], "jobqueue.dev/v1alpha1", "{what}");
            let problems = spec_problems(&obj["spec"], &schema);
            assert!(problems.is_empty(), "{what}: {problems:?}");
            assert_eq!(cel(obj, None), Ok(()), "{what}");
            let jq: JobQueue = serde_json::from_value(obj.clone()).expect("a JobQueue");
            validate::plan(&jq.spec).unwrap_or_else(|e| panic!("{what}: {e}"));
            // Every Secret key the queue names is defined next to it.
            let redis = &obj["spec"]["redis"];
            for (field, sel) in [
                ("urlSecretRef", &redis["urlSecretRef"]),
                ("usernameSecretRef", &redis["usernameSecretRef"]),
                ("passwordSecretRef", &redis["passwordSecretRef"]),
                (
                    "sentinel.passwordSecretRef",
                    &redis["sentinel"]["passwordSecretRef"],
                ),
                ("tls.caSecretRef", &redis["tls"]["caSecretRef"]),
                (
                    "tls.clientCertSecretRef",
                    &redis["tls"]["clientCertSecretRef"],
                ),
                (
                    "tls.clientKeySecretRef",
                    &redis["tls"]["clientKeySecretRef"],
                ),
            ] {
                if let (Some(name), Some(key)) = (sel["name"].as_str(), sel["key"].as_str()) {
                    assert!(
                        has_secret_key(&docs, name, key),
                        "{what}: {field} names Secret {name} key {key}, not in {file}"
                    );
                }
            }
            queues.push(jq);
        }
    }
    // The examples cover each way to reach Redis.
    let inline_url = |q: &JobQueue| {
        let r = &q.spec.redis;
        r.url.is_some() && r.password_secret_ref.is_none() && !r.cluster
    };
    let secrets_and_tls = |q: &JobQueue| {
        let r = &q.spec.redis;
        r.url_secret_ref.is_some()
            && r.password_secret_ref.is_some()
            && r.tls.as_ref().is_some_and(|t| t.ca_secret_ref.is_some())
    };
    let cluster_seeds = |q: &JobQueue| {
        let r = &q.spec.redis;
        r.cluster && r.url.as_deref().is_some_and(|u| u.contains(','))
    };
    assert!(
        queues.iter().any(inline_url),
        "no example with an inline URL"
    );
    assert!(
        queues.iter().any(secrets_and_tls),
        "no example with Secrets and TLS"
    );
    assert!(queues.iter().any(cluster_seeds), "no Redis Cluster example");
    let sentinel_replicated = |q: &JobQueue| {
        let r = &q.spec.redis;
        r.sentinel.is_some()
            && r.password_secret_ref.is_some()
            && q.spec
                .durability
                .as_ref()
                .is_some_and(|d| d.mode == DurabilityMode::Replicated)
    };
    let acl_user = |q: &JobQueue| {
        let r = &q.spec.redis;
        r.username_secret_ref.is_some() && r.password_secret_ref.is_some()
    };
    let mutual_tls = |q: &JobQueue| {
        q.spec.redis.tls.as_ref().is_some_and(|t| {
            t.client_cert_secret_ref.is_some() && t.client_key_secret_ref.is_some()
        })
    };
    assert!(
        queues.iter().any(sentinel_replicated),
        "no Sentinel example with replicated durability"
    );
    assert!(queues.iter().any(acl_user), "no ACL user example");
    assert!(queues.iter().any(mutual_tls), "no mutual TLS example");
    assert!(
        queues.iter().any(|q| q.spec.partitions > 1),
        "no partitioned example"
    );
    assert!(queues.len() >= 8, "{} example queues", queues.len());
}

#[test]
fn the_worker_example_runs_the_exec_worker_on_an_example_queue() {
    let files = example_files();
    let (file, docs) = files
        .iter()
        .find(|(_, docs)| docs.iter().any(|d| d["kind"] == "Deployment"))
        .expect("an example worker Deployment");
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let command: Vec<&str> = container["command"]
        .as_array()
        .expect("the worker's command")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    // It is a command line the binary accepts.
    let cli = jobqueue::cli::Cli::try_parse_from(&command)
        .unwrap_or_else(|e| panic!("{file}: `{}` is refused: {e}", command.join(" ")));
    let jobqueue::cli::Command::Worker(args) = cli.command else {
        panic!("{file}: `{}` is not `jobqueue worker`", command.join(" "));
    };
    assert!(!args.exec.is_empty(), "{file}: a command follows --exec");
    // The queue it works on is one of the example queues.
    let tag = &args.connect.tag;
    let tags: Vec<String> = files
        .iter()
        .flat_map(|(_, docs)| docs.iter())
        .filter(|d| d["kind"] == "JobQueue")
        .map(|d| d["spec"]["hashTag"].as_str().unwrap().to_string())
        .collect();
    assert!(
        tags.contains(tag),
        "{file}: --tag={tag} is no example queue's hash tag ({tags:?})"
    );
    // The URL comes from a Secret of the same file, never inline.
    let url = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "JOBQUEUE_REDIS_URL")
        .expect("JOBQUEUE_REDIS_URL");
    let sel = &url["valueFrom"]["secretKeyRef"];
    assert!(
        has_secret_key(
            docs,
            sel["name"].as_str().unwrap(),
            sel["key"].as_str().unwrap()
        ),
        "{file}: the Redis URL's Secret is not in the file"
    );
    // The grace period leaves room for --shutdown-timeout.
    let shutdown = args.shutdown_timeout.as_secs() as i64;
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        grace > shutdown,
        "{file}: grace {grace}s ≤ shutdown timeout {shutdown}s"
    );
}

#[test]
fn the_structural_check_catches_typos() {
    let mut spec = minimal();
    spec["visibilityTimeOut"] = json!("60s");
    spec["maxAttempts"] = json!("five");
    let problems = spec_problems(&spec, &schema());
    assert_eq!(
        problems,
        vec![
            "spec.maxAttempts: expected integer, got \"five\"".to_string(),
            "spec.visibilityTimeOut: unknown field".to_string(),
        ]
    );
}

/// RFC 7386 merge of `patch` into `target` (null removes).
fn json_patch_merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_patch_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn collect_rules(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                out.extend(
                    rules
                        .iter()
                        .filter_map(|r| r["rule"].as_str().map(String::from)),
                );
            }
            for v in map.values() {
                collect_rules(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

/// What the structural check finds wrong in a JobQueue's spec.
fn spec_problems(spec: &Value, schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    conform(spec, &schema["properties"]["spec"], "spec", &mut problems);
    problems
}

/// The structural part of the API server's validation: known fields, types, required
/// fields, numeric bounds and enums (pruning would silently drop a misspelt field).
fn conform(value: &Value, schema: &Value, path: &str, problems: &mut Vec<String>) {
    if value.is_null() && schema["nullable"] == json!(true) {
        return;
    }
    let ty = schema["type"].as_str().unwrap_or("");
    let ok = match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    };
    if !ok {
        problems.push(format!("{path}: expected {ty}, got {value}"));
        return;
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
        && n < min
    {
        problems.push(format!("{path}: {n} is below {min}"));
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), value.as_f64())
        && n > max
    {
        problems.push(format!("{path}: {n} is above {max}"));
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let (Some(max), Some(s)) = (schema["maxLength"].as_u64(), value.as_str())
        && s.chars().count() as u64 > max
    {
        problems.push(format!("{path}: longer than {max}"));
    }
    match value {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            for (key, v) in map {
                match props.and_then(|p| p.get(key)) {
                    Some(sub) => conform(v, sub, &format!("{path}.{key}"), problems),
                    None if schema.get("additionalProperties").is_some() => conform(
                        v,
                        &schema["additionalProperties"],
                        &format!("{path}.{key}"),
                        problems,
                    ),
                    None => problems.push(format!("{path}.{key}: unknown field")),
                }
            }
            for req in schema["required"].as_array().into_iter().flatten() {
                let req = req.as_str().unwrap();
                if !map.contains_key(req) {
                    problems.push(format!("{path}.{req}: required"));
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                conform(item, &schema["items"], &format!("{path}[{i}]"), problems);
            }
        }
        _ => {}
    }
}

/// A spec with `workers` holding `behavior`.
fn with_behavior(behavior: Value) -> Value {
    let mut spec = minimal();
    spec["workers"] = json!({
        "scaleTargetRef": {"name": "w"},
        "maxReplicas": 200,
        "behavior": behavior,
    });
    object(spec)
}

#[test]
fn scale_up_behavior_defaults_to_the_hpa_and_the_step_is_not_defaulted() {
    // behavior.scaleUp: {} gets the HPA's policies; no maxScaleUpStep appears.
    let defaulted =
        kube::core::cel::apply_defaults(&schema(), &with_behavior(json!({"scaleUp": {}})));
    let workers = &defaulted["spec"]["workers"];
    assert_eq!(
        workers["behavior"]["scaleUp"],
        json!({
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15},
                {"type": "Pods", "value": 4, "periodSeconds": 15},
            ],
            "selectPolicy": "Max",
            "stabilizationWindowSeconds": 0,
        })
    );
    assert!(workers.get("maxScaleUpStep").is_none(), "{workers}");
    let jq: JobQueue = serde_json::from_value(defaulted).unwrap();
    let policy = validate::plan(&jq.spec).unwrap().workers.unwrap();
    assert_eq!(
        policy.scale_up,
        jobqueue::controller::scaling::ScaleUp::default()
    );
}

#[test]
fn scale_up_behavior_is_checked_by_the_schema_and_cel() {
    let good = [
        json!({"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1800}],
                           "selectPolicy": "Min", "stabilizationWindowSeconds": 3600}}),
        json!({"scaleUp": {"policies": [], "selectPolicy": "Disabled"}}),
        json!({}),
    ];
    for behavior in good {
        let obj = with_behavior(behavior.clone());
        assert_eq!(cel(&obj, None), Ok(()), "{behavior}");
        let mut problems = Vec::new();
        conform(
            &obj["spec"],
            &schema()["properties"]["spec"],
            "spec",
            &mut problems,
        );
        assert!(problems.is_empty(), "{behavior}: {problems:?}");
    }
    // CEL: an empty list of policies scales nothing unless that is the point.
    for select in [json!("Max"), json!("Min"), Value::Null] {
        let mut rules = json!({"policies": []});
        if !select.is_null() {
            rules["selectPolicy"] = select;
        }
        let errors = cel(&with_behavior(json!({"scaleUp": rules})), None)
            .expect_err("empty policies are refused");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("policies must not be empty unless selectPolicy is Disabled")),
            "{errors:?}"
        );
    }
    // The schema: enums and bounds, as the HPA's.
    let whole = schema();
    let rules = &whole["properties"]["spec"]["properties"]["workers"]["properties"]["behavior"]["properties"]
        ["scaleUp"]["properties"];
    assert_eq!(
        rules["selectPolicy"]["enum"],
        json!(["Max", "Min", "Disabled"])
    );
    assert_eq!(
        rules["policies"]["items"]["properties"]["type"]["enum"],
        json!(["Pods", "Percent"])
    );
    assert_eq!(rules["policies"]["maxItems"], json!(10));
    let bad = [
        (
            json!({"type": "Pods", "value": 0, "periodSeconds": 15}),
            "below 1",
        ),
        (
            json!({"type": "Pods", "value": 4, "periodSeconds": 0}),
            "below 1",
        ),
        (
            json!({"type": "Pods", "value": 4, "periodSeconds": 1801}),
            "above 1800",
        ),
    ];
    for (policy, words) in bad {
        let obj = with_behavior(json!({"scaleUp": {"policies": [policy]}}));
        let mut problems = Vec::new();
        conform(
            &obj["spec"],
            &schema()["properties"]["spec"],
            "spec",
            &mut problems,
        );
        assert!(
            problems.iter().any(|p| p.contains(words)),
            "{obj}: {problems:?}"
        );
    }
    for (rules, words) in [
        (json!({"stabilizationWindowSeconds": 3601}), "above 3600"),
        (json!({"stabilizationWindowSeconds": -1}), "below 0"),
    ] {
        let obj = with_behavior(json!({"scaleUp": rules}));
        let mut problems = Vec::new();
        conform(
            &obj["spec"],
            &schema()["properties"]["spec"],
            "spec",
            &mut problems,
        );
        assert!(
            problems.iter().any(|p| p.contains(words)),
            "{obj}: {problems:?}"
        );
    }
}

#[test]
fn the_deprecated_step_is_still_accepted() {
    let mut spec = minimal();
    spec["workers"] =
        json!({"scaleTargetRef": {"name": "w"}, "maxReplicas": 10, "maxScaleUpStep": 2});
    let obj = object(spec);
    assert_eq!(cel(&obj, None), Ok(()));
    let jq: JobQueue = serde_json::from_value(obj).unwrap();
    let policy = validate::plan(&jq.spec).unwrap().workers.unwrap();
    assert_eq!(
        policy.scale_up,
        jobqueue::controller::scaling::ScaleUp::per_reconcile(2)
    );
}

/// `minimal()` with `patch` merged in, as an object.
fn minimal_with(patch: Value) -> Value {
    let mut spec = minimal();
    json_patch_merge(&mut spec, &patch);
    object(spec)
}

#[test]
fn the_rules_of_the_controller_that_cel_can_express_are_in_the_crd() {
    // Each refused by the API server now, with the controller's words.
    let cases = [
        (
            json!({"retry": {"initial": "10s", "max": "5s"}}),
            "retry.max must not be below retry.initial",
        ),
        (
            json!({"retry": {"initial": "1m30s", "max": "90s", "multiplier": 2.0}}),
            "",
        ),
        (
            json!({"redis": {"url": "redis://a:6379,http://b:6379"}}),
            "every seed node of url must start with redis:// or rediss://",
        ),
        (
            json!({"workers": {"scaleTargetRef": {"apiVersion": "apps/v1/x", "name": "w"},
                               "maxReplicas": 2}}),
            "scaleTargetRef.apiVersion must be group/version",
        ),
        (
            json!({"workers": {"scaleTargetRef": {"apiVersion": "apps/", "name": "w"},
                               "maxReplicas": 2}}),
            "scaleTargetRef.apiVersion must be group/version",
        ),
        (
            json!({"workers": {"scaleTargetRef": {"apiVersion": "", "name": "w"},
                               "maxReplicas": 2}}),
            "scaleTargetRef.apiVersion must be group/version",
        ),
        (
            json!({"workers": {"scaleTargetRef": {"kind": "Deploy-ment", "name": "w"},
                               "maxReplicas": 2}}),
            "scaleTargetRef.kind must be a kind",
        ),
    ];
    for (patch, message) in cases {
        let obj = minimal_with(patch.clone());
        // The controller's verdict first: CEL must agree with it.
        let jq: JobQueue = serde_json::from_value(obj.clone()).unwrap();
        let controller = validate::plan(&jq.spec).map(|p| p.invalid_workers);
        if message.is_empty() {
            assert_eq!(cel(&obj, None), Ok(()), "{patch}");
            assert_eq!(controller, Ok(None), "{patch}");
            continue;
        }
        assert!(
            !matches!(controller, Ok(None)),
            "{patch}: the controller accepts it"
        );
        let errors = cel(&obj, None).expect_err(&format!("{patch} must be refused"));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{patch}: expected {message:?}, got {errors:?}"
        );
    }
    // Good ones pass: equal bounds, the core group, a custom resource, Cluster seeds.
    for patch in [
        json!({"retry": {"initial": "2s", "max": "2s"}}),
        json!({"retry": {"initial": "500ms", "max": "168h"}}),
        json!({"redis": {"url": "redis://a:6379, rediss://b:6379"}}),
        json!({"workers": {"scaleTargetRef": {"apiVersion": "v1", "kind": "ReplicationController",
                                              "name": "w"}, "maxReplicas": 2}}),
        json!({"workers": {"scaleTargetRef": {"apiVersion": "argoproj.io/v1alpha1",
                                              "kind": "Rollout", "name": "w"}, "maxReplicas": 2}}),
    ] {
        let obj = minimal_with(patch.clone());
        assert_eq!(cel(&obj, None), Ok(()), "{patch}");
        let jq: JobQueue = serde_json::from_value(obj).unwrap();
        let plan = validate::plan(&jq.spec).unwrap_or_else(|e| panic!("{patch}: {e}"));
        assert_eq!(plan.invalid_workers, None, "{patch}");
    }
}

#[test]
fn a_duration_cel_cannot_read_fails_its_own_rule_not_the_comparison() {
    // `7d` is not a Go duration: refused by the field's own rule, which names it, as the
    // controller refuses it; the retry bounds' comparison stays out of it (no CEL runtime
    // error on the object).
    for (retry, field) in [
        (json!({"initial": "7d"}), "retry.initial"),
        (json!({"max": "soon"}), "retry.max"),
    ] {
        let obj = minimal_with(json!({ "retry": retry }));
        let errors = cel(&obj, None).expect_err("an unreadable duration is refused");
        assert!(
            errors
                .iter()
                .all(|e| e.contains(&format!("{field} must be a positive duration"))),
            "{retry}: {errors:?}"
        );
        let jq: JobQueue = serde_json::from_value(obj).unwrap();
        assert_eq!(validate::plan(&jq.spec).unwrap_err().field, {
            if field == "retry.initial" {
                "spec.retry.initial"
            } else {
                "spec.retry.max"
            }
        });
    }
}

#[test]
fn the_keys_location_is_immutable() {
    let old = object(json!({
        "redis": {"url": "redis://redis:6379"},
        "hashTag": "emails",
        "keyPrefix": "jq",
    }));
    let changes = [
        (json!({"keyPrefix": "app"}), "keyPrefix is immutable"),
        (
            json!({"redis": {"url": "redis://other:6379"}}),
            "redis.url is immutable",
        ),
        (
            json!({"redis": {"url": null, "urlSecretRef": {"name": "r", "key": "url"}}}),
            "redis.url is immutable",
        ),
        (
            json!({"redis": {"cluster": true}}),
            "redis.cluster is immutable",
        ),
    ];
    for (patch, message) in changes {
        let mut new = old.clone();
        json_patch_merge(&mut new["spec"], &patch);
        let errors = cel(&new, Some(&old)).expect_err(&format!("{patch} must be refused"));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{patch}: expected {message:?}, got {errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("orphan") && e.contains("new JobQueue")),
            "{patch}: the message says why and what to do: {errors:?}"
        );
    }
    // The URL's Secret reference too.
    let old_secret = object(json!({
        "redis": {"urlSecretRef": {"name": "redis", "key": "url"}},
        "hashTag": "emails",
    }));
    let mut new = old_secret.clone();
    new["spec"]["redis"]["urlSecretRef"]["name"] = json!("redis-2");
    let errors = cel(&new, Some(&old_secret)).expect_err("a new Secret reference is refused");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("redis.urlSecretRef is immutable")),
        "{errors:?}"
    );
    // What does not move the keys may change: the password, TLS, the settings.
    let mut new = old.clone();
    json_patch_merge(
        &mut new["spec"],
        &json!({
            "redis": {"passwordSecretRef": {"name": "redis", "key": "password"}, "tls": {}},
            "visibilityTimeout": "2m",
        }),
    );
    assert_eq!(cel(&new, Some(&old)), Ok(()));
    assert_eq!(cel(&old_secret, Some(&old_secret)), Ok(()));
}

#[test]
fn the_queue_settings_bounds_of_the_client_are_in_the_schema() {
    // QueueSettings::validate refuses these; the API server now does too.
    for (patch, words) in [
        (json!({"retry": {"multiplier": 1001.0}}), "above 1000"),
        (
            json!({"deadLetter": {"maxLength": 100_000_000_000_000_000_u64}}),
            "above 9007199254740992",
        ),
    ] {
        let obj = minimal_with(patch.clone());
        let mut problems = Vec::new();
        conform(
            &obj["spec"],
            &schema()["properties"]["spec"],
            "spec",
            &mut problems,
        );
        assert!(
            problems.iter().any(|p| p.contains(words)),
            "{patch}: {problems:?}"
        );
        let jq: JobQueue = serde_json::from_value(obj).unwrap();
        assert!(validate::plan(&jq.spec).is_err(), "{patch}");
    }
    // The bounds themselves pass.
    let obj = minimal_with(
        json!({"retry": {"multiplier": 1000.0}, "deadLetter": {"maxLength": 9_007_199_254_740_992_u64}}),
    );
    let mut problems = Vec::new();
    conform(
        &obj["spec"],
        &schema()["properties"]["spec"],
        "spec",
        &mut problems,
    );
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn the_workers_fallback_is_checked() {
    let with = |fallback: Value| {
        let mut spec = minimal();
        spec["workers"] = json!({
            "scaleTargetRef": {"name": "w"},
            "maxReplicas": 5,
            "fallback": fallback,
        });
        object(spec)
    };
    assert_eq!(
        cel(&with(json!({"failureThreshold": 3, "replicas": 2})), None),
        Ok(())
    );
    assert_eq!(
        cel(&with(json!({"failureThreshold": 1, "replicas": 0})), None),
        Ok(())
    );
    for (fallback, message) in [
        (
            json!({"failureThreshold": 0, "replicas": 2}),
            "fallback.failureThreshold must be at least 1",
        ),
        (
            json!({"failureThreshold": 3, "replicas": -1}),
            "fallback.replicas must not be negative",
        ),
    ] {
        let errors =
            cel(&with(fallback.clone()), None).expect_err(&format!("{fallback} must be refused"));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{fallback}: expected {message:?}, got {errors:?}"
        );
    }
}

#[test]
fn sentinel_acl_and_mutual_tls_are_checked_by_the_schema() {
    let sentinel = json!({
        "sentinel": {"addresses": ["s-0:26379", "s-1"], "masterName": "mymaster"}
    });
    let good = [
        json!({"redis": sentinel.clone(), "hashTag": "a"}),
        json!({"redis": {"url": "redis://r:6379", "usernameSecretRef": {"name": "u", "key": "user"},
                         "passwordSecretRef": {"name": "u", "key": "password"}}, "hashTag": "a"}),
        json!({"redis": {"url": "rediss://r:6380", "tls": {
            "clientCertSecretRef": {"name": "c", "key": "tls.crt"},
            "clientKeySecretRef": {"name": "c", "key": "tls.key"}}}, "hashTag": "a"}),
        json!({"redis": sentinel.clone(), "hashTag": "a",
               "durability": {"mode": "replicated", "replicas": 2, "timeout": "500ms"}}),
    ];
    for spec in good {
        assert_eq!(cel(&object(spec.clone()), None), Ok(()), "{spec}");
        assert!(spec_problems(&spec, &schema()).is_empty(), "{spec}");
        let jq: JobQueue = serde_json::from_value(object(spec.clone())).unwrap();
        validate::plan(&jq.spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
    let with_url = json!({"url": "redis://r:6379", "sentinel": sentinel["sentinel"]});
    let bad = [
        (
            json!({"redis": with_url}),
            "exactly one of url, urlSecretRef and sentinel",
        ),
        (
            json!({"redis": {}}),
            "exactly one of url, urlSecretRef and sentinel",
        ),
        (
            json!({"redis": {"cluster": true, "sentinel": sentinel["sentinel"]}}),
            "sentinel and cluster exclude each other",
        ),
        (
            json!({"redis": {"sentinel": {"addresses": [], "masterName": "m"}}}),
            "sentinel.addresses must not be empty",
        ),
        (
            json!({"redis": {"sentinel": {"addresses": ["s"], "masterName": ""}}}),
            "sentinel.masterName must not be empty",
        ),
        (
            json!({"redis": {"url": "rediss://r", "tls": {"clientCertSecretRef": {"name": "c", "key": "tls.crt"}}}}),
            "clientCertSecretRef and tls.clientKeySecretRef go together",
        ),
        (
            json!({"redis": {"url": "redis://r"}, "durability": {"mode": "replicated", "timeout": "0s"}}),
            "durability.timeout must be a positive duration",
        ),
    ];
    for (patch, message) in bad {
        let mut spec = json!({"hashTag": "a"});
        json_patch_merge(&mut spec, &patch);
        let errors =
            cel(&object(spec.clone()), None).expect_err(&format!("{spec} must be refused"));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{spec}: expected {message:?}, got {errors:?}"
        );
    }
    // The schema refuses a replica count of 0 and a mode it does not know.
    for durability in [
        json!({"mode": "replicated", "replicas": 0}),
        json!({"mode": "sync"}),
    ] {
        let spec = json!({"redis": {"url": "redis://r"}, "hashTag": "a", "durability": durability});
        assert!(!spec_problems(&spec, &schema()).is_empty(), "{spec}");
    }
    // The defaults: replicated waits for one replica for 1s.
    let defaulted = kube::core::cel::apply_defaults(
        &schema(),
        &object(
            json!({"redis": {"url": "redis://r"}, "hashTag": "a", "durability": {"mode": "replicated"}}),
        ),
    );
    assert_eq!(defaulted["spec"]["durability"]["replicas"], 1);
    assert_eq!(defaulted["spec"]["durability"]["timeout"], "1s");
}

#[test]
fn the_sentinels_are_immutable_but_their_password_is_not() {
    let old = object(json!({
        "redis": {"sentinel": {"addresses": ["s-0:26379"], "masterName": "mymaster"}},
        "hashTag": "a",
    }));
    for (patch, message) in [
        (
            json!({"redis": {"sentinel": {"masterName": "other"}}}),
            "redis.sentinel (its addresses and masterName) is immutable",
        ),
        (
            json!({"redis": {"sentinel": {"addresses": ["s-9:26379"]}}}),
            "redis.sentinel (its addresses and masterName) is immutable",
        ),
        (
            json!({"redis": {"sentinel": null, "url": "redis://r:6379"}}),
            "redis.sentinel (its addresses and masterName) is immutable",
        ),
    ] {
        let mut new = old.clone();
        json_patch_merge(&mut new["spec"], &patch);
        let errors = cel(&new, Some(&old)).expect_err(&format!("{patch} must be refused"));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{patch}: expected {message:?}, got {errors:?}"
        );
    }
    // From a URL to the Sentinels: refused too (the keys would move).
    let old_url = object(json!({"redis": {"url": "redis://r:6379"}, "hashTag": "a"}));
    let mut new = old_url.clone();
    json_patch_merge(
        &mut new["spec"],
        &json!({"redis": {"url": null, "sentinel": {"addresses": ["s"], "masterName": "m"}}}),
    );
    assert!(cel(&new, Some(&old_url)).is_err());
    // A new Sentinel password, user or durability: allowed.
    let mut new = old.clone();
    json_patch_merge(
        &mut new["spec"],
        &json!({"redis": {"sentinel": {"passwordSecretRef": {"name": "s", "key": "p"}},
                          "usernameSecretRef": {"name": "u", "key": "u"},
                          "passwordSecretRef": {"name": "u", "key": "p"}},
                "durability": {"mode": "replicated"}}),
    );
    assert_eq!(cel(&new, Some(&old)), Ok(()));
}
