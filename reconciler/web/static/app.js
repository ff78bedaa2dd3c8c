/* nodus-gitops dashboard: keeps a server-rendered page current without reloading it.

   Live pages (<body data-poll>) re-read their own URL every 2 s and replace each element
   marked data-live="<id>" with the element of the same id in the fresh page, so new rows
   appear, gone ones go, and counts follow. The fresh page is parsed with DOMParser and its
   nodes are moved in: the server escaped every value already, and no string is ever
   assigned as HTML here. Focus, text selection, scroll positions and open <details> are
   carried over to the new elements, and the row the reader looks at stays where it is on
   the screen. Reading pauses while the tab is hidden.

   Every <time datetime> is written in the viewer's own zone with how long ago it was
   ("2026-12-02 05:10:03 CET · 4m ago"); its title is the instant as the server wrote it.

   When the server cannot be reached, a note says so (role=status) until it answers. */
(function () {
  "use strict";
  var INTERVAL_MS = 2000;
  var body = document.body;
  var liveStatus = document.getElementById("live");
  var connection = document.getElementById("connection");
  var lastOk = Date.now();
  var waiting = false;  // a read is due but the tab is hidden
  var lastSource = new WeakMap();  // a live element -> the markup it was made from

  /* -- times ------------------------------------------------------------------------ */

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function zoneName(moment) {
    try {
      var parts = new Intl.DateTimeFormat(navigator.language || "en-US",
        { timeZoneName: "short" }).formatToParts(moment);
      for (var i = 0; i < parts.length; i += 1) {
        if (parts[i].type === "timeZoneName") { return parts[i].value; }
      }
    } catch (e) { /* no Intl zone names: fall through to the offset */ }
    var offset = -moment.getTimezoneOffset();
    return "UTC" + (offset < 0 ? "-" : "+") + pad(Math.floor(Math.abs(offset) / 60)) + ":" +
      pad(Math.abs(offset) % 60);
  }

  function absolute(moment) {
    return moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" +
      pad(moment.getDate()) + " " + pad(moment.getHours()) + ":" + pad(moment.getMinutes()) +
      ":" + pad(moment.getSeconds()) + " " + zoneName(moment);
  }

  function relative(moment, now) {
    var seconds = Math.round((now - moment.getTime()) / 1000);
    var span = Math.abs(seconds);
    if (span < 5) { return "just now"; }
    var text = span < 60 ? span + "s" : span < 3600 ? Math.floor(span / 60) + "m" :
      span < 86400 ? Math.floor(span / 3600) + "h" : Math.floor(span / 86400) + "d";
    return seconds > 0 ? text + " ago" : "in " + text;
  }

  function formatTimes(root) {
    var now = Date.now();
    Array.prototype.forEach.call(root.querySelectorAll("time[datetime]"), function (el) {
      var instant = el.getAttribute("datetime");
      var moment = new Date(instant);
      if (isNaN(moment.getTime())) { return; }  // keep the server's text
      var text = absolute(moment) + " · " + relative(moment, now);
      if (el.textContent !== text) { el.textContent = text; }
      if (el.getAttribute("title") !== instant) { el.setAttribute("title", instant); }
    });
  }

  /* -- carrying focus and scroll over to a replacement ------------------------------ */

  // Where an element is inside a live element, as steps from it that survive rows coming
  // and going: a child that names itself (a row's data-key, a sync's data-sync, ...) is
  // found by that name, any other by its place among its siblings.
  var NAMES = ["id", "data-key", "data-sync", "data-binding", "data-stage", "data-cell"];

  function pathFrom(root, el) {
    var path = [];
    while (el && el !== root) {
      var step = { index: Array.prototype.indexOf.call(el.parentNode.children, el),
        tag: el.tagName };
      for (var i = 0; i < NAMES.length; i += 1) {
        if (el.hasAttribute(NAMES[i])) {
          step.name = NAMES[i];
          step.value = el.getAttribute(NAMES[i]);
          break;
        }
      }
      path.unshift(step);
      el = el.parentNode;
    }
    return path;
  }

  function atPath(root, path) {
    var el = root;
    for (var i = 0; el && i < path.length; i += 1) {
      var step = path[i];
      if (step.name) {
        el = Array.prototype.find.call(el.children, function (child) {
          return child.getAttribute(step.name) === step.value;
        }) || null;
      } else {
        el = el.children[step.index] || null;
        if (el && el.tagName !== step.tag) { el = null; }
      }
    }
    return el;
  }

  function counterpart(root, el, path) {
    // The element standing for `el` in the replacement `root`: at the same place (see
    // pathFrom), else by id, link target or form name.
    var placed = atPath(root, path);
    if (placed) { return placed; }
    var selectors = [];
    if (el.id) { selectors.push("#" + CSS.escape(el.id)); }
    ["href", "name"].forEach(function (attr) {
      var value = el.getAttribute(attr);
      if (value) { selectors.push(el.tagName + "[" + attr + "=\"" + CSS.escape(value) + "\"]"); }
    });
    for (var i = 0; i < selectors.length; i += 1) {
      var found = root.querySelector(selectors[i]);
      if (found) { return found; }
    }
    return null;
  }

  function carryFocus(old, fresh) {
    var active = document.activeElement;
    if (!active || active === body || !old.contains(active)) { return function () {}; }
    var path = pathFrom(old, active);
    var selection = typeof active.selectionStart === "number" ?
      [active.selectionStart, active.selectionEnd] : null;
    return function () {
      var target = old === active ? fresh : counterpart(fresh, active, path);
      if (!target) { return; }
      target.focus({ preventScroll: true });
      if (selection && typeof target.setSelectionRange === "function") {
        try { target.setSelectionRange(selection[0], selection[1]); } catch (e) { /* type */ }
      }
    };
  }

  function carryScroll(old) {
    var kept = [];
    [old].concat(Array.prototype.slice.call(old.querySelectorAll("*"))).forEach(function (el) {
      if (el.scrollTop || el.scrollLeft || el.matches("pre.log")) {  // a tail: even unscrolled
        kept.push({ path: pathFrom(old, el), top: el.scrollTop, left: el.scrollLeft,
          atEnd: el.scrollTop + el.clientHeight >= el.scrollHeight - 4 });
      }
    });
    var details = [old].concat(Array.prototype.slice.call(old.querySelectorAll("details")))
      .filter(function (d) { return d.tagName === "DETAILS"; })
      .map(function (d) { return { path: pathFrom(old, d), open: d.open }; });
    return function (fresh) {
      kept.forEach(function (k) {
        var el = atPath(fresh, k.path);
        if (!el) { return; }
        el.scrollLeft = k.left;
        el.scrollTop = k.atEnd ? el.scrollHeight : k.top;  // a tail read at its end stays there
      });
      details.forEach(function (d) {
        var el = atPath(fresh, d.path);
        if (el && el.tagName === "DETAILS") { el.open = d.open; }
      });
    };
  }

  /* -- replacing the live elements -------------------------------------------------- */

  function firstNamedInView() {
    // The first row (or card) of a live element on screen: the reader's place.
    var selector = NAMES.slice(1).map(function (n) { return "[data-live] [" + n + "]"; });
    var rows = document.querySelectorAll(selector.join(","));
    for (var i = 0; i < rows.length; i += 1) {
      var box = rows[i].getBoundingClientRect();
      if (box.bottom > 0 && box.height > 0) {
        for (var j = 1; j < NAMES.length; j += 1) {
          var value = rows[i].getAttribute(NAMES[j]);
          if (value !== null) {
            return { selector: "[" + NAMES[j] + "=\"" + CSS.escape(value) + "\"]", top: box.top };
          }
        }
      }
    }
    return null;
  }

  function keepInView(place) {
    // Rows that came or went above the reader's place do not move it on the screen.
    var row = place && document.querySelector(place.selector);
    if (!row) { return; }
    var moved = row.getBoundingClientRect().top - place.top;
    if (moved) { window.scrollBy(0, moved); }
  }

  function markArrivals(old, node) {
    // Rows (or cards) that were not there before are marked for a moment (app.css).
    var selector = NAMES.slice(1).map(function (n) { return "[" + n + "]"; }).join(",");
    var before = {};
    Array.prototype.forEach.call(old.querySelectorAll(selector), function (el) {
      before[NAMES.slice(1).map(function (n) { return el.getAttribute(n); }).join("|")] = 1;
    });
    Array.prototype.forEach.call(node.querySelectorAll(selector), function (el) {
      if (!before[NAMES.slice(1).map(function (n) { return el.getAttribute(n); }).join("|")]) {
        el.classList.add("arrived");
      }
    });
  }

  function swap(doc) {
    var place = firstNamedInView();
    var fresh = {};
    Array.prototype.forEach.call(doc.querySelectorAll("[data-live]"), function (el) {
      fresh[el.getAttribute("data-live")] = el;
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-live]"), function (old) {
      var next = fresh[old.getAttribute("data-live")];
      if (!old.isConnected || !next) { return; }  // inside a replaced one, or not on the page
      var source = next.outerHTML;
      if (lastSource.get(old) === source) { return; }
      var node = document.adoptNode(next);
      lastSource.set(node, source);
      formatTimes(node);
      markArrivals(old, node);
      var restoreFocus = carryFocus(old, node);
      var restoreScroll = carryScroll(old);
      old.replaceWith(node);
      restoreScroll(node);
      restoreFocus();
    });
    keepInView(place);
  }

  /* -- reading the page again, and saying when that fails --------------------------- */

  function since(ms) { return relative(new Date(ms), Date.now()); }

  function showOk() {
    lastOk = Date.now();
    if (connection.textContent) { connection.textContent = ""; }
    liveStatus.className = "live ok";
    liveStatus.textContent = "live";
    liveStatus.title = "updated " + absolute(new Date(lastOk));
  }

  function showLost(why) {
    connection.textContent = why + ", retrying (last update " + since(lastOk) + ")";
    liveStatus.className = "live lost";
    liveStatus.textContent = "offline";
  }

  function schedule() { setTimeout(refresh, INTERVAL_MS); }

  function refresh() {
    if (document.hidden) {
      waiting = true;
      liveStatus.className = "live paused";
      liveStatus.textContent = "paused";
      return;  // visibilitychange reads again
    }
    fetch(window.location.href, { headers: { Accept: "text/html" }, cache: "no-store",
      credentials: "same-origin", redirect: "error" })
      .then(function (res) {
        if (!res.ok) {
          var error = new Error("the server answered HTTP " + res.status);
          error.http = true;
          throw error;
        }
        return res.text();
      })
      .then(function (text) {
        swap(new DOMParser().parseFromString(text, "text/html"));
        showOk();
      })
      .catch(function (err) {
        showLost(err && err.http ? err.message : "connection lost");
      })
      .then(schedule);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && waiting) { waiting = false; refresh(); }
  });

  /* -- filters: a select submits its form when picked with a pointer; from the keyboard
     the arrows only move through the options and Enter submits ------------------------ */

  function autosubmit() {
    Array.prototype.forEach.call(document.querySelectorAll("form[data-autosubmit] select"),
      function (select) {
        var keyed = false;
        function submit() {
          if (select.form.requestSubmit) { select.form.requestSubmit(); } else {
            select.form.submit();
          }
        }
        select.addEventListener("pointerdown", function () { keyed = false; });
        select.addEventListener("keydown", function (event) {
          keyed = true;
          if (event.key === "Enter") { event.preventDefault(); submit(); }
        });
        select.addEventListener("change", function () { if (!keyed) { submit(); } });
      });
  }

  /* -- start ------------------------------------------------------------------------ */

  Array.prototype.forEach.call(document.querySelectorAll("[data-live]"), function (el) {
    lastSource.set(el, el.outerHTML);  // before the times are rewritten
  });
  formatTimes(document);
  setInterval(function () { formatTimes(document); }, 1000);  // keep "4m ago" true
  autosubmit();
  Array.prototype.forEach.call(document.querySelectorAll("pre.log"), function (pre) {
    pre.scrollTop = pre.scrollHeight;  // a tail: show its end
  });
  if (body.hasAttribute("data-poll") && liveStatus && connection) { schedule(); }
}());
