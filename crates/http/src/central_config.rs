//! `?merge-central-config` on the catalog and health service reads:
//! proxy and gateway rows come back with `proxy-defaults` and
//! `service-defaults` merged in, as Consul's servers merge them
//! (`legate_agent::central_config`). Consul reads the parameter by its
//! presence alone: any value, `false` included, turns it on.

use legate_types::catalog::ConnectProxyConfig;
use legate_types::{NodeService, QueryOptions};

use crate::util::{ApiError, Params};
use crate::AppState;

/// Whether the request asks for the merge.
pub(crate) fn wanted(params: &Params) -> bool {
    params.has("merge-central-config")
}

/// Merges central config into every `(kind, service name, proxy)` that
/// takes it, reading the entries once and only when one does. A failed
/// read answers 500 with Consul's text.
pub(crate) async fn merge_rows<'a>(
    st: &AppState,
    opts: &QueryOptions,
    rows: impl IntoIterator<Item = (&'a str, &'a str, &'a mut ConnectProxyConfig)>,
) -> Result<(), ApiError> {
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|(kind, _, _)| legate_agent::central_config::applies_to(kind))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    let entries = st
        .agent
        .central_config(opts)
        .await
        .map_err(ApiError::internal)?;
    for (kind, name, proxy) in rows {
        legate_agent::central_config::merge(kind, name, proxy, &entries);
    }
    Ok(())
}

/// A service instance as a row [`merge_rows`] takes (a gateway registered
/// without proxy settings gets empty ones to merge into).
pub(crate) fn instance(service: &mut NodeService) -> (&str, &str, &mut ConnectProxyConfig) {
    let proxy = service.proxy.get_or_insert_with(Default::default);
    (service.kind.as_str(), service.service.as_str(), proxy)
}
