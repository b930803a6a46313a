//! `legate acl auth-method create|read|update|delete|list` and `legate
//! acl binding-rule create|read|update|delete|list`, with Consul's flags,
//! texts and pretty formats (or `-format json`).

use clap::{Args, Subcommand};
use legate_types::acl_auth::{AclAuthMethod, AclBindingRule};
use reqwest::Method;
use serde_json::{json, Value};

use super::acl::{print_json, put};
use super::fail;
use crate::client::{Client, HttpFlags};

/// `acl auth-method` subcommands.
#[derive(Subcommand, Debug)]
pub enum AuthMethodCommand {
    /// Creates an auth method.
    Create(Box<MethodArgs>),
    /// Reads an auth method by -name.
    Read(MethodNameArgs),
    /// Updates an auth method by -name.
    Update(Box<MethodArgs>),
    /// Deletes an auth method by -name.
    Delete(MethodNameArgs),
    /// Lists auth methods.
    List(MethodNameArgs),
}

/// Flags of `auth-method create` and `update`.
#[derive(Args, Debug)]
pub struct MethodArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The method's type (`jwt`).
    #[arg(long = "type")]
    kind: Option<String>,
    /// Its name.
    #[arg(long)]
    name: Option<String>,
    /// A name for people.
    #[arg(long = "display-name")]
    display_name: Option<String>,
    /// Free text.
    #[arg(long)]
    description: Option<String>,
    /// The longest life of its tokens (`10m`).
    #[arg(long = "max-token-ttl")]
    max_token_ttl: Option<String>,
    /// `local` or `global`.
    #[arg(long = "token-locality")]
    token_locality: Option<String>,
    /// The method's config as JSON (`@file` or `-` for stdin).
    #[arg(long)]
    config: Option<String>,
    /// Update: replace the method rather than change what the flags name.
    #[arg(long = "no-merge")]
    no_merge: bool,
    /// Show the Raft indexes.
    #[arg(long)]
    meta: bool,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// `-name` (and the list's `-meta`).
#[derive(Args, Debug)]
pub struct MethodNameArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The method's name.
    #[arg(long)]
    name: Option<String>,
    /// Show the Raft indexes.
    #[arg(long)]
    meta: bool,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// The text of a `-config`-style argument: JSON, `@file` or `-`.
fn config_text(arg: &str) -> Result<String, String> {
    if let Some(path) = arg.strip_prefix('@') {
        return std::fs::read_to_string(path)
            .map_err(|e| format!("Error loading configuration file: {e}"));
    }
    if arg == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("Error loading configuration file: {e}"))?;
        return Ok(text);
    }
    Ok(arg.to_string())
}

/// A method in Consul's pretty form (labels to column 15).
pub fn pretty_method(m: &AclAuthMethod, meta: bool) -> String {
    let mut out = format!("Name:          {}\nType:          {}\n", m.name, m.r#type);
    if !m.display_name.is_empty() {
        out.push_str(&format!("DisplayName:   {}\n", m.display_name));
    }
    out.push_str(&format!("Description:   {}\n", m.description));
    if let Some(ttl) = m.max_token_ttl {
        out.push_str(&format!(
            "MaxTokenTTL:   {}\n",
            legate_types::duration::format_go_duration(ttl)
        ));
    }
    if !m.token_locality.is_empty() {
        out.push_str(&format!("TokenLocality: {}\n", m.token_locality));
    }
    if meta {
        out.push_str(&format!(
            "Create Index:  {}\nModify Index:  {}\n",
            m.create_index, m.modify_index
        ));
    }
    let config = serde_json::to_string_pretty(&m.config).unwrap_or_else(|_| "null".into());
    out.push_str(&format!("Config:\n{config}\n"));
    out
}

fn show_method(m: &AclAuthMethod, format: &str, meta: bool) {
    if format == "json" {
        print_json(m);
    } else {
        print!("{}", pretty_method(m, meta));
    }
}

/// Runs an `acl auth-method` subcommand.
pub async fn run_methods(cmd: AuthMethodCommand) -> u8 {
    match cmd {
        AuthMethodCommand::Create(args) => write_method(*args, true).await,
        AuthMethodCommand::Update(args) => write_method(*args, false).await,
        AuthMethodCommand::Read(args) => {
            let Some(name) = args.name.filter(|n| !n.is_empty()) else {
                return fail("Must specify the -name parameter");
            };
            let client = Client::new(&args.http);
            match client
                .get_json::<AclAuthMethod>(&format!("/v1/acl/auth-method/{name}"), &[])
                .await
            {
                Ok(method) => {
                    show_method(&method, &args.format, args.meta);
                    0
                }
                Err(e) if e.status == Some(reqwest::StatusCode::NOT_FOUND) => {
                    fail(format!("Auth method not found with name {name:?}"))
                }
                Err(e) => fail(format!("Error reading auth method {name:?}: {e}")),
            }
        }
        AuthMethodCommand::Delete(args) => {
            let Some(name) = args.name.filter(|n| !n.is_empty()) else {
                return fail("Must specify the -name parameter");
            };
            let client = Client::new(&args.http);
            let path = format!("/v1/acl/auth-method/{name}");
            match client.ok(Method::DELETE, &path, &[], None).await {
                Ok(_) => {
                    println!("Auth method {name:?} deleted successfully");
                    0
                }
                Err(e) => fail(format!("Error deleting auth method {name:?}: {e}")),
            }
        }
        AuthMethodCommand::List(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Vec<AclAuthMethod>>("/v1/acl/auth-methods", &[])
                .await
            {
                Ok(methods) if args.format == "json" => {
                    print_json(&methods.iter().map(AclAuthMethod::stub).collect::<Vec<_>>());
                    0
                }
                Ok(methods) => {
                    for m in methods {
                        print!("{}:\n   Type:         {}\n", m.name, m.r#type);
                        if !m.display_name.is_empty() {
                            println!("   DisplayName:  {}", m.display_name);
                        }
                        println!("   Description:  {}", m.description);
                        if args.meta {
                            println!("   Create Index: {}", m.create_index);
                            println!("   Modify Index: {}", m.modify_index);
                        }
                    }
                    0
                }
                Err(e) => fail(format!("Failed to retrieve the auth method list: {e}")),
            }
        }
    }
}

async fn write_method(args: MethodArgs, create: bool) -> u8 {
    let client = Client::new(&args.http);
    let Some(name) = args.name.clone().filter(|n| !n.is_empty()) else {
        return fail(if create {
            "Missing required '-name' flag"
        } else {
            "Cannot update an auth method without specifying the -name parameter"
        });
    };
    let mut body = if create || args.no_merge {
        let Some(kind) = args.kind.clone().filter(|k| !k.is_empty()) else {
            return fail("Missing required '-type' flag");
        };
        json!({"Name": name, "Type": kind})
    } else {
        match client
            .get_json::<Value>(&format!("/v1/acl/auth-method/{name}"), &[])
            .await
        {
            Ok(current) => current,
            Err(e) if e.status == Some(reqwest::StatusCode::NOT_FOUND) => {
                return fail(format!("Auth method not found with name {name:?}"))
            }
            Err(e) => return fail(format!("Error when retrieving current auth method: {e}")),
        }
    };
    let mut set = |key: &str, value: &Option<String>| {
        if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
            body[key] = json!(v);
        }
    };
    set("DisplayName", &args.display_name);
    set("Description", &args.description);
    set("MaxTokenTTL", &args.max_token_ttl);
    set("TokenLocality", &args.token_locality);
    if let Some(arg) = &args.config {
        let parsed = config_text(arg).and_then(|text| {
            serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("Error parsing JSON configuration file: {e}"))
        });
        match parsed {
            Ok(config) => body["Config"] = config,
            Err(e) => return fail(e),
        }
    }
    let path = if create {
        "/v1/acl/auth-method".to_string()
    } else {
        format!("/v1/acl/auth-method/{name}")
    };
    match put::<AclAuthMethod>(&client, &path, body).await {
        Ok(method) => {
            show_method(&method, &args.format, args.meta);
            0
        }
        Err(e) if create => fail(format!("Failed to create new auth method: {e}")),
        Err(e) => fail(format!("Error updating auth method {name:?}: {e}")),
    }
}

/// `acl binding-rule` subcommands.
#[derive(Subcommand, Debug)]
pub enum BindingRuleCommand {
    /// Creates a binding rule.
    Create(Box<RuleArgs>),
    /// Reads a binding rule by -id (a unique prefix will do).
    Read(RuleIdArgs),
    /// Updates a binding rule by -id.
    Update(Box<RuleArgs>),
    /// Deletes a binding rule by -id.
    Delete(RuleIdArgs),
    /// Lists binding rules (of one -method).
    List(RuleIdArgs),
}

/// Flags of `binding-rule create` and `update`.
#[derive(Args, Debug)]
pub struct RuleArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The rule to update.
    #[arg(long)]
    id: Option<String>,
    /// The auth method it belongs to.
    #[arg(long)]
    method: Option<String>,
    /// Free text.
    #[arg(long)]
    description: Option<String>,
    /// Which logins it applies to.
    #[arg(long)]
    selector: Option<String>,
    /// `service`, `node`, `role`, `policy` or `templated-policy`.
    #[arg(long = "bind-type", default_value = "service")]
    bind_type: String,
    /// The name bound; can use `${var}` interpolation.
    #[arg(long = "bind-name")]
    bind_name: Option<String>,
    /// A templated policy's variables, `name=value` (repeatable).
    #[arg(long = "bind-vars")]
    bind_vars: Vec<String>,
    /// Update: replace the rule rather than change what the flags name.
    #[arg(long = "no-merge")]
    no_merge: bool,
    /// Show the Raft indexes.
    #[arg(long)]
    meta: bool,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// `-id` (read, delete), `-method` (list).
#[derive(Args, Debug)]
pub struct RuleIdArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The rule's ID, or a unique prefix of it.
    #[arg(long)]
    id: Option<String>,
    /// List: only this auth method's rules.
    #[arg(long)]
    method: Option<String>,
    /// Show the Raft indexes.
    #[arg(long)]
    meta: bool,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// A rule in Consul's pretty form; `indent` leads every line (lists).
pub fn pretty_rule(r: &AclBindingRule, indent: &str, meta: bool) -> String {
    let mut out = String::new();
    if indent.is_empty() {
        out.push_str(&format!("ID:           {}\n", r.id));
    }
    out.push_str(&format!(
        "{indent}AuthMethod:   {}\n{indent}Description:  {}\n{indent}BindType:     {}\n{indent}BindName:     {}\n",
        r.auth_method, r.description, r.bind_type, r.bind_name
    ));
    if let Some(vars) = r.bind_vars.as_ref().filter(|v| !v.name.is_empty()) {
        out.push_str(&format!(
            "{indent}BindVars:     \n{indent}     - Name: {}\n",
            vars.name
        ));
    }
    out.push_str(&format!("{indent}Selector:     {}\n", r.selector));
    if meta {
        out.push_str(&format!(
            "{indent}Create Index: {}\n{indent}Modify Index: {}\n",
            r.create_index, r.modify_index
        ));
    }
    out
}

/// The full ID a partial `-id` names (36 characters are taken as they
/// are).
async fn rule_id(client: &Client, partial: &str) -> Result<String, String> {
    if partial.len() == 36 {
        return Ok(partial.to_string());
    }
    let rules = client
        .get_json::<Vec<AclBindingRule>>("/v1/acl/binding-rules", &[])
        .await
        .map_err(|e| e.to_string())?;
    let matches: Vec<&AclBindingRule> =
        rules.iter().filter(|r| r.id.starts_with(partial)).collect();
    match matches.as_slice() {
        [one] => Ok(one.id.clone()),
        [] => Err(format!("No such rule ID with prefix: {partial}")),
        _ => Err("Partial rule ID is not unique".into()),
    }
}

/// Runs an `acl binding-rule` subcommand.
pub async fn run_rules(cmd: BindingRuleCommand) -> u8 {
    match cmd {
        BindingRuleCommand::Create(args) => write_rule(*args, true).await,
        BindingRuleCommand::Update(args) => write_rule(*args, false).await,
        BindingRuleCommand::Read(args) => {
            let Some(partial) = args.id.filter(|i| !i.is_empty()) else {
                return fail("Must specify the -id parameter.");
            };
            let client = Client::new(&args.http);
            let id = match rule_id(&client, &partial).await {
                Ok(id) => id,
                Err(e) => return fail(format!("Error determining binding rule ID: {e}")),
            };
            match client
                .get_json::<AclBindingRule>(&format!("/v1/acl/binding-rule/{id}"), &[])
                .await
            {
                Ok(rule) if args.format == "json" => {
                    print_json(&rule);
                    0
                }
                Ok(rule) => {
                    print!("{}", pretty_rule(&rule, "", args.meta));
                    0
                }
                Err(e) if e.status == Some(reqwest::StatusCode::NOT_FOUND) => {
                    fail(format!("Binding rule not found with ID {id:?}"))
                }
                Err(e) => fail(format!("Error reading binding rule {id:?}: {e}")),
            }
        }
        BindingRuleCommand::Delete(args) => {
            let Some(partial) = args.id.filter(|i| !i.is_empty()) else {
                return fail("Must specify the -id parameter");
            };
            let client = Client::new(&args.http);
            let id = match rule_id(&client, &partial).await {
                Ok(id) => id,
                Err(e) => return fail(format!("Error determining binding rule ID: {e}")),
            };
            let path = format!("/v1/acl/binding-rule/{id}");
            match client.ok(Method::DELETE, &path, &[], None).await {
                Ok(_) => {
                    println!("Binding rule {id:?} deleted successfully");
                    0
                }
                Err(e) => fail(format!("Error deleting binding rule {id:?}: {e}")),
            }
        }
        BindingRuleCommand::List(args) => {
            let client = Client::new(&args.http);
            let query: Vec<(&str, String)> = args
                .method
                .iter()
                .map(|m| ("authmethod", m.clone()))
                .collect();
            match client
                .get_json::<Vec<AclBindingRule>>("/v1/acl/binding-rules", &query)
                .await
            {
                Ok(rules) if args.format == "json" => {
                    print_json(&rules);
                    0
                }
                Ok(rules) => {
                    for rule in rules {
                        print!("{}:\n{}", rule.id, pretty_rule(&rule, "   ", args.meta));
                    }
                    0
                }
                Err(e) => fail(format!("Failed to retrieve the binding rule list: {e}")),
            }
        }
    }
}

async fn write_rule(args: RuleArgs, create: bool) -> u8 {
    let client = Client::new(&args.http);
    if !args.bind_vars.is_empty() && args.bind_type != "templated-policy" {
        return fail("Cannot specify -bind-vars when -bind-type is not templated-policy");
    }
    let bind_vars = args
        .bind_vars
        .iter()
        .rev()
        .filter_map(|v| v.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("name"))
        .map(|(_, v)| json!({"Name": v}));
    let mut body = if create {
        let Some(method) = args.method.clone().filter(|m| !m.is_empty()) else {
            return fail("Missing required '-method' flag");
        };
        json!({"AuthMethod": method})
    } else {
        let Some(partial) = args.id.clone().filter(|i| !i.is_empty()) else {
            return fail("Cannot update a binding rule without specifying the -id parameter");
        };
        let id = match rule_id(&client, &partial).await {
            Ok(id) => id,
            Err(e) => return fail(format!("Error determining binding rule ID: {e}")),
        };
        if args.no_merge {
            json!({"ID": id})
        } else {
            match client
                .get_json::<Value>(&format!("/v1/acl/binding-rule/{id}"), &[])
                .await
            {
                Ok(current) => current,
                Err(e) if e.status == Some(reqwest::StatusCode::NOT_FOUND) => {
                    return fail(format!("Binding rule not found with ID {id:?}"))
                }
                Err(e) => return fail(format!("Error when retrieving current binding rule: {e}")),
            }
        }
    };
    if create && args.bind_name.as_deref().is_none_or(str::is_empty) {
        return fail("Missing required '-bind-name' flag");
    }
    body["BindType"] = json!(args.bind_type);
    if let Some(name) = args.bind_name.as_ref().filter(|n| !n.is_empty()) {
        body["BindName"] = json!(name);
    }
    if let Some(d) = &args.description {
        body["Description"] = json!(d);
    }
    if let Some(s) = &args.selector {
        body["Selector"] = json!(s);
    }
    match bind_vars {
        Some(vars) => body["BindVars"] = vars,
        None => {
            if let Some(map) = body.as_object_mut() {
                map.remove("BindVars");
            }
        }
    }
    let path = match body["ID"].as_str() {
        Some(id) if !create => format!("/v1/acl/binding-rule/{id}"),
        _ => "/v1/acl/binding-rule".to_string(),
    };
    match put::<AclBindingRule>(&client, &path, body).await {
        Ok(rule) if args.format == "json" => {
            print_json(&rule);
            0
        }
        Ok(rule) => {
            print!("{}", pretty_rule(&rule, "", args.meta));
            0
        }
        Err(e) if create => fail(format!("Failed to create new binding rule: {e}")),
        Err(e) => fail(format!("Error updating binding rule: {e}")),
    }
}
