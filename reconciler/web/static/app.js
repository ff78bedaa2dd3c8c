/* nodus-gitops dashboard: keeps a server-rendered page current without reloading it.
   Every 2 s it polls the JSON API URL the page names in <body data-poll> and updates the
   elements marked with data-* attributes. Text is only ever set with textContent, never
   parsed as HTML. The status line in the header says when the data is stale. */
(function () {
  "use strict";
  var INTERVAL_MS = 2000;
  var STALE_MS = 6000;
  var TERMINAL = { Succeeded: 1, Failed: 1, Cancelled: 1 };
  var BAD_RESULTS = { blocked: 1, invalid: 1, error: 1, partial: 1 };
  var body = document.body;
  var pollUrl = body.getAttribute("data-poll");
  var page = body.getAttribute("data-page") || "";
  var live = document.getElementById("live");
  var lastOk = Date.now();
  var lastError = "";
  var logsDone = false;

  function phaseSlug(phase) {
    return "phase-" + String(phase || "unknown").toLowerCase().replace(/[^a-z0-9]/g, "");
  }
  function phaseClass(phase) { return "phase " + phaseSlug(phase); }
  function sel(attr, value) {
    return "[" + attr + "=\"" + (window.CSS && CSS.escape ? CSS.escape(String(value))
      : String(value).replace(/["\\]/g, "\\$&")) + "\"]";
  }
  function flash(el) {
    var row = el.closest ? el.closest("tr, section, li") : null;
    if (!row) { return; }
    row.classList.remove("changed");
    void row.offsetWidth;
    row.classList.add("changed");
  }
  function setText(el, text) {
    text = text == null ? "" : String(text);
    if (el && el.textContent !== text) { el.textContent = text; flash(el); }
  }
  function setBadge(el, value, bad) {
    if (!el) { return; }
    var cls = phaseClass(value) + (bad ? " bad" : "");
    if (el.className !== cls) { el.className = cls; }
    setText(el, value || "Unknown");
  }
  function field(scope, name) { return scope.querySelector(sel("data-field", name)); }
  function money(value) {
    var n = Number(value || 0);
    return "$" + (isFinite(n) ? n.toFixed(2) : "0.00");
  }
  function progress(r) {
    var st = r.status || {};
    if (r.kind === "Pipeline") {
      var stages = st.stages || [];
      return stages.length ? stages.filter(function (s) { return s.phase === "Succeeded"; })
        .length + "/" + stages.length : "-";
    }
    if (r.kind === "Sweep") {
      var cells = st.cells || [];
      return cells.length ? cells.filter(function (c) { return TERMINAL[c.phase]; }).length +
        "/" + cells.length : "-";
    }
    return st.completedIndexes || "-";
  }
  function notice(text) {
    var el = document.getElementById("live-notice");
    if (!el) {
      el = document.createElement("p");
      el.id = "live-notice";
      el.className = "notice";
      var h1 = document.querySelector("main h1");
      h1.parentNode.insertBefore(el, h1.nextSibling);
    }
    el.textContent = text;
  }
  function shortSha(el, sha) {
    var code = el && el.querySelector("code");
    if (!code || !sha || code.getAttribute("title") === sha) { return; }
    var old = code.getAttribute("title");
    code.textContent = sha.slice(0, 12);
    code.setAttribute("title", sha);
    var link = code.closest("a");
    if (link && old) { link.href = link.href.replace(old, sha); }
    flash(el);
  }

  /* -- one updater per page ---------------------------------------------------------- */

  function overview(repos) {
    repos.forEach(function (b) {
      var card = document.querySelector("section" + sel("data-binding", b.id));
      if (!card) { notice("A repository binding was added: reload to see it."); return; }
      var last = b.lastSync || {};
      var lastSync = field(card, "lastSync");
      if (lastSync) {
        setBadge(lastSync.querySelector(".phase"), last.result || "-", BAD_RESULTS[last.result]);
        var msg = lastSync.querySelector(".muted");
        setText(msg, last.message || "");
        var time = lastSync.querySelector("time");
        if (time && last.finishedAt) { time.setAttribute("datetime", last.finishedAt); }
      }
      shortSha(field(card, "lastSeenCommit"), b.lastSeenCommit);
      shortSha(field(card, "lastAppliedCommit"), b.lastAppliedCommit);
      setText(field(card, "costUSD"), "$" + b.costUSD);
      var list = field(card, "phases");
      var phases = Object.keys(b.phases || {});
      if (list && list.tagName === "UL") {
        var seen = {};
        Array.prototype.forEach.call(list.querySelectorAll("li"), function (li) {
          var badge = li.querySelector(".phase");
          var name = badge ? badge.textContent : "";
          seen[name] = 1;
          setText(li.querySelector(".count"), b.phases[name] || 0);
        });
        if (phases.some(function (p) { return !seen[p]; })) {
          notice("Resources reached a new phase: reload to see its count.");
        }
      } else if (phases.length) {
        notice("Resources were created: reload to see them.");
      }
      var bad = b.lastError || BAD_RESULTS[last.result] || (b.phases || {}).Failed;
      card.classList.toggle("problem", !!bad);
    });
  }

  function resources(items, response) {
    items.forEach(function (r) {
      var row = document.querySelector("tr" + sel("data-key", r.kind + "/" + r.project + "/" +
        r.name));
      if (!row) { return; }
      setBadge(field(row, "phase"), r.phase);
      setText(field(row, "reason"), r.reason || "");
      setText(field(row, "cost"), money(r.costUSD));
      setText(field(row, "progress"), progress(r));
      row.classList.toggle("bad", r.phase === "Failed");
    });
    var total = response.headers.get("X-Total-Count");
    var shown = field(document, "total");
    if (total && shown && shown.textContent.indexOf(total + " resources") !== 0) {
      notice("Now " + total + " resources match these filters: reload to see them all.");
    }
  }

  function resource(r) {
    var st = r.status || {};
    var facts = document.querySelector("main > dl");
    if (facts) {
      setBadge(field(facts, "phase"), r.phase);
      setText(field(facts, "reason"), r.reason || "-");
      setText(field(facts, "message"), r.message || "-");
      setText(field(facts, "fix"), r.fix || "-");
      setText(field(facts, "cost"), money(r.costUSD));
    }
    (st.stages || []).forEach(function (s) {
      var node = document.querySelector("g" + sel("data-stage", s.name));
      if (node) {
        var cls = "node " + phaseSlug(s.phase);
        if (node.getAttribute("class") !== cls) { node.setAttribute("class", cls); }
        setText(node.querySelector(".node-phase"), s.phase);
        setText(node.querySelector("title"), s.name + ": " + s.phase);
      }
      var row = document.querySelector("tr" + sel("data-stage", s.name));
      if (row) {
        setBadge(field(row, "phase"), s.phase);
        setText(field(row, "cost"), money(s.costUSD));
        setText(field(row, "reason"), s.reason || "");
      }
    });
    (st.cells || []).forEach(function (c) {
      var row = document.querySelector("tr" + sel("data-cell", c.index));
      if (row) {
        setBadge(field(row, "phase"), c.phase);
        setText(field(row, "cost"), money(c.costUSD));
      }
    });
    var events = field(document, "events");
    if (events && r.events) {
      var text = r.events.map(function (e) { return e.at + e.reason + e.message; }).join("|");
      if (events.getAttribute("data-sig") !== null && events.getAttribute("data-sig") !== text) {
        var list = document.createElement("ol");
        list.className = "timeline";
        list.setAttribute("data-field", "events");
        r.events.forEach(function (e) {
          var li = document.createElement("li");
          li.className = "event";
          var kind = document.createElement("span");
          kind.className = "event-" + String(e.type).toLowerCase();
          kind.textContent = e.type;
          var reason = document.createElement("strong");
          reason.textContent = e.reason;
          var msg = document.createElement("span");
          msg.className = "message";
          msg.textContent = e.message;
          li.append(e.at.replace("T", " ").slice(0, 19) + " ", kind, " ", reason, " ", msg);
          list.appendChild(li);
        });
        list.setAttribute("data-sig", text);
        events.replaceWith(list);
      } else {
        events.setAttribute("data-sig", text);
      }
    }
    refreshLogs(r.phase);
  }

  function refreshLogs(phase) {
    if (logsDone) { return; }
    logsDone = !!TERMINAL[phase];  // one last read after the end, then stop
    Array.prototype.forEach.call(document.querySelectorAll("pre[data-logs]"), function (pre) {
      fetch(pre.getAttribute("data-logs"), { headers: { Accept: "application/json" } })
        .then(function (res) { return res.ok ? res.json() : null; })
        .then(function (data) {
          if (!data) { return; }
          var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          var text = data.lines.join("\n");
          if (pre.textContent !== text) {
            pre.textContent = text;
            if (atEnd) { pre.scrollTop = pre.scrollHeight; }
          }
        })
        .catch(function () { /* the status line reports failures */ });
    });
  }

  function history(syncs) {
    var fresh = 0;
    syncs.forEach(function (s) {
      var section = document.querySelector("section" + sel("data-sync", s.id));
      if (!section) { fresh += 1; return; }
      setBadge(section.querySelector("h2 " + sel("data-field", "result")), s.result,
        BAD_RESULTS[s.result]);
    });
    if (fresh) { notice(fresh + " new sync" + (fresh > 1 ? "s" : "") + ": reload to see."); }
  }

  var updaters = { overview: overview, resources: resources, history: history };

  /* -- polling and the status line -------------------------------------------------- */

  function showStatus() {
    if (!live) { return; }
    var age = Math.round((Date.now() - lastOk) / 1000);
    if (Date.now() - lastOk > STALE_MS) {
      live.className = "live stale";
      live.textContent = "stale: last updated " + age + " s ago" +
        (lastError ? " (" + lastError + ")" : "");
    } else {
      live.className = "live ok";
      live.textContent = "live · updated " + new Date(lastOk).toLocaleTimeString();
    }
  }

  function poll() {
    if (document.hidden) { setTimeout(poll, INTERVAL_MS); return; }
    fetch(pollUrl, { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (res) {
        if (!res.ok) { throw new Error("HTTP " + res.status); }
        return res.json().then(function (data) {
          var update = updaters[page] ||
            (page.indexOf("resource") === 0 || page === "logs" ? resource : null);
          if (update) { update(data, res); }
          lastOk = Date.now();
          lastError = "";
        });
      })
      .catch(function (err) { lastError = String(err && err.message || err); })
      .then(function () { showStatus(); setTimeout(poll, INTERVAL_MS); });
  }

  function autosubmit() {
    Array.prototype.forEach.call(document.querySelectorAll("form[data-autosubmit] select"),
      function (select) {
        select.addEventListener("change", function () { select.form.submit(); });
      });
  }

  autosubmit();
  Array.prototype.forEach.call(document.querySelectorAll("pre.log"), function (pre) {
    pre.scrollTop = pre.scrollHeight;  // a tail: show its end
  });
  if (pollUrl) {
    setInterval(showStatus, 1000);
    setTimeout(poll, INTERVAL_MS);
  }
}());
