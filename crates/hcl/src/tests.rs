use super::*;
use serde_json::json;

#[test]
fn seed_demo_parses_as_written() {
    let demo = r#"services {
  name = "web"
  port = 8080
  connect {
    sidecar_service {
      proxy {
        upstreams {
          destination_name = "db"
          local_bind_port = 9191
        }
      }
    }
  }
}
services {
  name = "db"
  port = 9090
  connect { sidecar_service {} }
}
"#;
    let value = parse(demo).unwrap();
    assert_eq!(
        value,
        json!({"services": [
            {"name": "web", "port": 8080, "connect": {"sidecar_service": {"proxy": {"upstreams": {
                "destination_name": "db", "local_bind_port": 9191}}}}},
            {"name": "db", "port": 9090, "connect": {"sidecar_service": {}}}
        ]})
    );
}

#[test]
fn one_line_blocks_with_several_items() {
    let value = parse(r#"services { name = "web" connect { sidecar_service {} } }"#).unwrap();
    assert_eq!(
        value,
        json!({"services": {"name": "web", "connect": {"sidecar_service": {}}}})
    );
    let value = parse(r#"ports { grpc = 8502 }"#).unwrap();
    assert_eq!(value, json!({"ports": {"grpc": 8502}}));
}

#[test]
fn consul_doc_agent_config() {
    let doc = r#"
# Full configuration
datacenter = "east-aws"
data_dir = "/opt/consul"
log_level = "INFO"
node_name = "foobar"
server = true
bootstrap_expect = 3
retry_join = ["10.0.0.1", "10.0.0.2",]
/* a block comment */
watches = [
  {
    type = "checks"
    handler = "/usr/bin/health-check-handler.sh"
  }
]
telemetry {
  statsite_address = "127.0.0.1:2180" // trailing comment
}
acl {
  enabled = true
  default_policy = "deny"
  tokens { initial_management = "root" }
}
performance { raft_multiplier = 1 }
ui_config { enabled = true }
"#;
    let value = parse(doc).unwrap();
    assert_eq!(value["datacenter"], "east-aws");
    assert_eq!(value["server"], true);
    assert_eq!(value["bootstrap_expect"], 3);
    assert_eq!(value["retry_join"], json!(["10.0.0.1", "10.0.0.2"]));
    assert_eq!(value["watches"][0]["type"], "checks");
    assert_eq!(value["acl"]["tokens"]["initial_management"], "root");
    assert_eq!(value["performance"]["raft_multiplier"], 1);
}

#[test]
fn service_definition_with_checks_and_labels() {
    let doc = r#"
service {
  id = "redis"
  name = "redis"
  tags = ["primary"]
  address = ""
  meta { meta = "for my service" }
  port = 8000
  enable_tag_override = false
  checks = [
    {
      args = ["/usr/local/bin/check_redis.py"]
      interval = "10s"
    }
  ]
  weights { passing = 5, warning = 1 }
}
config_entries {
  bootstrap = [
    { kind = "proxy-defaults", name = "global", config { local_connect_timeout_ms = 1000 } }
  ]
}
bucket "logs" { region = "x" }
"#;
    let value = parse(doc).unwrap();
    assert_eq!(value["service"]["checks"][0]["interval"], "10s");
    assert_eq!(
        value["service"]["weights"],
        json!({"passing": 5, "warning": 1})
    );
    assert_eq!(
        value["config_entries"]["bootstrap"][0]["config"]["local_connect_timeout_ms"],
        1000
    );
    assert_eq!(value["bucket"]["logs"]["region"], "x");
}

#[test]
fn strings_heredocs_numbers() {
    let doc = "a = \"x ${var.y} \\\"q\\\"\"\nb = <<EOF\nline1\n  line2\nEOF\nc = <<-EOT\n    k\n      l\n    EOT\nd = -1\ne = 1.5\nf = 0x10\n";
    let value = parse(doc).unwrap();
    assert_eq!(value["a"], "x ${var.y} \"q\"");
    assert_eq!(value["b"], "line1\n  line2\n");
    assert_eq!(value["c"], "k\n  l\n");
    assert_eq!(value["d"], -1);
    assert_eq!(value["e"], 1.5);
    assert_eq!(value["f"], 16);
}

#[test]
fn errors_name_line_and_column() {
    let err = parse("a = 1\nb = \"open\n").unwrap_err();
    assert_eq!(err.line, 2);
    let err = parse("a {\n b = 1\n").unwrap_err();
    assert!(err.message.contains("missing '}'"), "{err}");
    let err = parse("a = bare").unwrap_err();
    assert!(err.message.contains("quoted"), "{err}");
    let err = parse("x y z").unwrap_err();
    assert!(err.message.contains("expected '='"), "{err}");
    assert!(parse("a = [1, 2").is_err());
    assert!(parse("/* never closed").is_err());
}
