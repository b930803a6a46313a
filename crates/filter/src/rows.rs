//! The selectors each endpoint's rows accept, by Consul's field names
//! (including fields Consul has and Legate leaves empty, such as
//! `Partition` and `PeerName`, so a filter valid for Consul stays valid).
//! Free-form parts (proxy configuration, check definitions, tagged
//! addresses, permissions) accept any selector below them.

use std::sync::OnceLock;

use crate::Shape;

const NODE: &str = "ID Node Address Datacenter TaggedAddresses:{} Meta:{} \
    Partition PeerName Locality:* CreateIndex ModifyIndex";

const NODE_SERVICE: &str = "Kind ID Service Tags:[] Address TaggedAddresses:* Meta:{} \
    Port SocketPath Weights:* EnableTagOverride Proxy:* Connect:* Datacenter Namespace \
    Partition PeerName Locality:* ContentHash LocallyRegisteredAsSidecar CreateIndex ModifyIndex";

const HEALTH_CHECK: &str = "Node CheckID Name Status Notes Output ServiceID ServiceName \
    ServiceTags:[] Type Interval Timeout ExposedPort Definition:* Namespace Partition \
    PeerName CreateIndex ModifyIndex";

fn cached(cell: &'static OnceLock<Shape>, make: fn() -> Shape) -> &'static Shape {
    cell.get_or_init(make)
}

/// `/v1/catalog/nodes`.
pub fn node() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || Shape::fields(NODE, vec![]))
}

/// `/v1/catalog/service/:service`, `/v1/catalog/connect/:service`,
/// `/v1/catalog/services`.
pub fn service_node() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || {
        Shape::fields(
            "ID Node Address Datacenter TaggedAddresses:{} NodeMeta:{} ServiceKind ServiceID \
             ServiceName ServiceTags:[] ServiceAddress ServiceTaggedAddresses:* ServiceWeights:* \
             ServiceMeta:{} ServicePort ServiceSocketPath ServiceEnableTagOverride ServiceProxy:* \
             ServiceConnect:* Namespace Partition PeerName ServiceLocality:* CreateIndex ModifyIndex",
            vec![],
        )
    })
}

/// `/v1/agent/services`, `/v1/catalog/node-services/:node`.
pub fn node_service() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || Shape::fields(NODE_SERVICE, vec![]))
}

/// `/v1/health/checks|node|state`, `/v1/agent/checks`.
pub fn health_check() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || Shape::fields(HEALTH_CHECK, vec![]))
}

/// `/v1/health/service/:service`, `/v1/health/connect/:service`.
pub fn check_service_node() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || {
        Shape::fields(
            "",
            vec![
                ("Node", node().clone()),
                ("Service", node_service().clone()),
                ("Checks", Shape::List(Box::new(health_check().clone()))),
            ],
        )
    })
}

/// `/v1/session/list`, `/v1/session/node/:node`.
pub fn session() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || {
        Shape::fields(
            "ID Name Node LockDelay Behavior TTL NodeChecks:[] ServiceChecks:* Checks:[] \
             Namespace Partition CreateIndex ModifyIndex",
            vec![],
        )
    })
}

/// `/v1/connect/intentions`.
pub fn intention() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    cached(&SHAPE, || {
        Shape::fields(
            "ID Description SourceNS SourceName DestinationNS DestinationName SourcePartition \
             DestinationPartition SourcePeer SourceSamenessGroup SourceType Action \
             Permissions:* Precedence Meta:{} LegacyID LegacyMeta:{} LegacyCreateTime \
             LegacyUpdateTime CreatedAt UpdatedAt Hash CreateIndex ModifyIndex",
            vec![],
        )
    })
}

/// Rows without a fixed shape (config entries, KV entries).
pub fn any() -> &'static Shape {
    &Shape::Any
}
