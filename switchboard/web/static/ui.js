// Switchboard web UI: the only script. Everything works without it; it adds
// (1) live feed updates over the native EventSource and (2) copy buttons.
(function () {
  "use strict";
  var feed = document.getElementById("feed");
  if (feed && window.EventSource) {
    var status = document.getElementById("feed-status");
    var shown = Number(feed.dataset.since || 0);
    var fetching = false, again = false;
    var pull = function () {
      if (fetching) { again = true; return; }
      fetching = true;
      fetch(feed.dataset.rows + "?after=" + shown, {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : ""; })
        .then(function (html) {
          var box = document.createElement("ul");
          box.innerHTML = html;
          var items = Array.prototype.slice.call(box.children);
          items.reverse().forEach(function (li) {
            var id = Number(li.dataset.id);
            if (id > shown) { shown = id; }
            li.classList.add("new");
            feed.insertBefore(li, feed.firstChild);
          });
          var empty = document.getElementById("feed-empty");
          if (empty && items.length) { empty.remove(); }
        })
        .finally(function () { fetching = false; if (again) { again = false; pull(); } });
    };
    var source = new EventSource(feed.dataset.stream + "?since=" + shown);
    source.onopen = function () { status.textContent = "live"; status.dataset.live = "on"; };
    source.onerror = function () { status.textContent = "reconnecting…"; status.dataset.live = "off"; };
    source.addEventListener("feed", function (e) { if (Number(e.lastEventId) > shown) { pull(); } });
    // The page's position is from another timeline (the hub's database was restored): start again.
    source.addEventListener("restart", function () { source.close(); window.location.reload(); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var field = document.getElementById(button.dataset.copy);
      var done = function () { button.textContent = "Copied"; };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(done);
      } else { field.select(); document.execCommand("copy"); done(); }
    });
  });
})();
