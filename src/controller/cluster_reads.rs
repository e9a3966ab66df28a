//! What a reconcile reads from the Kubernetes API besides the JobQueue itself: the
//! Secrets behind its Redis endpoint, and the scale target's `/scale` with the
//! HorizontalPodAutoscalers that could claim it. Each read ends in plain data for the
//! pure steps: connection options, a [`Failure`], a [`TargetState`].

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};

use super::Settings;
use super::caches::Caches;
use super::failures::kube_reason;
use super::ownership;
use super::redis_pool::Endpoint;
use super::scaling::{TargetRef, TargetState};
use super::status::{Failure, reasons};
use super::validate::{EndpointPlan, UrlSource};
use crate::crd::SecretKeySelector;
use crate::queue::ConnectOptions;

/// Read the Secrets the endpoint names (each once) and build its connection options.
pub async fn resolve_endpoint(
    client: &Client,
    settings: &Settings,
    ns: &str,
    plan: &EndpointPlan,
) -> Result<Endpoint, Failure> {
    resolve_endpoint_in(&Caches::default(), client, settings, ns, plan).await
}

/// [`resolve_endpoint`], each Secret from the cache when it holds it (no request), else
/// read from the API.
pub async fn resolve_endpoint_in(
    caches: &Caches,
    client: &Client,
    settings: &Settings,
    ns: &str,
    plan: &EndpointPlan,
) -> Result<Endpoint, Failure> {
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut secrets: HashMap<&str, Arc<Secret>> = HashMap::new();
    for name in plan.secret_names() {
        if let Some(secret) = caches.secret(ns, name) {
            secrets.insert(name, secret);
            continue;
        }
        match secrets_api.get_opt(name).await {
            Ok(Some(secret)) => {
                let secret = Arc::new(secret);
                secrets.insert(name, secret);
            }
            Ok(None) => {
                return Err(Failure {
                    reason: reasons::SECRET_NOT_FOUND,
                    message: format!("Secret {ns}/{name} not found"),
                    redis_reached: false,
                });
            }
            Err(e) => {
                return Err(Failure {
                    reason: reasons::SECRET_UNREADABLE,
                    message: format!("cannot read Secret {ns}/{name}: {}", kube_reason(&e)),
                    redis_reached: false,
                });
            }
        }
    }
    let value = |sel: &SecretKeySelector, field: &str| -> Result<Vec<u8>, Failure> {
        let secret = &secrets[sel.name.as_str()];
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&sel.key))
            .map(|b| b.0.clone());
        data.ok_or_else(|| Failure {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret {ns}/{} has no key {:?} (named by {field})",
                sel.name, sel.key
            ),
            redis_reached: false,
        })
    };
    let text = |sel: &SecretKeySelector, field: &str| -> Result<String, Failure> {
        let bytes = value(sel, field)?;
        let text = String::from_utf8(bytes).map_err(|_| Failure {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret {ns}/{} key {:?} (named by {field}) is not UTF-8 text",
                sel.name, sel.key
            ),
            redis_reached: false,
        })?;
        Ok(text.trim().to_string())
    };
    let password = match &plan.password {
        Some(sel) => Some(text(sel, "spec.redis.passwordSecretRef")?),
        None => None,
    };
    let username = match &plan.username {
        Some(sel) => Some(text(sel, "spec.redis.usernameSecretRef")?),
        None => None,
    };
    let ca = match &plan.ca {
        Some(sel) => Some(value(sel, "spec.redis.tls.caSecretRef")?),
        None => None,
    };
    let client_cert = match &plan.client_cert {
        Some(sel) => Some(pem(
            value(sel, "spec.redis.tls.clientCertSecretRef")?,
            sel,
            "spec.redis.tls.clientCertSecretRef",
            "CERTIFICATE",
        )?),
        None => None,
    };
    let client_key = match &plan.client_key {
        Some(sel) => Some(pem(
            value(sel, "spec.redis.tls.clientKeySecretRef")?,
            sel,
            "spec.redis.tls.clientKeySecretRef",
            "PRIVATE KEY",
        )?),
        None => None,
    };
    let options = match &plan.url {
        UrlSource::Sentinel {
            addresses,
            master_name,
        } => {
            let sentinel_password = match &plan.sentinel_password {
                Some(sel) => Some(text(sel, "spec.redis.sentinel.passwordSecretRef")?),
                None => None,
            };
            ConnectOptions::sentinel(addresses.clone(), master_name.clone())
                .sentinel_password(sentinel_password)
                .sentinel_tls(plan.tls)
        }
        UrlSource::Inline(url) => url_options(url, plan.tls),
        UrlSource::Secret(sel) => url_options(&text(sel, "spec.redis.urlSecretRef")?, plan.tls),
    };
    let options = options
        .cluster(plan.cluster)
        .password(password)
        .username(username)
        .client_cert(client_cert, client_key)
        .tls_server_name(plan.server_name.clone())
        .connect_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .ca_cert(ca.clone());
    Ok(Endpoint { options, ca })
}

/// The options of a URL, `rediss://` when the spec asks for TLS.
fn url_options(url: &str, tls: bool) -> ConnectOptions {
    ConnectOptions::new(if tls { force_tls(url) } else { url.to_string() })
}

/// A Secret's value that must hold a PEM block of `label`: named when it does not (the
/// value itself is never shown).
fn pem(
    bytes: Vec<u8>,
    sel: &SecretKeySelector,
    field: &str,
    label: &str,
) -> Result<Vec<u8>, Failure> {
    if crate::queue::pem_blocks(&bytes, label) == 0 {
        return Err(Failure {
            reason: reasons::SECRET_KEY_MISSING,
            message: format!(
                "Secret key {:?} of {} (named by {field}) holds no PEM {} (no -----BEGIN \
                 ...{label}----- line)",
                sel.key,
                sel.name,
                label.to_lowercase()
            ),
            redis_reached: false,
        });
    }
    Ok(bytes)
}

/// `redis://` → `rediss://`, for every URL of a comma-separated list.
pub fn force_tls(url: &str) -> String {
    url.split(',')
        .map(|u| {
            let u = u.trim();
            match u.strip_prefix("redis://") {
                Some(rest) => format!("rediss://{rest}"),
                None => u.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The target's replicas, or why the operator cannot scale it: missing, claimed by an
/// HPA or a KEDA ScaledObject of namespace `ns`, or unreadable.
pub async fn target_state(client: &Client, ns: &str, target: &TargetRef) -> TargetState {
    target_state_in(&Caches::default(), client, ns, target).await
}

/// [`target_state`], the replicas (of a Deployment or a StatefulSet) and the HPAs from
/// the caches when they hold them (no request), else read from the API.
pub async fn target_state_in(
    caches: &Caches,
    client: &Client,
    ns: &str,
    target: &TargetRef,
) -> TargetState {
    let replicas = match caches.replicas(ns, target) {
        Some(replicas) => Ok(replicas),
        None => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &target.api_resource());
            api.get_scale(&target.name)
                .await
                .map(|scale| scale.spec.and_then(|s| s.replicas).unwrap_or(0))
        }
    };
    match replicas {
        Ok(replicas) => {
            let hpa = match caches.claiming_hpa(ns, target) {
                Some(hpa) => Ok(hpa),
                None => claiming_hpa(client, ns, target).await,
            };
            match hpa {
                Ok(Some(hpa)) => TargetState::ClaimedByHpa { hpa, replicas },
                Ok(None) => match scaled_object_in(caches, client, ns, target).await {
                    Ok(Some(scaled_object)) => TargetState::ClaimedByScaledObject {
                        scaled_object,
                        replicas,
                    },
                    Ok(None) => TargetState::Found { replicas },
                    Err(e) => TargetState::Unreadable {
                        message: format!(
                            "cannot list the KEDA ScaledObjects of namespace {ns}: {}",
                            kube_reason(&e)
                        ),
                    },
                },
                Err(e) => TargetState::Unreadable {
                    message: format!(
                        "cannot list the HorizontalPodAutoscalers of namespace {ns}: {}",
                        kube_reason(&e)
                    ),
                },
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => TargetState::NotFound {
            message: format!(
                "{target} ({}) not found in namespace {ns}: {}",
                target.api_version(),
                s.message
            ),
        },
        Err(e) => TargetState::Unreadable {
            message: format!("cannot read the scale of {target}: {}", kube_reason(&e)),
        },
    }
}

/// The HPA (`namespace/name`) of namespace `ns` that scales `target`, if any.
async fn claiming_hpa(
    client: &Client,
    ns: &str,
    target: &TargetRef,
) -> Result<Option<String>, kube::Error> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let hpas = api.list(&ListParams::default()).await?;
    Ok(hpas
        .items
        .iter()
        .find(|hpa| {
            hpa.spec
                .as_ref()
                .is_some_and(|spec| target.is_targeted_by(&spec.scale_target_ref))
        })
        .map(|hpa| format!("{ns}/{}", hpa.name_any())))
}

pub use super::caches::scaled_object_resource;

/// The KEDA ScaledObject claiming `target`, from the caches when they can tell.
async fn scaled_object_in(
    caches: &Caches,
    client: &Client,
    ns: &str,
    target: &TargetRef,
) -> Result<Option<String>, kube::Error> {
    match caches.claiming_scaled_object(ns, target) {
        Some(found) => Ok(found),
        None => claiming_scaled_object(client, ns, target).await,
    }
}

/// The KEDA ScaledObject (`namespace/name`) of namespace `ns` that scales `target`,
/// paused or not. Without KEDA (the LIST answers 404) there is none.
pub async fn claiming_scaled_object(
    client: &Client,
    ns: &str,
    target: &TargetRef,
) -> Result<Option<String>, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &scaled_object_resource());
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => return Err(e),
    };
    let items: Vec<serde_json::Value> = list
        .items
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect();
    Ok(ownership::claiming_scaled_object(target, &items).map(|name| format!("{ns}/{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_rewrites_every_plain_url() {
        assert_eq!(
            force_tls("redis://a:1, rediss://b:2,redis://c:3"),
            "rediss://a:1,rediss://b:2,rediss://c:3"
        );
    }

    /// `spec.redis.tls.serverName` reaches the connection options (no Secret to read).
    #[tokio::test]
    async fn the_tls_server_name_goes_into_the_connection_options() {
        use crate::crd::{JobQueueSpec, TlsSpec};
        let (service, _) = tower_test::mock::pair::<
            ::http::Request<kube::client::Body>,
            ::http::Response<kube::client::Body>,
        >();
        let client = Client::new(service, "default");
        let mut spec = JobQueueSpec::new("redis://10.0.0.7:6380", "emails");
        spec.redis.tls = Some(TlsSpec {
            server_name: Some("redis.jobs.example".into()),
            ..TlsSpec::default()
        });
        let plan = super::super::validate::plan(&spec).unwrap();
        let endpoint = resolve_endpoint(&client, &Settings::default(), "default", &plan.endpoint)
            .await
            .unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(endpoint.options.url, "rediss://10.0.0.7:6380");
        assert_eq!(
            endpoint.options.tls_server_name.as_deref(),
            Some("redis.jobs.example")
        );
    }
}
