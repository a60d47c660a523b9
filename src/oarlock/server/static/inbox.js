// oarlock inbox: live updates over Server-Sent Events and the diff of an edit as it is
// typed. Everything here is an enhancement: the pages work without it. Text from the
// server is only ever set as textContent, never as HTML, and always through visible(),
// which shows what the server's renderer shows as escapes (control, bidirectional and
// invisible characters) as escapes too.
"use strict";

// the characters oarlock's renderer escapes (oarlock._render, oarlock.governance._sanitize)
const UNSAFE = new RegExp(
  "[\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180e" +
  "\\u200b-\\u200f\\u202a-\\u202e\\u2028\\u2029\\u2060-\\u206f\\u3164\\ufeff\\uffa0" +
  "\\ufff0-\\ufffb\\u{1bca0}-\\u{1bca3}\\u{1d173}-\\u{1d17a}\\u{e0000}-\\u{e00ff}" +
  "\\u{e01f0}-\\u{e0fff}\\ud800-\\udfff]", "gu");
const NAMED = { "\n": "\\n", "\t": "\\t", "\r": "\\r" };
const MARKER = "[redacted]";

function hex(n, width) { return n.toString(16).padStart(width, "0"); }

function visible(text) {
  return String(text).replace(UNSAFE, (c) => {
    if (NAMED[c]) return NAMED[c];
    const cp = c.codePointAt(0);
    if (cp <= 0xff) return "\\x" + hex(cp, 2);
    if (cp <= 0xffff) return "\\u" + hex(cp, 4);
    return "\\U" + hex(cp, 8);
  });
}

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = visible(text);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function textNode(text) { return document.createTextNode(visible(text)); }

function argsText(args) {
  return Object.entries(args || {}).map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join(", ");
}

function inboxRow(a) {
  const tr = el("tr", null, { "data-key": a.runId + "/" + a.toolCallId, class: "new" });
  const link = el("a", a.tool, { href: "/approvals/" + encodeURIComponent(a.runId) + "/" + encodeURIComponent(a.toolCallId) });
  const cells = [link, el("span", a.sideEffect, { class: "class class-" + a.sideEffect }), el("code", argsText(a.arguments)),
    textNode(a.policy ? (a.policy.ruleId || "default") + ": " + a.policy.reasons.join("; ") : "-"),
    textNode(a.agent), el("time", a.requestedAt, { datetime: a.requestedAt }),
    a.expiresAt ? el("time", a.expiresAt, { datetime: a.expiresAt }) : textNode("none")];
  for (const c of cells) { const td = el("td"); td.appendChild(c); tr.appendChild(td); }
  return tr;
}

function watchInbox() {
  const note = document.getElementById("live-note");
  const body = document.querySelector("#inbox tbody");
  if (!note || !body || !window.EventSource) return;
  const announce = document.getElementById("announce");
  const count = document.getElementById("count");
  const say = (text) => { announce.textContent = visible(text); };
  const recount = () => { count.textContent = String(body.querySelectorAll("tr[data-key]").length); };
  const source = new EventSource(note.dataset.stream);
  const shown = (key) => [...body.querySelectorAll("tr[data-key]")].some((r) => r.dataset.key === key);
  const add = (a) => {
    if (shown(a.runId + "/" + a.toolCallId)) return false;
    const empty = body.querySelector("tr.empty"); if (empty) empty.remove();
    body.insertBefore(inboxRow(a), body.firstChild);
    recount();
    return true;
  };
  // what is pending when the stream (re)connects: any approval the page does not show yet
  source.addEventListener("snapshot", (e) => {
    const added = JSON.parse(e.data).approvals.filter(add).length;
    if (added) say(added + " new approval" + (added > 1 ? "s" : ""));
  });
  source.addEventListener("approval_requested", (e) => {
    const a = JSON.parse(e.data);
    if (add(a)) say("New approval: " + a.tool + " (" + argsText(a.arguments) + ") for " + a.agent);
  });
  source.addEventListener("approval_decided", (e) => {
    const a = JSON.parse(e.data);
    const key = a.runId + "/" + a.toolCallId;
    for (const r of body.querySelectorAll("tr[data-key]")) if (r.dataset.key === key) r.remove();
    recount();
    say(a.tool + " " + a.decision + " by " + a.decidedBy);
  });
  source.onerror = () => { note.textContent = "Live updates paused; reconnecting."; };
  source.onopen = () => { note.textContent = "Live: new approvals appear here."; };
}

// JSON with its object members in order, so that two equal values read alike
function stable(value) {
  if (value === undefined) return "undefined";
  if (Array.isArray(value)) return "[" + value.map(stable).join(",") + "]";
  if (value && typeof value === "object") {
    return "{" + Object.keys(value).sort().map((k) => JSON.stringify(k) + ":" + stable(value[k])).join(",") + "}";
  }
  return JSON.stringify(value);
}

// a field's value as the server reads it back (oarlock.server._exact.read_form)
function readField(input, original) {
  const kind = input.dataset.kind, raw = input.value, given = input.dataset.name in original;
  if (raw === "" && (kind !== "string" || !given)) return { value: undefined };
  if (kind === "boolean") return { value: raw === "true" };
  if (kind === "number") {
    const n = Number(raw.trim());
    return Number.isFinite(n) ? { value: n } : { bad: "not a number" };
  }
  if (kind === "text" || kind === "json") {
    try {
      const value = JSON.parse(raw);
      if (kind === "text" && typeof value !== "string") return { bad: "not a JSON string" };
      return { value };
    } catch (err) { return { bad: kind === "text" ? "not a JSON string (a newline is \\n)" : "not JSON" }; }
  }
  return { value: raw };
}

function watchEdits() {
  const form = document.getElementById("approve-form");
  const diff = document.getElementById("diff");
  if (!form || !diff) return;
  const original = JSON.parse(form.dataset.original);
  const button = form.querySelector("button.approve");
  const show = () => {
    const rows = [], problems = [];
    for (const input of form.querySelectorAll("[data-name]")) {
      const name = input.dataset.name, now = readField(input, original);
      if (now.bad) { problems.push(name + ": " + now.bad); continue; }
      if (stable(now.value) === stable(original[name])) continue;
      rows.push([name, original[name], now.value]);
      if (now.value !== undefined && stable(now.value).includes(MARKER)) {
        problems.push(name + ": still holds " + MARKER + " but is not the value shown; keep it as it was (its real value is kept) or replace it whole");
      }
    }
    diff.replaceChildren();
    for (const p of problems) diff.appendChild(el("p", p, { class: "error" }));
    if (!rows.length) {
      if (!problems.length) diff.appendChild(el("p", "No change: approving approves the call as the agent asked.", { class: "note" }));
      button.textContent = "Approve";
      return;
    }
    diff.appendChild(el("p", "You are approving an edited call:", { class: "note" }));
    const table = el("table"); const head = el("tr");
    for (const h of ["Argument", "Asked", "Approving"]) head.appendChild(el("th", h, { scope: "col" }));
    table.appendChild(head);
    const shownValue = (v) => (v === undefined ? "(not given)" : JSON.stringify(v));
    for (const [name, was, now] of rows) {
      const tr = el("tr"); tr.appendChild(el("td", name));
      const a = el("td"); a.appendChild(el("del", shownValue(was))); tr.appendChild(a);
      const b = el("td"); b.appendChild(el("ins", shownValue(now))); tr.appendChild(b);
      table.appendChild(tr);
    }
    diff.appendChild(table);
    button.textContent = "Approve with edits";
  };
  form.addEventListener("input", show);
  show();
}

function watchRun() {
  const status = document.getElementById("run-status");
  if (!status || !window.EventSource) return;
  const source = new EventSource(status.dataset.stream);
  source.addEventListener("status_changed", (e) => { status.textContent = visible(JSON.parse(e.data).data.to); });
  source.onerror = () => source.close();
}

document.addEventListener("DOMContentLoaded", () => { watchInbox(); watchEdits(); watchRun(); });
