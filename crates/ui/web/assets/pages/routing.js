// A service's compiled discovery chain, drawn as Consul's routing view
// draws it: the service, then its routers, splitters, resolvers and the
// targets they resolve to, in columns, with a line for each edge (a
// route's match, a split's weight, a failover) drawn in an SVG over them.
import { html, useState, useLayoutEffect, useRef } from "../vendor/htm-preact-3.1.1.js";
import { ROOT, useLive, Link, ErrorNote, enc } from "../lib.js";

const COLUMNS = ["service", "router", "splitter", "resolver", "target"];

function routeLabel(definition) {
  const http = (definition && definition.Match && definition.Match.HTTP) || {};
  if (http.PathExact) return `path = ${http.PathExact}`;
  if (http.PathPrefix) return `path ${http.PathPrefix}*`;
  if (http.PathRegex) return `path ~ ${http.PathRegex}`;
  if (http.Header && http.Header.length) return `header ${http.Header[0].Name}`;
  if (http.Methods && http.Methods.length) return http.Methods.join(", ");
  return "everything else";
}

// The boxes by column and the edges between them.
function layout(chain) {
  const boxes = { service: [], router: [], splitter: [], resolver: [], target: [] };
  const edges = [];
  boxes.service.push({ id: "service", title: chain.ServiceName, lines: [`protocol ${chain.Protocol}`] });
  edges.push({ from: "service", to: chain.StartNode, label: "" });
  for (const [id, node] of Object.entries(chain.Nodes || {})) {
    const box = { id, title: node.Name, lines: [] };
    if (node.Type === "router") {
      for (const route of node.Routes || []) {
        const label = routeLabel(route.Definition);
        box.lines.push(`${label} → ${route.NextNode.split(":")[1]}`);
        edges.push({ from: id, to: route.NextNode, label });
      }
    } else if (node.Type === "splitter") {
      for (const split of node.Splits || []) {
        box.lines.push(`${split.Weight}% → ${split.NextNode.split(":")[1]}`);
        edges.push({ from: id, to: split.NextNode, label: `${split.Weight}%` });
      }
    } else if (node.Type === "resolver") {
      const resolver = node.Resolver || {};
      box.lines.push(`timeout ${resolver.ConnectTimeout || "5s"}`);
      if (resolver.Target) edges.push({ from: id, to: `target:${resolver.Target}`, label: "" });
      for (const target of (resolver.Failover && resolver.Failover.Targets) || []) {
        box.lines.push(`failover → ${target}`);
        edges.push({ from: id, to: `target:${target}`, label: "failover", failover: true });
      }
    }
    (boxes[node.Type] || []).push(box);
  }
  for (const [id, target] of Object.entries(chain.Targets || {})) {
    const lines = [`${target.Service}${target.ServiceSubset ? ` (${target.ServiceSubset})` : ""} in ${target.Datacenter}`];
    if (target.Subset && target.Subset.Filter) lines.push(target.Subset.Filter);
    boxes.target.push({ id: `target:${id}`, title: id, lines });
  }
  return { boxes, edges };
}

function Chain({ chain }) {
  const { boxes, edges } = layout(chain);
  const container = useRef(null);
  const [lines, setLines] = useState([]);
  const signature = JSON.stringify(edges);
  useLayoutEffect(() => {
    const root = container.current;
    if (!root) return;
    const origin = root.getBoundingClientRect();
    const at = (id) => root.querySelector(`[data-node="${CSS.escape(id)}"]`);
    const drawn = [];
    for (const edge of edges) {
      const from = at(edge.from);
      const to = at(edge.to);
      if (!from || !to) continue;
      const a = from.getBoundingClientRect();
      const b = to.getBoundingClientRect();
      drawn.push({
        ...edge,
        x1: a.right - origin.left, y1: a.top + a.height / 2 - origin.top,
        x2: b.left - origin.left, y2: b.top + b.height / 2 - origin.top,
      });
    }
    setLines(drawn);
  }, [signature]);
  return html`<div class="chain" ref=${container} id="chain">
    <svg class="edges" aria-hidden="true">
      ${lines.map((l) => html`<g data-from=${l.from} data-to=${l.to}>
        <line x1=${l.x1} y1=${l.y1} x2=${l.x2} y2=${l.y2} class=${l.failover ? "failover" : ""} />
        ${l.label && html`<text x=${(l.x1 + l.x2) / 2} y=${(l.y1 + l.y2) / 2 - 4}>${l.label}</text>`}
      </g>`)}
    </svg>
    ${COLUMNS.map((column) => html`<div class="column" data-column=${column}>
      <h3>${column === "service" ? "service" : `${column}s`}</h3>
      ${boxes[column].map((box) => html`<div class=${`box ${column}`} data-node=${box.id}>
        <strong>${box.title}</strong>
        ${box.lines.map((line) => html`<div class="detail">${line}</div>`)}
      </div>`)}
    </div>`)}
  </div>`;
}

export function RoutingPage({ dc, name }) {
  const { data, error } = useLive(`/v1/discovery-chain/${enc(name)}?dc=${enc(dc)}`);
  return html`<section>
    <p><${Link} href=${`${ROOT}${enc(dc)}/services/${enc(name)}`}>← ${name}</${Link}></p>
    <h1>Routing for ${name}</h1>
    <${ErrorNote} error=${error} />
    ${data && data.Chain && html`<${Chain} chain=${data.Chain} />`}
  </section>`;
}
