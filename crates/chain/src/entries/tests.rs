use legate_types::config_entry::from_json;
use legate_types::keys::canonicalize_keys;
use serde_json::{json, Value};

use super::validate_entry;

fn check(value: Value) -> Result<(), String> {
    let entry = from_json(canonicalize_keys(value))?;
    validate_entry(&entry)
}

#[test]
fn documented_shapes_are_accepted() {
    let valid = vec![
        json!({"Kind": "service-defaults", "Name": "web", "Protocol": "http", "MeshGateway": {"Mode": "local"},
               "UpstreamConfig": {"Defaults": {"ConnectTimeoutMs": 5000}}, "LocalRequestTimeoutMs": 2000}),
        json!({"kind": "proxy-defaults", "name": "global", "config": {"protocol": "http", "local_connect_timeout_ms": 1000},
               "mesh_gateway": {"mode": "remote"}}),
        json!({"Kind": "service-router", "Name": "web", "Routes": [
            {"Match": {"HTTP": {"PathPrefix": "/admin", "Header": [{"Name": "x-debug", "Exact": "1"}],
                                "QueryParam": [{"Name": "canary", "Present": true}], "Methods": ["GET", "post"]}},
             "Destination": {"Service": "admin", "PrefixRewrite": "/", "RequestTimeout": "15s", "NumRetries": 3,
                             "RetryOn": ["5xx", "reset"], "RetryOnStatusCodes": [503],
                             "RequestHeaders": {"Add": {"x-route": "admin"}, "Remove": ["x-internal"]}}},
            {"Match": {"HTTP": {"PathRegex": "^/api/v[0-9]+/"}}, "Destination": {"ServiceSubset": "v2"}}
        ]}),
        json!({"Kind": "service-splitter", "Name": "web", "Splits": [
            {"Weight": 90, "ServiceSubset": "v1"}, {"Weight": 9.99, "ServiceSubset": "v2"}, {"Weight": 0.01, "Service": "web-canary"}
        ]}),
        json!({"Kind": "service-resolver", "Name": "web", "DefaultSubset": "v1", "ConnectTimeout": "15s",
               "Subsets": {"v1": {"Filter": "Service.Meta.version == v1"}, "v2": {"Filter": "Service.Meta.version == v2", "OnlyPassing": true}},
               "Failover": {"*": {"Datacenters": ["dc2", "dc3"]}, "v1": {"Targets": [{"Datacenter": "dc2"}]}},
               "LoadBalancer": {"Policy": "ring_hash", "RingHashConfig": {"MinimumRingSize": 1024}, "HashPolicies": [{"Field": "header", "FieldValue": "x-user"}]}}),
        json!({"Kind": "service-resolver", "Name": "web", "Redirect": {"Service": "web-v2", "Datacenter": "dc2"}}),
        json!({"Kind": "mesh", "Name": "mesh", "TransparentProxy": {"MeshDestinationsOnly": true}}),
        json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "web", "Consumers": [{"Peer": "east"}]}]}),
    ];
    for entry in valid {
        assert_eq!(check(entry.clone()), Ok(()), "{entry}");
    }
}

#[test]
fn single_blocks_from_hcl_become_lists() {
    let hcl = "Kind = \"service-router\"\nName = \"web\"\nRoutes {\n  Match { HTTP { PathPrefix = \"/a\" } }\n}\n";
    let value = legate_hcl::parse(hcl).unwrap();
    let entry = from_json(canonicalize_keys(value)).unwrap();
    assert!(entry.body["Routes"].is_array());
    assert_eq!(validate_entry(&entry), Ok(()));
}

#[test]
fn invalid_entries_name_what_is_wrong() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"Kind": "service-defaults", "Name": "web", "Protocol": "udp"}),
            "Protocol \"udp\" is not one of",
        ),
        (
            json!({"Kind": "service-defaults", "Name": "web", "Protcol": "http"}),
            "invalid config key `Protcol`",
        ),
        (
            json!({"Kind": "service-defaults", "Name": "web", "Mode": "magic"}),
            "Mode \"magic\"",
        ),
        (
            json!({"Kind": "service-defaults", "Name": "web", "MeshGateway": {"Mode": "everywhere"}}),
            "MeshGateway.Mode",
        ),
        (
            json!({"Kind": "service-defaults", "Name": "web", "MaxInboundConnections": -1}),
            "MaxInboundConnections",
        ),
        (
            json!({"Kind": "proxy-defaults", "Name": "global", "Config": {"protocol": "smtp"}}),
            "Config.protocol",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"PathExact": "/a", "PathPrefix": "/b"}}}]}),
            "Route[0] should only contain at most one of PathExact, PathPrefix, or PathRegex",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"PathPrefix": "admin"}}}]}),
            "PathPrefix doesn't start with '/'",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"PathRegex": "(["}}}]}),
            "invalid regular expression",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"Header": [{"Exact": "x"}]}}}]}),
            "Header[0] missing required Name field",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"Header": [{"Name": "a", "Exact": "x", "Prefix": "y"}]}}}]}),
            "should only contain one of Present",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"Methods": ["FETCH"]}}}]}),
            "invalid method",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Destination": {"PrefixRewrite": "/"}}]}),
            "PrefixRewrite",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Destination": {"RetryOn": ["sometimes"]}}]}),
            "invalid retry condition",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Destination": {"RequestTimeout": "soon"}}]}),
            "invalid duration",
        ),
        (
            json!({"Kind": "service-splitter", "Name": "web", "Splits": []}),
            "no splits configured",
        ),
        (
            json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 90}, {"Weight": 5, "Service": "b"}]}),
            "sum of all split weights must be 100, not 95.000000",
        ),
        (
            json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 50}, {"Weight": 50, "Service": "web"}]}),
            "occurs more than once",
        ),
        (
            json!({"Kind": "service-splitter", "Name": "web", "Splits": [{"Weight": 150}, {"Weight": -50, "Service": "b"}]}),
            "between 0 and 100",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "DefaultSubset": "v9", "Subsets": {"v1": {}}}),
            "DefaultSubset \"v9\" is not a valid subset",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Subsets": {"V_1": {}}}),
            "Subset \"V_1\" is invalid",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Subsets": {"v1": {"Filter": "Service.Meta.version =="}}}),
            "Filter for subset \"v1\"",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Redirect": {"Service": "b"}, "Subsets": {"v1": {}}}),
            "Redirect and Subsets cannot both be set",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Redirect": {"Service": "web"}}),
            "no-op",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Failover": {"v3": {"Datacenters": ["dc2"]}}}),
            "Bad Failover[\"v3\"]: not a valid subset",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Failover": {"*": {}}}),
            "one of Service, ServiceSubset",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "LoadBalancer": {"Policy": "fastest"}}),
            "Bad LoadBalancer policy: \"fastest\" is not supported",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "Subsets": {"v1": {}},
                   "Failover": {"*": {"Targets": [{"Datacenter": "dc2"}], "Datacenters": ["dc3"]}}}),
            "Targets cannot be set with Datacenters",
        ),
        (
            json!({"Kind": "service-defaults", "Name": "*"}),
            "not a wildcard",
        ),
        (
            json!({"Kind": "service-defaults", "Name": "web", "MutualTLSMode": "loose"}),
            "Invalid MutualTLSMode \"loose\"",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"Header": [{"Name": "a"}]}}}]}),
            "should only contain one of Present",
        ),
        (
            json!({"Kind": "service-router", "Name": "web", "Routes": [{"Match": {"HTTP": {"Methods": ["GET", "get"]}}}]}),
            "more than once",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "LoadBalancer": {"Policy": "random", "HashPolicies": [{"Field": "header"}]}}),
            "HashPolicies specified for non-hash-based Policy",
        ),
        (
            json!({"Kind": "service-resolver", "Name": "web", "ConnectTimeout": "-5s"}),
            "negative",
        ),
    ];
    for (entry, needle) in cases {
        let err = check(entry.clone()).expect_err(&entry.to_string());
        assert!(
            err.contains(needle),
            "{entry}: {err:?} should mention {needle:?}"
        );
    }
}
