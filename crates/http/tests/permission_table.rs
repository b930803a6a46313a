//! The HTTP router against the permission table: every route the router
//! registers has a row in `legate_acl::doors::HTTP`, every row names a
//! registered route, and every config entry kind has its permissions.
//! (Each row is tried with an allowed and a denied token through the
//! binary in `crates/cli/tests/permission_rows.rs`.)

use std::collections::BTreeSet;

use legate_acl::doors::{config_entry_needs, http_door, CONFIG_ENTRY_KINDS, HTTP};

#[test]
fn every_route_has_a_row() {
    let routes = legate_http::route_list();
    assert!(routes.len() > 100, "{} routes", routes.len());
    let missing: Vec<String> = routes
        .iter()
        .filter(|(method, path)| match *method {
            "ANY" => !HTTP.iter().any(|d| door_path(d.door) == *path),
            _ => http_door(method, path).is_none(),
        })
        .map(|(method, path)| format!("{method} {path}"))
        .collect();
    assert!(missing.is_empty(), "routes without a row: {missing:#?}");
}

#[test]
fn every_row_is_a_route() {
    let routes: BTreeSet<(&str, &str)> = legate_http::route_list().into_iter().collect();
    let stale: Vec<&str> = HTTP
        .iter()
        .map(|d| d.door)
        .filter(|door| {
            let (method, path) = door
                .split('?')
                .next()
                .and_then(|d| d.split_once(' '))
                .expect("METHOD /path");
            !routes.contains(&(method, path)) && !routes.contains(&("ANY", path))
        })
        .collect();
    assert!(stale.is_empty(), "rows for no route: {stale:#?}");
    let mut seen = BTreeSet::new();
    for door in HTTP {
        assert!(seen.insert(door.door), "{} twice", door.door);
    }
}

#[test]
fn every_config_entry_kind_has_its_permissions() {
    for kind in legate_types::config_entry::KINDS {
        assert!(config_entry_needs(kind).is_some(), "{kind} has no row");
    }
    for row in CONFIG_ENTRY_KINDS {
        assert!(
            legate_types::config_entry::KINDS.contains(&row.kind),
            "{} is no kind",
            row.kind
        );
    }
}

fn door_path(door: &str) -> &str {
    let base = door.split('?').next().unwrap_or(door);
    base.split_once(' ').map(|(_, p)| p).unwrap_or(base)
}
