// The key/value store: a folder browser (`?keys&separator=/`, kept
// current), and a key's editor — value, flags, the session holding its
// lock — with save and delete; folders are created with a trailing `/` and
// deleted with everything under them.
import { html, useState, useEffect } from "../vendor/htm-preact-3.1.1.js";
import { ROOT, useLive, Link, ErrorNote, write, navigate, enc } from "../lib.js";

const encKey = (key) => key.split("/").map(enc).join("/");

// The value of a KV entry as text (UTF-8; Consul sends it as base64).
function decode(value) {
  if (!value) return "";
  const bytes = Uint8Array.from(atob(value), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

function Breadcrumbs({ dc, prefix }) {
  const parts = prefix.split("/").filter(Boolean);
  return html`<p class="crumbs">
    <${Link} href=${`${ROOT}${enc(dc)}/kv/`}>Key/Value</${Link}>
    ${parts.map((part, i) => html` / <${Link}
      href=${`${ROOT}${enc(dc)}/kv/${encKey(parts.slice(0, i + 1).join("/"))}/`}>${part}</${Link}>`)}
  </p>`;
}

function CreateForm({ dc, prefix }) {
  const [name, setName] = useState("");
  const [value, setValue] = useState("");
  const [error, setError] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    setError(null);
    try {
      const key = prefix + name;
      await write("PUT", `/v1/kv/${encKey(key)}?dc=${enc(dc)}`, name.endsWith("/") ? "" : value);
      setName("");
      setValue("");
    } catch (e) {
      setError(e);
    }
  };
  return html`<form class="editor" id="kv-create" onSubmit=${submit}>
    <h2>Create</h2>
    <label>Key or folder (end with /)
      <input name="key" required value=${name} onInput=${(e) => setName(e.target.value)} /></label>
    <label>Value
      <textarea name="value" rows="4" value=${value} onInput=${(e) => setValue(e.target.value)}
        disabled=${name.endsWith("/")}></textarea></label>
    <button type="submit">Save</button>
    <${ErrorNote} error=${error} />
  </form>`;
}

function Folder({ dc, prefix }) {
  const { data, error } = useLive(
    `/v1/kv/${encKey(prefix)}?keys&separator=/&dc=${enc(dc)}`, []
  );
  const keys = (data || []).filter((k) => k !== prefix);
  const [problem, setProblem] = useState(null);
  const remove = async (key) => {
    setProblem(null);
    try {
      await write("DELETE", `/v1/kv/${encKey(key)}?dc=${enc(dc)}${key.endsWith("/") ? "&recurse" : ""}`);
    } catch (e) {
      setProblem(e);
    }
  };
  return html`<section>
    <${Breadcrumbs} dc=${dc} prefix=${prefix} />
    <h1>Key/Value</h1>
    <${ErrorNote} error=${error || problem} />
    <table class="list" id="kv">
      <thead><tr><th>Key</th><th></th></tr></thead>
      <tbody>
        ${keys.map((key) => {
          const label = key.slice(prefix.length);
          const href = key.endsWith("/")
            ? `${ROOT}${enc(dc)}/kv/${encKey(key)}`
            : `${ROOT}${enc(dc)}/kv/${encKey(key)}/edit`;
          return html`<tr data-key=${key}>
            <td><${Link} href=${href}>${label}</${Link}>${key.endsWith("/") && html` <span class="badge">folder</span>`}</td>
            <td class="actions"><button type="button" onClick=${() => remove(key)}>Delete</button></td>
          </tr>`;
        })}
      </tbody>
    </table>
    <${CreateForm} dc=${dc} prefix=${prefix} />
  </section>`;
}

function Editor({ dc, keyName }) {
  const { data, error } = useLive(`/v1/kv/${encKey(keyName)}?dc=${enc(dc)}`);
  const entry = data && data[0];
  const [value, setValue] = useState(null);
  const [flags, setFlags] = useState(null);
  const [problem, setProblem] = useState(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => { setValue(null); setFlags(null); }, [keyName]);
  const current = value !== null ? value : entry ? decode(entry.Value) : "";
  const currentFlags = flags !== null ? flags : entry ? String(entry.Flags) : "0";
  const parent = keyName.includes("/") ? keyName.slice(0, keyName.lastIndexOf("/") + 1) : "";
  const save = async (event) => {
    event.preventDefault();
    setProblem(null);
    try {
      await write("PUT", `/v1/kv/${encKey(keyName)}?dc=${enc(dc)}&flags=${enc(currentFlags)}`, current);
      setSaved(true);
    } catch (e) {
      setProblem(e);
    }
  };
  const remove = async () => {
    try {
      await write("DELETE", `/v1/kv/${encKey(keyName)}?dc=${enc(dc)}`);
      navigate(`${ROOT}${enc(dc)}/kv/${encKey(parent)}`);
    } catch (e) {
      setProblem(e);
    }
  };
  return html`<section>
    <${Breadcrumbs} dc=${dc} prefix=${parent} />
    <h1 class="key">${keyName}</h1>
    <${ErrorNote} error=${error && error.status !== 404 ? error : null} />
    <form class="editor" id="kv-edit" onSubmit=${save}>
      <label>Value
        <textarea name="value" rows="10" value=${current}
          onInput=${(e) => { setValue(e.target.value); setSaved(false); }}></textarea></label>
      <label>Flags
        <input name="flags" inputmode="numeric" value=${currentFlags} onInput=${(e) => setFlags(e.target.value)} /></label>
      ${entry && entry.Session && html`<p class="lock">Locked by session ${entry.Session}</p>`}
      <div class="buttons">
        <button type="submit">Save</button>
        <button type="button" class="danger" onClick=${remove}>Delete</button>
        ${saved && html`<span class="saved">Saved</span>`}
      </div>
      <${ErrorNote} error=${problem} />
    </form>
  </section>`;
}

// `/ui/:dc/kv/<folder>/` and `/ui/:dc/kv/<key>/edit`.
export function KvPage({ dc, rest }) {
  if (rest.endsWith("/edit")) {
    return html`<${Editor} dc=${dc} keyName=${rest.slice(0, -"/edit".length)} />`;
  }
  const prefix = rest && !rest.endsWith("/") ? `${rest}/` : rest;
  return html`<${Folder} dc=${dc} prefix=${prefix} />`;
}

