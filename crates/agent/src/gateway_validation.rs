//! Consul's checks of a gateway registration (`NodeService.Validate`'s
//! gateway half), answered as Consul's agent answers them: HTTP 400
//! `Validation failed: ` and every problem in go-multierror's list form.

use legate_types::{NodeService, ServiceDefinition};

use crate::AgentError;

/// The service kinds that are gateways.
pub const GATEWAY_KINDS: [&str; 4] = [
    "mesh-gateway",
    "terminating-gateway",
    "ingress-gateway",
    "api-gateway",
];

/// go-multierror's text of `errors` (`1 error occurred:\n\t* ...\n\n`).
pub fn multierror(errors: &[String]) -> String {
    let items: Vec<String> = errors.iter().map(|e| format!("* {e}")).collect();
    if errors.len() == 1 {
        format!("1 error occurred:\n\t{}\n\n", items[0])
    } else {
        format!(
            "{} errors occurred:\n\t{}\n\n",
            errors.len(),
            items.join("\n\t")
        )
    }
}

/// Every problem of a gateway registration, in Consul's order.
pub fn gateway_problems(def: &ServiceDefinition, service: &NodeService) -> Vec<String> {
    let kind = service.kind.as_str();
    let mut problems = Vec::new();
    if service.port == 0 && kind != "ingress-gateway" && kind != "api-gateway" {
        problems.push(format!("Port must be non-zero for a {kind}"));
    }
    if def
        .connect
        .as_ref()
        .is_some_and(|c| c.sidecar_service.is_some())
    {
        problems.push(format!("A {kind} cannot have a sidecar service defined"));
    }
    if let Some(proxy) = &service.proxy {
        let invalid =
            |field: &str| format!("The Proxy.{field} configuration is invalid for a {kind}");
        if !proxy.destination_service_name.is_empty() {
            problems.push(invalid("DestinationServiceName"));
        }
        if !proxy.destination_service_id.is_empty() {
            problems.push(invalid("DestinationServiceID"));
        }
        if !proxy.local_service_address.is_empty() {
            problems.push(invalid("LocalServiceAddress"));
        }
        if proxy.local_service_port != 0 {
            problems.push(invalid("LocalServicePort"));
        }
        if !proxy.local_service_socket_path.is_empty() {
            problems.push(invalid("LocalServiceSocketPath"));
        }
        if !proxy.upstreams.is_empty() {
            problems.push(invalid("Upstreams"));
        }
    }
    problems
}

/// `Ok` for a valid gateway registration; Consul's 400 otherwise.
pub fn validate_gateway(def: &ServiceDefinition, service: &NodeService) -> Result<(), AgentError> {
    let problems = gateway_problems(def, service);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(AgentError::BadRequest(format!(
            "Validation failed: {}",
            multierror(&problems)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_read_as_consuls_multierror() {
        assert_eq!(
            multierror(&["Port must be non-zero for a mesh-gateway".into()]),
            "1 error occurred:\n\t* Port must be non-zero for a mesh-gateway\n\n"
        );
        assert_eq!(
            multierror(&["a".into(), "b".into()]),
            "2 errors occurred:\n\t* a\n\t* b\n\n"
        );
    }
}
