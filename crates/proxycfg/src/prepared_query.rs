//! Prepared-query upstreams: a query is not a blocking read, so its
//! answer is polled, and a proxy keeps the last answer it had while the
//! servers cannot answer (fail-static).

use std::time::Duration;

use futures::StreamExt;

use crate::manager::Subscription;
use crate::snapshot::QueryEndpoint;

/// How often a prepared query is run again for the proxies that use it.
/// Consul's agent caches the answer without a refresh interval of its
/// own; Legate follows changes within this.
pub const QUERY_REFRESH: Duration = Duration::from_secs(3);

/// Follows a query by running `execute` every [`QUERY_REFRESH`]: the
/// first answer (an empty one when the first run fails, so the proxy's
/// other upstreams are not held up), then every answer that differs from
/// the last. Failures after the first answer keep the last one.
pub fn poll_query<F, Fut>(execute: F, refresh: Duration) -> Subscription<Vec<QueryEndpoint>>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<QueryEndpoint>, String>> + Send + 'static,
{
    Box::pin(
        futures::stream::unfold(
            (execute, None::<Vec<QueryEndpoint>>),
            move |(execute, last)| async move {
                let mut first = last.is_none();
                loop {
                    if !first {
                        tokio::time::sleep(refresh).await;
                    }
                    let answer = match execute().await {
                        Ok(mut endpoints) => {
                            in_stable_order(&mut endpoints);
                            Some(endpoints)
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "prepared query upstream: execute failed");
                            first.then(Vec::new)
                        }
                    };
                    first = false;
                    if let Some(answer) = answer {
                        if last.as_ref() != Some(&answer) {
                            return Some((answer.clone(), (execute, Some(answer))));
                        }
                    }
                }
            },
        )
        .boxed(),
    )
}

/// Puts an answer in a stable order (by datacenter, node, service id):
/// a query shuffles its answer on every run, and a reshuffle is no change.
pub fn in_stable_order(endpoints: &mut [QueryEndpoint]) {
    endpoints.sort_by(|a, b| {
        (&a.datacenter, &a.endpoint.node, &a.endpoint.service_id).cmp(&(
            &b.datacenter,
            &b.endpoint.node,
            &b.endpoint.service_id,
        ))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Endpoint, EndpointHealth};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn at(node: &str) -> QueryEndpoint {
        QueryEndpoint {
            endpoint: Endpoint {
                node: node.into(),
                service_id: "db-sidecar-proxy".into(),
                address: "10.0.0.1".into(),
                port: 21000,
                health: EndpointHealth::Passing,
                weight: 1,
            },
            datacenter: "dc1".into(),
            service: "db".into(),
        }
    }

    #[tokio::test]
    async fn the_first_failure_answers_empty_later_ones_keep_the_last_answer_and_repeats_are_not_sent(
    ) {
        // Runs: fail, [a], [a], fail, [b, a] (sorted to [a, b]).
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let mut answers = poll_query(
            move || {
                let n = r.fetch_add(1, Ordering::SeqCst);
                async move {
                    match n {
                        0 | 3 => Err("no leader".to_string()),
                        1 | 2 => Ok(vec![at("a")]),
                        _ => Ok(vec![at("b"), at("a")]),
                    }
                }
            },
            Duration::from_millis(1),
        );
        assert_eq!(answers.next().await.unwrap(), Vec::new());
        assert_eq!(answers.next().await.unwrap(), vec![at("a")]);
        assert_eq!(answers.next().await.unwrap(), vec![at("a"), at("b")]);
        assert_eq!(runs.load(Ordering::SeqCst), 5);
    }
}
