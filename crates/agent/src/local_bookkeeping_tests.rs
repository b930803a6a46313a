//! The local state's bookkeeping under random registrations, removals,
//! status changes and syncs: every service or check out of sync is in
//! its dirty set, the index of checks by service and the set of deferred
//! check updates are exact, and the proxy
//! version moves whenever the set of services that make proxies changes
//! (and not for plain services).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn policy() -> RegistrationPolicy {
    RegistrationPolicy {
        node_name: "n".into(),
        allow_scripts: false,
        sidecar_ports: (21000, 21999),
        locality: None,
    }
}

fn ttl_check(name: &str) -> CheckDefinition {
    CheckDefinition {
        name: name.into(),
        ttl: Some(Duration::from_secs(30)),
        ..Default::default()
    }
}

fn random_service(rng: &mut StdRng) -> ServiceDefinition {
    let id = format!("s{}", rng.random_range(0..30));
    let mut def = ServiceDefinition {
        id: id.clone(),
        name: format!("svc{}", rng.random_range(0..5)),
        port: Some(8080),
        ..Default::default()
    };
    match rng.random_range(0..6) {
        0 => {
            def.kind = "connect-proxy".into();
            def.proxy = Some(legate_types::ConnectProxyConfig {
                destination_service_name: "svc0".into(),
                ..Default::default()
            });
        }
        1 => {
            def.connect = Some(legate_types::ServiceConnect {
                native: false,
                sidecar_service: Some(Box::default()),
            })
        }
        2 => {
            def.connect = Some(legate_types::ServiceConnect {
                native: true,
                sidecar_service: None,
            })
        }
        _ => {}
    }
    for i in 0..rng.random_range(0..3) {
        def.checks.push(ttl_check(&format!("{id}-c{i}")));
    }
    def
}

fn proxies(local: &LocalState) -> Vec<(String, String)> {
    local
        .services
        .values()
        .filter(|s| makes_a_proxy(&s.service))
        .map(|s| (s.service.id.clone(), format!("{:?}", s.service)))
        .collect()
}

fn check_invariants(local: &LocalState) {
    for (id, s) in &local.services {
        assert!(
            s.in_sync || local.dirty_services.contains(id),
            "{id} out of sync but not dirty"
        );
    }
    for (id, c) in &local.checks {
        assert!(
            c.in_sync || local.dirty_checks.contains(id),
            "{id} out of sync but not dirty"
        );
    }
    let mut index: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (id, c) in &local.checks {
        index
            .entry(c.check.service_id.clone())
            .or_default()
            .insert(id.clone());
    }
    assert_eq!(index, local.checks_by_service);
    let deferred: BTreeSet<String> = (local.checks.iter())
        .filter(|(_, c)| c.deferred_until.is_some())
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(deferred, local.deferred_checks);
    assert_eq!(
        local.next_deferred(),
        local.checks.values().filter_map(|c| c.deferred_until).min()
    );
}

#[test]
fn dirty_sets_index_and_proxy_version_stay_exact_under_random_changes() {
    let mut rng = StdRng::seed_from_u64(25);
    let mut local = LocalState::default();
    let p = policy();
    for _ in 0..5_000 {
        let (before, version) = (proxies(&local), local.proxy_version);
        match rng.random_range(0..9) {
            0..=2 => {
                let def = random_service(&mut rng);
                let replace = rng.random_bool(0.5);
                let _ = local.add_service(def, "", false, replace, &p);
            }
            3 => {
                let id = format!("s{}", rng.random_range(0..30));
                local.remove_service(&id, true);
            }
            4 => {
                let (def, check) =
                    build_check("n", &ttl_check("node-check"), "", None, false).unwrap();
                local.put_check(def, check, "", false);
            }
            5 => {
                if let Some(id) = local
                    .checks
                    .keys()
                    .nth(rng.random_range(0..local.checks.len().max(1)))
                    .cloned()
                {
                    if rng.random_bool(0.5) {
                        local.remove_check(&id);
                    } else {
                        let status = [
                            HealthStatus::Passing,
                            HealthStatus::Warning,
                            HealthStatus::Critical,
                        ][rng.random_range(0..3)];
                        local.update_check(&id, status, "out");
                    }
                }
            }
            6 => {
                // A sync that got some of it across.
                let ids: Vec<String> = local.dirty_services.iter().cloned().collect();
                for id in ids.iter().filter(|_| rng.random_bool(0.5)) {
                    if let Some(s) = local.services.get_mut(id) {
                        s.in_sync = true;
                        local.dirty_services.remove(id);
                    }
                }
                let ids: Vec<String> = local.dirty_checks.iter().cloned().collect();
                for id in ids.iter().filter(|_| rng.random_bool(0.5)) {
                    if let Some(c) = local.checks.get_mut(id) {
                        c.in_sync = true;
                        local.dirty_checks.remove(id);
                    }
                }
            }
            7 => local.mark_all_out_of_sync(),
            _ => {
                local.check_update_interval = Duration::from_millis(1);
                if let Some(id) = local.checks.keys().next().cloned() {
                    let status = local.checks[&id].check.status;
                    local.update_check(&id, status, &format!("{}", rng.random::<u32>()));
                }
                if rng.random_bool(0.5) {
                    local.release_deferred(std::time::Instant::now() + Duration::from_secs(1));
                }
            }
        }
        check_invariants(&local);
        if proxies(&local) != before {
            assert!(
                local.proxy_version > version,
                "the proxies changed, the version did not"
            );
        }
    }
}

#[test]
fn plain_services_leave_the_proxy_version_alone() {
    let mut local = LocalState::default();
    let p = policy();
    for i in 0..100 {
        let def = ServiceDefinition {
            name: format!("plain{i}"),
            port: Some(80),
            checks: vec![ttl_check(&format!("c{i}"))],
            ..Default::default()
        };
        local.add_service(def, "", false, false, &p).unwrap();
    }
    local.remove_service("plain7", true);
    assert_eq!(local.proxy_version, 0);
    local
        .add_service(
            ServiceDefinition {
                name: "web".into(),
                port: Some(80),
                connect: Some(legate_types::ServiceConnect {
                    native: false,
                    sidecar_service: Some(Box::default()),
                }),
                ..Default::default()
            },
            "",
            false,
            false,
            &p,
        )
        .unwrap();
    assert!(local.proxy_version > 0);
    assert_eq!(local.service_health("plain3"), Some(HealthStatus::Critical));
    assert_eq!(local.service_health("plain7"), None);
}
