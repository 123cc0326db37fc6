// The dashboard's script: live updates, actions in place, the log as it
// grows. Every page works without it. Job fields arrive as HTML that the
// server escaped, or as text put in place with textContent: never as
// markup built here.
(function () {
  'use strict';
  var body = document.body;
  var base = body.dataset.base || '/ui/';
  var csrf = body.dataset.csrf;
  var poll = parseInt(body.dataset.poll, 10) || 2000;
  var status = document.getElementById('status');

  function say(msg, bad) {
    status.textContent = msg;
    status.className = bad ? 'error' : 'ok';
  }

  function signedOut(r) {
    if (r.status === 401) {
      location.href = base + 'signin?next=' + encodeURIComponent(location.pathname + location.search);
      throw new Error('Signed out.');
    }
  }

  function errorOf(j, r) {
    if (j && typeof j.error === 'string') return j.error;
    if (j && j.error && j.error.message) return j.error.message;
    return r.statusText || 'The request failed.';
  }

  // send makes a request of the dashboard and resolves with its JSON
  // answer, or rejects with its message.
  function send(method, url, form) {
    var opts = { method: method, headers: { 'Jobdir-UI': '1' }, credentials: 'same-origin' };
    if (method === 'POST') {
      opts.headers['X-CSRF-Token'] = csrf;
      opts.body = form || new URLSearchParams();
    }
    return fetch(url, opts).then(function (r) {
      signedOut(r);
      return r.json().catch(function () { return null; }).then(function (j) {
        if (!r.ok) throw new Error(errorOf(j, r));
        return j;
      });
    });
  }

  // The live part of the page is drawn again every poll, from the same
  // URL (so the filters hold), in place (so the scroll holds), and the
  // focused element, found again by its id, keeps the focus.
  var live = document.querySelector('[data-live]');
  var last = null;
  var inFlight = false;
  var polls = 0;
  function refresh() {
    if (!live || inFlight) return Promise.resolve();
    inFlight = true;
    return fetch(location.href, { headers: { 'Jobdir-Fragment': '1', 'Jobdir-UI': '1' }, credentials: 'same-origin' })
      .then(function (r) {
        signedOut(r);
        if (!r.ok) return;
        return r.text().then(function (html) {
          polls++;
          body.dataset.polls = String(polls);
          if (html === last) return;
          last = html;
          // Rows selected stay selected through the swap.
          var selected = selectedIDs();
          var focused = document.activeElement;
          var id = focused && focused.closest('[data-live], [data-live-part]') ? focused.id : '';
          // A part of the live content that lies elsewhere on the page (a
          // job's details, below its log) comes in a template of its own.
          var parts = document.createElement('div');
          parts.innerHTML = html;
          parts.querySelectorAll('template[data-part]').forEach(function (t) {
            var place = document.querySelector('[data-live-part="' + t.dataset.part + '"]');
            if (place) place.replaceChildren(t.content);
            t.remove();
          });
          live.replaceChildren.apply(live, Array.prototype.slice.call(parts.childNodes));
          live.querySelectorAll('input.select').forEach(function (c) { c.checked = selected.indexOf(c.value) >= 0; });
          selectionChanged();
          if (id) {
            var again = document.getElementById(id);
            if (again && !again.disabled) again.focus();
          }
          body.dataset.updated = String(Date.now());
        });
      })
      .catch(function () {})
      .then(function () { inFlight = false; });
  }
  // The next poll waits at least four times as long as the last one took,
  // so that a page left open on a large, slow store costs it at most a
  // fifth of one core.
  function loop() {
    var started = Date.now();
    var p = document.hidden ? Promise.resolve() : refresh();
    p.then(function () {
      setTimeout(loop, Math.max(poll, 4 * (Date.now() - started)));
    });
  }
  if (live) {
    setTimeout(loop, poll);
    document.addEventListener('visibilitychange', function () { if (!document.hidden) refresh(); });
  }

  // Actions on one job.
  document.addEventListener('submit', function (e) {
    var form = e.target;
    if (!form.hasAttribute('data-action')) return;
    e.preventDefault();
    // The form's fields but the CSRF token (sent as a header) go in the
    // query: a queue's limit.
    var fields = new URLSearchParams(new FormData(form));
    fields.delete('csrf');
    var url = form.action + (fields.toString() ? '?' + fields.toString() : '');
    send('POST', url).then(function (j) {
      say(j.message);
      if (j.location) {
        var a = document.createElement('a');
        a.href = j.location;
        a.textContent = ' Open the new job.';
        a.id = 'new-job';
        status.appendChild(a);
      }
      return refresh();
    }).catch(function (err) { say(err.message, true); });
  });

  // Rows selected in the jobs table, for the actions on the selected jobs.
  function selectedIDs() {
    return Array.prototype.map.call(document.querySelectorAll('input.select:checked'), function (c) { return c.value; });
  }
  function selectionChanged() {
    var none = selectedIDs().length === 0;
    document.querySelectorAll('[data-selected]').forEach(function (b) { b.disabled = none; });
  }
  document.addEventListener('change', function (e) {
    if (e.target.matches('input.select')) selectionChanged();
  });

  // Bulk actions: count, confirm, act, on the jobs the filter matches or
  // on the selected ones (among those the filter matches).
  document.addEventListener('click', function (e) {
    var b = e.target.closest('[data-bulk]');
    if (!b) return;
    var action = b.dataset.bulk;
    var query = b.parentElement.dataset.query || '';
    var q = new URLSearchParams(query);
    q.set('action', action);
    if (b.hasAttribute('data-selected')) {
      q.delete('job');
      selectedIDs().forEach(function (id) { q.append('job', id); });
    }
    var which = b.hasAttribute('data-selected') ? 'selected' : 'matching';
    var words = {
      cancel: { none: 'canceled', verb: 'Cancel', after: '' },
      retry: { none: 'retried', verb: 'Retry', after: '' },
      delete: { none: 'deleted (only finished jobs are)', verb: 'Delete', after: ' for good, with their logs' }
    }[action];
    send('GET', base + 'bulk?' + q.toString()).then(function (c) {
      if (c.count === 0) {
        say('No ' + which + ' job can be ' + words.none + '.');
        return;
      }
      var n = c.more ? c.count + ' (the first ones: repeat the action for the rest)' : String(c.count);
      var finished = action === 'delete' ? ' finished' : '';
      if (!window.confirm(words.verb + ' ' + n + ' ' + which + finished + ' jobs' + words.after + '?')) return;
      return send('POST', base + 'bulk', q).then(function (res) {
        say(res.message);
        return refresh();
      });
    }).catch(function (err) { say(err.message, true); });
  });

  // A job's log, followed as the program writes it.
  var log = document.querySelector('[data-log]');
  if (log) {
    var logStatus = document.getElementById('log-status');
    logStatus.textContent = 'Following the log…';
    fetch(log.dataset.log, { headers: { 'Jobdir-UI': '1' }, credentials: 'same-origin' }).then(function (r) {
      signedOut(r);
      if (!r.ok) {
        return r.json().catch(function () { return null; }).then(function (j) {
          logStatus.textContent = 'No log: ' + errorOf(j, r);
        });
      }
      var reader = r.body.getReader();
      var dec = new TextDecoder();
      function pump() {
        return reader.read().then(function (x) {
          var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
          if (x.done) {
            log.append(dec.decode());
            logStatus.textContent = 'End of the log: the job has ended.';
            return refresh();
          }
          log.append(dec.decode(x.value, { stream: true }));
          if (atEnd) log.scrollTop = log.scrollHeight;
          return pump();
        });
      }
      return pump();
    }).catch(function () {
      logStatus.textContent = 'The log stopped: reload the page to follow it again.';
    });
  }
})();
