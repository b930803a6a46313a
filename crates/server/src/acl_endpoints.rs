//! The ACL endpoints (Consul's `ACL.*` RPCs): bootstrap, tokens, policies,
//! roles and `authorize`, with Consul's validation and its error texts.
//! Validation failures are server-side errors (HTTP 500), as in Consul;
//! only permission and not-found answers carry their own codes. Policies,
//! roles and global tokens are written in the primary.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use legate_state::{Command, CommandResult, Table, Tables};
use legate_types::acl::*;
use legate_types::{Queried, QueryOptions, RpcError, WriteOptions};

use crate::acl::{expired, policy_hash, token_hash, GLOBAL_MANAGEMENT_RULES};
use crate::{Access, Resource, Server};

/// The redacted form of a secret shown to callers without `acl:write`.
const HIDDEN: &str = "<hidden>";
/// The shortest and longest token lifetimes Consul accepts.
const MIN_EXPIRATION: Duration = Duration::from_secs(60);
const MAX_EXPIRATION: Duration = Duration::from_secs(24 * 60 * 60);
/// The reset file an operator writes to bootstrap again.
const BOOTSTRAP_RESET_FILE: &str = "acl-bootstrap-reset";

pub(crate) fn failed(message: impl Into<String>) -> RpcError {
    RpcError::Internal(message.into())
}

pub(crate) fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Whether an ID is among the reserved `00000000-0000-0000-0000-0000000000xx`.
fn reserved(id: &str) -> bool {
    id.starts_with("00000000-0000-0000-0000-0000000000")
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Consul's check of a user-chosen token ID.
fn validate_token_id(id: &str) -> Result<(), String> {
    if reserved(id) {
        return Err(
            "UUIDs with the prefix \"00000000-0000-0000-0000-0000000000\" are reserved".into(),
        );
    }
    uuid::Uuid::parse_str(id)
        .map(|_| ())
        .map_err(|_| "not a valid UUID".to_string())
}

/// `ExpirationTTL` as Consul takes it: a Go duration string or nanoseconds.
fn parse_ttl(value: &serde_json::Value) -> Result<Duration, RpcError> {
    match value {
        serde_json::Value::String(s) if s.is_empty() => Ok(Duration::ZERO),
        serde_json::Value::String(s) => legate_types::duration::parse_go_duration(s)
            .map_err(|e| RpcError::BadRequest(format!("Token decoding failed: {e}"))),
        serde_json::Value::Number(n) => {
            let nanos = n.as_i64().unwrap_or(-1);
            if nanos < 0 {
                Err(failed(format!(
                    "Token Expiration TTL '{nanos}ns' should be > 0"
                )))
            } else {
                Ok(Duration::from_nanos(nanos as u64))
            }
        }
        serde_json::Value::Null => Ok(Duration::ZERO),
        other => Err(RpcError::BadRequest(format!(
            "Token decoding failed: invalid ExpirationTTL {other}"
        ))),
    }
}

fn format_duration(d: Duration) -> String {
    legate_types::duration::format_go_duration(d)
}

pub(crate) fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

impl Server {
    /// A Raft write whose refusal (a taken name or secret) is a
    /// server-side error, as Consul reports it.
    pub(crate) async fn acl_write(
        &self,
        command: Command,
    ) -> Result<(u64, CommandResult), RpcError> {
        self.write(command).await.map_err(|e| match e {
            RpcError::BadRequest(m) => failed(m),
            other => other,
        })
    }

    /// An ACL read (Consul's `ACL.*Read`/`*List` prologue): ACLs on,
    /// `acl:read`, then a blocking read watching `tables`.
    pub(crate) async fn acl_read_query<T>(
        &self,
        opts: &QueryOptions,
        tables: &[Table],
        read: impl Fn(&Tables) -> Result<(u64, T), RpcError>,
    ) -> Result<Queried<T>, RpcError> {
        self.acl_on()?;
        self.authorize(&opts.token, Resource::Acl, Access::Read)?;
        self.blocking_query(opts, |w| w.tables(tables), read).await
    }

    pub(crate) fn acl_on(&self) -> Result<(), RpcError> {
        if self.config.acl.enabled {
            Ok(())
        } else {
            Err(RpcError::AclDisabled)
        }
    }

    /// ACL writes need the ACL tables on every server.
    pub(crate) fn acl_writable(&self) -> Result<(), RpcError> {
        self.acl_on()?;
        if self.acl_tables_enabled() {
            Ok(())
        } else {
            Err(failed(
                "The ACL system is not available until every server supports it",
            ))
        }
    }

    /// Whether the request's token may write ACLs (its secrets are shown).
    fn may_write_acls(&self, token: &str) -> bool {
        self.authorize(token, Resource::Acl, Access::Write).is_ok()
    }

    /// `ACL.BootstrapTokens`.
    pub(crate) async fn acl_bootstrap_write(
        &self,
        opts: &WriteOptions,
    ) -> Result<AclToken, RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.acl_bootstrap(&routed).await;
        }
        self.acl_writable()?;
        let done = self.store.read().acl_bootstrap_index();
        let reset_path = self
            .config
            .raft
            .data_dir
            .as_ref()
            .map(|d| d.join(BOOTSTRAP_RESET_FILE));
        let reset_index = match reset_path.as_ref().map(std::fs::read_to_string) {
            Some(Ok(text)) => Some(text.trim().parse::<u64>().unwrap_or(0)),
            _ => None,
        };
        if done != 0 {
            match reset_index {
                None => {
                    return Err(RpcError::PermissionDenied(format!(
                        "ACL bootstrap no longer allowed (reset index: {done})"
                    )))
                }
                Some(specified) if specified != done => {
                    return Err(failed(format!(
                        "Invalid bootstrap reset index (specified {specified}, reset index: {done})"
                    )))
                }
                Some(_) => {}
            }
        }
        let mut token = AclToken {
            accessor_id: new_uuid(),
            secret_id: new_uuid(),
            description: "Bootstrap Token (Global Management)".into(),
            policies: vec![AclLink {
                id: GLOBAL_MANAGEMENT_POLICY_ID.into(),
                name: String::new(),
            }],
            create_time: legate_types::federation_state::now_rfc3339(),
            ..Default::default()
        };
        token.hash = token_hash(&token);
        let accessor = token.accessor_id.clone();
        let command = Command::AclBootstrap {
            token: Box::new(token),
            reset_index: reset_index.filter(|_| done != 0),
        };
        match self.acl_write(command).await? {
            (_, CommandResult::Applied(true)) => {}
            _ => {
                let now = self.store.read().acl_bootstrap_index();
                return Err(RpcError::PermissionDenied(format!(
                    "ACL bootstrap no longer allowed (reset index: {now})"
                )));
            }
        }
        if let Some(path) = reset_path.filter(|_| reset_index.is_some()) {
            let _ = std::fs::remove_file(path);
        }
        tracing::info!("acl: bootstrapped");
        let tables = self.store.read();
        let stored = tables
            .acl_token(&accessor)
            .1
            .cloned()
            .ok_or(RpcError::AclNotFound)?;
        Ok(with_names(&tables, stored))
    }

    /// `ACL.TokenSet`.
    pub(crate) async fn acl_token_write(
        &self,
        opts: &WriteOptions,
        mut token: AclToken,
        create: bool,
    ) -> Result<AclToken, RpcError> {
        if !token.local {
            if let Some((remote, routed)) = self.global_write(opts)? {
                return remote.acl_token_set(&routed, token, create).await;
            }
        }
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        let existing = if create {
            self.prepare_new_token(&mut token)?;
            None
        } else {
            Some(self.prepare_token_update(&mut token)?)
        };
        {
            let tables = self.store.read();
            token.policies = normalize_policy_links(&tables, &token.policies)?;
            token.roles = normalize_role_links(&tables, &token.roles)?;
        }
        validate_identities(
            &token.service_identities,
            &token.node_identities,
            "token",
            token.local,
        )?;
        dedupe_identities(&mut token.service_identities, &mut token.node_identities);
        token.templated_policies =
            crate::acl_templated::normalize_for_token(&token.templated_policies)?;
        self.templated_policies_writable(&token.templated_policies)?;
        if let Some(old) = existing {
            token.create_time = old.create_time;
        }
        token.hash = token_hash(&token);
        let accessor = token.accessor_id.clone();
        self.acl_write(Command::AclTokenSet(Box::new(token)))
            .await?;
        let tables = self.store.read();
        let stored = tables
            .acl_token(&accessor)
            .1
            .cloned()
            .ok_or_else(|| failed("Failed to retrieve token after insertion"))?;
        Ok(with_names(&tables, stored))
    }

    fn prepare_new_token(&self, token: &mut AclToken) -> Result<(), RpcError> {
        let tables = self.store.read();
        let in_use =
            |id: &str| tables.acl_token(id).1.is_some() || tables.acl_token_by_secret(id).is_some();
        if token.accessor_id.is_empty() {
            token.accessor_id = new_uuid();
        } else {
            validate_token_id(&token.accessor_id)
                .map_err(|e| failed(format!("Invalid Token: AccessorID - {e}")))?;
            if in_use(&token.accessor_id) {
                return Err(failed("Invalid Token: AccessorID is already in use"));
            }
        }
        if token.secret_id.is_empty() {
            token.secret_id = new_uuid();
        } else {
            validate_token_id(&token.secret_id)
                .map_err(|e| failed(format!("Invalid Token: SecretID - {e}")))?;
            if in_use(&token.secret_id) {
                return Err(failed("Invalid Token: SecretID is already in use"));
            }
        }
        let now = SystemTime::now();
        token.create_time = rfc3339(now);
        let ttl = match token.expiration_ttl.take() {
            Some(value) => parse_ttl(&value)?,
            None => Duration::ZERO,
        };
        if !ttl.is_zero() {
            if token.expiration_time.is_some() {
                return Err(failed(
                    "Token Expiration TTL and Expiration Time cannot both be set",
                ));
            }
            token.expiration_time = Some(rfc3339(now + ttl));
        }
        if let Some(at) = &token.expiration_time {
            let when = humantime::parse_rfc3339_weak(at)
                .map_err(|e| RpcError::BadRequest(format!("Token decoding failed: {e}")))?;
            let expires_in = when
                .duration_since(now)
                .map_err(|_| failed("ExpirationTime cannot be before CreateTime"))?;
            if expires_in > MAX_EXPIRATION + Duration::from_secs(1) {
                return Err(failed(format!(
                    "ExpirationTime cannot be more than {} in the future (was {})",
                    format_duration(MAX_EXPIRATION),
                    format_duration(expires_in)
                )));
            }
            if expires_in + Duration::from_secs(1) < MIN_EXPIRATION {
                return Err(failed(format!(
                    "ExpirationTime cannot be less than {} in the future (was {})",
                    format_duration(MIN_EXPIRATION),
                    format_duration(expires_in)
                )));
            }
        }
        if !token.auth_method.is_empty() {
            return Err(failed("AuthMethod field is disallowed outside of login"));
        }
        Ok(())
    }

    fn prepare_token_update(&self, token: &mut AclToken) -> Result<AclToken, RpcError> {
        if uuid::Uuid::parse_str(&token.accessor_id).is_err() {
            return Err(failed("AccessorID is not a valid UUID"));
        }
        if matches!(token.secret_id.as_str(), "allow" | "deny" | "manage") {
            return Err(RpcError::PermissionDenied("Cannot modify root ACL".into()));
        }
        let tables = self.store.read();
        let current = tables
            .acl_token(&token.accessor_id)
            .1
            .filter(|t| !expired(t))
            .cloned()
            .ok_or_else(|| failed(format!("Cannot find token {:?}", token.accessor_id)))?;
        if token.secret_id.is_empty() {
            token.secret_id = current.secret_id.clone();
        } else if token.secret_id != current.secret_id {
            return Err(failed("Changing a token's SecretID is not permitted"));
        }
        if token.local != current.local {
            return Err(failed(format!(
                "Cannot toggle local mode of {}",
                token.accessor_id
            )));
        }
        if token.auth_method.is_empty() {
            token.auth_method = current.auth_method.clone();
        } else if token.auth_method != current.auth_method {
            return Err(failed(format!(
                "Cannot change AuthMethod of {}",
                token.accessor_id
            )));
        }
        let ttl_given = token
            .expiration_ttl
            .take()
            .is_some_and(|v| parse_ttl(&v).map(|d| !d.is_zero()).unwrap_or(true));
        if ttl_given {
            return Err(failed(format!(
                "Cannot change expiration time of {}",
                token.accessor_id
            )));
        }
        match &token.expiration_time {
            Some(at) if current.expiration_time.as_deref() != Some(at.as_str()) => {
                return Err(failed(format!(
                    "Cannot change expiration time of {}",
                    token.accessor_id
                )))
            }
            Some(_) => {}
            None => token.expiration_time = current.expiration_time.clone(),
        }
        Ok(current)
    }

    /// `ACL.TokenRead` by AccessorID.
    pub(crate) async fn acl_token_read(
        &self,
        opts: &QueryOptions,
        accessor_id: String,
    ) -> Result<Queried<Option<AclToken>>, RpcError> {
        let show_secret = self.may_write_acls(&opts.token);
        self.acl_read_query(
            opts,
            &[Table::AclTokens, Table::AclPolicies, Table::AclRoles],
            |t| {
                let token = t
                    .acl_token(&accessor_id)
                    .1
                    .filter(|tok| !expired(tok))
                    .map(|tok| shown(t, tok, show_secret));
                Ok((t.table_index(Table::AclTokens), token))
            },
        )
        .await
    }

    /// `ACL.TokenRead` by the request's own secret (no permission needed).
    pub(crate) fn acl_token_of_request(&self, opts: &QueryOptions) -> Result<AclToken, RpcError> {
        self.acl_on()?;
        let secret = if opts.token.is_empty() {
            ANONYMOUS_TOKEN_SECRET
        } else {
            &opts.token
        };
        let tables = self.store.read();
        let token = tables
            .acl_token_by_secret(secret)
            .filter(|t| !expired(t))
            .cloned()
            .ok_or(RpcError::AclNotFound)?;
        Ok(with_names(&tables, token))
    }

    /// `ACL.TokenList`.
    pub(crate) async fn acl_token_all(
        &self,
        opts: &QueryOptions,
        filter: AclTokenFilter,
    ) -> Result<Queried<Vec<AclToken>>, RpcError> {
        let show_secret = self.may_write_acls(&opts.token);
        self.acl_read_query(
            opts,
            &[Table::AclTokens, Table::AclPolicies, Table::AclRoles],
            |t| {
                let (index, tokens) = t.acl_tokens();
                let listed = tokens
                    .filter(|tok| !expired(tok))
                    .filter(|tok| !(filter.global_only && tok.local))
                    .filter(|tok| {
                        (filter.policy.is_empty()
                            || tok.policies.iter().any(|l| l.id == filter.policy))
                            && (filter.role.is_empty()
                                || tok.roles.iter().any(|l| l.id == filter.role))
                            && (filter.auth_method.is_empty()
                                || tok.auth_method == filter.auth_method)
                            && (filter.service_name.is_empty()
                                || tok
                                    .service_identities
                                    .iter()
                                    .any(|s| s.service_name == filter.service_name)
                                || crate::acl_templated::names_service(
                                    &tok.templated_policies,
                                    &filter.service_name,
                                ))
                    })
                    .map(|tok| shown(t, tok, show_secret))
                    .collect();
                Ok((index, listed))
            },
        )
        .await
    }

    /// `ACL.TokenDelete`.
    pub(crate) async fn acl_token_remove(
        &self,
        opts: &WriteOptions,
        accessor_id: String,
    ) -> Result<(), RpcError> {
        let local = self
            .store
            .read()
            .acl_token(&accessor_id)
            .1
            .is_some_and(|t| t.local);
        if !local {
            if let Some((remote, routed)) = self.global_write(opts)? {
                return remote.acl_token_delete(&routed, accessor_id).await;
            }
        }
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if accessor_id == ANONYMOUS_TOKEN_ID {
            return Err(failed(
                "Delete operation not permitted on the anonymous token",
            ));
        }
        let secret = self
            .store
            .read()
            .acl_token(&accessor_id)
            .1
            .filter(|t| !expired(t))
            .map(|t| t.secret_id.clone());
        match secret {
            None => return Err(RpcError::NotFound("Cannot find token to delete".into())),
            Some(secret) if secret == opts.token => {
                return Err(failed(
                    "Deletion of the request's authorization token is not permitted",
                ))
            }
            Some(_) => {}
        }
        self.acl_write(Command::AclTokenDelete(accessor_id))
            .await
            .map(|_| ())
    }

    /// `ACL.TokenClone`.
    pub(crate) async fn acl_token_copy(
        &self,
        opts: &WriteOptions,
        accessor_id: String,
        description: String,
    ) -> Result<AclToken, RpcError> {
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        let source = self
            .store
            .read()
            .acl_token(&accessor_id)
            .1
            .filter(|t| !expired(t))
            .cloned()
            .ok_or(RpcError::AclNotFound)?;
        if !source.auth_method.is_empty() {
            return Err(failed("Cannot clone a token created from an auth method"));
        }
        let copy = AclToken {
            accessor_id: String::new(),
            secret_id: String::new(),
            description: if description.is_empty() {
                source.description.clone()
            } else {
                description
            },
            policies: source.policies.clone(),
            roles: source.roles.clone(),
            service_identities: source.service_identities.clone(),
            node_identities: source.node_identities.clone(),
            templated_policies: source.templated_policies.clone(),
            local: source.local,
            expiration_time: source.expiration_time.clone(),
            ..Default::default()
        };
        self.acl_token_write(opts, copy, true).await
    }

    /// `ACL.PolicySet`.
    pub(crate) async fn acl_policy_write(
        &self,
        opts: &WriteOptions,
        mut policy: AclPolicy,
        create: bool,
    ) -> Result<AclPolicy, RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.acl_policy_set(&routed, policy, create).await;
        }
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if policy.name.is_empty() {
            return Err(failed("Invalid Policy: no Name is set"));
        }
        if !valid_name(&policy.name) {
            return Err(failed(
                "Invalid Policy: invalid Name. Only alphanumeric characters, '-' and '_' are allowed",
            ));
        }
        {
            let tables = self.store.read();
            if create || policy.id.is_empty() {
                policy.id = new_uuid();
            } else {
                let current = tables
                    .acl_policy(&policy.id)
                    .1
                    .ok_or_else(|| failed(format!("cannot find policy {}", policy.id)))?;
                if policy.id == GLOBAL_MANAGEMENT_POLICY_ID {
                    if policy.rules != current.rules && policy.rules != GLOBAL_MANAGEMENT_RULES {
                        return Err(failed(
                            "Changing the Rules for the builtin global-management policy is not permitted",
                        ));
                    }
                    if !policy.datacenters.is_empty() {
                        return Err(failed(
                            "Changing the Datacenters of the builtin global-management policy is not permitted",
                        ));
                    }
                    policy.rules = current.rules.clone();
                }
            }
        }
        legate_acl::parse(&policy.rules).map_err(failed)?;
        policy.hash = policy_hash(&policy);
        let id = policy.id.clone();
        self.acl_write(Command::AclPolicySet(Box::new(policy)))
            .await?;
        self.store
            .read()
            .acl_policy(&id)
            .1
            .cloned()
            .ok_or_else(|| failed("Failed to retrieve policy after insertion"))
    }

    /// `ACL.PolicyRead` by ID or name.
    pub(crate) async fn acl_policy_read(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
        by_name: bool,
    ) -> Result<Queried<Option<AclPolicy>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclPolicies], |t| {
            let found = if by_name {
                t.acl_policy_by_name(&id_or_name)
            } else {
                t.acl_policy(&id_or_name).1
            };
            Ok((t.table_index(Table::AclPolicies), found.cloned()))
        })
        .await
    }

    /// `ACL.PolicyList`.
    pub(crate) async fn acl_policy_all(
        &self,
        opts: &QueryOptions,
    ) -> Result<Queried<Vec<AclPolicy>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclPolicies], |t| {
            let (index, all) = t.acl_policies();
            Ok((index, all.cloned().collect()))
        })
        .await
    }

    /// `ACL.PolicyDelete`.
    pub(crate) async fn acl_policy_remove(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.acl_policy_delete(&routed, id).await;
        }
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if id == GLOBAL_MANAGEMENT_POLICY_ID {
            return Err(failed(
                "Delete operation not permitted on the builtin global-management policy",
            ));
        }
        if self.store.read().acl_policy(&id).1.is_none() {
            return Ok(());
        }
        self.acl_write(Command::AclPolicyDelete(id))
            .await
            .map(|_| ())
    }

    /// `ACL.RoleSet`.
    pub(crate) async fn acl_role_write(
        &self,
        opts: &WriteOptions,
        mut role: AclRole,
        create: bool,
    ) -> Result<AclRole, RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.acl_role_set(&routed, role, create).await;
        }
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if role.name.is_empty() {
            return Err(failed("Invalid Role: no Name is set"));
        }
        if !valid_name(&role.name) {
            return Err(failed(
                "Invalid Role: invalid Name. Only alphanumeric characters, '-' and '_' are allowed",
            ));
        }
        {
            let tables = self.store.read();
            if create || role.id.is_empty() {
                role.id = new_uuid();
            } else if tables.acl_role(&role.id).1.is_none() {
                return Err(failed(format!("cannot find role {}", role.id)));
            }
            role.policies = normalize_policy_links(&tables, &role.policies)?;
        }
        validate_identities(
            &role.service_identities,
            &role.node_identities,
            "role",
            false,
        )?;
        dedupe_identities(&mut role.service_identities, &mut role.node_identities);
        role.templated_policies =
            crate::acl_templated::normalize_for_role(&role.templated_policies)?;
        self.templated_policies_writable(&role.templated_policies)?;
        role.hash = {
            let mut as_token = AclToken {
                description: format!("{}\n{}", role.name, role.description),
                policies: role.policies.clone(),
                service_identities: role.service_identities.clone(),
                node_identities: role.node_identities.clone(),
                templated_policies: role.templated_policies.clone(),
                ..Default::default()
            };
            as_token.hash = token_hash(&as_token);
            as_token.hash
        };
        let id = role.id.clone();
        self.acl_write(Command::AclRoleSet(Box::new(role))).await?;
        let tables = self.store.read();
        let stored = tables
            .acl_role(&id)
            .1
            .cloned()
            .ok_or_else(|| failed("Failed to retrieve role after insertion"))?;
        Ok(role_with_names(&tables, stored))
    }

    /// `ACL.RoleRead` by ID or name.
    pub(crate) async fn acl_role_read(
        &self,
        opts: &QueryOptions,
        id_or_name: String,
        by_name: bool,
    ) -> Result<Queried<Option<AclRole>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclRoles, Table::AclPolicies], |t| {
            let found = if by_name {
                t.acl_role_by_name(&id_or_name)
            } else {
                t.acl_role(&id_or_name).1
            };
            Ok((
                t.table_index(Table::AclRoles),
                found.cloned().map(|r| role_with_names(t, r)),
            ))
        })
        .await
    }

    /// `ACL.RoleList`.
    pub(crate) async fn acl_role_all(
        &self,
        opts: &QueryOptions,
        policy: String,
    ) -> Result<Queried<Vec<AclRole>>, RpcError> {
        self.acl_read_query(opts, &[Table::AclRoles, Table::AclPolicies], |t| {
            let (index, all) = t.acl_roles();
            let listed = all
                .filter(|r| policy.is_empty() || r.policies.iter().any(|l| l.id == policy))
                .cloned()
                .map(|r| role_with_names(t, r))
                .collect();
            Ok((index, listed))
        })
        .await
    }

    /// `ACL.RoleDelete`.
    pub(crate) async fn acl_role_remove(
        &self,
        opts: &WriteOptions,
        id: String,
    ) -> Result<(), RpcError> {
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.acl_role_delete(&routed, id).await;
        }
        self.acl_writable()?;
        self.authorize(&opts.token, Resource::Acl, Access::Write)?;
        if self.store.read().acl_role(&id).1.is_none() {
            return Err(RpcError::NotFound("Cannot find role to delete".into()));
        }
        self.acl_write(Command::AclRoleDelete(id)).await.map(|_| ())
    }

    /// `/v1/internal/acl/authorize`: what the request's token may do.
    pub(crate) fn acl_authorize_checks(
        &self,
        opts: &QueryOptions,
        checks: Vec<AclAuthorizationCheck>,
    ) -> Result<Vec<AclAuthorizationCheck>, RpcError> {
        if checks.len() > 64 {
            return Err(RpcError::BadRequest(
                "Refusing to process more than 64 authorizations at once".into(),
            ));
        }
        let resolved = if self.config.acl.enabled {
            Some(self.resolve_token(&opts.token)?)
        } else {
            None
        };
        checks
            .into_iter()
            .map(|mut check| {
                let resource = legate_acl::Resource::parse(&check.resource)
                    .filter(|r| *r != legate_acl::Resource::Intention || !check.segment.is_empty())
                    .ok_or_else(|| {
                        RpcError::BadRequest(format!(
                            "Invalid resource {:?} in authorization request",
                            check.resource
                        ))
                    })?;
                let access = match check.access.as_str() {
                    "read" => legate_acl::Access::Read,
                    "list" => legate_acl::Access::List,
                    "write" => legate_acl::Access::Write,
                    other => {
                        return Err(RpcError::BadRequest(format!(
                            "Invalid access level {other:?} in authorization request"
                        )))
                    }
                };
                check.allow = match &resolved {
                    None => true,
                    Some(token) => token.authorizer.allowed(resource, &check.segment, access),
                };
                Ok(check)
            })
            .collect()
    }
}

/// A token with its links' names, its secret shown or redacted.
fn shown(tables: &Tables, token: &AclToken, show_secret: bool) -> AclToken {
    let mut out = with_names(tables, token.clone());
    if !show_secret {
        out.secret_id = HIDDEN.into();
    }
    out
}

/// Fills in the names of a token's policy and role links.
fn with_names(tables: &Tables, mut token: AclToken) -> AclToken {
    for link in &mut token.policies {
        link.name = tables
            .acl_policy(&link.id)
            .1
            .map(|p| p.name.clone())
            .unwrap_or_default();
    }
    for link in &mut token.roles {
        link.name = tables
            .acl_role(&link.id)
            .1
            .map(|r| r.name.clone())
            .unwrap_or_default();
    }
    token
}

fn role_with_names(tables: &Tables, mut role: AclRole) -> AclRole {
    for link in &mut role.policies {
        link.name = tables
            .acl_policy(&link.id)
            .1
            .map(|p| p.name.clone())
            .unwrap_or_default();
    }
    role
}

/// Links by ID or name, checked, stored by ID only, without duplicates;
/// `by_name` and `by_id` find the linked object's ID, `kind` names it in
/// Consul's error.
fn normalize_links(
    links: &[AclLink],
    kind: &str,
    by_name: impl Fn(&str) -> Option<String>,
    by_id: impl Fn(&str) -> Option<String>,
) -> Result<Vec<AclLink>, RpcError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for link in links {
        let id = if link.id.is_empty() {
            by_name(&link.name)
                .ok_or_else(|| failed(format!("No such ACL {kind} with name {:?}", link.name)))?
        } else {
            by_id(&link.id)
                .ok_or_else(|| failed(format!("No such ACL {kind} with ID {:?}", link.id)))?
        };
        if seen.insert(id.clone()) {
            out.push(AclLink {
                id,
                name: String::new(),
            });
        }
    }
    Ok(out)
}

fn normalize_policy_links(tables: &Tables, links: &[AclLink]) -> Result<Vec<AclLink>, RpcError> {
    normalize_links(
        links,
        "policy",
        |name| tables.acl_policy_by_name(name).map(|p| p.id.clone()),
        |id| tables.acl_policy(id).1.map(|p| p.id.clone()),
    )
}

fn normalize_role_links(tables: &Tables, links: &[AclLink]) -> Result<Vec<AclLink>, RpcError> {
    normalize_links(
        links,
        "role",
        |name| tables.acl_role_by_name(name).map(|r| r.id.clone()),
        |id| tables.acl_role(id).1.map(|r| r.id.clone()),
    )
}

/// Consul's checks of service and node identities on a token or role.
fn validate_identities(
    services: &[ServiceIdentity],
    nodes: &[NodeIdentity],
    on: &str,
    local: bool,
) -> Result<(), RpcError> {
    use legate_acl::identities::valid_identity_name;
    for s in services {
        if s.service_name.is_empty() {
            return Err(failed(format!(
                "Service identity is missing the service name field on this {on}"
            )));
        }
        if local && !s.datacenters.is_empty() {
            return Err(failed(format!(
                "Service identity {:?} cannot specify a list of datacenters on a local token",
                s.service_name
            )));
        }
        if !valid_identity_name(&s.service_name) {
            return Err(failed(format!(
                "Service identity {:?} has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
                s.service_name
            )));
        }
    }
    for n in nodes {
        if n.node_name.is_empty() {
            return Err(failed(format!(
                "Node identity is missing the node name field on this {on}"
            )));
        }
        if n.datacenter.is_empty() {
            return Err(failed(format!(
                "Node identity is missing the datacenter field on this {on}"
            )));
        }
        if !valid_identity_name(&n.node_name) {
            return Err(failed(
                "Node identity has an invalid name. Only lowercase alphanumeric characters, '-' and '_' are allowed",
            ));
        }
    }
    Ok(())
}

/// Merges duplicate identities (a service's datacenters joined).
pub(crate) fn dedupe_identities(
    services: &mut Vec<ServiceIdentity>,
    nodes: &mut Vec<NodeIdentity>,
) {
    let mut merged: Vec<ServiceIdentity> = Vec::new();
    for s in services.drain(..) {
        match merged.iter_mut().find(|m| m.service_name == s.service_name) {
            Some(m) if m.datacenters.is_empty() || s.datacenters.is_empty() => {
                m.datacenters.clear()
            }
            Some(m) => {
                for dc in s.datacenters {
                    if !m.datacenters.contains(&dc) {
                        m.datacenters.push(dc);
                    }
                }
            }
            None => merged.push(s),
        }
    }
    *services = merged;
    let mut seen = BTreeSet::new();
    nodes.retain(|n| seen.insert((n.node_name.clone(), n.datacenter.clone())));
}
