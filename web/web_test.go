package web_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/web"
)

// bundleNames returns the script and stylesheet that index.html names.
func bundleNames(t *testing.T, srv *httptest.Server) (js, css string) {
	t.Helper()
	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	jsm := regexp.MustCompile(`src="(app-[A-Z0-9]+\.js)"`).FindSubmatch(body)
	cssm := regexp.MustCompile(`href="(app-[A-Z0-9]+\.css)"`).FindSubmatch(body)
	if jsm == nil || cssm == nil {
		t.Fatalf("index.html names no bundle:\n%s", body)
	}
	return "/" + string(jsm[1]), "/" + string(cssm[1])
}

func TestHandlerServesThePageAndItsBundle(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	js, css := bundleNames(t, srv)

	tests := []struct {
		name        string
		path        string
		status      int
		contentType string
		cache       string
		contains    string
	}{
		{"the root is index.html, revalidated on every load", "/", 200, "text/html; charset=utf-8", "no-cache", "<title>jobwatch</title>"},
		{"index.html by name is the same page", "/index.html", 200, "text/html; charset=utf-8", "no-cache", `id="jobs"`},
		{"the script is JavaScript and cached forever", js, 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", "Reconnecting…"},
		{"the stylesheet is CSS and cached forever", css, 200, "text/css; charset=utf-8", "public, max-age=31536000, immutable", ".job"},
		{"an unknown path is not found rather than the page", "/jobwatch.v1.Nope/Call", 404, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			if tt.status != 200 {
				return
			}
			if got := res.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type %q, want %q", got, tt.contentType)
			}
			if got := res.Header.Get("Cache-Control"); got != tt.cache {
				t.Errorf("Cache-Control %q, want %q", got, tt.cache)
			}
			if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", got)
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("body does not contain %q", tt.contains)
			}
		})
	}
}

func TestHandlerGzipsForBrowsersThatAcceptIt(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	js, _ := bundleNames(t, srv)

	req, _ := http.NewRequest("GET", srv.URL+js, nil)
	req.Header.Set("Accept-Encoding", "gzip, deflate, br")
	// A transport that does not undo the compression, as a browser's
	// network panel would show it.
	res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := res.Header.Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", got)
	}
	zr, err := gzip.NewReader(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(plain), "Reconnecting…") {
		t.Error("the gzipped script does not unpack to the bundle")
	}
}

func TestHandlerAnswersARepeatedLoadWithNotModified(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	etag := res.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag on index.html")
	}
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("If-None-Match", etag)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d, want 304", res.StatusCode)
	}
}
