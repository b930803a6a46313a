//! Templated policies on tokens and roles: checked and normalised as
//! Consul's token writer and `RoleSet` do (the template's fixed ID set,
//! its variables checked against its schema, duplicates dropped), and
//! expanded into the rules a token carries.

use legate_acl::templated::{template, Template};
use legate_types::acl::TemplatedPolicy;
use legate_types::RpcError;

use crate::Server;

/// Whether a templated policy was written for `on` (`token` or `role`).
fn missing_name(on: &str) -> RpcError {
    RpcError::Internal(format!(
        "templated policy is missing the template name field on this {on}"
    ))
}

/// The variables' name as validation sees it: `None` when no variables
/// object was given.
fn name_of(policy: &TemplatedPolicy) -> Option<&str> {
    policy.template_variables.as_ref().map(|v| v.name.as_str())
}

/// Consul's `normalizeTemplatedPolicies` for a token.
pub(crate) fn normalize_for_token(
    policies: &[TemplatedPolicy],
) -> Result<Vec<TemplatedPolicy>, RpcError> {
    let mut out = Vec::with_capacity(policies.len());
    for policy in policies {
        if policy.template_name.is_empty() {
            return Err(missing_name("token"));
        }
        let base = template(&policy.template_name).ok_or_else(|| {
            RpcError::Internal(format!(
                "no such ACL templated policy with Name {:?}",
                policy.template_name
            ))
        })?;
        base.validate(name_of(policy)).map_err(|e| {
            RpcError::Internal(format!(
                "validation error for templated policy {:?}: {e}",
                policy.template_name
            ))
        })?;
        let mut normalized = policy.clone();
        normalized.template_id = base.id.to_string();
        out.push(normalized);
    }
    Ok(deduplicate(out))
}

/// Consul's checks in `RoleSet`.
pub(crate) fn normalize_for_role(
    policies: &[TemplatedPolicy],
) -> Result<Vec<TemplatedPolicy>, RpcError> {
    let mut out = Vec::with_capacity(policies.len());
    for policy in policies {
        if policy.template_name.is_empty() {
            return Err(missing_name("role"));
        }
        let base = template(&policy.template_name).ok_or_else(|| {
            RpcError::Internal(format!(
                "templated policy with an invalid templated name: {} for this role",
                policy.template_name
            ))
        })?;
        base.validate(name_of(policy)).map_err(|e| {
            RpcError::Internal(format!(
                "encountered role with invalid templated policy: {e}"
            ))
        })?;
        let mut normalized = policy.clone();
        if normalized.template_id.is_empty() {
            normalized.template_id = base.id.to_string();
        }
        out.push(normalized);
    }
    Ok(deduplicate(out))
}

/// Consul's `Deduplicate`: the first of each template (for templates
/// without variables) or of each (template, name) wins, datacenters
/// aside.
fn deduplicate(policies: Vec<TemplatedPolicy>) -> Vec<TemplatedPolicy> {
    let mut seen: Vec<(String, Option<String>)> = Vec::new();
    policies
        .into_iter()
        .filter(|policy| {
            let takes_name = template(&policy.template_name).is_some_and(Template::takes_name);
            let key = (
                policy.template_name.clone(),
                takes_name.then(|| name_of(policy).unwrap_or_default().to_string()),
            );
            if seen.contains(&key) {
                false
            } else {
                seen.push(key);
                true
            }
        })
        .collect()
}

/// The rules of every templated policy that applies in datacenter `dc`.
pub(crate) fn rules_in(policies: &[TemplatedPolicy], dc: &str) -> Vec<String> {
    policies
        .iter()
        .filter(|p| p.datacenters.is_empty() || p.datacenters.iter().any(|d| d == dc))
        .filter_map(|p| {
            template(&p.template_name).map(|t| t.render(name_of(p).unwrap_or_default()))
        })
        .collect()
}

/// The line a templated policy adds to a token's or role's hash.
pub(crate) fn hash_line(policy: &TemplatedPolicy) -> String {
    format!(
        "{}:{}:{}:{}\n",
        policy.template_id,
        policy.template_name,
        name_of(policy).unwrap_or_default(),
        policy.datacenters.join(",")
    )
}

/// Whether `policies` grant write on the service `name` (what
/// `?servicename=` matches besides service identities).
pub(crate) fn names_service(policies: &[TemplatedPolicy], name: &str) -> bool {
    policies
        .iter()
        .any(|p| p.template_name == "builtin/service" && name_of(p) == Some(name))
}

impl Server {
    /// Refuses templated policies until every server knows them: an
    /// older one would drop them from the tokens and roles it stores.
    pub(crate) fn templated_policies_writable(
        &self,
        policies: &[TemplatedPolicy],
    ) -> Result<(), RpcError> {
        if policies.is_empty()
            || crate::features::cluster_supports(
                &self.server_features(),
                crate::features::TEMPLATED_POLICIES,
            )
        {
            return Ok(());
        }
        Err(RpcError::Internal(
            "templated policies need every server to run this version of Legate".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_types::acl::TemplateVariables;

    fn linked(name: &str, variable: Option<&str>, dcs: &[&str]) -> TemplatedPolicy {
        TemplatedPolicy {
            template_name: name.into(),
            template_variables: variable.map(|n| TemplateVariables { name: n.into() }),
            datacenters: dcs.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn duplicates_go_the_first_one_winning_as_in_consul() {
        let list = vec![
            linked("builtin/service", Some("api"), &[]),
            linked("builtin/node", Some("api"), &[]),
            linked("builtin/node", Some("web"), &[]),
            linked("builtin/service", Some("api"), &["dc2"]),
            linked("builtin/dns", None, &[]),
            linked("builtin/service", Some("web"), &[]),
            linked("builtin/dns", None, &["dc1"]),
        ];
        let normalized = normalize_for_token(&list).unwrap();
        assert_eq!(normalized.len(), 5);
        assert!(normalized[0].datacenters.is_empty(), "the first one wins");
        assert_eq!(
            normalized[0].template_id,
            "00000000-0000-0000-0000-000000000003"
        );
    }

    #[test]
    fn bad_links_are_refused_with_consuls_texts() {
        let text = |r: Result<Vec<TemplatedPolicy>, RpcError>| match r {
            Err(RpcError::Internal(t)) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            text(normalize_for_token(&[linked("builtin/nope", None, &[])])),
            "no such ACL templated policy with Name \"builtin/nope\""
        );
        assert_eq!(
            text(normalize_for_token(&[linked("", None, &[])])),
            "templated policy is missing the template name field on this token"
        );
        assert_eq!(
            text(normalize_for_token(&[linked("builtin/service", None, &[])])),
            "validation error for templated policy \"builtin/service\": 1 error occurred:\n\t* Invalid type. Expected: object, given: null\n\n"
        );
        assert_eq!(
            text(normalize_for_role(&[linked("builtin/nope", None, &[])])),
            "templated policy with an invalid templated name: builtin/nope for this role"
        );
        assert!(text(normalize_for_role(&[linked(
            "builtin/node",
            Some("N!"),
            &[]
        )]))
        .starts_with("encountered role with invalid templated policy: node identity \"N!\""));
    }

    #[test]
    fn rules_apply_only_in_their_datacenters() {
        let list = vec![
            linked("builtin/service", Some("web"), &["dc2"]),
            linked("builtin/dns", None, &[]),
        ];
        assert_eq!(rules_in(&list, "dc1").len(), 1);
        let here = rules_in(&list, "dc2");
        assert_eq!(here.len(), 2);
        assert!(here[0].contains("service \"web\""));
        assert!(names_service(&list, "web"));
        assert!(!names_service(&list, "api"));
    }
}
