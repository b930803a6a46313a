//! Templated policies (Consul 1.17+): Consul's built-in rule templates,
//! filled with a name (`builtin/service` for `web`) and linked from tokens,
//! roles and binding rules. Each renders to a synthetic policy with the
//! same ID quirk as service identities. The texts — templates, schemas,
//! descriptions and errors — are Consul CE's, byte for byte.

use crate::identities::{synthetic_policy_id, synthetic_policy_name, valid_identity_name};

/// The schema of templates that need a `name` (JSON-schema text).
const NAME_SCHEMA: &str = "{\n\t\"type\": \"object\",\n\t\"properties\": {\n\t\t\"name\": { \"type\": \"string\", \"$ref\": \"#/definitions/min-length-one\" }\n\t},\n\t\"required\": [\"name\"],\n\t\"definitions\": {\n\t\t\"min-length-one\": {\n\t\t\t\t\"type\": \"string\",\n\t\t\t\t\"minLength\": 1\n\t\t}\n\t}\n}";

/// The placeholder a template's name variable fills.
const NAME_PLACEHOLDER: &str = "{{.Name}}";

/// One built-in template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Template {
    /// Its name (`builtin/service`).
    pub name: &'static str,
    /// Consul's fixed ID for it.
    pub id: &'static str,
    /// The JSON schema of its variables (`""`: it takes none).
    pub schema: &'static str,
    /// The rules, with `{{.Name}}` where the name goes.
    pub template: &'static str,
    /// What it grants.
    pub description: &'static str,
}

/// Consul CE's templates, in name order.
pub const TEMPLATES: &[Template] = &[
    Template {
        name: "builtin/api-gateway",
        id: "00000000-0000-0000-0000-000000000008",
        schema: NAME_SCHEMA,
        template: "mesh = \"read\"\nnode_prefix \"\" {\n\tpolicy = \"read\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}\nservice \"{{.Name}}\" {\n\tpolicy = \"write\"\n}",
        description: "Gives the token or role permissions for a Consul api gateway",
    },
    Template {
        name: "builtin/dns",
        id: "00000000-0000-0000-0000-000000000005",
        schema: "",
        template: "\nnode_prefix \"\" {\n\tpolicy = \"read\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}\nquery_prefix \"\" {\n\tpolicy = \"read\"\n}",
        description: "Gives the token or role permissions for the Consul DNS to query services in the network.",
    },
    Template {
        name: "builtin/node",
        id: "00000000-0000-0000-0000-000000000004",
        schema: NAME_SCHEMA,
        template: "\nnode \"{{.Name}}\" {\n\tpolicy = \"write\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}",
        description: "Gives the token or role permissions for a register an agent/node into the catalog. A node is typically a consul agent but can also be a physical server, cloud instance or a container.",
    },
    Template {
        name: "builtin/nomad-client",
        id: "00000000-0000-0000-0000-000000000009",
        schema: "",
        template: "agent_prefix \"\" {\n  policy = \"read\"\n}\nnode_prefix \"\" {\n  policy = \"read\"\n}\nservice_prefix \"\" {\n  policy = \"write\"\n}\nkey_prefix \"\" {\n  policy = \"read\"\n}",
        description: "Gives the token or role permissions required for integration with a nomad client.",
    },
    Template {
        name: "builtin/nomad-server",
        id: "00000000-0000-0000-0000-000000000006",
        schema: "",
        template: "\nacl = \"write\"\nagent_prefix \"\" {\n  policy = \"read\"\n}\nnode_prefix \"\" {\n  policy = \"read\"\n}\nservice_prefix \"\" {\n  policy = \"write\"\n}",
        description: "Gives the token or role permissions required for integration with a nomad server.",
    },
    Template {
        name: "builtin/service",
        id: "00000000-0000-0000-0000-000000000003",
        schema: NAME_SCHEMA,
        template: "\nservice \"{{.Name}}\" {\n\tpolicy = \"write\"\n}\nservice \"{{.Name}}-sidecar-proxy\" {\n\tpolicy = \"write\"\n}\nservice_prefix \"\" {\n\tpolicy = \"read\"\n}\nnode_prefix \"\" {\n\tpolicy = \"read\"\n}",
        description: "Gives the token or role permissions to register a service and discover services in the Consul catalog. It also gives the specified service's sidecar proxy the permission to discover and route traffic to other services.",
    },
];

/// The template named `name`.
pub fn template(name: &str) -> Option<&'static Template> {
    TEMPLATES.iter().find(|t| t.name == name)
}

/// Go's `%q` of a string (close enough for names: quotes and
/// backslashes escaped).
fn quoted(text: &str) -> String {
    format!("{text:?}")
}

impl Template {
    /// Whether the template takes a name.
    pub fn takes_name(&self) -> bool {
        !self.schema.is_empty()
    }

    /// Consul's `ValidateTemplatedPolicy`: the variables (`None`: no
    /// variables object at all; `Some(name)`, possibly empty) checked
    /// against the schema, service and node names against the identity
    /// name rules first. Errors are Consul's texts (schema failures in
    /// go-multierror's form).
    pub fn validate(&self, name: Option<&str>) -> Result<(), String> {
        if !self.takes_name() {
            return Ok(());
        }
        if let Some(name) = name {
            match self.name {
                "builtin/service" if !valid_identity_name(name) => {
                    return Err(format!(
                        "service identity {} has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
                        quoted(name)
                    ))
                }
                "builtin/node" if !valid_identity_name(name) => {
                    return Err(format!(
                        "node identity {}  has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
                        quoted(name)
                    ))
                }
                // Stricter than Consul, whose template pastes any name
                // into the rules: a name that could end the rule's
                // string (and add rules of its own) is refused.
                "builtin/api-gateway"
                    if name
                        .chars()
                        .any(|c| c == '"' || c == '\\' || c == '$' || c.is_control()) =>
                {
                    return Err(format!(
                        "api gateway name {} has characters a rule name cannot hold",
                        quoted(name)
                    ))
                }
                _ => {}
            }
        }
        let problem = match name {
            None => "Invalid type. Expected: object, given: null",
            // The variables encode with `omitempty`: an empty name is absent.
            Some("") => "name is required",
            Some(_) => return Ok(()),
        };
        Err(format!("1 error occurred:\n\t* {problem}\n\n"))
    }

    /// The rules the template gives for `name`.
    pub fn render(&self, name: &str) -> String {
        self.template.replace(NAME_PLACEHOLDER, name)
    }

    /// The synthetic policy the template gives for `name`: (ID, name,
    /// description, rules).
    pub fn synthetic_policy(&self, name: &str) -> SyntheticPolicy {
        let rules = self.render(name);
        let id = synthetic_policy_id(&rules);
        SyntheticPolicy {
            name: synthetic_policy_name(&id),
            id,
            description: format!(
                "synthetic policy generated from templated policy: {}",
                self.name
            ),
            rules,
        }
    }
}

/// A rendered template, as Consul's preview shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticPolicy {
    /// `hex(rules)` followed by the empty FNV-128a digest.
    pub id: String,
    /// `synthetic-policy-<id>`.
    pub name: String,
    /// `synthetic policy generated from templated policy: <template>`.
    pub description: String,
    /// The rules.
    pub rules: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_rules_that_parse_and_match_the_identities() {
        for t in TEMPLATES {
            let rules = t.render("web");
            crate::parse(&rules).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        }
        let service = template("builtin/service").unwrap().render("web");
        assert_eq!(service, crate::identities::service_identity_rules("web"));
        let node = template("builtin/node").unwrap().render("n1");
        assert_eq!(node, crate::identities::node_identity_rules("n1"));
        assert_eq!(NAME_SCHEMA.len(), 225);
    }

    #[test]
    fn variables_are_checked_as_consul_checks_them() {
        let service = template("builtin/service").unwrap();
        assert_eq!(service.validate(Some("web")), Ok(()));
        assert_eq!(
            service.validate(None).unwrap_err(),
            "1 error occurred:\n\t* Invalid type. Expected: object, given: null\n\n"
        );
        assert_eq!(
            service.validate(Some("")).unwrap_err(),
            "service identity \"\" has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed"
        );
        assert!(template("builtin/node")
            .unwrap()
            .validate(Some("Web"))
            .unwrap_err()
            .starts_with("node identity \"Web\"  has an invalid name"));
        let gateway = template("builtin/api-gateway").unwrap();
        assert_eq!(
            gateway.validate(Some("")).unwrap_err(),
            "1 error occurred:\n\t* name is required\n\n"
        );
        assert_eq!(gateway.validate(Some("Any Name")), Ok(()));
        for injected in [
            "x\" {policy=\"write\"}\nacl = \"write\"\nservice \"y",
            "a\\b",
            "${x}",
        ] {
            assert!(
                gateway
                    .validate(Some(injected))
                    .unwrap_err()
                    .contains("cannot hold"),
                "{injected}"
            );
        }
        let dns = template("builtin/dns").unwrap();
        assert_eq!(dns.validate(None), Ok(()));
        assert!(template("builtin/workload-identity").is_none());
    }

    #[test]
    fn the_synthetic_policy_has_consuls_id_name_and_description() {
        let policy = template("builtin/service").unwrap().synthetic_policy("web");
        assert!(policy.id.starts_with("0a73657276696365202277656222207b"));
        assert!(policy.id.ends_with("6c62272e07bb014262b821756295c58d"));
        assert_eq!(policy.name, format!("synthetic-policy-{}", policy.id));
        assert_eq!(
            policy.description,
            "synthetic policy generated from templated policy: builtin/service"
        );
    }
}
