// Rate runs by keyboard, as annotation queues do: one metric of one run is current (outlined); a number key
// answers it with that choice and moves on to the next metric, then the next run. j / ↓ and k / ↑ move
// without answering; s skips the run (it leaves your queue); n writes a note first (Enter in the note
// answers nothing: pick a number after it).
// Progressive enhancement: without this script every form still posts on its own.
(function () {
  "use strict";
  var list = document.getElementById("rate-list");
  if (!list) return;
  var current = null; // the <tr data-metric> that answers the next number key
  var pending = null; // the run and metric just answered, until HTMX swaps the run back in

  function rows() {
    return Array.prototype.slice.call(list.querySelectorAll("tr[data-metric]"));
  }

  function choose(row) {
    if (current) current.classList.remove("kbd-current");
    current = row || null;
    if (!current) return;
    current.classList.add("kbd-current");
    var article = current.closest("article");
    if (article && article.scrollIntoView) article.scrollIntoView({ block: "nearest" });
  }

  function step(by) {
    var all = rows();
    var at = all.indexOf(current);
    var next = all[Math.min(Math.max(at + by, 0), all.length - 1)];
    if (next) choose(next);
  }

  function firstUnanswered() {
    var all = rows();
    for (var i = 0; i < all.length; i++) {
      if (!all[i].querySelector("button.chosen")) return all[i];
    }
    return all[0];
  }

  function buttonFor(row, key) {
    var buttons = Array.prototype.slice.call(row.querySelectorAll(".choices button[name=value]"));
    // A choice whose value is the key itself (0 👎, 1 👍; 1–5 on a rubric) wins; otherwise the key's place.
    for (var i = 0; i < buttons.length; i++) {
      if (buttons[i].value === key) return buttons[i];
    }
    var place = parseInt(key, 10);
    return place >= 1 && place <= buttons.length ? buttons[place - 1] : null;
  }

  function answer(key) {
    if (!current) return false;
    var button = buttonFor(current, key);
    if (!button) {
      var number = current.querySelector("input[type=number][name=value]");
      if (!number) return false;
      number.value = key;
      button = current.querySelector("button[type=submit]");
      if (!button) return false;
    }
    var metric = current.getAttribute("data-metric");
    var article = current.closest("article");
    pending = { id: article ? article.id : "", metric: metric };
    button.click();
    return true;
  }

  // s skips the outlined metric's run: it leaves the queue (HTMX removes its article) and the next run's first
  // metric becomes current.
  function skip() {
    var article = current.closest("article");
    var button = article ? article.querySelector("form.rate-skip button[type=submit]") : null;
    if (!button) return false;
    var next = null;
    var all = rows();
    for (var i = all.indexOf(current) + 1; i < all.length; i++) {
      if (all[i].closest("article") !== article) { next = all[i]; break; }
    }
    button.click();
    choose(next);
    return true;
  }

  // After HTMX swaps the answered run back in, the metric after the answered one becomes current. (An
  // outerHTML swap's afterSwap fires on the old, detached element; htmx:load fires on the new one.)
  document.body.addEventListener("htmx:load", function (event) {
    if (!pending || !event.target || event.target.id !== pending.id) return;
    var article = event.target;
    var all = rows();
    var row = article ? article.querySelector('tr[data-metric="' + pending.metric + '"]') : null;
    pending = null;
    if (article.querySelector(".answer.error")) {
      choose(row); // not saved: the same metric stays current, its refusal on the page
      return;
    }
    var at = all.indexOf(row);
    choose(at >= 0 && at + 1 < all.length ? all[at + 1] : row || firstUnanswered());
  });

  list.addEventListener("click", function (event) {
    var row = event.target.closest && event.target.closest("tr[data-metric]");
    if (row) choose(row);
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var typing = event.target.closest && event.target.closest("input, textarea, select");
    if (typing) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    if (/^[0-9]$/.test(event.key)) {
      if (answer(event.key)) event.preventDefault();
    } else if (event.key === "j" || event.key === "ArrowDown") {
      step(1);
      event.preventDefault();
    } else if (event.key === "k" || event.key === "ArrowUp") {
      step(-1);
      event.preventDefault();
    } else if (event.key === "s" && current) {
      if (skip()) event.preventDefault();
    } else if (event.key === "n" && current) {
      var note = current.querySelector("input[name=note]");
      if (note) {
        note.focus();
        event.preventDefault();
      }
    }
  });

  var help = document.getElementById("rate-keys");
  if (help) help.hidden = false;
  choose(firstUnanswered());
})();
