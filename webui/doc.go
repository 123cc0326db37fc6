// Package webui serves the jobdir dashboard: web pages, for people, on a
// jobstore.Store. It shows an overview (counts by state and by kind, the
// oldest due job's wait, jobs finished and failed per minute over the last
// hour, the running jobs), a table of jobs with filters and paging, and a
// page per job with its fields, attempts and live log; it cancels, retries
// and re-runs a job, or every job a filter matches. `jobdir serve` mounts
// it at /ui/ beside the HTTP API.
//
// The pages are html/template templates and a little plain JavaScript,
// embedded in the binary: nothing is fetched from elsewhere, and building
// needs no JavaScript toolchain. Every page works without JavaScript; with
// it, the pages update themselves every few seconds (a short poll of the
// page's live part, which keeps the reader's scroll, focus and filters),
// actions show their effect in place, and a job's log follows as it grows.
//
// The file docs/ui.md in the jobdir repository describes the pages, the
// actions and the security model.
//
// # Guarantees
//
// Every page and action needs a session, except with
// Options.InsecureNoAuth, where a banner on every page says so. A session
// is had by signing in with one of the API's bearer tokens; its cookie is
// HttpOnly, SameSite=Strict, Secure over TLS (or with Options.SecureCookie),
// scoped to the dashboard's path, and it ends at Options.SessionTTL or at
// sign-out. Every request that changes anything is a POST that must carry
// the session's CSRF token and must not come from another site
// (http.CrossOriginProtection: Sec-Fetch-Site, then Origin). Job fields are
// rendered as text, never as markup, and the pages forbid inline and
// foreign scripts with a Content-Security-Policy.
//
// Each request reads a bounded number of jobs, whatever the store holds:
// the table pages through the store's cursor (List) and never counts all
// matching jobs, a filter it applies itself (a key, a finished state) reads
// at most ScanBudget jobs per request, and a bulk action reads at most
// MaxBulk.
//
// # Caveats
//
// Sessions live in the memory of the process that signed them in: a
// restart signs everyone out, and behind a load balancer each replica
// needs its own sign-in (or sticky sessions). The overview's counts by
// kind and its chart read the newest jobs, at most OverviewBudget of them,
// created in the last hour: a job created earlier and finished in the last
// hour is not in the chart.
package webui
