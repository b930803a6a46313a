//! Config entries and the discovery chain: writes normalized and validated
//! (per entry and across the chains they touch) before Raft, kind-aware
//! reads, and the compiled chain.

use legate_state::{Command, CommandResult, Table};
use legate_types::config_entry::{self, ConfigEntry};
use legate_types::*;

use crate::{Access, Resource, Server};

impl Server {
    pub(crate) async fn config_apply_endpoint(
        &self,
        opts: &WriteOptions,
        mut entry: ConfigEntry,
        cas: Option<u64>,
    ) -> Result<bool, RpcError> {
        if entry.kind == crate::intentions::INTENTIONS_KIND {
            self.intentions_writable()?;
        }
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.config_apply(&routed, entry, cas).await;
        }
        self.check_datacenter(&opts.datacenter)?;
        legate_chain::normalize_entry(&mut entry);
        config_entry::validate(&entry).map_err(RpcError::BadRequest)?;
        legate_chain::validate_entry(&entry).map_err(RpcError::BadRequest)?;
        self.check_chains_after(&entry.kind, &entry.name, Some(&entry))?;
        self.authorize_config_write(&opts.token, &entry.kind, &entry.name)?;
        let command = Command::ConfigEntrySet {
            entry: Box::new(entry),
            cas,
        };
        match self.write(command).await? {
            (_, CommandResult::Applied(applied)) => Ok(applied),
            (_, other) => Err(RpcError::Internal(format!(
                "unexpected config entry result {other:?}"
            ))),
        }
    }

    pub(crate) async fn config_get_endpoint(
        &self,
        opts: &QueryOptions,
        kind: String,
        name: String,
    ) -> Result<Queried<Option<ConfigEntry>>, RpcError> {
        let kind = config_entry::normalize_kind(&kind).map_err(RpcError::BadRequest)?;
        self.authorize_config_read(&opts.token, &kind, &name)?;
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::ConfigEntries]),
            |t| Ok(t.config_entry(&kind, &name)),
        )
        .await
    }

    pub(crate) async fn config_list_endpoint(
        &self,
        opts: &QueryOptions,
        kind: String,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError> {
        let kind = config_entry::normalize_kind(&kind).map_err(RpcError::BadRequest)?;
        let entries = self
            .filtered_list(
                opts,
                legate_filter::rows::any(),
                &[Table::ConfigEntries],
                |t| t.config_entries_of_kind(&kind),
            )
            .await?;
        self.filter_config_entries(&opts.token, entries)
    }

    pub(crate) async fn config_list_all_endpoint(
        &self,
        opts: &QueryOptions,
        kinds: Vec<String>,
    ) -> Result<Queried<Vec<ConfigEntry>>, RpcError> {
        // A caller that names no kinds is an old secondary: only the kinds
        // every version decodes (Consul's rule).
        let kinds = if kinds.is_empty() {
            crate::config_replication::KINDS_WITHOUT_A_LIST
                .iter()
                .map(|k| k.to_string())
                .collect()
        } else {
            kinds
        };
        let entries = self
            .filtered_list(
                opts,
                legate_filter::rows::any(),
                &[Table::ConfigEntries],
                |t| t.config_entries_of_kinds(&kinds),
            )
            .await?;
        self.filter_config_entries(&opts.token, entries)
    }

    pub(crate) async fn config_delete_endpoint(
        &self,
        opts: &WriteOptions,
        kind: String,
        name: String,
        cas: Option<u64>,
    ) -> Result<bool, RpcError> {
        let kind = config_entry::normalize_kind(&kind).map_err(RpcError::BadRequest)?;
        if kind == crate::intentions::INTENTIONS_KIND {
            self.intentions_writable()?;
        }
        if let Some((remote, routed)) = self.global_write(opts)? {
            return remote.config_delete(&routed, kind, name, cas).await;
        }
        self.check_datacenter(&opts.datacenter)?;
        self.authorize_config_write(&opts.token, &kind, &name)?;
        self.check_chains_after(&kind, &name, None)?;
        match self
            .write(Command::ConfigEntryDelete { kind, name, cas })
            .await?
        {
            (_, CommandResult::Applied(applied)) => Ok(applied),
            (_, other) => Err(RpcError::Internal(format!(
                "unexpected config entry result {other:?}"
            ))),
        }
    }

    pub(crate) async fn discovery_chain_endpoint(
        &self,
        opts: &QueryOptions,
        service: String,
        compile_datacenter: String,
        overrides: legate_types::rpc::ChainOverrides,
    ) -> Result<Queried<serde_json::Value>, RpcError> {
        if service.is_empty() {
            return Err(RpcError::BadRequest("Missing service name".into()));
        }
        if !matches!(
            overrides.protocol.to_ascii_lowercase().as_str(),
            "" | "tcp" | "http" | "http2" | "grpc"
        ) {
            return Err(RpcError::BadRequest(format!(
                "OverrideProtocol {:?} is not one of tcp, http, http2, grpc",
                overrides.protocol
            )));
        }
        if !matches!(
            overrides.mesh_gateway_mode.as_str(),
            "" | "none" | "local" | "remote"
        ) {
            return Err(RpcError::BadRequest(format!(
                "OverrideMeshGateway.Mode {:?} is not one of none, local, remote",
                overrides.mesh_gateway_mode
            )));
        }
        self.authorize(
            &opts.token,
            Resource::Service(service.clone()),
            Access::Read,
        )?;
        let datacenter = if compile_datacenter.is_empty() {
            self.config.datacenter.clone()
        } else {
            compile_datacenter
        };
        let kinds: Vec<String> = legate_chain::ROUTING_KINDS
            .iter()
            .map(|k| k.to_string())
            .collect();
        self.blocking_query(
            opts,
            |w| w.tables(&[Table::ConfigEntries]),
            |t| {
                let cluster_id = t.system_metadata(crate::CLUSTER_ID_KEY).ok_or_else(|| {
                    RpcError::Internal(
                        "the cluster id is not initialized yet; retry shortly".into(),
                    )
                })?;
                let (index, entries) = t.config_entries_of_kinds(&kinds);
                let request = legate_chain::CompileRequest {
                    service: service.clone(),
                    datacenter: datacenter.clone(),
                    trust_domain: format!("{cluster_id}.consul"),
                    override_protocol: overrides.protocol.clone(),
                    override_connect_timeout: overrides.connect_timeout,
                    override_mesh_gateway: overrides.mesh_gateway_mode.clone(),
                };
                let chain =
                    legate_chain::compile(&entries, &request).map_err(RpcError::Internal)?;
                let value =
                    serde_json::to_value(&chain).map_err(|e| RpcError::Internal(e.to_string()))?;
                Ok((index, value))
            },
        )
        .await
    }
}
