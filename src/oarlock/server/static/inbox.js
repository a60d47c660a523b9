// oarlock inbox: live updates over Server-Sent Events and the diff of an edit as it is
// typed. Everything here is an enhancement: the pages work without it. Text from the
// server is only ever set as textContent, never as HTML.
"use strict";

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function argsText(args) {
  return Object.entries(args || {}).map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join(", ");
}

function inboxRow(a) {
  const tr = el("tr", null, { "data-key": a.runId + "/" + a.toolCallId, class: "new" });
  const link = el("a", a.tool, { href: "/approvals/" + encodeURIComponent(a.runId) + "/" + encodeURIComponent(a.toolCallId) });
  const cells = [link, el("span", a.sideEffect, { class: "class class-" + a.sideEffect }), el("code", argsText(a.arguments)),
    document.createTextNode(a.policy ? (a.policy.ruleId || "default") + ": " + a.policy.reasons.join("; ") : "-"),
    document.createTextNode(a.agent), el("time", a.requestedAt, { datetime: a.requestedAt }),
    a.expiresAt ? el("time", a.expiresAt, { datetime: a.expiresAt }) : document.createTextNode("none")];
  for (const c of cells) { const td = el("td"); td.appendChild(c); tr.appendChild(td); }
  return tr;
}

function watchInbox() {
  const note = document.getElementById("live-note");
  const body = document.querySelector("#inbox tbody");
  if (!note || !body || !window.EventSource) return;
  const announce = document.getElementById("announce");
  const count = document.getElementById("count");
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
    if (added) announce.textContent = added + " new approval" + (added > 1 ? "s" : "");
  });
  source.addEventListener("approval_requested", (e) => {
    const a = JSON.parse(e.data);
    if (add(a)) announce.textContent = "New approval: " + a.tool + " (" + argsText(a.arguments) + ") for " + a.agent;
  });
  source.addEventListener("approval_decided", (e) => {
    const a = JSON.parse(e.data);
    const key = a.runId + "/" + a.toolCallId;
    for (const r of body.querySelectorAll("tr[data-key]")) if (r.dataset.key === key) r.remove();
    recount();
    announce.textContent = a.tool + " " + a.decision + " by " + a.decidedBy;
  });
  source.onerror = () => { note.textContent = "Live updates paused; reconnecting."; };
  source.onopen = () => { note.textContent = "Live: new approvals appear here."; };
}

function readField(input) {
  const kind = input.dataset.kind, raw = input.value;
  if (kind === "boolean") return raw === "true";
  if (kind === "number" || kind === "integer") return raw === "" ? undefined : Number(raw);
  if (kind === "json") { try { return JSON.parse(raw); } catch (err) { return raw; } }
  return raw;
}

function watchEdits() {
  const form = document.getElementById("approve-form");
  const diff = document.getElementById("diff");
  if (!form || !diff) return;
  const original = JSON.parse(form.dataset.original);
  const button = form.querySelector("button.approve");
  const show = () => {
    const rows = [];
    for (const input of form.querySelectorAll("[data-name]")) {
      const name = input.dataset.name, now = readField(input);
      if (JSON.stringify(now) !== JSON.stringify(original[name])) rows.push([name, original[name], now]);
    }
    diff.replaceChildren();
    if (!rows.length) {
      diff.appendChild(el("p", "No change: approving approves the call as the agent asked.", { class: "note" }));
      button.textContent = "Approve";
      return;
    }
    diff.appendChild(el("p", "You are approving an edited call:", { class: "note" }));
    const table = el("table"); const head = el("tr");
    for (const h of ["Argument", "Asked", "Approving"]) head.appendChild(el("th", h, { scope: "col" }));
    table.appendChild(head);
    for (const [name, was, now] of rows) {
      const tr = el("tr"); tr.appendChild(el("td", name));
      const a = el("td"); a.appendChild(el("del", JSON.stringify(was))); tr.appendChild(a);
      const b = el("td"); b.appendChild(el("ins", JSON.stringify(now))); tr.appendChild(b);
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
  source.addEventListener("status_changed", (e) => { status.textContent = JSON.parse(e.data).data.to; });
  source.onerror = () => source.close();
}

document.addEventListener("DOMContentLoaded", () => { watchInbox(); watchEdits(); watchRun(); });
