// The main navigation on a narrow screen: one Menu button opens and closes it (the needs-you link stays in the bar).
// Without this script the button stays hidden and the navigation shows whole (the stylesheet keys on html.js-menu).
(function () {
  "use strict";
  document.documentElement.classList.add("js-menu");
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.querySelector(".topbar .menu-button");
    var bar = document.querySelector(".topbar");
    if (!button || !bar) return;
    button.hidden = false;
    button.addEventListener("click", function () {
      var open = !bar.classList.contains("open");
      bar.classList.toggle("open", open);
      button.setAttribute("aria-expanded", open ? "true" : "false");
    });
  });
})();
