//! Help text for every metric Legate records, registered when the
//! recorder is installed (Consul registers its known metrics' help text
//! up front too), so the Prometheus form carries a `# HELP` line for each.
//! Timers are in milliseconds, gauges of time left in seconds.

/// Counters: (name without the prefix, help).
pub const COUNTERS: &[(&str, &str)] = &[
    ("raft.apply", "Writes applied through Raft on the leader."),
    (
        "raft.state.candidate",
        "Times this server became a Raft candidate (elections started).",
    ),
    (
        "raft.state.leader",
        "Times this server became the Raft leader.",
    ),
    (
        "raft.state.follower",
        "Times this server became a Raft follower.",
    ),
    ("rpc.request", "RPC requests this server answered."),
    (
        "rpc.request_error",
        "RPC requests this server answered with an error.",
    ),
    (
        "rpc.accept_conn",
        "Connections the server port accepted, by negotiated protocol.",
    ),
    (
        "rpc.dialed_conns",
        "TLS connections dialled to other servers, by protocol.",
    ),
    ("rpc.cross-dc", "RPC calls sent to another datacenter."),
    (
        "rpc.query",
        "Read requests this server received (blocking or not).",
    ),
    ("client.rpc", "RPC calls this agent made to servers."),
    (
        "client.rpc.failed",
        "RPC calls this agent made that got no answer.",
    ),
    (
        "serf.member.join",
        "Gossip members seen joining or coming back.",
    ),
    ("serf.member.left", "Gossip members seen leaving."),
    ("serf.member.failed", "Gossip members seen failing."),
    ("memberlist.udp.sent", "Gossip bytes sent over UDP."),
    ("memberlist.udp.received", "Gossip bytes received over UDP."),
    ("xds.server.pushes", "xDS responses sent, by proxy."),
    (
        "xds.server.nacks",
        "xDS responses a proxy rejected, by proxy.",
    ),
    (
        "acl.cache.evictions",
        "ACL cache entries let go to make room.",
    ),
    (
        "agent.cache.evictions",
        "Agent cache entries let go to make room.",
    ),
    (
        "wanfed.path_probes",
        "Probes of the path to the primary through the local mesh gateways.",
    ),
];

/// Timers (summaries in ms, the push latency a histogram): (name, help).
pub const TIMERS: &[(&str, &str)] = &[
    (
        "raft.commitTime",
        "Time from a write's dispatch to its commit on the leader (ms).",
    ),
    (
        "raft.fsm.apply",
        "Time to apply one Raft log entry to the state store (ms).",
    ),
    (
        "raft.leader.lastContact",
        "Time since a quorum of followers last acknowledged the leader (ms).",
    ),
    (
        "api.http",
        "HTTP API request time by method and route (ms).",
    ),
    ("kvs.apply", "Time to apply a KV write (ms)."),
    ("txn.apply", "Time to apply a transaction (ms)."),
    (
        "catalog.register",
        "Time to apply a catalog registration (ms).",
    ),
    (
        "catalog.deregister",
        "Time to apply a catalog deregistration (ms).",
    ),
    ("session.apply", "Time to apply a session write (ms)."),
    ("acl.apply", "Time to apply an ACL write (ms)."),
    ("acl.ResolveToken", "Time to resolve an ACL token (ms)."),
    (
        "config_entry.apply",
        "Time to apply a config entry write (ms).",
    ),
    (
        "prepared-query.apply",
        "Time to apply a prepared query write (ms).",
    ),
    (
        "federation_state.apply",
        "Time to apply a federation state write (ms).",
    ),
    (
        "dns.domain_query",
        "Time to answer a DNS query for a name (ms).",
    ),
    ("dns.ptr_query", "Time to answer a reverse DNS query (ms)."),
    (
        "leader.reconcile",
        "Time the leader takes to reconcile the servers' catalog entries (ms).",
    ),
    (
        crate::XDS_PUSH_LATENCY,
        "Time from a change reaching proxycfg to the xDS response written, by resource type (ms).",
    ),
];

/// Gauges: (name, help).
pub const GAUGES: &[(&str, &str)] = &[
    ("state.nodes", "Catalog nodes."),
    ("state.services", "Distinct service names."),
    ("state.service_instances", "Service instances."),
    ("state.kv_entries", "KV entries."),
    ("state.config_entries", "Config entries, by kind."),
    (
        "state.connect_instances",
        "Mesh service instances, by kind.",
    ),
    ("members.servers", "Servers of this datacenter in gossip."),
    (
        "members.clients",
        "Client agents of this datacenter in gossip.",
    ),
    (
        "rpc.queries_blocking",
        "Blocking queries this server is holding now.",
    ),
    ("session_ttl.active", "Sessions the leader keeps."),
    (
        "autopilot.healthy",
        "1 when every server is healthy, 0 when not (leader; NaN elsewhere).",
    ),
    (
        "autopilot.failure_tolerance",
        "Voters that may fail with quorum kept (leader; NaN elsewhere).",
    ),
    (
        "mesh.active-root-ca.expiry",
        "Seconds until the active mesh root CA expires.",
    ),
    (
        "mesh.active-signing-ca.expiry",
        "Seconds until the active mesh signing CA expires.",
    ),
    ("runtime.alloc_bytes", "Heap bytes in use."),
    ("runtime.sys_bytes", "Resident memory in bytes."),
    ("runtime.num_goroutines", "Live tasks of the async runtime."),
    (
        "runtime.total_gc_pause_ns",
        "Garbage-collection pauses; always 0, there is no collector.",
    ),
    ("xds.server.streams", "Open xDS streams."),
    ("agent.cache.entries", "Entries of an agent cache."),
    ("agent.cache.bytes", "Bytes of an agent cache."),
    (
        "wanfed.primary_gateways",
        "Primary gateways this server knows.",
    ),
    (
        "wanfed.local_gateways",
        "Local mesh gateways this server knows.",
    ),
    (
        "wanfed.primary_through_local",
        "1 when the primary is reached through the local gateways.",
    ),
    (
        "wanfed.local_path_failures",
        "Failed probes in a row of the path through the local gateways.",
    ),
    (
        "leader.replication.acl-policies.status",
        "1 after a good ACL policy replication round, 0 after a failed one.",
    ),
    (
        "leader.replication.acl-roles.status",
        "1 after a good ACL role replication round, 0 after a failed one.",
    ),
    (
        "leader.replication.acl-tokens.status",
        "1 after a good ACL token replication round, 0 after a failed one.",
    ),
    (
        "leader.replication.config-entries.status",
        "1 after a good config entry replication round, 0 after a failed one.",
    ),
    (
        "leader.replication.federation-state.status",
        "1 after a good federation state replication round, 0 after a failed one.",
    ),
];

/// Registers every help text with the installed recorder.
pub(crate) fn describe_all() {
    for (name, help) in COUNTERS {
        metrics::describe_counter!(*name, *help);
    }
    for (name, help) in TIMERS {
        metrics::describe_histogram!(*name, *help);
    }
    for (name, help) in GAUGES {
        metrics::describe_gauge!(*name, *help);
    }
}
