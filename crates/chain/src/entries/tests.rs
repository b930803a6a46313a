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

#[test]
fn other_kinds_follow_consul_rules() {
    let valid = vec![
        json!({"Kind": "service-intentions", "Name": "api", "Sources": [
            {"Name": "web", "Action": "allow"},
            {"Name": "*", "Action": "deny", "Description": "default deny"},
            {"Name": "reporter", "Permissions": [{"Action": "allow", "HTTP": {"PathPrefix": "/v2", "Methods": ["GET"]}}]}]}),
        json!({"Kind": "service-intentions", "Name": "*", "Sources": [{"Name": "*", "Action": "deny"}]}),
        json!({"Kind": "ingress-gateway", "Name": "ingress", "TLS": {"Enabled": true, "TLSMinVersion": "TLSv1_2"},
               "Listeners": [{"Port": 8080, "Protocol": "http", "Services": [{"Name": "web", "Hosts": ["web.example.com", "*.example.org"]}, {"Name": "api"}]},
                             {"Port": 9090, "Services": [{"Name": "db"}]}]}),
        json!({"Kind": "terminating-gateway", "Name": "tgw", "Services": [
            {"Name": "billing", "CAFile": "/ca.pem", "CertFile": "/c.pem", "KeyFile": "/k.pem", "SNI": "billing.example.com"},
            {"Name": "legacy", "CAFile": "/ca.pem"}]}),
        json!({"Kind": "mesh", "Name": "mesh", "TLS": {"Incoming": {"TLSMinVersion": "TLSv1_2", "TLSMaxVersion": "TLSv1_3"}},
               "HTTP": {"Incoming": {"RequestNormalization": {"HeadersWithUnderscoresAction": "DROP_HEADER"}}}}),
        json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "web", "Consumers": [{"PeerName": "east"}]}]}),
    ];
    for entry in valid {
        assert_eq!(check(entry.clone()), Ok(()), "{entry}");
    }
    let invalid: Vec<(Value, &str)> = vec![
        (
            json!({"Kind": "service-intentions", "Name": "api"}),
            "At least one source is required",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api*", "Sources": [{"Name": "a", "Action": "allow"}]}),
            "Name: wildcard character '*' cannot be used with partial values",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Action": "maybe"}]}),
            "Sources[0].Action must be set to 'allow' or 'deny'",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Action": "allow", "Permissions": [{"Action": "allow", "HTTP": {"PathPrefix": "/"}}]}]}),
            "Action must be omitted if Permissions are specified",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "*", "Sources": [{"Name": "web", "Permissions": [{"Action": "allow", "HTTP": {"PathPrefix": "/"}}]}]}),
            "wildcarded destinations",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Permissions": [{"Action": "allow", "HTTP": {}}]}]}),
            "HTTP should not be empty",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Permissions": [{"Action": "allow"}]}]}),
            "Permissions[0].HTTP is required",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Action": "allow"}, {"Name": "web", "Action": "deny"}]}),
            "Sources[1] defines \"web\" more than once",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Action": "allow", "Type": "external"}]}),
            "Type must be set to 'consul'",
        ),
        (
            json!({"Kind": "service-intentions", "Name": "api", "Sources": [{"Name": "web", "Action": "allow", "LegacyID": "x"}]}),
            "LegacyID must be omitted",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1, "Services": [{"Name": "a"}]}, {"Port": 1, "Services": [{"Name": "b"}]}]}),
            "port 1 declared on two listeners",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1, "Protocol": "udp", "Services": [{"Name": "a"}]}]}),
            "'udp' is an unsupported protocol",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1}]}),
            "No service declared for listener with port 1",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1, "Services": [{"Name": "a"}, {"Name": "b"}]}]}),
            "Multiple services per listener",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1, "Services": [{"Name": "a", "Hosts": ["a.com"]}]}]}),
            "not supported for the tcp protocol",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "Listeners": [{"Port": 1, "Protocol": "http", "Services": [{"Name": "a", "Hosts": ["a.*.com"]}]}]}),
            "only allowed as the leftmost label",
        ),
        (
            json!({"Kind": "ingress-gateway", "Name": "i", "TLS": {"TLSMinVersion": "TLSv1_3", "TLSMaxVersion": "TLSv1_2"}, "Listeners": []}),
            "less than the configured min version",
        ),
        (
            json!({"Kind": "terminating-gateway", "Name": "t", "Services": [{"Name": ""}]}),
            "Service name cannot be blank.",
        ),
        (
            json!({"Kind": "terminating-gateway", "Name": "t", "Services": [{"Name": "a", "CertFile": "/c.pem"}]}),
            "must have a CertFile, CAFile, and KeyFile",
        ),
        (
            json!({"Kind": "terminating-gateway", "Name": "t", "Services": [{"Name": "a"}, {"Name": "a"}]}),
            "specified more than once",
        ),
        (
            json!({"Kind": "mesh", "Name": "mesh", "TLS": {"Outgoing": {"TLSMinVersion": "TLSv9"}}}),
            "error in outgoing TLS configuration",
        ),
        (
            json!({"Kind": "mesh", "Name": "mesh", "HTTP": {"Incoming": {"RequestNormalization": {"PathWithEscapedSlashesAction": "EAT"}}}}),
            "no matching PathWithEscapedSlashesAction value found for EAT",
        ),
        (
            json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "web"}]}),
            "must have at least one consumer",
        ),
        (
            json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "web", "Consumers": [{"Peer": "*"}]}]}),
            "exporting to all peers",
        ),
        (
            json!({"Kind": "exported-services", "Name": "default", "Services": [{"Name": "", "Consumers": [{"Peer": "a"}]}]}),
            "service name cannot be empty",
        ),
    ];
    for (entry, needle) in invalid {
        let err = check(entry.clone()).expect_err(&entry.to_string());
        assert!(
            err.contains(needle),
            "{entry}: {err:?} should mention {needle:?}"
        );
    }
}
