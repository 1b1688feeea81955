package server

import (
	"html"
	"net/http"
	"strings"
)

// placeholderPage serves a short page at / until the real page (package
// web) is wired in through Config.Page; every other path is 404.
func placeholderPage() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(strings.ReplaceAll(placeholderHTML, "{{host}}", html.EscapeString(r.Host))))
	})
	return mux
}

// The README is not served by the binary, so the page names it rather
// than linking to a copy that could drift.
const placeholderHTML = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>jobwatch</title></head>
<body>
<h1>jobwatch</h1>
<p>A job service that answers the question every caller of a background job
asks: <em>is it done yet?</em> Submit jobs, let workers claim and run them,
and wait for or watch any job over Connect, gRPC, gRPC-Web or curl with JSON.</p>
<p>The browser page is not built into this binary yet; the API is served here:</p>
<pre>curl -sS -H 'Content-Type: application/json' -d '{"kind":"example"}' \
  http://{{host}}/jobwatch.v1.JobService/SubmitJob</pre>
<p>The <strong>README.md</strong> at the root of the jobwatch source tree says how
to run it, submit, wait for and watch jobs, and what each error code means.
Metrics: <a href="/metrics">/metrics</a>.</p>
</body>
</html>
`
