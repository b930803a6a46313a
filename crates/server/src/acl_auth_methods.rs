//! `ACL.AuthMethod*` and `ACL.BindingRule*`: auth methods of type `jwt`
//! and their binding rules, checked in Consul's order with its texts
//! (server-side refusals answer 500, as Consul's do), written once every
//! server advertises `ft_am`.

use std::time::Duration;

use legate_auth::JwtConfig;
use legate_state::{Command, Table};
use legate_types::acl_auth::{AclAuthMethod, AclBindingRule};
use legate_types::{Queried, QueryOptions, RpcError, WriteOptions};

use crate::acl_endpoints::{failed, new_uuid};
use crate::{Access, Resource, Server};

/// The auth method types Legate has (Consul CE also has `kubernetes` and
/// `aws-iam`, which need those clouds).
const TYPES: &[&str] = &["jwt"];
/// The bounds of a method's `MaxTokenTTL` (Consul's token TTL bounds).
const MIN_TTL: Duration = Duration::from_secs(60);
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The bind types a binding rule may have.
const BIND_TYPES: &[&str] = &["service", "node", "role", "policy", "templated-policy"];

/// Consul's name rule for auth methods: `^[A-Za-z0-9\-_]{1,128}$`.
fn valid_method_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A bind name's validity for its type (Consul's regexes).
pub(crate) fn valid_bind_name(bind_type: &str, name: &str) -> bool {
    let loose = |limit: usize| {
        !name.is_empty()
            && name.len() <= limit
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    match bind_type {
        "service" | "node" => legate_acl::identities::valid_identity_name(name),
        "role" => loose(256),
        "policy" => loose(128),
        _ => true,
    }
}

/// The selector grammar's view of a login: `value.<name>` strings and
/// `list.<name>` lists.
pub(crate) fn selector_shape() -> legate_filter::Shape {
    use legate_filter::Shape;
    Shape::Struct(
        [
            ("value".to_string(), Shape::Map(Box::new(Shape::Leaf))),
            (
                "list".to_string(),
                Shape::Map(Box::new(Shape::List(Box::new(Shape::Leaf)))),
            ),
        ]
        .into_iter()
        .collect(),
    )
}

impl Server {
    /// Auth methods and binding rules need every server to know them.
    fn auth_methods_writable(&self) -> Result<(), RpcError> {
        self.acl_writable()?;
        if self.store.read().acl_auth_methods().1.next().is_some()
            || crate::features::cluster_supports(
                &self.server_features(),
                crate::features::AUTH_METHODS,
            )
        {
            Ok(())
        } else {
            Err(failed(
                "auth methods need every server to run this version of Legate",
            ))
        }
    }

    /// `ACL.AuthMethodSet` (create and update are one call, as in Consul).
    pub(crate) async fn acl_auth_method_write(
        &self,
        opts: &WriteOptions,
        mut method: AclAuthMethod,
    ) -> Result<AclAuthMethod, RpcError> {
        self.auth_methods_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if method.name.is_empty() {
            return Err(failed("Invalid Auth Method: no Name is set"));
        }
        if !valid_method_name(&method.name) {
            return Err(failed(
                "Invalid Auth Method: invalid Name. Only alphanumeric characters, '-' and '_' are allowed",
            ));
        }
        if let Some(existing) = self.store.read().acl_auth_method(&method.name).1 {
            if method.r#type.is_empty() {
                method.r#type = existing.r#type.clone();
            } else if method.r#type != existing.r#type {
                return Err(failed("the Type field of an Auth Method is immutable"));
            }
        }
        if !TYPES.contains(&method.r#type.as_str()) {
            return Err(failed(format!(
                "Invalid Auth Method: Type should be one of: [{}]",
                TYPES.join(" ")
            )));
        }
        if let Some(ttl) = method.max_token_ttl.filter(|t| !t.is_zero()) {
            let show = legate_types::duration::format_go_duration;
            if ttl > MAX_TTL {
                return Err(failed(format!(
                    "MaxTokenTTL {} cannot be more than {}",
                    show(ttl),
                    show(MAX_TTL)
                )));
            }
            if ttl < MIN_TTL {
                return Err(failed(format!(
                    "MaxTokenTTL {} cannot be less than {}",
                    show(ttl),
                    show(MIN_TTL)
                )));
            }
        } else {
            method.max_token_ttl = None;
        }
        match method.token_locality.as_str() {
            "" | "local" => {}
            "global" if self.config.primary_datacenter == self.config.datacenter => {}
            "global" => {
                return Err(failed(
                    "Invalid Auth Method: TokenLocality 'global' can only be used in the primary datacenter",
                ))
            }
            _ => {
                return Err(failed(
                    "Invalid Auth Method: TokenLocality should be one of 'local' or 'global'",
                ))
            }
        }
        let config = JwtConfig::from_config(method.config.as_ref())
            .and_then(|c| c.validate().map(|_| c))
            .map_err(|e| failed(format!("Invalid Auth Method: {e}")))?;
        self.check_key_source(&config)
            .await
            .map_err(|e| failed(format!("Invalid Auth Method: {e}")))?;
        let name = method.name.clone();
        self.acl_write(Command::AclAuthMethodSet(Box::new(method)))
            .await?;
        self.store
            .read()
            .acl_auth_method(&name)
            .1
            .cloned()
            .ok_or_else(|| failed("Failed to retrieve auth method after insertion"))
    }

    /// `ACL.AuthMethodRead`.
    pub(crate) async fn acl_auth_method_read(
        &self,
        opts: &QueryOptions,
        name: String,
    ) -> Result<Queried<Option<AclAuthMethod>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclAuthMethods], |t| {
            let (index, found) = t.acl_auth_method(&name);
            Ok((index, found.cloned()))
        })
        .await
    }

    /// `ACL.AuthMethodList`, by name.
    pub(crate) async fn acl_auth_method_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<AclAuthMethod>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclAuthMethods], |t| {
            let (index, all) = t.acl_auth_methods();
            Ok((index, all.cloned().collect()))
        })
        .await
    }

    /// `ACL.AuthMethodDelete`: with its binding rules and tokens; a
    /// method that is not there is no error.
    pub(crate) async fn acl_auth_method_remove(
        &self,
        opts: &WriteOptions,
        name: String,
    ) -> Result<(), RpcError> {
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if self.store.read().acl_auth_method(&name).1.is_none() {
            return Ok(());
        }
        self.acl_write(Command::AclAuthMethodDelete(name))
            .await
            .map(|_| ())
    }

    /// `ACL.BindingRuleSet`.
    pub(crate) async fn acl_binding_rule_write(
        &self,
        opts: &WriteOptions,
        mut rule: AclBindingRule,
    ) -> Result<AclBindingRule, RpcError> {
        self.auth_methods_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if rule.id.is_empty() {
            rule.id = new_uuid();
        } else {
            if uuid::Uuid::parse_str(&rule.id).is_err() {
                return Err(failed("Binding Rule ID invalid UUID"));
            }
            let existing = self.store.read().acl_binding_rule(&rule.id).1.cloned();
            let Some(existing) = existing else {
                return Err(failed(format!("cannot find binding rule {}", rule.id)));
            };
            if rule.auth_method.is_empty() {
                rule.auth_method = existing.auth_method;
            } else if rule.auth_method != existing.auth_method {
                return Err(failed(
                    "the AuthMethod field of an Binding Rule is immutable",
                ));
            }
        }
        if rule.auth_method.is_empty() {
            return Err(failed("Invalid Binding Rule: no AuthMethod is set"));
        }
        let method = self
            .store
            .read()
            .acl_auth_method(&rule.auth_method)
            .1
            .cloned()
            .ok_or_else(|| {
                failed(format!(
                    "cannot find auth method with name {:?}",
                    rule.auth_method
                ))
            })?;
        let config = JwtConfig::from_config(method.config.as_ref()).map_err(failed)?;
        if !rule.selector.is_empty() {
            legate_filter::Expr::parse_for(&rule.selector, &selector_shape()).map_err(|e| {
                failed(format!(
                    "invalid Binding Rule: Selector is invalid: {}",
                    e.0
                ))
            })?;
        }
        if rule.bind_type.is_empty() {
            return Err(failed("Invalid Binding Rule: no BindType is set"));
        }
        if rule.bind_name.is_empty() {
            return Err(failed("Invalid Binding Rule: no BindName is set"));
        }
        if rule.bind_type != "templated-policy" && rule.bind_vars.is_some() {
            return Err(failed(
                "invalid Binding Rule: BindVars cannot be set when bind type is not templated-policy.",
            ));
        }
        if !BIND_TYPES.contains(&rule.bind_type.as_str()) {
            return Err(failed(format!(
                "Invalid Binding Rule: unknown BindType {:?}",
                rule.bind_type
            )));
        }
        // The bind name (and variables) with every claim standing in as
        // "fake", as Consul checks them.
        let fake = crate::acl_login::fake_identity(&config);
        crate::acl_login::bind_target(&rule, &fake).map_err(|e| {
            failed(format!(
                "Invalid Binding Rule: invalid BindName or BindVars: {e}"
            ))
        })?;
        let id = rule.id.clone();
        self.acl_write(Command::AclBindingRuleSet(Box::new(rule)))
            .await?;
        self.store
            .read()
            .acl_binding_rule(&id)
            .1
            .cloned()
            .ok_or_else(|| failed("Failed to retrieve binding rule after insertion"))
    }

    /// `ACL.BindingRuleRead`.
    pub(crate) async fn acl_binding_rule_read(
        &self,
        opts: &QueryOptions,
        id: String,
    ) -> Result<Queried<Option<AclBindingRule>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclBindingRules], |t| {
            let (index, found) = t.acl_binding_rule(&id);
            Ok((index, found.cloned()))
        })
        .await
    }

    /// `ACL.BindingRuleList`, by ID, optionally of one auth method.
    pub(crate) async fn acl_binding_rule_all(
        &self,
        opts: &QueryOptions,
        auth_method: String,
    ) -> Result<Queried<Vec<AclBindingRule>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclBindingRules], |t| {
            let (index, all) = t.acl_binding_rules();
            let listed = all
                .filter(|r| auth_method.is_empty() || r.auth_method == auth_method)
                .cloned()
                .collect();
            Ok((index, listed))
        })
        .await
    }

    /// `ACL.BindingRuleDelete`: a rule that is not there is no error.
    pub(crate) async fn acl_binding_rule_remove(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError> {
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if self.store.read().acl_binding_rule(&id).1.is_none() {
            return Ok(());
        }
        self.acl_write(Command::AclBindingRuleDelete(id))
            .await
            .map(|_| ())
    }
}
