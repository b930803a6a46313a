// A service's compiled discovery chain, drawn as Consul's routing view
// draws it: the service, then its routers, splitters, resolvers and the
// targets they resolve to, in columns, with a line for each edge (a
// route's match, a split's weight, a failover) drawn in an SVG over them.
import { html } from "../vendor/htm-preact-3.1.1.js";
import { ROOT, useLive, Link, ErrorNote, enc } from "../lib.js";
import { Graph } from "../graph.js";

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
        edges.push({ from: id, to: `target:${target}`, label: "failover", kind: "failover" });
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
  const columns = COLUMNS.map((key) => ({
    key, title: key === "service" ? "service" : `${key}s`, boxes: boxes[key],
  }));
  return html`<${Graph} id="chain" columns=${columns} edges=${edges} />`;
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
