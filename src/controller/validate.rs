//! Spec → plan: everything the reconciler needs from a `JobQueue` spec, checked.
//!
//! The CRD's schema and CEL rules refuse most bad specs at the API server; this is the
//! same check on the controller's side, for what slips past (an older API server, a CRD
//! installed without its rules, an edit made before the rules existed). It is pure: a
//! spec in, a plan or the first problem (naming its field) out. [`plan`] checks the
//! spec part by part: the Redis endpoint, the key names, the queue settings, the reaper
//! and the workers' scaling.
//!
//! The parts are not equal. The endpoint, the key names, the queue settings and the
//! reaper are what reaping needs: a problem there fails the plan as a whole. The
//! workers' scaling is not: a problem in `spec.workers` leaves the plan standing, with
//! no scale policy and the problem in [`QueuePlan::invalid_workers`], so the queue is
//! still reaped and counted while scaling waits for a fixed spec.

use std::str::FromStr;
use std::time::Duration;

use super::scaling::{Per, RateKind, RateLimit, ScalePolicy, ScaleUp, Select, TargetRef};
use crate::crd::{
    DurabilityMode, DurabilitySpec, JobQueueSpec, MAX_SPEC_PARTITIONS, RedisSpec, ScaleUpRules,
    ScalingPolicyType, SecretKeySelector, SelectPolicy, WorkersSpec,
};
use crate::queue::auto_visibility::AutoBounds;
use crate::queue::{Durability, JobOptions, MAX_BATCH, PriorityMode, QueueSettings};

/// A spec the controller cannot act on, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidSpec {
    /// The field's path, e.g. `spec.visibilityTimeout`.
    pub field: &'static str,
    pub reason: String,
}

/// Where the Redis URL comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlSource {
    Inline(String),
    Secret(SecretKeySelector),
    /// No URL: the primary the Sentinels at `addresses` name for `master_name`.
    Sentinel {
        addresses: Vec<String>,
        master_name: String,
    },
}

/// How to reach the queue's Redis, before Secrets are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPlan {
    pub url: UrlSource,
    /// The ACL user.
    pub username: Option<SecretKeySelector>,
    pub password: Option<SecretKeySelector>,
    /// The Sentinels' own password (with [`UrlSource::Sentinel`]).
    pub sentinel_password: Option<SecretKeySelector>,
    pub cluster: bool,
    /// Force `rediss://` (through Sentinel: TLS to the data nodes).
    pub tls: bool,
    pub ca: Option<SecretKeySelector>,
    /// The client certificate and its key, for mutual TLS (both or neither).
    pub client_cert: Option<SecretKeySelector>,
    pub client_key: Option<SecretKeySelector>,
    /// The name the server's certificate is checked for, instead of the URL's host.
    pub server_name: Option<String>,
}

impl EndpointPlan {
    /// The Secrets to read, each once, in a stable order.
    pub fn secret_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        let refs = [
            match &self.url {
                UrlSource::Secret(s) => Some(s),
                UrlSource::Inline(_) | UrlSource::Sentinel { .. } => None,
            },
            self.username.as_ref(),
            self.password.as_ref(),
            self.sentinel_password.as_ref(),
            self.ca.as_ref(),
            self.client_cert.as_ref(),
            self.client_key.as_ref(),
        ];
        for r in refs.into_iter().flatten() {
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
        names
    }
}

/// A checked spec.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePlan {
    pub endpoint: EndpointPlan,
    pub prefix: String,
    pub tag: String,
    /// What goes into the queue's `meta` hash.
    pub settings: QueueSettings,
    /// Time between reconciles.
    pub interval: Duration,
    /// Expired leases per reaper call.
    pub batch: usize,
    /// What the queue's writes wait for (`spec.durability`; primary without it).
    pub durability: Durability,
    /// How many partitions new jobs are spread over (`spec.partitions`, 1 to 256).
    pub partitions: usize,
    /// `spec.paused`: the queue's pause to hold (its claims stop while true), or `None`
    /// to leave it to `jobqueue pause` / `resume` and the console.
    pub paused: Option<bool>,
    /// How to scale the workers, when the spec names them (and they are valid).
    pub workers: Option<ScalePolicy>,
    /// Why `spec.workers` cannot be acted on, when it cannot: then `workers` is `None`
    /// and the operator does not scale, but the rest of the plan is in force.
    pub invalid_workers: Option<InvalidSpec>,
    /// `spec.visibilityTimeout: auto`: the bounds the operator tunes the value within
    /// (`settings.visibility_timeout` is then only where it starts).
    pub auto: Option<AutoBounds>,
    /// `spec.schedules`, checked (cron expression and time zone parsed).
    pub schedules: Vec<crate::queue::schedule::Schedule>,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> InvalidSpec {
    InvalidSpec {
        field,
        reason: reason.into(),
    }
}

/// Parse a Go duration (`60s`, `1m30s`, `500ms`); `positive` refuses zero.
pub fn parse_duration(
    field: &'static str,
    text: &str,
    positive: bool,
) -> Result<Duration, InvalidSpec> {
    let parsed = kube::core::Duration::from_str(text.trim()).map_err(|e| {
        invalid(
            field,
            format!("{text:?} is not a duration ({e}); write e.g. 60s, 1m30s or 500ms"),
        )
    })?;
    if parsed.is_negative() {
        return Err(invalid(field, format!("{text:?} is negative")));
    }
    let d: Duration = parsed.into();
    if positive && d.is_zero() {
        return Err(invalid(field, format!("{text:?} must be above zero")));
    }
    Ok(d)
}

fn check_tag(field: &'static str, text: &str, what: &str) -> Result<(), InvalidSpec> {
    if text.is_empty() {
        return Err(invalid(field, format!("the {what} must not be empty")));
    }
    if text.contains(['{', '}']) {
        return Err(invalid(
            field,
            format!("{text:?} must not contain braces (write `emails`, not `{{emails}}`)"),
        ));
    }
    Ok(())
}

fn check_secret_ref(field: &'static str, r: &SecretKeySelector) -> Result<(), InvalidSpec> {
    if r.name.is_empty() || r.key.is_empty() {
        return Err(invalid(field, "both name and key must be set"));
    }
    Ok(())
}

/// Check a spec and turn it into a plan. The parts reaping needs are checked in the
/// spec's order, and the first problem is the answer; `spec.workers` is checked on its
/// own, and its problem goes into the plan ([`QueuePlan::invalid_workers`]).
pub fn plan(spec: &JobQueueSpec) -> Result<QueuePlan, InvalidSpec> {
    let endpoint = endpoint_plan(&spec.redis)?;
    check_tag("spec.hashTag", &spec.hash_tag, "hash tag")?;
    check_tag("spec.keyPrefix", &spec.key_prefix, "key prefix")?;
    let settings = queue_settings(spec)?;
    let (interval, batch) = reaper(spec)?;
    let durability = durability(spec.durability.as_ref())?;
    let partitions = partitions(spec)?;
    let auto = auto_bounds(spec)?;
    // The client's own check, so the plan never holds settings `configure` would refuse.
    settings
        .validate()
        .map_err(|e| invalid("spec", e.to_string()))?;
    let (workers, invalid_workers) = match spec.workers.as_ref().map(scale_policy) {
        None => (None, None),
        Some(Ok(policy)) => (Some(policy), None),
        Some(Err(problem)) => (None, Some(problem)),
    };

    Ok(QueuePlan {
        endpoint,
        prefix: spec.key_prefix.clone(),
        tag: spec.hash_tag.clone(),
        settings,
        interval,
        batch,
        durability,
        partitions,
        paused: spec.paused,
        workers,
        invalid_workers,
        auto,
        schedules: schedules(spec)?,
    })
}

/// `spec.schedules` as the queue's schedules: a bad rule names its schedule and field.
fn schedules(spec: &JobQueueSpec) -> Result<Vec<crate::queue::schedule::Schedule>, InvalidSpec> {
    use crate::queue::schedule::{Missed, Rule, Schedule, validate_name};
    if !spec.schedules.is_empty() && spec.partitions > 1 {
        return Err(invalid(
            "spec.schedules",
            "a partitioned queue has no schedules (a schedule lives on one queue)",
        ));
    }
    let mut out = Vec::with_capacity(spec.schedules.len());
    for s in &spec.schedules {
        let bad = |e: crate::queue::Error| invalid("spec.schedules", format!("{}: {e}", s.name));
        validate_name(&s.name).map_err(bad)?;
        let rule = match (&s.every, &s.cron) {
            (Some(every), None) => Rule::Every(
                crate::duration::parse(every)
                    .map_err(|e| invalid("spec.schedules", format!("{}: every: {e}", s.name)))?,
            ),
            (None, Some(cron)) => Rule::Cron {
                expr: cron.clone(),
                tz: s.time_zone.clone().unwrap_or_else(|| "UTC".into()),
            },
            _ => {
                return Err(invalid(
                    "spec.schedules",
                    format!("{}: exactly one of every and cron", s.name),
                ));
            }
        };
        rule.validate().map_err(bad)?;
        let options = schedule_options(s)?;
        out.push(Schedule {
            name: s.name.clone(),
            rule,
            payload: s.payload.clone().into_bytes(),
            options,
            missed: Missed::parse(s.missed.as_deref().unwrap_or("skip")).map_err(bad)?,
            paused: false,
        });
    }
    Ok(out)
}

/// The options of every job a `spec.schedules` entry fires, checked as enqueue checks
/// them; a bad one names its schedule and field.
fn schedule_options(s: &crate::crd::ScheduleSpec) -> Result<JobOptions, InvalidSpec> {
    let duration = |field: &str, text: &Option<String>, positive: bool| {
        text.as_deref()
            .map(|t| {
                parse_duration("spec.schedules", t, positive).map_err(|e| {
                    invalid(
                        "spec.schedules",
                        format!("{}: {field}: {}", s.name, e.reason),
                    )
                })
            })
            .transpose()
    };
    let options = JobOptions {
        max_attempts: s.max_attempts,
        backoff_initial: duration("backoffInitial", &s.backoff_initial, false)?,
        backoff_max: duration("backoffMax", &s.backoff_max, false)?,
        backoff_multiplier: s.backoff_multiplier,
        priority: s.priority,
        timeout: duration("timeout", &s.timeout, true)?,
        visibility: duration("visibility", &s.visibility, true)?,
        rate_key: s.rate_key.clone(),
        notify: None,
    };
    options
        .validate()
        .map_err(|e| invalid("spec.schedules", format!("{}: {e}", s.name)))?;
    Ok(options)
}

/// `spec.visibilityTimeout: auto` and `spec.visibilityAuto`: the bounds, checked.
fn auto_bounds(spec: &JobQueueSpec) -> Result<Option<AutoBounds>, InvalidSpec> {
    if spec.visibility_timeout != "auto" {
        if spec.visibility_auto.is_some() {
            return Err(invalid(
                "spec.visibilityAuto",
                "applies to visibilityTimeout: auto only",
            ));
        }
        return Ok(None);
    }
    if spec.partitions > 1 {
        return Err(invalid(
            "spec.visibilityTimeout",
            "auto is for a queue of one partition (spec.partitions is above 1): give a duration",
        ));
    }
    let bounds = match &spec.visibility_auto {
        None => AutoBounds::default(),
        Some(a) => AutoBounds {
            min: parse_duration("spec.visibilityAuto.min", &a.min, true)?,
            max: parse_duration("spec.visibilityAuto.max", &a.max, true)?,
            margin: a.margin,
        },
    };
    bounds.validate().map_err(|e| {
        let text = e.to_string();
        let field = if text.contains("margin") {
            "spec.visibilityAuto.margin"
        } else if text.contains("min") && !text.contains("auto max") {
            "spec.visibilityAuto.min"
        } else {
            "spec.visibilityAuto.max"
        };
        invalid(field, text)
    })?;
    Ok(Some(bounds))
}

/// `spec.partitions`: 1 to 256, and a tag found for each partition (each partition's
/// tag, `hashTag~k`, must be a valid tag too).
fn partitions(spec: &JobQueueSpec) -> Result<usize, InvalidSpec> {
    let n = spec.partitions;
    if !(1..=MAX_SPEC_PARTITIONS).contains(&n) {
        return Err(invalid(
            "spec.partitions",
            format!("{n} is not between 1 and {MAX_SPEC_PARTITIONS}"),
        ));
    }
    let n = n as usize;
    crate::queue::partition_tags(&spec.hash_tag, n)
        .map_err(|e| invalid("spec.partitions", e.to_string()))?;
    Ok(n)
}

/// `spec.redis`: exactly one of a URL, its Secret and the Sentinels; Secret references
/// that name a key; a client certificate with its key.
fn endpoint_plan(redis: &RedisSpec) -> Result<EndpointPlan, InvalidSpec> {
    let url = match (&redis.url, &redis.url_secret_ref, &redis.sentinel) {
        (Some(url), None, None) => {
            let url = url.trim();
            let schemes_ok = url
                .split(',')
                .map(str::trim)
                .all(|u| u.starts_with("redis://") || u.starts_with("rediss://"));
            if url.is_empty() || !schemes_ok {
                return Err(invalid(
                    "spec.redis.url",
                    "must start with redis:// or rediss:// (TLS)",
                ));
            }
            UrlSource::Inline(url.to_string())
        }
        (None, Some(secret), None) => {
            check_secret_ref("spec.redis.urlSecretRef", secret)?;
            UrlSource::Secret(secret.clone())
        }
        (None, None, Some(sentinel)) => {
            if redis.cluster {
                return Err(invalid(
                    "spec.redis.sentinel",
                    "sentinel and cluster exclude each other: a Cluster fails over by itself, \
                     give its seed nodes in url",
                ));
            }
            if sentinel.addresses.is_empty() {
                return Err(invalid(
                    "spec.redis.sentinel.addresses",
                    "give at least one Sentinel (host:port)",
                ));
            }
            for address in &sentinel.addresses {
                check_sentinel_address(address)?;
            }
            if sentinel.master_name.trim().is_empty() {
                return Err(invalid(
                    "spec.redis.sentinel.masterName",
                    "must not be empty (the name of `sentinel monitor NAME ...`)",
                ));
            }
            UrlSource::Sentinel {
                addresses: sentinel.addresses.iter().map(|a| a.trim().into()).collect(),
                master_name: sentinel.master_name.trim().to_string(),
            }
        }
        _ => {
            return Err(invalid(
                "spec.redis",
                "exactly one of url, urlSecretRef and sentinel must be set",
            ));
        }
    };
    let sentinel_password = redis
        .sentinel
        .as_ref()
        .and_then(|s| s.password_secret_ref.clone());
    if let Some(p) = &sentinel_password {
        check_secret_ref("spec.redis.sentinel.passwordSecretRef", p)?;
    }
    if let Some(u) = &redis.username_secret_ref {
        check_secret_ref("spec.redis.usernameSecretRef", u)?;
        // Through Sentinel the password can only come from its Secret.
        if redis.password_secret_ref.is_none() && redis.sentinel.is_some() {
            return Err(invalid(
                "spec.redis.usernameSecretRef",
                "an ACL user needs a password: set spec.redis.passwordSecretRef",
            ));
        }
    }
    if let Some(p) = &redis.password_secret_ref {
        check_secret_ref("spec.redis.passwordSecretRef", p)?;
    }
    let tls = redis.tls.clone().unwrap_or_default();
    if let Some(ca) = &tls.ca_secret_ref {
        check_secret_ref("spec.redis.tls.caSecretRef", ca)?;
    }
    match (&tls.client_cert_secret_ref, &tls.client_key_secret_ref) {
        (Some(cert), Some(key)) => {
            check_secret_ref("spec.redis.tls.clientCertSecretRef", cert)?;
            check_secret_ref("spec.redis.tls.clientKeySecretRef", key)?;
        }
        (Some(_), None) => {
            return Err(invalid(
                "spec.redis.tls.clientKeySecretRef",
                "a client certificate needs its private key: set clientKeySecretRef too",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "spec.redis.tls.clientCertSecretRef",
                "a client key needs its certificate: set clientCertSecretRef too",
            ));
        }
        (None, None) => {}
    }
    if let Some(name) = &tls.server_name {
        let field = "spec.redis.tls.serverName";
        if redis.sentinel.is_some() {
            return Err(invalid(
                field,
                "not with spec.redis.sentinel: each data node is checked for the address the \
                 Sentinels name (make the nodes announce names their certificates list)",
            ));
        }
        if redis.cluster {
            return Err(invalid(
                field,
                "not with spec.redis.cluster: each node is checked for the address it \
                 announces (set cluster-announce-hostname to a name its certificate lists)",
            ));
        }
        if rustls::pki_types::ServerName::try_from(name.trim()).is_err() {
            return Err(invalid(field, "not a DNS name or an IP address"));
        }
    }
    Ok(EndpointPlan {
        url,
        username: redis.username_secret_ref.clone(),
        password: redis.password_secret_ref.clone(),
        sentinel_password,
        cluster: redis.cluster,
        tls: redis.tls.is_some(),
        ca: tls.ca_secret_ref,
        client_cert: tls.client_cert_secret_ref,
        client_key: tls.client_key_secret_ref,
        server_name: tls.server_name.map(|n| n.trim().to_string()),
    })
}

/// One of `spec.redis.sentinel.addresses`: `host` or `host:port`, not a URL.
fn check_sentinel_address(address: &str) -> Result<(), InvalidSpec> {
    let field = "spec.redis.sentinel.addresses";
    let address = address.trim();
    if address.contains("://") {
        return Err(invalid(
            field,
            format!("{address:?} is a URL: write host:port (e.g. redis-sentinel:26379)"),
        ));
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') => (host, Some(port)),
        _ => (address, None),
    };
    if host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .is_empty()
    {
        return Err(invalid(field, format!("{address:?} has no host")));
    }
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(invalid(
            field,
            format!("{address:?}: port {port:?} is not a number from 0 to 65535"),
        ));
    }
    Ok(())
}

/// `spec.durability`: primary, or replicated with at least one replica and a timeout.
fn durability(spec: Option<&DurabilitySpec>) -> Result<Durability, InvalidSpec> {
    let Some(spec) = spec else {
        return Ok(Durability::Primary);
    };
    match spec.mode {
        DurabilityMode::Primary => Ok(Durability::Primary),
        DurabilityMode::Replicated => {
            if spec.replicas < 1 {
                return Err(invalid(
                    "spec.durability.replicas",
                    "must be at least 1 (or use mode: primary)",
                ));
            }
            let timeout = parse_duration("spec.durability.timeout", &spec.timeout, true)?;
            if timeout < Duration::from_millis(1) {
                return Err(invalid("spec.durability.timeout", "must be at least 1ms"));
            }
            Ok(Durability::Replicated {
                replicas: spec.replicas,
                timeout,
            })
        }
    }
}

/// What goes into the queue's `meta` hash: the lease, the retries and the retention.
/// Each field checked on its own; [`plan`] runs the client's check on the whole.
fn queue_settings(spec: &JobQueueSpec) -> Result<QueueSettings, InvalidSpec> {
    // auto: the value starts from the default and is the operator's to set after
    let visibility_timeout = if spec.visibility_timeout == "auto" {
        QueueSettings::default().visibility_timeout
    } else {
        parse_duration("spec.visibilityTimeout", &spec.visibility_timeout, true)?
    };
    if spec.max_attempts < 1 {
        return Err(invalid("spec.maxAttempts", "must be at least 1"));
    }
    let backoff_initial = parse_duration("spec.retry.initial", &spec.retry.initial, true)?;
    let backoff_max = parse_duration("spec.retry.max", &spec.retry.max, true)?;
    if backoff_max < backoff_initial {
        return Err(invalid(
            "spec.retry.max",
            format!(
                "{} is below retry.initial ({})",
                spec.retry.max, spec.retry.initial
            ),
        ));
    }
    let multiplier = spec.retry.multiplier;
    if !multiplier.is_finite() || multiplier < 1.0 {
        return Err(invalid(
            "spec.retry.multiplier",
            format!("{multiplier} must be a number of at least 1"),
        ));
    }
    let completed_retention =
        parse_duration("spec.completedRetention", &spec.completed_retention, false)?;
    let dead_retention = parse_duration(
        "spec.deadLetter.retention",
        &spec.dead_letter.retention,
        false,
    )?;
    Ok(QueueSettings {
        visibility_timeout,
        max_attempts: spec.max_attempts,
        backoff_initial,
        backoff_max,
        backoff_multiplier: multiplier,
        completed_retention,
        dead_retention,
        dead_max_len: spec.dead_letter.max_length,
        rate_limit: rate_limit("spec.rateLimit", spec.rate_limit.as_ref())?,
        rate_limit_per_key: rate_limit("spec.rateLimitPerKey", spec.rate_limit_per_key.as_ref())?,
        priority_mode: spec
            .priority_mode
            .as_deref()
            .map(PriorityMode::parse)
            .transpose()
            .map_err(|reason| invalid("spec.priorityMode", reason))?
            .unwrap_or_default(),
    })
}

/// `spec.rateLimit` or `spec.rateLimitPerKey`, checked as the scripts take it.
fn rate_limit(
    field: &'static str,
    spec: Option<&crate::crd::RateLimitSpec>,
) -> Result<Option<crate::queue::RateLimit>, InvalidSpec> {
    let Some(spec) = spec else { return Ok(None) };
    let per = parse_duration(field, &spec.per, true)?;
    crate::queue::RateLimit::new(spec.max, per)
        .map(Some)
        .map_err(|reason| invalid(field, reason))
}

/// `spec.reaper`: the time between reconciles and the leases per reaper call.
fn reaper(spec: &JobQueueSpec) -> Result<(Duration, usize), InvalidSpec> {
    let interval = parse_duration("spec.reaper.interval", &spec.reaper.interval, true)?;
    let batch = spec.reaper.batch_size as usize;
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(invalid(
            "spec.reaper.batchSize",
            format!("{batch} is not between 1 and {MAX_BATCH}"),
        ));
    }
    Ok((interval, batch))
}

/// `spec.workers`: the bounds, the backlog per replica, the steps and the target.
fn scale_policy(workers: &WorkersSpec) -> Result<ScalePolicy, InvalidSpec> {
    if workers.min_replicas < 0 {
        return Err(invalid("spec.workers.minReplicas", "must not be negative"));
    }
    if workers.max_replicas < 1 {
        return Err(invalid("spec.workers.maxReplicas", "must be at least 1"));
    }
    if workers.min_replicas > workers.max_replicas {
        return Err(invalid(
            "spec.workers.minReplicas",
            format!(
                "{} exceeds maxReplicas ({})",
                workers.min_replicas, workers.max_replicas
            ),
        ));
    }
    if workers.target_backlog_per_replica < 1 {
        return Err(invalid(
            "spec.workers.targetBacklogPerReplica",
            "must be at least 1",
        ));
    }
    let stabilization = parse_duration(
        "spec.workers.scaleDownStabilization",
        &workers.scale_down_stabilization,
        false,
    )?;
    let r = &workers.scale_target_ref;
    let target = TargetRef::parse(&r.api_version, &r.kind, &r.name)
        .map_err(|reason| invalid("spec.workers.scaleTargetRef", reason))?;
    Ok(ScalePolicy {
        target,
        min_replicas: workers.min_replicas,
        max_replicas: workers.max_replicas,
        target_backlog_per_replica: u64::from(workers.target_backlog_per_replica),
        activation_backlog: u64::from(workers.activation_backlog),
        scale_down_stabilization: stabilization,
        scale_up: scale_up(workers)?,
        concurrency: workers.concurrency.max(1),
        rate_cap: None,
    })
}

/// `spec.workers.behavior.scaleUp`, or the deprecated `maxScaleUpStep` without it, or
/// the HPA's defaults.
fn scale_up(workers: &WorkersSpec) -> Result<ScaleUp, InvalidSpec> {
    if let Some(rules) = workers.behavior.as_ref().and_then(|b| b.scale_up.as_ref()) {
        return scale_up_rules(rules);
    }
    match workers.max_scale_up_step {
        Some(step) if step < 1 => Err(invalid("spec.workers.maxScaleUpStep", "must be at least 1")),
        Some(step) => Ok(ScaleUp::per_reconcile(step)),
        None => Ok(ScaleUp::default()),
    }
}

fn scale_up_rules(rules: &ScaleUpRules) -> Result<ScaleUp, InvalidSpec> {
    const POLICIES: &str = "spec.workers.behavior.scaleUp.policies";
    let select = match rules.select_policy {
        SelectPolicy::Max => Select::Max,
        SelectPolicy::Min => Select::Min,
        SelectPolicy::Disabled => Select::Disabled,
    };
    if rules.policies.is_empty() && select != Select::Disabled {
        return Err(invalid(
            POLICIES,
            "must not be empty unless selectPolicy is Disabled",
        ));
    }
    let mut policies = Vec::with_capacity(rules.policies.len());
    for p in &rules.policies {
        if p.value < 1 {
            return Err(invalid(
                POLICIES,
                format!("value {} must be at least 1", p.value),
            ));
        }
        if !(1..=1800).contains(&p.period_seconds) {
            return Err(invalid(
                POLICIES,
                format!(
                    "periodSeconds {} is not between 1 and 1800",
                    p.period_seconds
                ),
            ));
        }
        policies.push(RateLimit {
            kind: match p.type_ {
                ScalingPolicyType::Pods => RateKind::Pods,
                ScalingPolicyType::Percent => RateKind::Percent,
            },
            value: p.value,
            per: Per::Period(Duration::from_secs(p.period_seconds.unsigned_abs().into())),
        });
    }
    let window = rules.stabilization_window_seconds;
    if !(0..=3600).contains(&window) {
        return Err(invalid(
            "spec.workers.behavior.scaleUp.stabilizationWindowSeconds",
            format!("{window} is not between 0 and 3600"),
        ));
    }
    Ok(ScaleUp {
        policies,
        select,
        stabilization: Duration::from_secs(window.unsigned_abs().into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ScaleTargetRef, TlsSpec, WorkersSpec};

    fn spec() -> JobQueueSpec {
        JobQueueSpec::new("redis://redis:6379", "emails")
    }

    fn workers() -> WorkersSpec {
        WorkersSpec {
            scale_target_ref: ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "w".into(),
            },
            min_replicas: 0,
            max_replicas: 8,
            concurrency: 1,
            target_backlog_per_replica: 10,
            activation_backlog: 2,
            scale_down_stabilization: "2m".into(),
            max_scale_up_step: Some(4),
            behavior: None,
            fallback: None,
            on_delete: crate::crd::OnDelete::Keep,
        }
    }

    #[test]
    fn workers_become_a_scale_policy() {
        let mut s = spec();
        assert_eq!(plan(&s).unwrap().workers, None);
        s.workers = Some(workers());
        let policy = plan(&s).unwrap().workers.expect("a policy");
        assert_eq!(policy.target.to_string(), "Deployment/w");
        assert_eq!(policy.target.group, "apps");
        assert_eq!((policy.min_replicas, policy.max_replicas), (0, 8));
        assert_eq!(policy.target_backlog_per_replica, 10);
        assert_eq!(policy.activation_backlog, 2);
        assert_eq!(policy.scale_down_stabilization, Duration::from_secs(120));
        assert_eq!(policy.scale_up, ScaleUp::per_reconcile(4));
    }

    fn field_of(spec: &JobQueueSpec) -> &'static str {
        plan(spec).expect_err("the spec is invalid").field
    }

    /// The field a spec's problem names: the plan's error, or (for `spec.workers`,
    /// which leaves the plan standing) its workers' problem.
    fn problem_of(spec: &JobQueueSpec) -> &'static str {
        match plan(spec) {
            Err(e) => e.field,
            Ok(p) => {
                p.invalid_workers
                    .unwrap_or_else(|| panic!("the spec is invalid: {spec:?}"))
                    .field
            }
        }
    }

    #[test]
    fn the_priority_mode_is_a_setting_strict_when_absent() {
        let mut s = spec();
        assert_eq!(
            plan(&s).unwrap().settings.priority_mode,
            PriorityMode::Strict
        );
        for (text, mode) in [
            ("strict", PriorityMode::Strict),
            ("weighted", PriorityMode::Weighted),
        ] {
            s.priority_mode = Some(text.into());
            assert_eq!(plan(&s).unwrap().settings.priority_mode, mode);
        }
        s.priority_mode = Some("fair".into());
        let e = plan(&s).expect_err("not a mode");
        assert_eq!(
            (e.field, e.reason.as_str()),
            (
                "spec.priorityMode",
                "\"fair\" is not a priority mode: strict or weighted"
            )
        );
    }

    fn schedule(options: serde_json::Value) -> crate::crd::ScheduleSpec {
        let mut v = serde_json::json!({"name": "hourly", "every": "1h", "payload": "{}"});
        if let (Some(v), serde_json::Value::Object(options)) = (v.as_object_mut(), options) {
            v.extend(options);
        }
        serde_json::from_value(v).expect("a schedule")
    }

    #[test]
    fn a_schedules_job_options_are_checked_as_enqueue_checks_them() {
        let mut s = spec();
        s.schedules = vec![schedule(serde_json::json!({
            "maxAttempts": 3, "backoffInitial": "250ms", "backoffMax": "1m",
            "backoffMultiplier": 1.5, "priority": 7, "timeout": "2m", "visibility": "30s",
            "rateKey": "customer-42"
        }))];
        assert_eq!(
            plan(&s).unwrap().schedules[0].options,
            JobOptions {
                max_attempts: Some(3),
                backoff_initial: Some(Duration::from_millis(250)),
                backoff_max: Some(Duration::from_secs(60)),
                backoff_multiplier: Some(1.5),
                priority: Some(7),
                timeout: Some(Duration::from_secs(120)),
                visibility: Some(Duration::from_secs(30)),
                rate_key: Some("customer-42".into()),
                notify: None,
            }
        );
        s.schedules = vec![schedule(serde_json::json!({}))];
        assert!(plan(&s).unwrap().schedules[0].options.is_empty());
        let cases = [
            (
                serde_json::json!({"priority": 12}),
                "hourly: invalid priority: 12 is not between 0 and 9",
            ),
            (
                serde_json::json!({"maxAttempts": 0}),
                "hourly: invalid max attempts: 0 is not between 1 and 1000000",
            ),
            (
                serde_json::json!({"backoffMultiplier": 0.5}),
                "hourly: invalid backoff multiplier: 0.5 is not a number from 1 to 1000",
            ),
            (
                serde_json::json!({"timeout": "0s"}),
                "hourly: timeout: \"0s\" must be above zero",
            ),
            (
                serde_json::json!({"visibility": "soon"}),
                "hourly: visibility: \"soon\" is not a duration",
            ),
            (
                serde_json::json!({"backoffInitial": "-1s"}),
                "hourly: backoffInitial: \"-1s\" is negative",
            ),
            (
                serde_json::json!({"backoffInitial": "1m", "backoffMax": "1s"}),
                "hourly: invalid backoff max: 1s is below the initial backoff 1m",
            ),
            (
                serde_json::json!({"rateKey": ""}),
                "hourly: invalid rate key: 0 bytes",
            ),
            (
                serde_json::json!({"timeout": "500us"}),
                "hourly: invalid timeout: 500µs is too short (at least 1ms)",
            ),
        ];
        for (options, says) in cases {
            s.schedules = vec![schedule(options.clone())];
            let e = plan(&s).expect_err(&format!("{options} is refused"));
            assert_eq!(e.field, "spec.schedules", "{options}");
            assert!(e.reason.starts_with(says), "{options}: {}", e.reason);
        }
    }

    #[test]
    fn defaults_give_the_scripts_defaults() {
        let plan = plan(&spec()).unwrap();
        assert_eq!(plan.settings, QueueSettings::default());
        assert_eq!(plan.interval, Duration::from_secs(10));
        assert_eq!(plan.batch, 250);
        assert_eq!(plan.prefix, "jq");
        assert_eq!(
            plan.endpoint.url,
            UrlSource::Inline("redis://redis:6379".into())
        );
        assert!(!plan.endpoint.tls);
    }

    #[test]
    fn visibility_auto_takes_its_bounds_and_names_a_bad_one() {
        let mut s = spec();
        assert_eq!(plan(&s).unwrap().auto, None);
        s.visibility_timeout = "auto".into();
        let p = plan(&s).unwrap();
        assert_eq!(p.auto, Some(AutoBounds::default()));
        s.visibility_auto = Some(crate::crd::VisibilityAutoSpec {
            min: "10s".into(),
            max: "5m".into(),
            margin: 3.0,
        });
        let b = plan(&s).unwrap().auto.unwrap();
        assert_eq!(
            (b.min, b.max, b.margin),
            (Duration::from_secs(10), Duration::from_secs(300), 3.0)
        );
        let refused = |f: &dyn Fn(&mut JobQueueSpec)| {
            let mut s = spec();
            s.visibility_timeout = "auto".into();
            s.visibility_auto = Some(crate::crd::VisibilityAutoSpec {
                min: "5s".into(),
                max: "15m".into(),
                margin: 2.0,
            });
            f(&mut s);
            plan(&s).unwrap_err().to_string()
        };
        let err = refused(&|s| s.visibility_auto.as_mut().unwrap().margin = 0.5);
        assert!(err.starts_with("spec.visibilityAuto.margin: "), "{err}");
        let err = refused(&|s| s.visibility_auto.as_mut().unwrap().max = "1s".into());
        assert!(err.starts_with("spec.visibilityAuto.max: "), "{err}");
        assert!(err.contains("below auto min"), "{err}");
        let err = refused(&|s| s.visibility_auto.as_mut().unwrap().min = "soon".into());
        assert!(
            err.starts_with("spec.visibilityAuto.min: \"soon\""),
            "{err}"
        );
        let err = refused(&|s| s.partitions = 4);
        assert!(
            err.starts_with("spec.visibilityTimeout: auto is for a queue of one partition"),
            "{err}"
        );
        let err = refused(&|s| s.visibility_timeout = "30s".into());
        assert!(
            err.starts_with("spec.visibilityAuto: applies to visibilityTimeout: auto only"),
            "{err}"
        );
    }

    #[test]
    fn durations_are_go_durations() {
        let mut s = spec();
        s.visibility_timeout = "1m30s".into();
        s.completed_retention = "500ms".into();
        let plan = plan(&s).unwrap();
        assert_eq!(plan.settings.visibility_timeout, Duration::from_secs(90));
        assert_eq!(
            plan.settings.completed_retention,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        type Edit = Box<dyn Fn(&mut JobQueueSpec)>;
        let cases: Vec<(&str, Edit)> = vec![
            (
                "spec.visibilityTimeout",
                Box::new(|s| s.visibility_timeout = "0s".into()),
            ),
            (
                "spec.visibilityTimeout",
                Box::new(|s| s.visibility_timeout = "soon".into()),
            ),
            (
                "spec.visibilityTimeout",
                Box::new(|s| s.visibility_timeout = "-5s".into()),
            ),
            (
                "spec.completedRetention",
                Box::new(|s| s.completed_retention = "-1s".into()),
            ),
            ("spec.hashTag", Box::new(|s| s.hash_tag = "".into())),
            ("spec.hashTag", Box::new(|s| s.hash_tag = "{emails}".into())),
            ("spec.keyPrefix", Box::new(|s| s.key_prefix = "a}".into())),
            ("spec.maxAttempts", Box::new(|s| s.max_attempts = 0)),
            ("spec.retry.max", Box::new(|s| s.retry.max = "100ms".into())),
            (
                "spec.retry.multiplier",
                Box::new(|s| s.retry.multiplier = 0.5),
            ),
            (
                "spec.retry.multiplier",
                Box::new(|s| s.retry.multiplier = f64::NAN),
            ),
            (
                "spec.reaper.interval",
                Box::new(|s| s.reaper.interval = "0s".into()),
            ),
            (
                "spec.reaper.batchSize",
                Box::new(|s| s.reaper.batch_size = 0),
            ),
            (
                "spec.reaper.batchSize",
                Box::new(|s| s.reaper.batch_size = 1001),
            ),
            ("spec.partitions", Box::new(|s| s.partitions = 0)),
            ("spec.partitions", Box::new(|s| s.partitions = 257)),
            (
                "spec.partitions",
                // A tag of 256 bytes leaves no room for a partition's `~k`.
                Box::new(|s| {
                    s.hash_tag = "t".repeat(256);
                    s.partitions = 4
                }),
            ),
            (
                "spec.redis",
                Box::new(|s| {
                    s.redis.url_secret_ref = Some(SecretKeySelector {
                        name: "r".into(),
                        key: "url".into(),
                    })
                }),
            ),
            ("spec.redis", Box::new(|s| s.redis.url = None)),
            (
                "spec.redis.url",
                Box::new(|s| s.redis.url = Some("http://redis".into())),
            ),
            (
                "spec.redis.passwordSecretRef",
                Box::new(|s| {
                    s.redis.password_secret_ref = Some(SecretKeySelector {
                        name: "r".into(),
                        key: "".into(),
                    })
                }),
            ),
            (
                "spec.workers.minReplicas",
                Box::new(|s| {
                    s.workers = Some(WorkersSpec {
                        min_replicas: 5,
                        max_replicas: 2,
                        ..workers()
                    })
                }),
            ),
            (
                "spec.workers.maxScaleUpStep",
                Box::new(|s| {
                    s.workers = Some(WorkersSpec {
                        max_scale_up_step: Some(0),
                        ..workers()
                    })
                }),
            ),
            (
                "spec.workers.scaleDownStabilization",
                Box::new(|s| {
                    s.workers = Some(WorkersSpec {
                        scale_down_stabilization: "later".into(),
                        ..workers()
                    })
                }),
            ),
            (
                "spec.workers.scaleTargetRef",
                Box::new(|s| {
                    let mut w = workers();
                    w.scale_target_ref.api_version = "apps/v1/x".into();
                    s.workers = Some(w);
                }),
            ),
        ];
        for (field, break_it) in cases {
            let mut s = spec();
            break_it(&mut s);
            assert_eq!(problem_of(&s), field, "{s:?}");
            // Only a workers' problem leaves the plan standing.
            assert_eq!(plan(&s).is_ok(), field.starts_with("spec.workers"), "{s:?}");
        }
    }

    #[test]
    fn a_bad_workers_part_leaves_the_reaping_part_in_force() {
        let mut s = spec();
        s.visibility_timeout = "45s".into();
        s.workers = Some(WorkersSpec {
            min_replicas: 5,
            max_replicas: 2,
            ..workers()
        });
        let reaping = plan(&s).expect("a bad spec.workers leaves the reaping part valid");
        assert_eq!(reaping.settings.visibility_timeout, Duration::from_secs(45));
        assert_eq!(
            (reaping.interval, reaping.batch),
            (Duration::from_secs(10), 250)
        );
        assert_eq!(
            reaping.workers, None,
            "no scaling on a refused workers part"
        );
        let problem = reaping
            .invalid_workers
            .expect("the workers' problem is kept");
        assert_eq!(problem.field, "spec.workers.minReplicas");
        assert!(problem.reason.contains("exceeds maxReplicas"), "{problem}");

        // Valid workers: a policy and no problem; none: neither.
        s.workers = Some(workers());
        let plan_ok = plan(&s).unwrap();
        assert!(plan_ok.workers.is_some() && plan_ok.invalid_workers.is_none());
        s.workers = None;
        let plan_none = plan(&s).unwrap();
        assert!(plan_none.workers.is_none() && plan_none.invalid_workers.is_none());

        // A bad part that reaping needs fails the plan, whatever the workers.
        s.workers = Some(WorkersSpec {
            min_replicas: 5,
            max_replicas: 2,
            ..workers()
        });
        s.reaper.interval = "0s".into();
        assert_eq!(field_of(&s), "spec.reaper.interval");
    }

    #[test]
    fn messages_say_what_is_wrong() {
        let mut s = spec();
        s.visibility_timeout = "soon".into();
        let err = plan(&s).unwrap_err().to_string();
        assert!(err.starts_with("spec.visibilityTimeout: \"soon\""), "{err}");
        assert!(err.contains("60s"), "{err}");
    }

    #[test]
    fn secrets_are_listed_once() {
        let mut s = spec();
        s.redis.url = None;
        let r = |key: &str| SecretKeySelector {
            name: "redis".into(),
            key: key.into(),
        };
        s.redis.url_secret_ref = Some(r("url"));
        s.redis.password_secret_ref = Some(r("password"));
        s.redis.tls = Some(TlsSpec {
            ca_secret_ref: Some(SecretKeySelector {
                name: "ca".into(),
                key: "ca.crt".into(),
            }),
            ..TlsSpec::default()
        });
        let plan = plan(&s).unwrap();
        assert_eq!(plan.endpoint.secret_names(), vec!["redis", "ca"]);
        assert!(plan.endpoint.tls);
    }

    #[test]
    fn sentinel_user_client_certificate_and_durability_are_checked_by_field() {
        use crate::crd::{DurabilityMode, DurabilitySpec, SentinelSpec};
        fn sel(name: &str, key: &str) -> Option<SecretKeySelector> {
            Some(SecretKeySelector {
                name: name.into(),
                key: key.into(),
            })
        }
        let sentinel = |addresses: &[&str], master: &str| {
            let mut s = spec();
            s.redis.url = None;
            s.redis.sentinel = Some(SentinelSpec {
                addresses: addresses.iter().map(|a| a.to_string()).collect(),
                master_name: master.into(),
                password_secret_ref: sel("sentinel", "password"),
            });
            s
        };
        // A good one: the Sentinels, their password and the user's Secrets.
        let mut good = sentinel(&["s-0:26379", " s-1 ", "[::1]:5000"], "mymaster");
        good.redis.username_secret_ref = sel("redis", "username");
        good.redis.password_secret_ref = sel("redis", "password");
        good.durability = Some(DurabilitySpec {
            mode: DurabilityMode::Replicated,
            replicas: 2,
            timeout: "500ms".into(),
        });
        let p = plan(&good).unwrap();
        assert_eq!(
            p.endpoint.url,
            UrlSource::Sentinel {
                addresses: vec!["s-0:26379".into(), "s-1".into(), "[::1]:5000".into()],
                master_name: "mymaster".into()
            }
        );
        assert_eq!(p.endpoint.secret_names(), vec!["redis", "sentinel"]);
        assert_eq!(
            p.durability,
            Durability::Replicated {
                replicas: 2,
                timeout: Duration::from_millis(500)
            }
        );
        assert_eq!(plan(&spec()).unwrap().durability, Durability::Primary);

        type Edit = Box<dyn Fn(&mut JobQueueSpec)>;
        let cases: Vec<(&str, &str, Edit)> = vec![
            (
                "spec.redis",
                "exactly one of url, urlSecretRef and sentinel",
                Box::new(|s| s.redis.url = Some("redis://r".into())),
            ),
            (
                "spec.redis.sentinel",
                "exclude each other",
                Box::new(|s| s.redis.cluster = true),
            ),
            (
                "spec.redis.sentinel.addresses",
                "at least one",
                Box::new(|s| s.redis.sentinel.as_mut().unwrap().addresses.clear()),
            ),
            (
                "spec.redis.sentinel.addresses",
                "is a URL",
                Box::new(|s| {
                    s.redis.sentinel.as_mut().unwrap().addresses = vec!["redis://s:26379".into()]
                }),
            ),
            (
                "spec.redis.sentinel.addresses",
                "port \"x\"",
                Box::new(|s| s.redis.sentinel.as_mut().unwrap().addresses = vec!["s:x".into()]),
            ),
            (
                "spec.redis.sentinel.masterName",
                "must not be empty",
                Box::new(|s| s.redis.sentinel.as_mut().unwrap().master_name = " ".into()),
            ),
            (
                "spec.redis.sentinel.passwordSecretRef",
                "both name and key",
                Box::new(|s| s.redis.sentinel.as_mut().unwrap().password_secret_ref = sel("s", "")),
            ),
            (
                "spec.redis.usernameSecretRef",
                "needs a password",
                Box::new(|s| s.redis.username_secret_ref = sel("redis", "username")),
            ),
            (
                "spec.redis.tls.clientKeySecretRef",
                "needs its private key",
                Box::new(|s| {
                    s.redis.tls = Some(TlsSpec {
                        client_cert_secret_ref: sel("c", "tls.crt"),
                        ..TlsSpec::default()
                    })
                }),
            ),
            (
                "spec.redis.tls.clientCertSecretRef",
                "needs its certificate",
                Box::new(|s| {
                    s.redis.tls = Some(TlsSpec {
                        client_key_secret_ref: sel("c", "tls.key"),
                        ..TlsSpec::default()
                    })
                }),
            ),
            (
                "spec.durability.replicas",
                "at least 1",
                Box::new(|s| {
                    s.durability = Some(DurabilitySpec {
                        mode: DurabilityMode::Replicated,
                        replicas: 0,
                        ..DurabilitySpec::default()
                    })
                }),
            ),
            (
                "spec.durability.timeout",
                "not a duration",
                Box::new(|s| {
                    s.durability = Some(DurabilitySpec {
                        mode: DurabilityMode::Replicated,
                        timeout: "soon".into(),
                        ..DurabilitySpec::default()
                    })
                }),
            ),
        ];
        for (field, words, break_it) in cases {
            let mut s = sentinel(&["s-0:26379"], "mymaster");
            break_it(&mut s);
            let err = plan(&s).expect_err(field);
            assert_eq!(err.field, field, "{err}");
            assert!(err.reason.contains(words), "{field}: {err}");
        }
    }

    #[test]
    fn a_tls_server_name_is_for_one_standalone_server_and_must_be_a_name() {
        use crate::crd::SentinelSpec;
        let named = |name: &str| {
            let mut s = JobQueueSpec::new("rediss://10.0.0.7:6380", "emails");
            s.redis.tls = Some(TlsSpec {
                server_name: Some(name.into()),
                ..TlsSpec::default()
            });
            s
        };
        let p = plan(&named(" redis.jobs.example ")).unwrap();
        assert_eq!(
            p.endpoint.server_name.as_deref(),
            Some("redis.jobs.example")
        );
        assert!(p.endpoint.tls);
        assert_eq!(
            plan(&named("10.0.0.7"))
                .unwrap()
                .endpoint
                .server_name
                .as_deref(),
            Some("10.0.0.7")
        );
        assert_eq!(plan(&spec()).unwrap().endpoint.server_name, None);

        let mut cluster = named("redis.jobs.example");
        cluster.redis.cluster = true;
        let mut sentinel = named("redis.jobs.example");
        sentinel.redis.url = None;
        sentinel.redis.sentinel = Some(SentinelSpec {
            addresses: vec!["s-0:26379".into()],
            master_name: "mymaster".into(),
            password_secret_ref: None,
        });
        for (s, words) in [
            (cluster, "not with spec.redis.cluster"),
            (sentinel, "not with spec.redis.sentinel"),
            (named("not a name"), "not a DNS name or an IP address"),
        ] {
            let err = plan(&s).expect_err(words);
            assert_eq!(err.field, "spec.redis.tls.serverName", "{err}");
            assert!(err.reason.contains(words), "{err}");
        }
    }

    #[test]
    fn scale_up_comes_from_behavior_or_the_deprecated_step_or_the_hpa_defaults() {
        use crate::crd::{ScalingPolicy, WorkersBehavior};
        let rules = |policies, select_policy, window| WorkersBehavior {
            scale_up: Some(ScaleUpRules {
                policies,
                select_policy,
                stabilization_window_seconds: window,
            }),
        };
        let policy = |type_, value, period_seconds| ScalingPolicy {
            type_,
            value,
            period_seconds,
        };
        let scale_up_of = |w: WorkersSpec| {
            let mut s = spec();
            s.workers = Some(w);
            let p = plan(&s)?;
            match p.invalid_workers {
                Some(problem) => Err(problem),
                None => Ok(p.workers.unwrap().scale_up),
            }
        };
        let fifteen = Per::Period(Duration::from_secs(15));
        // Neither: the HPA's defaults.
        let none = WorkersSpec {
            max_scale_up_step: None,
            ..workers()
        };
        assert_eq!(scale_up_of(none.clone()), Ok(ScaleUp::default()));
        assert_eq!(
            ScaleUp::default().policies,
            vec![
                RateLimit {
                    kind: RateKind::Percent,
                    value: 100,
                    per: fifteen
                },
                RateLimit {
                    kind: RateKind::Pods,
                    value: 4,
                    per: fifteen
                },
            ]
        );
        // The deprecated step alone: a Pods policy per reconcile.
        assert_eq!(scale_up_of(workers()), Ok(ScaleUp::per_reconcile(4)));
        // behavior.scaleUp wins over the step.
        let behavior = rules(
            vec![policy(ScalingPolicyType::Pods, 2, 60)],
            SelectPolicy::Min,
            120,
        );
        let want = ScaleUp {
            policies: vec![RateLimit {
                kind: RateKind::Pods,
                value: 2,
                per: Per::Period(Duration::from_secs(60)),
            }],
            select: Select::Min,
            stabilization: Duration::from_secs(120),
        };
        for step in [None, Some(4)] {
            let w = WorkersSpec {
                max_scale_up_step: step,
                behavior: Some(behavior.clone()),
                ..workers()
            };
            assert_eq!(scale_up_of(w), Ok(want.clone()));
        }
        // An empty behavior (no scaleUp) leaves the step in force.
        let w = WorkersSpec {
            behavior: Some(WorkersBehavior::default()),
            ..workers()
        };
        assert_eq!(scale_up_of(w), Ok(ScaleUp::per_reconcile(4)));
        // Disabled needs no policy.
        let w = WorkersSpec {
            behavior: Some(rules(vec![], SelectPolicy::Disabled, 0)),
            ..none.clone()
        };
        assert_eq!(scale_up_of(w).unwrap().select, Select::Disabled);

        // Each bad part named.
        let pods = |value, period| vec![policy(ScalingPolicyType::Pods, value, period)];
        for (behavior, field, words) in [
            (
                rules(vec![], SelectPolicy::Max, 0),
                "spec.workers.behavior.scaleUp.policies",
                "must not be empty",
            ),
            (
                rules(pods(0, 15), SelectPolicy::Max, 0),
                "spec.workers.behavior.scaleUp.policies",
                "value 0",
            ),
            (
                rules(pods(4, 0), SelectPolicy::Max, 0),
                "spec.workers.behavior.scaleUp.policies",
                "periodSeconds 0",
            ),
            (
                rules(pods(4, 1801), SelectPolicy::Max, 0),
                "spec.workers.behavior.scaleUp.policies",
                "periodSeconds 1801",
            ),
            (
                rules(pods(4, 15), SelectPolicy::Max, 3601),
                "spec.workers.behavior.scaleUp.stabilizationWindowSeconds",
                "3601",
            ),
            (
                rules(pods(4, 15), SelectPolicy::Max, -1),
                "spec.workers.behavior.scaleUp.stabilizationWindowSeconds",
                "-1",
            ),
        ] {
            let w = WorkersSpec {
                behavior: Some(behavior),
                ..none.clone()
            };
            let e = scale_up_of(w).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.reason.contains(words), "{e}");
        }
    }
}
