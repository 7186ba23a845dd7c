// The console's live parts, in plain JavaScript from this server (no framework, nothing fetched from
// elsewhere). Every page works without it: the forms submit, and a reload shows what is new.
(function () {
  "use strict";

  function swap(targetId, url) {
    return fetch(url, { credentials: "same-origin" })
      .then(function (answer) {
        if (answer.redirected) { window.location.reload(); return null; }  // logged out: to the form
        return answer.ok ? answer.text() : null;
      })
      .then(function (html) {
        var target = document.getElementById(targetId);
        if (html !== null && target) { target.innerHTML = html; }
      })
      .catch(function () { /* the next refresh tries again */ });
  }

  // The bookings timeline: its rows again every few seconds while the page is in view.
  var timeline = document.getElementById("timeline");
  if (timeline && timeline.dataset.refresh) {
    setInterval(function () {
      if (!document.hidden) { swap("timeline", timeline.dataset.refresh); }
    }, 3000);
  }

  // The placement form: the verdicts follow the form as it changes.
  var form = document.querySelector("form[data-live]");
  if (form) {
    var timer = null;
    form.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var query = new URLSearchParams(new FormData(form)).toString();
        history.replaceState(null, "", form.getAttribute("action") + "?" + query);
        swap(form.dataset.live, form.getAttribute("action") + "?" + query + "&partial=1");
      }, 300);
    });
  }
  // The reserve form: choosing a pool chooses the class it is booked by and offers its profiles.
  var pool = document.querySelector("form.reserve select[name=pool]");
  if (pool) {
    var cls = document.querySelector("form.reserve select[name=class]");
    var profile = document.querySelector("form.reserve select[name=profile]");
    var follow = function () {
      var chosen = pool.options[pool.selectedIndex];
      if (chosen && cls && chosen.dataset.class) { cls.value = chosen.dataset.class; }
      if (!profile) { return; }
      var first = "";
      Array.prototype.forEach.call(profile.querySelectorAll("optgroup"), function (group) {
        var mine = group.dataset.pool === pool.value;
        group.hidden = !mine;
        group.disabled = !mine;
        if (mine && !first && group.querySelector("option")) { first = group.querySelector("option").value; }
      });
      profile.value = cls && cls.value === "gpu.mig" ? first : "";
    };
    pool.addEventListener("change", follow);
  }
})();
