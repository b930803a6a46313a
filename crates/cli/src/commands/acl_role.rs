//! `legate acl role create|read|update|list|delete`, printing what
//! Consul's CLI prints (its pretty format, or `-format json`).

use clap::{Args, Subcommand};
use legate_types::acl::AclRole;
use reqwest::Method;
use serde_json::json;

use super::acl::{
    identities_body, links_body, pretty_identities, pretty_links, print_json, put, GrantFlags,
    IdOrNameArgs,
};
use super::fail;
use crate::client::{Client, HttpFlags};

/// Role subcommands.
#[derive(Subcommand, Debug)]
pub enum RoleCommand {
    /// Creates a role.
    Create(Box<RoleWriteArgs>),
    /// Reads a role by -id or -name.
    Read(IdOrNameArgs),
    /// Updates a role by -id or -name: new links and identities are added.
    Update(Box<RoleWriteArgs>),
    /// Lists roles.
    List(IdOrNameArgs),
    /// Deletes a role by -id or -name.
    Delete(IdOrNameArgs),
}

/// Flags of `acl role create` and `acl role update`.
#[derive(Args, Debug)]
pub struct RoleWriteArgs {
    #[command(flatten)]
    http: HttpFlags,
    /// The role to update (update only).
    #[arg(long)]
    id: Option<String>,
    /// Its name (update: the role to update when -id is not given).
    #[arg(long)]
    name: Option<String>,
    /// Free text.
    #[arg(long)]
    description: Option<String>,
    #[command(flatten)]
    grants: GrantFlags,
    #[command(flatten)]
    templated: super::acl_templated::TemplatedFlags,
    /// `pretty` or `json`.
    #[arg(long, default_value = "pretty")]
    format: String,
}

/// A role in Consul's pretty form (values at column 15), every line led by
/// `indent` (lists indent each role under its name).
pub fn pretty_role(r: &AclRole, indent: &str) -> String {
    let mut out = format!(
        "{indent}ID:           {}\n{indent}Name:         {}\n{indent}Description:  {}\n",
        r.id, r.name, r.description
    );
    out.push_str(&pretty_links(indent, "Policies", &r.policies));
    out.push_str(&pretty_identities(
        indent,
        &r.service_identities,
        &r.node_identities,
    ));
    out.push_str(&super::acl_templated::pretty(indent, &r.templated_policies));
    out
}

fn show(role: &AclRole, format: &str) {
    if format == "json" {
        print_json(role);
    } else {
        print!("{}", pretty_role(role, ""));
    }
}

/// The role `-id` or `-name` names.
async fn find(
    client: &Client,
    id: &Option<String>,
    name: &Option<String>,
) -> Result<AclRole, String> {
    let (path, what) = match (id, name) {
        (Some(id), _) => (format!("/v1/acl/role/{id}"), id),
        (None, Some(name)) => (format!("/v1/acl/role/name/{name}"), name),
        (None, None) => return Err("Must specify either the -id or -name parameters".into()),
    };
    client
        .get_json::<AclRole>(&path, &[])
        .await
        .map_err(|e| format!("Error reading role {what:?}: {e}"))
}

/// Runs a `role` subcommand.
pub async fn run(cmd: RoleCommand) -> u8 {
    match cmd {
        RoleCommand::Create(args) => create(*args).await,
        RoleCommand::Update(args) => update(*args).await,
        RoleCommand::Read(args) => {
            let client = Client::new(&args.http);
            match find(&client, &args.id, &args.name).await {
                Ok(role) => {
                    show(&role, &args.format);
                    0
                }
                Err(e) => fail(e),
            }
        }
        RoleCommand::List(args) => {
            let client = Client::new(&args.http);
            match client.get_json::<Vec<AclRole>>("/v1/acl/roles", &[]).await {
                Ok(roles) if args.format == "json" => {
                    print_json(&roles);
                    0
                }
                Ok(roles) => {
                    let blocks: Vec<String> = roles
                        .iter()
                        .map(|r| format!("{}:\n{}", r.name, pretty_role(r, "   ")))
                        .collect();
                    print!("{}", blocks.join("\n"));
                    0
                }
                Err(e) => fail(format!("Failed to retrieve the role list: {e}")),
            }
        }
        RoleCommand::Delete(args) => {
            let client = Client::new(&args.http);
            let role = match find(&client, &args.id, &args.name).await {
                Ok(role) => role,
                Err(e) => return fail(e),
            };
            match client
                .ok(
                    Method::DELETE,
                    &format!("/v1/acl/role/{}", role.id),
                    &[],
                    None,
                )
                .await
            {
                Ok(_) => {
                    println!("Role {:?} deleted successfully", role.id);
                    0
                }
                Err(e) => fail(format!("Error deleting role {:?}: {e}", role.id)),
            }
        }
    }
}

async fn create(args: RoleWriteArgs) -> u8 {
    let Some(name) = &args.name else {
        return fail("Missing required '-name' flag");
    };
    if args.grants.policy_names.is_empty()
        && args.grants.policy_ids.is_empty()
        && args.grants.service_identities.is_empty()
        && args.grants.node_identities.is_empty()
        && !args.templated.names_any()
    {
        return fail("Cannot create a role without specifying -policy-name, -policy-id, -service-identity, -node-identity, -templated-policy-file or -templated-policy at least once");
    }
    let templated = match args.templated.for_create("role") {
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
    let body = json!({
        "Name": name,
        "Description": args.description.clone().unwrap_or_default(),
        "Policies": links_body(&args.grants.policy_ids, &args.grants.policy_names),
        "ServiceIdentities": services,
        "NodeIdentities": nodes,
        "TemplatedPolicies": templated,
    });
    let client = Client::new(&args.http);
    match put::<AclRole>(&client, "/v1/acl/role", body).await {
        Ok(role) => {
            show(&role, &args.format);
            0
        }
        Err(e) => fail(format!("Failed to create new role: {e}")),
    }
}

/// Consul's `role update` without `-no-merge`: the role's links and
/// identities stay and the flags' are added; `-name`/`-description`
/// replace theirs.
async fn update(args: RoleWriteArgs) -> u8 {
    let client = Client::new(&args.http);
    let role = match find(
        &client,
        &args.id,
        &args.name.clone().filter(|_| args.id.is_none()),
    )
    .await
    {
        Ok(role) => role,
        Err(e) => return fail(e),
    };
    let (services, nodes) = match identities_body(
        &args.grants.service_identities,
        &args.grants.node_identities,
    ) {
        Ok(both) => both,
        Err(e) => return fail(e),
    };
    let mut policies: Vec<serde_json::Value> = role
        .policies
        .iter()
        .map(|l| json!({ "ID": l.id }))
        .collect();
    policies.extend(links_body(
        &args.grants.policy_ids,
        &args.grants.policy_names,
    ));
    let mut service_identities = serde_json::to_value(&role.service_identities).unwrap_or_default();
    if let Some(list) = service_identities.as_array_mut() {
        list.extend(services);
    }
    let existing = serde_json::to_value(&role.templated_policies)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let templated = match args.templated.for_update(existing, false) {
        Ok(templated) => templated,
        Err(e) => return fail(e),
    };
    let mut node_identities = serde_json::to_value(&role.node_identities).unwrap_or_default();
    if let Some(list) = node_identities.as_array_mut() {
        list.extend(nodes);
    }
    let body = json!({
        "ID": role.id,
        "Name": args.name.clone().filter(|_| args.id.is_some()).unwrap_or(role.name.clone()),
        "Description": args.description.clone().unwrap_or(role.description.clone()),
        "Policies": policies,
        "ServiceIdentities": service_identities,
        "NodeIdentities": node_identities,
        "TemplatedPolicies": templated,
    });
    match put::<AclRole>(&client, &format!("/v1/acl/role/{}", role.id), body).await {
        Ok(role) => {
            show(&role, &args.format);
            0
        }
        Err(e) => fail(format!("Failed to update role {:?}: {e}", role.id)),
    }
}
