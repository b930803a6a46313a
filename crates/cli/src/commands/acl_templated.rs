//! Templated policies in the CLI: `legate acl templated-policy
//! list|read|preview`, the `-templated-policy`, `-templated-policy-file`
//! and `-var` flags of token and role commands (with `-append-*` and
//! `-replace-*` on updates), and the "Templated Policies:" lines of the
//! pretty formats — Consul's flags, texts and layouts.

use clap::{Args, Subcommand};
use legate_types::acl::{AclPolicy, TemplatedPolicy};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::acl::{pretty_policy, print_json};
use super::fail;
use crate::client::{Client, HttpFlags};

/// `acl templated-policy` subcommands.
#[derive(Subcommand, Debug)]
pub enum TemplatedPolicyCommand {
    /// Lists ACL templated policies.
    List(ListArgs),
    /// Reads an ACL templated policy by -name.
    Read(ReadArgs),
    /// Previews the policy an ACL templated policy renders to.
    Preview(PreviewArgs),
}

/// Flags of `acl templated-policy list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// Flags of `acl templated-policy read`.
#[derive(Args, Debug)]
pub struct ReadArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The templated policy's name (`builtin/service`).
    #[arg(long)]
    name: Option<String>,
    /// Also print the schema and the raw template.
    #[arg(long)]
    meta: bool,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// Flags of `acl templated-policy preview`.
#[derive(Args, Debug)]
pub struct PreviewArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The templated policy's name.
    #[arg(long)]
    name: Option<String>,
    /// `VariableName:Value` (repeatable).
    #[arg(long = "var")]
    vars: Vec<String>,
    /// A file of `TemplatedPolicy "<name>" { Name = "..." }` blocks.
    #[arg(long)]
    file: Option<String>,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// The templated-policy flags of token and role commands.
#[derive(Args, Debug, Default)]
pub struct TemplatedFlags {
    /// The templated policy name. Use -var flag to specify variables when
    /// required.
    #[arg(long = "templated-policy")]
    pub templated_policy: Option<String>,
    /// Path to a file containing templated policies and variables.
    #[arg(long = "templated-policy-file")]
    pub templated_policy_file: Option<String>,
    /// Update: a templated policy added to the existing ones.
    #[arg(long = "append-templated-policy")]
    pub append: Option<String>,
    /// Update: a templated policy replacing the existing ones.
    #[arg(long = "replace-templated-policy")]
    pub replace: Option<String>,
    /// Update: a file of templated policies added to the existing ones.
    #[arg(long = "append-templated-policy-file")]
    pub append_file: Option<String>,
    /// Update: a file of templated policies replacing the existing ones.
    #[arg(long = "replace-templated-policy-file")]
    pub replace_file: Option<String>,
    /// Templated policy variables, `VariableName:Value` (repeatable).
    #[arg(long = "var")]
    pub vars: Vec<String>,
}

/// The variables of `-var name:value` flags: `None` without any, as
/// Consul sends none; keys are matched without regard to case, unknown
/// ones ignored, the last of a key winning.
fn variables(vars: &[String]) -> Result<Option<Value>, String> {
    if vars.is_empty() {
        return Ok(None);
    }
    let mut name = String::new();
    for var in vars {
        let parts: Vec<&str> = var.split(':').collect();
        let [key, value] = parts.as_slice() else {
            return Err(format!(
                "malformed -var argument: {var:?}, expecting VariableName:Value"
            ));
        };
        if key.eq_ignore_ascii_case("name") {
            name = value.to_string();
        }
    }
    Ok(Some(json!({ "Name": name })))
}

/// The templated policies of a `-templated-policy-file`: HCL blocks
/// `TemplatedPolicy "<name>" { Name = "<value>" }`.
fn from_file(path: &str) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("Failed to read file: {e}"))?;
    let parsed = legate_hcl::parse(&text).map_err(|e| e.to_string())?;
    let blocks: Vec<Value> = match parsed.get("TemplatedPolicy") {
        None => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(other) => vec![other.clone()],
    };
    let mut out = Vec::new();
    for block in blocks {
        let Value::Object(by_name) = block else {
            return Err("TemplatedPolicy blocks need a template name label".into());
        };
        for (name, bodies) in by_name {
            let bodies = match bodies {
                Value::Array(items) => items,
                other => vec![other],
            };
            for body in bodies {
                let name_var = body
                    .as_object()
                    .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case("name")))
                    .and_then(|(_, v)| v.as_str())
                    .unwrap_or_default()
                    .to_string();
                out.push(json!({
                    "TemplateName": name,
                    "TemplateVariables": { "Name": name_var },
                }));
            }
        }
    }
    Ok(out)
}

/// Consul's `ExtractTemplatedPolicies`: one from `-templated-policy` (and
/// its `-var`s), or every one of a file; neither gives none.
pub fn extract(
    name: Option<&str>,
    file: Option<&str>,
    vars: &[String],
) -> Result<Vec<Value>, String> {
    match (
        name.filter(|n| !n.is_empty()),
        file.filter(|f| !f.is_empty()),
    ) {
        (Some(name), _) => {
            let mut policy = json!({ "TemplateName": name });
            if let Some(vars) = variables(vars)? {
                policy["TemplateVariables"] = vars;
            }
            Ok(vec![policy])
        }
        (None, Some(file)) => from_file(file),
        (None, None) => Ok(Vec::new()),
    }
}

impl TemplatedFlags {
    /// Whether a create names any templated policy.
    pub fn names_any(&self) -> bool {
        self.templated_policy.is_some() || self.templated_policy_file.is_some()
    }

    /// The templated policies a create gives a `what` (`token`, `role`).
    pub fn for_create(&self, what: &str) -> Result<Vec<Value>, String> {
        if self.templated_policy.is_some() && self.templated_policy_file.is_some() {
            return Err(format!(
                "Cannot combine the use of templated-policy flag with templated-policy-file. To create a {what} with a single templated policy and simple use case, use -templated-policy. For multiple templated policies and more complicated use cases, use -templated-policy-file"
            ));
        }
        extract(
            self.templated_policy.as_deref(),
            self.templated_policy_file.as_deref(),
            &self.vars,
        )
    }

    /// The templated policies after an update of a token (`token`) or a
    /// role: replaced by the `-replace-*` flags, else extended by the
    /// `-append-*` ones (and `-templated-policy*`).
    pub fn for_update(&self, existing: Vec<Value>, token: bool) -> Result<Vec<Value>, String> {
        let appends = self.append.is_some() || self.append_file.is_some();
        let replaces = self.replace.is_some() || self.replace_file.is_some();
        if appends && replaces {
            let dash = if token { "-" } else { "" };
            return Err(format!(
                "Cannot combine the use of {dash}append-templated-policy flags with replace-templated-policy. To set or overwrite existing templated policies, use -replace-templated-policy or -replace-templated-policy-file. To append to existing templated policies, use -append-templated-policy or -append-templated-policy-file."
            ));
        }
        if replaces {
            return extract(
                self.replace.as_deref(),
                self.replace_file.as_deref(),
                &self.vars,
            );
        }
        let mut all = existing;
        all.extend(extract(
            self.append.as_deref(),
            self.append_file.as_deref(),
            &self.vars,
        )?);
        all.extend(self.for_create(if token { "token" } else { "role" })?);
        Ok(all)
    }
}

/// `Templated Policies:` and each one's name, variable and datacenters,
/// every line led by `indent`.
pub fn pretty(indent: &str, policies: &[TemplatedPolicy]) -> String {
    if policies.is_empty() {
        return String::new();
    }
    let mut out = format!("{indent}Templated Policies:\n");
    for policy in policies {
        out.push_str(&format!("{indent}   {}\n", policy.template_name));
        if let Some(vars) = policy
            .template_variables
            .as_ref()
            .filter(|v| !v.name.is_empty())
        {
            out.push_str(&format!("{indent}      Name: {}\n", vars.name));
        }
        let dcs = if policy.datacenters.is_empty() {
            "all".to_string()
        } else {
            policy.datacenters.join(", ")
        };
        out.push_str(&format!("{indent}      Datacenters: {dcs}\n"));
    }
    out
}

/// What `read` prints about a template's variables, by name: the
/// variable's description and an example value.
fn input_variables(name: &str) -> String {
    let named = |description: &str, example: &str| {
        format!(
            "\n\tName: String - Required - {description}.\nExample usage:\n\tlegate acl token create -templated-policy {name} -var name:{example}\n"
        )
    };
    match name {
        "builtin/service" => named("The name of the service", "api"),
        "builtin/node" => named("The node name", "node-1"),
        "builtin/api-gateway" => named("The api gateway service name", "api-gateway"),
        "builtin/dns" | "builtin/nomad-server" | "builtin/nomad-client" => {
            format!(" None\nExample usage:\n\tlegate acl token create -templated-policy {name}\n")
        }
        _ => "   None\n".to_string(),
    }
}

/// A template in Consul's pretty form.
fn pretty_template(template: &Value, meta: bool) -> String {
    let text = |key: &str| template[key].as_str().unwrap_or_default().to_string();
    let name = text("TemplateName");
    let mut out = format!(
        "Name:            {name}\nDescription:     {}\nInput variables:{}",
        text("Description"),
        input_variables(&name)
    );
    if meta {
        if !text("Schema").is_empty() {
            out.push_str(&format!("Schema:\n{}\n\n", text("Schema")));
        }
        out.push_str(&format!("Raw Template:\n{}\n", text("Template")));
    }
    out
}

/// Runs an `acl templated-policy` subcommand.
pub async fn run(cmd: TemplatedPolicyCommand) -> u8 {
    match cmd {
        TemplatedPolicyCommand::List(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Map<String, Value>>("/v1/acl/templated-policies", &[])
                .await
            {
                Ok(all) if args.format == "json" => {
                    print_json(&all);
                    0
                }
                Ok(all) => {
                    let mut names: Vec<&String> = all.keys().collect();
                    names.sort();
                    for name in names {
                        println!("{name}");
                    }
                    0
                }
                Err(e) => fail(format!(
                    "Failed to retrieve the templated policies list: {e}"
                )),
            }
        }
        TemplatedPolicyCommand::Read(args) => {
            let Some(name) = args.name.filter(|n| !n.is_empty()) else {
                return fail("Must specify the -name parameter");
            };
            let client = Client::new(&args.http);
            let path = format!("/v1/acl/templated-policy/name/{name}");
            match client.get_json::<Value>(&path, &[]).await {
                Ok(template) if args.format == "json" => {
                    print_json(&template);
                    0
                }
                Ok(template) => {
                    print!("{}", pretty_template(&template, args.meta));
                    0
                }
                Err(e) => fail(format!("Error reading templated policy {name:?}: {e}")),
            }
        }
        TemplatedPolicyCommand::Preview(args) => preview(args).await,
    }
}

async fn preview(args: PreviewArgs) -> u8 {
    if args.name.is_none() && args.file.is_none() {
        return fail("Cannot preview a templated policy without specifying -name or -file");
    }
    let policies = match extract(args.name.as_deref(), args.file.as_deref(), &args.vars) {
        Ok(policies) => policies,
        Err(e) => return fail(e),
    };
    let [policy] = policies.as_slice() else {
        return fail("Can only preview a single templated policy at a time.");
    };
    let name = policy["TemplateName"].as_str().unwrap_or_default();
    let body = policy
        .get("TemplateVariables")
        .cloned()
        .unwrap_or(Value::Null);
    let client = Client::new(&args.http);
    let answer = client
        .ok(
            Method::POST,
            &format!("/v1/acl/templated-policy/preview/{name}"),
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice::<AclPolicy>(&bytes).map_err(|e| e.to_string()));
    match answer {
        Ok(policy) if args.format == "json" => {
            print_json(&policy);
            0
        }
        Ok(policy) => {
            print!("{}", pretty_policy(&policy));
            0
        }
        Err(e) => fail(format!(
            "Failed to generate the templated policy preview: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_and_files_give_consuls_templated_policies() {
        let vars = |v: &[&str]| variables(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(vars(&[]).unwrap(), None);
        assert_eq!(vars(&["name:web"]).unwrap(), Some(json!({"Name": "web"})));
        assert_eq!(
            vars(&["Name:a", "name:b", "other:x"]).unwrap(),
            Some(json!({"Name": "b"}))
        );
        assert_eq!(
            vars(&["name:a:b"]).unwrap_err(),
            "malformed -var argument: \"name:a:b\", expecting VariableName:Value"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.hcl");
        std::fs::write(
            &path,
            "TemplatedPolicy \"builtin/service\" {\n  Name = \"web\"\n}\nTemplatedPolicy \"builtin/node\" { Name = \"api\" }\nTemplatedPolicy \"builtin/service\" { Name = \"db\" }\n",
        )
        .unwrap();
        let mut found = from_file(path.to_str().unwrap()).unwrap();
        found.sort_by_key(|p| p.to_string());
        assert_eq!(
            found,
            vec![
                json!({"TemplateName": "builtin/node", "TemplateVariables": {"Name": "api"}}),
                json!({"TemplateName": "builtin/service", "TemplateVariables": {"Name": "db"}}),
                json!({"TemplateName": "builtin/service", "TemplateVariables": {"Name": "web"}}),
            ]
        );
    }

    #[test]
    fn updates_append_or_replace_but_not_both() {
        let existing = vec![json!({"TemplateName": "builtin/dns"})];
        let append = TemplatedFlags {
            append: Some("builtin/service".into()),
            vars: vec!["name:web".into()],
            ..Default::default()
        };
        assert_eq!(append.for_update(existing.clone(), true).unwrap().len(), 2);
        let replace = TemplatedFlags {
            replace: Some("builtin/node".into()),
            vars: vec!["name:n1".into()],
            ..Default::default()
        };
        let replaced = replace.for_update(existing.clone(), true).unwrap();
        assert_eq!(replaced.len(), 1);
        assert_eq!(replaced[0]["TemplateName"], "builtin/node");
        let both = TemplatedFlags {
            append: Some("builtin/dns".into()),
            replace: Some("builtin/dns".into()),
            ..Default::default()
        };
        assert!(both
            .for_update(existing, false)
            .unwrap_err()
            .starts_with("Cannot combine the use of append-templated-policy flags"));
    }
}
