//! `legate acl bootstrap|token|policy|role|set-agent-token`, printing what
//! Consul's CLI prints (its pretty format, or `-format json`).

use clap::{Args, Subcommand};
use legate_types::acl::{AclLink, AclPolicy, AclToken, NodeIdentity, ServiceIdentity};
use reqwest::Method;
use serde_json::{json, Value};

use super::fail;
use crate::client::{Client, HttpFlags};

/// ACL subcommands.
#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Bootstraps the ACL system and prints the management token.
    Bootstrap(FormatArgs),
    /// Token commands.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Policy commands.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Role commands.
    #[command(subcommand)]
    Role(super::acl_role::RoleCommand),
    /// Templated policy commands.
    #[command(subcommand)]
    TemplatedPolicy(super::acl_templated::TemplatedPolicyCommand),
    /// Auth method commands.
    #[command(subcommand)]
    AuthMethod(super::acl_auth::AuthMethodCommand),
    /// Binding rule commands.
    #[command(subcommand)]
    BindingRule(super::acl_auth::BindingRuleCommand),
    /// Sets one of the agent's tokens: `set-agent-token <type> <token>`.
    SetAgentToken(SetAgentTokenArgs),
}

/// Token subcommands.
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Creates a token.
    Create(Box<TokenCreateArgs>),
    /// Reads a token by -id, or the request's own with -self.
    Read(TokenReadArgs),
    /// Lists tokens.
    List(FormatArgs),
    /// Deletes a token by -id.
    Delete(IdArgs),
    /// Clones a token by -id, with a new -description.
    Clone(TokenCloneArgs),
    /// Updates a token by -id: the flags given replace what they name.
    Update(Box<TokenUpdateArgs>),
}

/// Flags of `acl token clone`.
#[derive(Args, Debug)]
pub struct TokenCloneArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The AccessorID of the token to clone.
    #[arg(long)]
    id: Option<String>,
    /// The clone's description.
    #[arg(long, default_value = "")]
    description: String,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// Flags of `acl token update` (Consul's: the policies, roles and
/// identities given replace the token's).
#[derive(Args, Debug)]
pub struct TokenUpdateArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The AccessorID of the token to update.
    #[arg(long)]
    id: Option<String>,
    /// A new description.
    #[arg(long)]
    description: Option<String>,
    #[command(flatten)]
    grants: GrantFlags,
    /// A role by name (repeatable).
    #[arg(long = "role-name")]
    role_names: Vec<String>,
    /// A role by ID (repeatable).
    #[arg(long = "role-id")]
    role_ids: Vec<String>,
    #[command(flatten)]
    templated: super::acl_templated::TemplatedFlags,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// Policy subcommands.
#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Creates a policy.
    Create(PolicyCreateArgs),
    /// Reads a policy by -id or -name.
    Read(IdOrNameArgs),
    /// Lists policies.
    List(FormatArgs),
    /// Deletes a policy by -id or -name.
    Delete(IdOrNameArgs),
}

/// The policies and identities a token or role is given
/// (`-policy-name`, `-policy-id`, `-service-identity`, `-node-identity`).
#[derive(Args, Debug)]
pub struct GrantFlags {
    /// A policy by name (repeatable).
    #[arg(long = "policy-name")]
    pub policy_names: Vec<String>,
    /// A policy by ID (repeatable).
    #[arg(long = "policy-id")]
    pub policy_ids: Vec<String>,
    /// `name[:dc1,dc2]` (repeatable).
    #[arg(long = "service-identity")]
    pub service_identities: Vec<String>,
    /// `name:dc` (repeatable).
    #[arg(long = "node-identity")]
    pub node_identities: Vec<String>,
}

/// `-format` only.
#[derive(Args, Debug)]
pub struct FormatArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// `pretty` (the default) or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// `-id`.
#[derive(Args, Debug)]
pub struct IdArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The token's AccessorID.
    #[arg(long)]
    id: Option<String>,
}

/// Flags of `acl token create`.
#[derive(Args, Debug)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Free text.
    #[arg(long, default_value = "")]
    description: String,
    #[command(flatten)]
    grants: GrantFlags,
    /// A role by name (repeatable).
    #[arg(long = "role-name")]
    role_names: Vec<String>,
    /// A role by ID (repeatable).
    #[arg(long = "role-id")]
    role_ids: Vec<String>,
    #[command(flatten)]
    templated: super::acl_templated::TemplatedFlags,
    /// A lifetime such as `1h`.
    #[arg(long = "expires-ttl")]
    expires_ttl: Option<String>,
    /// Valid only in this datacenter.
    #[arg(long)]
    local: bool,
    /// The AccessorID to use.
    #[arg(long)]
    accessor: Option<String>,
    /// The SecretID to use.
    #[arg(long)]
    secret: Option<String>,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// Flags of `acl token read`.
#[derive(Args, Debug)]
pub struct TokenReadArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The AccessorID.
    #[arg(long)]
    id: Option<String>,
    /// The token the command runs with.
    #[arg(long = "self")]
    own: bool,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// Flags of `acl policy create`.
#[derive(Args, Debug)]
pub struct PolicyCreateArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// Its name.
    #[arg(long)]
    name: Option<String>,
    /// Free text.
    #[arg(long, default_value = "")]
    description: String,
    /// The rules: text, `@file`, or `-` for standard input.
    #[arg(long, default_value = "")]
    rules: String,
    /// A datacenter it is valid in (repeatable).
    #[arg(long = "valid-datacenter")]
    datacenters: Vec<String>,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// `-id` or `-name` of a policy or role (and `-format`).
#[derive(Args, Debug)]
pub struct IdOrNameArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Its ID.
    #[arg(long)]
    pub id: Option<String>,
    /// Its name.
    #[arg(long)]
    pub name: Option<String>,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    pub format: String,
}

/// `acl set-agent-token TYPE TOKEN`.
#[derive(Args, Debug)]
pub struct SetAgentTokenArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// TYPE TOKEN.
    args: Vec<String>,
}

/// Go's `time.Time` form Consul's CLI prints (`2020-05-22 18:52:31 +0000 UTC`).
fn go_time(rfc3339: &str) -> String {
    let trimmed = rfc3339.trim_end_matches('Z');
    match trimmed.split_once('T') {
        Some((date, time)) => format!("{date} {time} +0000 UTC"),
        None => rfc3339.to_string(),
    }
}

/// A token in Consul's pretty form (values at column 19).
pub fn pretty_token(t: &AclToken) -> String {
    let mut out = format!(
        "AccessorID:       {}\nSecretID:         {}\nDescription:      {}\nLocal:            {}\nCreate Time:      {}\n",
        t.accessor_id,
        t.secret_id,
        t.description,
        t.local,
        go_time(&t.create_time)
    );
    if let Some(at) = &t.expiration_time {
        out.push_str(&format!("Expiration Time:  {}\n", go_time(at)));
    }
    out.push_str(&pretty_links("", "Policies", &t.policies));
    out.push_str(&pretty_links("", "Roles", &t.roles));
    out.push_str(&pretty_identities(
        "",
        &t.service_identities,
        &t.node_identities,
    ));
    out.push_str(&super::acl_templated::pretty("", &t.templated_policies));
    out
}

/// `<title>:` and a `   <id> - <name>` line per link (nothing for none),
/// each line led by `indent`.
pub(crate) fn pretty_links(indent: &str, title: &str, links: &[AclLink]) -> String {
    if links.is_empty() {
        return String::new();
    }
    let mut out = format!("{indent}{title}:\n");
    for l in links {
        out.push_str(&format!("{indent}   {} - {}\n", l.id, l.name));
    }
    out
}

/// Service identities (`   web (Datacenters: all)`) and node identities
/// (`   n1 (Datacenter: dc1)`) as Consul prints them.
pub(crate) fn pretty_identities(
    indent: &str,
    services: &[ServiceIdentity],
    nodes: &[NodeIdentity],
) -> String {
    let mut out = String::new();
    if !services.is_empty() {
        out.push_str(&format!("{indent}Service Identities:\n"));
        for s in services {
            let dcs = if s.datacenters.is_empty() {
                "all".to_string()
            } else {
                s.datacenters.join(", ")
            };
            out.push_str(&format!(
                "{indent}   {} (Datacenters: {dcs})\n",
                s.service_name
            ));
        }
    }
    if !nodes.is_empty() {
        out.push_str(&format!("{indent}Node Identities:\n"));
        for n in nodes {
            out.push_str(&format!(
                "{indent}   {} (Datacenter: {})\n",
                n.node_name, n.datacenter
            ));
        }
    }
    out
}

/// The JSON links of `-policy-id`/`-policy-name` (or role) flags.
pub(crate) fn links_body(ids: &[String], names: &[String]) -> Vec<Value> {
    ids.iter()
        .map(|id| json!({ "ID": id }))
        .chain(names.iter().map(|n| json!({ "Name": n })))
        .collect()
}

/// The JSON identities of `-service-identity name[:dc1,dc2]` and
/// `-node-identity name:dc` flags; a malformed one is named.
pub(crate) fn identities_body(
    services: &[String],
    nodes: &[String],
) -> Result<(Vec<Value>, Vec<Value>), String> {
    let services = services
        .iter()
        .map(|s| {
            let (name, dcs) = s.split_once(':').unwrap_or((s.as_str(), ""));
            let dcs: Vec<&str> = dcs.split(',').filter(|d| !d.is_empty()).collect();
            json!({ "ServiceName": name, "Datacenters": dcs })
        })
        .collect();
    let nodes = nodes
        .iter()
        .map(|n| match n.split_once(':') {
            Some((name, dc)) => Ok(json!({ "NodeName": name, "Datacenter": dc })),
            None => Err(format!("Malformed -node-identity argument: {n:?}")),
        })
        .collect::<Result<_, _>>()?;
    Ok((services, nodes))
}

/// A policy in Consul's pretty form (values at column 15).
pub fn pretty_policy(p: &AclPolicy) -> String {
    format!(
        "ID:           {}\nName:         {}\nDescription:  {}\nDatacenters:  {}\nRules:\n{}\n",
        p.id,
        p.name,
        p.description,
        p.datacenters.join(", "),
        p.rules
    )
}

pub(crate) fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

fn show_token(t: &AclToken, format: &str) {
    if format == "json" {
        print_json(t);
    } else {
        print!("{}", pretty_token(t));
    }
}

pub(crate) async fn put<T: serde::de::DeserializeOwned>(
    client: &Client,
    path: &str,
    body: Value,
) -> Result<T, String> {
    let bytes = client
        .ok(Method::PUT, path, &[], Some(body.to_string().into_bytes()))
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// Runs an `acl` subcommand.
pub async fn run(cmd: AclCommand) -> u8 {
    match cmd {
        AclCommand::Bootstrap(args) => {
            let client = Client::new(&args.http);
            match put::<AclToken>(&client, "/v1/acl/bootstrap", json!({})).await {
                Ok(token) => {
                    show_token(&token, &args.format);
                    0
                }
                Err(e) => fail(format!("Failed ACL bootstrapping: {e}")),
            }
        }
        AclCommand::Token(cmd) => token(cmd).await,
        AclCommand::Policy(cmd) => policy(cmd).await,
        AclCommand::Role(cmd) => super::acl_role::run(cmd).await,
        AclCommand::TemplatedPolicy(cmd) => super::acl_templated::run(cmd).await,
        AclCommand::AuthMethod(cmd) => super::acl_auth::run_methods(cmd).await,
        AclCommand::BindingRule(cmd) => super::acl_auth::run_rules(cmd).await,
        AclCommand::SetAgentToken(args) => {
            let [kind, secret] = args.args.as_slice() else {
                return fail("Missing TYPE and TOKEN arguments");
            };
            let client = Client::new(&args.http);
            let body = json!({ "Token": secret }).to_string().into_bytes();
            match client
                .ok(
                    Method::PUT,
                    &format!("/v1/agent/token/{kind}"),
                    &[],
                    Some(body),
                )
                .await
            {
                Ok(_) => {
                    println!("ACL token {kind:?} set successfully");
                    0
                }
                Err(e) => fail(format!("Failed setting token: {e}")),
            }
        }
    }
}

async fn token(cmd: TokenCommand) -> u8 {
    match cmd {
        TokenCommand::Create(args) => {
            if args.grants.policy_names.is_empty()
                && args.grants.policy_ids.is_empty()
                && args.role_names.is_empty()
                && args.role_ids.is_empty()
                && args.grants.service_identities.is_empty()
                && args.grants.node_identities.is_empty()
                && !args.templated.names_any()
            {
                return fail("Cannot create a token without specifying -policy-name, -policy-id, -role-name, -role-id, -service-identity, -node-identity, -templated-policy, or -templated-policy-file at least once");
            }
            let templated = match args.templated.for_create("token") {
                Ok(templated) => templated,
                Err(e) => return fail(e),
            };
            let (services, nodes) = match identities_body(
                &args.grants.service_identities,
                &args.grants.node_identities,
            ) {
                Ok(both) => both,
                Err(e) => return fail(e),
            };
            let mut body = json!({
                "Description": args.description,
                "Policies": links_body(&args.grants.policy_ids, &args.grants.policy_names),
                "Roles": links_body(&args.role_ids, &args.role_names),
                "ServiceIdentities": services,
                "NodeIdentities": nodes,
                "TemplatedPolicies": templated,
                "Local": args.local,
            });
            if let Some(ttl) = &args.expires_ttl {
                body["ExpirationTTL"] = json!(ttl);
            }
            if let Some(a) = &args.accessor {
                body["AccessorID"] = json!(a);
            }
            if let Some(s) = &args.secret {
                body["SecretID"] = json!(s);
            }
            let client = Client::new(&args.http);
            match put::<AclToken>(&client, "/v1/acl/token", body).await {
                Ok(token) => {
                    show_token(&token, &args.format);
                    0
                }
                Err(e) => fail(format!("Failed to create new token: {e}")),
            }
        }
        TokenCommand::Read(args) => {
            let client = Client::new(&args.http);
            let path = match (&args.id, args.own) {
                (_, true) => "/v1/acl/token/self".to_string(),
                (Some(id), false) => format!("/v1/acl/token/{id}"),
                (None, false) => return fail("Must specify the -id parameter"),
            };
            match client.get_json::<AclToken>(&path, &[]).await {
                Ok(token) => {
                    show_token(&token, &args.format);
                    0
                }
                Err(e) => fail(format!("Error reading token: {e}")),
            }
        }
        TokenCommand::List(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Vec<AclToken>>("/v1/acl/tokens", &[])
                .await
            {
                Ok(tokens) if args.format == "json" => {
                    print_json(&tokens);
                    0
                }
                Ok(tokens) => {
                    let blocks: Vec<String> = tokens.iter().map(pretty_token).collect();
                    print!("{}", blocks.join("\n"));
                    0
                }
                Err(e) => fail(format!("Failed to retrieve the token list: {e}")),
            }
        }
        TokenCommand::Clone(args) => {
            let Some(id) = args.id else {
                return fail("Must specify the -id parameter");
            };
            let client = Client::new(&args.http);
            let body = json!({ "Description": args.description });
            match put::<AclToken>(&client, &format!("/v1/acl/token/{id}/clone"), body).await {
                Ok(token) => {
                    if args.format != "json" {
                        println!("Token cloned successfully.");
                    }
                    show_token(&token, &args.format);
                    0
                }
                Err(e) => fail(format!("Failed to clone token: {e}")),
            }
        }
        TokenCommand::Update(args) => update_token(*args).await,
        TokenCommand::Delete(args) => {
            let Some(id) = args.id else {
                return fail("Must specify the -id parameter");
            };
            let client = Client::new(&args.http);
            match client
                .ok(Method::DELETE, &format!("/v1/acl/token/{id}"), &[], None)
                .await
            {
                Ok(_) => {
                    println!("Token {id:?} deleted successfully");
                    0
                }
                Err(e) => fail(format!("Error deleting token {id:?}: {e}")),
            }
        }
    }
}

/// The rules a `-rules` argument names: text, `@file`, or `-` (stdin).
fn rules_text(arg: &str) -> Result<String, String> {
    if let Some(path) = arg.strip_prefix('@') {
        return std::fs::read_to_string(path).map_err(|e| format!("Failed to read file: {e}"));
    }
    if arg == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        return Ok(text);
    }
    Ok(arg.to_string())
}

async fn policy_id(client: &Client, args: &IdOrNameArgs) -> Result<String, String> {
    match (&args.id, &args.name) {
        (Some(id), _) => Ok(id.clone()),
        (None, Some(name)) => client
            .get_json::<AclPolicy>(&format!("/v1/acl/policy/name/{name}"), &[])
            .await
            .map(|p| p.id)
            .map_err(|e| format!("Error looking up policy {name:?}: {e}")),
        (None, None) => Err("Must specify either the -id or -name parameters".into()),
    }
}

async fn policy(cmd: PolicyCommand) -> u8 {
    match cmd {
        PolicyCommand::Create(args) => {
            let Some(name) = &args.name else {
                return fail("Missing required '-name' flag");
            };
            let rules = match rules_text(&args.rules) {
                Ok(r) => r,
                Err(e) => return fail(format!("Error loading rules: {e}")),
            };
            let body = json!({
                "Name": name,
                "Description": args.description,
                "Rules": rules,
                "Datacenters": args.datacenters,
            });
            let client = Client::new(&args.http);
            match put::<AclPolicy>(&client, "/v1/acl/policy", body).await {
                Ok(p) if args.format == "json" => {
                    print_json(&p);
                    0
                }
                Ok(p) => {
                    print!("{}", pretty_policy(&p));
                    0
                }
                Err(e) => fail(format!("Failed to create new policy: {e}")),
            }
        }
        PolicyCommand::Read(args) => {
            let client = Client::new(&args.http);
            let id = match policy_id(&client, &args).await {
                Ok(id) => id,
                Err(e) => return fail(e),
            };
            match client
                .get_json::<AclPolicy>(&format!("/v1/acl/policy/{id}"), &[])
                .await
            {
                Ok(p) if args.format == "json" => {
                    print_json(&p);
                    0
                }
                Ok(p) => {
                    print!("{}", pretty_policy(&p));
                    0
                }
                Err(e) => fail(format!("Error reading policy {id:?}: {e}")),
            }
        }
        PolicyCommand::List(args) => {
            let client = Client::new(&args.http);
            match client
                .get_json::<Vec<AclPolicy>>("/v1/acl/policies", &[])
                .await
            {
                Ok(policies) if args.format == "json" => {
                    print_json(&policies);
                    0
                }
                Ok(policies) => {
                    for p in policies {
                        println!(
                            "{}:\n   ID:           {}\n   Description:  {}\n   Datacenters:  {}",
                            p.name,
                            p.id,
                            p.description,
                            p.datacenters.join(", ")
                        );
                    }
                    0
                }
                Err(e) => fail(format!("Failed to retrieve the policy list: {e}")),
            }
        }
        PolicyCommand::Delete(args) => {
            let client = Client::new(&args.http);
            let id = match policy_id(&client, &args).await {
                Ok(id) => id,
                Err(e) => return fail(e),
            };
            match client
                .ok(Method::DELETE, &format!("/v1/acl/policy/{id}"), &[], None)
                .await
            {
                Ok(_) => {
                    println!("Policy {id:?} deleted successfully");
                    0
                }
                Err(e) => fail(format!("Error deleting policy {id:?}: {e}")),
            }
        }
    }
}

/// `acl token update`: reads the token, replaces what the flags name, and
/// writes it back.
async fn update_token(args: TokenUpdateArgs) -> u8 {
    let Some(id) = &args.id else {
        return fail("Cannot update a token without specifying the -id parameter");
    };
    let client = Client::new(&args.http);
    let token = match client
        .get_json::<Value>(&format!("/v1/acl/token/{id}"), &[])
        .await
    {
        Ok(token) => token,
        Err(e) => return fail(format!("Error when retrieving current token: {e}")),
    };
    let (services, nodes) = match identities_body(
        &args.grants.service_identities,
        &args.grants.node_identities,
    ) {
        Ok(both) => both,
        Err(e) => return fail(e),
    };
    let mut body = json!({
        "AccessorID": id,
        "Description": args.description.clone().unwrap_or_else(|| token["Description"].as_str().unwrap_or_default().to_string()),
        "Policies": token.get("Policies").cloned().unwrap_or(json!([])),
        "Roles": token.get("Roles").cloned().unwrap_or(json!([])),
        "ServiceIdentities": token.get("ServiceIdentities").cloned().unwrap_or(json!([])),
        "NodeIdentities": token.get("NodeIdentities").cloned().unwrap_or(json!([])),
    });
    let existing = token["TemplatedPolicies"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match args.templated.for_update(existing, true) {
        Ok(templated) => body["TemplatedPolicies"] = json!(templated),
        Err(e) => return fail(e),
    }
    if !args.grants.policy_ids.is_empty() || !args.grants.policy_names.is_empty() {
        body["Policies"] = json!(links_body(
            &args.grants.policy_ids,
            &args.grants.policy_names
        ));
    }
    if !args.role_ids.is_empty() || !args.role_names.is_empty() {
        body["Roles"] = json!(links_body(&args.role_ids, &args.role_names));
    }
    if !services.is_empty() {
        body["ServiceIdentities"] = json!(services);
    }
    if !nodes.is_empty() {
        body["NodeIdentities"] = json!(nodes);
    }
    match put::<AclToken>(&client, &format!("/v1/acl/token/{id}"), body).await {
        Ok(token) => {
            if args.format != "json" {
                println!("Token updated successfully.");
            }
            show_token(&token, &args.format);
            0
        }
        Err(e) => fail(format!("Failed to update token {id}: {e}")),
    }
}
