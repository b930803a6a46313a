//! `POST /v1/agent/connect/authorize`: may the holder of a client
//! certificate connect to a local service? Decided from the agent's
//! intention cache for the target, as Consul's agent does.

use std::sync::Arc;

use legate_ca::SpiffeId;
use legate_types::intention::{AuthorizeRequest, AuthorizeResponse};
use legate_types::RpcError;

use crate::Agent;

impl Agent {
    /// Authorizes a connection from the service named in the client
    /// certificate's SPIFFE id to `Target`.
    pub async fn authorize(
        self: &Arc<Self>,
        request: &AuthorizeRequest,
    ) -> Result<AuthorizeResponse, RpcError> {
        if request.target.is_empty() {
            return Err(RpcError::BadRequest(
                "Target service must be specified".into(),
            ));
        }
        let id = SpiffeId::parse(&request.client_cert_uri).map_err(|_| {
            RpcError::BadRequest("ClientCertURI not a valid Connect identifier".into())
        })?;
        let SpiffeId::Service {
            trust_domain,
            service,
            ..
        } = &id
        else {
            return Err(RpcError::BadRequest(
                "ClientCertURI not a valid Service identifier".into(),
            ));
        };
        let roots = self.leaf_certs().roots().await?;
        if !trust_domain.eq_ignore_ascii_case(&roots.trust_domain) {
            return Ok(AuthorizeResponse {
                authorized: false,
                reason: format!("Identity from an external trust domain: {trust_domain}"),
            });
        }
        let intentions = self.intentions().for_destination(&request.target).await?;
        let check = legate_chain::intentions::check_intentions(
            &intentions,
            service,
            &request.target,
            self.default_intention_allow(),
        );
        Ok(AuthorizeResponse {
            authorized: check.allowed,
            reason: check.reason,
        })
    }
}
