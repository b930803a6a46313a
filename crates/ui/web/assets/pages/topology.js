// A service's topology with live traffic: the services that call it, the
// service, and the services it calls (as /v1/internal/ui/service-topology
// finds them — registrations, intentions, routing config — and any it was
// seen calling), with a line per edge labelled with what the
// built-in proxies report to this agent — connections let through and
// denied by intentions, bytes both ways, failed handshakes and the rates
// of the last interval. The counters come from
// /v1/internal/ui/traffic/:service (refreshed every second) and cover the
// proxies registered with this agent.
import { html } from "../vendor/htm-preact-3.1.1.js";
import { CONFIG, ROOT, useLive, Link, ErrorNote, enc } from "../lib.js";
import { Graph } from "../graph.js";

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function rate(n) {
  return n >= 10 ? n.toFixed(0) : n.toFixed(1);
}

function edgeLabel(e) {
  if (!e) return "no traffic seen";
  const parts = [`${e.Connections} conn`, bytes(e.BytesToDestination + e.BytesToSource)];
  if (e.Denied) parts.push(`${e.Denied} denied`);
  if (e.HandshakeFailures) parts.push(`${e.HandshakeFailures} TLS failed`);
  return parts.join(" · ");
}

// Lines of edges never seen are dashed, of edges with denials red.
function edgeKind(e) {
  if (!e) return "idle";
  return e.Denied > 0 ? "denied" : "";
}

// One neighbour's line under its name: how it is known, what intentions say.
function known(summary) {
  if (!summary) return [];
  const intention = summary.Intention || {};
  const verdict = intention.HasPermissions ? "L7 permissions" : intention.Allowed ? "allowed" : "denied by intentions";
  return [`${summary.Source || "seen in traffic"} · ${verdict}`];
}

function EdgeTable({ edges }) {
  return html`<table class="list" id="edges">
    <thead><tr><th>Edge</th><th class="number">Connections</th><th class="number">Denied</th>
      <th class="number">Bytes →</th><th class="number">Bytes ←</th>
      <th class="number">TLS failures</th><th class="number">Connect failures</th>
      <th class="number">conn/s</th><th class="number">bytes/s</th><th>Counted by</th></tr></thead>
    <tbody>
      ${edges.map((e) => html`<tr data-edge=${`${e.Source}->${e.Destination}`}>
        <td>${e.Source} → ${e.Destination}</td>
        <td class="number" data-field="Connections">${e.Connections}</td>
        <td class="number" data-field="Denied">${e.Denied}</td>
        <td class="number" data-field="BytesToDestination">${e.BytesToDestination}</td>
        <td class="number" data-field="BytesToSource">${e.BytesToSource}</td>
        <td class="number" data-field="HandshakeFailures">${e.HandshakeFailures}</td>
        <td class="number" data-field="ConnectFailures">${e.ConnectFailures}</td>
        <td class="number">${rate(e.ConnectionsPerSecond)}</td>
        <td class="number">${rate(e.BytesPerSecond)}</td>
        <td>${e.MeasuredAt.join(", ")}</td>
      </tr>`)}
    </tbody>
  </table>`;
}

export function TopologyPage({ dc, name }) {
  const local = dc === CONFIG.LocalDatacenter;
  const traffic = useLive(local ? `/v1/internal/ui/traffic/${enc(name)}` : null);
  const declared = useLive(`/v1/internal/ui/service-topology/${enc(name)}?kind=&dc=${enc(dc)}`);
  const t = traffic.data || { Upstreams: [], Downstreams: [], ReportedBy: [] };
  const topo = declared.data || { Upstreams: [], Downstreams: [] };
  const summaries = { up: new Map(topo.Upstreams.map((s) => [s.Name, s])), down: new Map(topo.Downstreams.map((s) => [s.Name, s])) };
  const upstreams = new Map([...summaries.up.keys()].map((u) => [u, null]));
  for (const e of t.Upstreams) upstreams.set(e.Destination, e);
  const downstreams = new Map([...summaries.down.keys()].map((d) => [d, null]));
  for (const e of t.Downstreams) downstreams.set(e.Source, e);
  const link = (service) => `${ROOT}${enc(dc)}/services/${enc(service)}/topology`;
  const box = (prefix, service, e) => ({
    id: `${prefix}:${service}`, title: service, kind: e ? "" : "idle",
    lines: [e ? `${rate(e.ConnectionsPerSecond)} conn/s · ${bytes(Math.round(e.BytesPerSecond))}/s` : "no traffic seen",
      ...known(summaries[prefix].get(service))],
  });
  const columns = [
    { key: "downstream", title: "called by", boxes: [...downstreams].map(([s, e]) => box("down", s, e)) },
    { key: "service", title: "service", boxes: [{
      id: "service", title: name,
      lines: [`protocol ${topo.Protocol || "tcp"}`,
        t.ReportedBy.length ? `${t.ReportedBy.length} proxy reporting` : "no local proxy reporting",
        ...(t.InboundHandshakeFailures ? [`${t.InboundHandshakeFailures} inbound TLS failures`] : [])],
    }] },
    { key: "upstream", title: "calls", boxes: [...upstreams].map(([s, e]) => box("up", s, e)) },
  ];
  const edges = [
    ...[...downstreams].map(([s, e]) => ({ from: `down:${s}`, to: "service", label: edgeLabel(e), kind: edgeKind(e) })),
    ...[...upstreams].map(([s, e]) => ({ from: "service", to: `up:${s}`, label: edgeLabel(e), kind: edgeKind(e) })),
  ];
  const all = [...t.Downstreams, ...t.Upstreams];
  return html`<section>
    <p><${Link} href=${`${ROOT}${enc(dc)}/services/${enc(name)}`}>← ${name}</${Link}></p>
    <h1>Topology of ${name}</h1>
    <${ErrorNote} error=${traffic.error || declared.error} />
    ${!local && html`<p class="note">Live traffic is shown for this agent's datacenter only.</p>`}
    <${Graph} id="topology" columns=${columns} edges=${edges} />
    <p class="links">${[...downstreams.keys(), ...upstreams.keys()].map((s) => html`<${Link} href=${link(s)}>${s}</${Link}> `)}</p>
    ${t.ReportedBy.length > 0 && html`<p class="links" id="reporting">Proxies: ${t.ReportedBy.map((p) =>
      html`<${Link} href=${`${ROOT}${enc(dc)}/proxies/${enc(p)}`}>${p}</${Link}> `)}</p>`}
    <h2>Traffic</h2>
    ${all.length === 0
      ? html`<p class="note">No traffic reported yet: the counters come from the built-in proxies registered with this agent, every 2 s.</p>`
      : html`<${EdgeTable} edges=${all} />`}
    ${(t.FilteredByACLs || topo.FilteredByACLs) && html`<p class="note">Some edges are hidden: this token may not read their other service.</p>`}
  </section>`;
}
