// Package web is the jobwatch browser page: the built bundle in dist/
// (TypeScript sources in src/, built by `npm run build`), embedded into the
// binary and served by Handler. It must never need Node at run time or at
// `go build`: dist/ is committed and CI checks it matches its sources.
//
// The page talks to its own origin with the Connect protocol over fetch,
// which works on plain HTTP/1.1, and follows a tenant's jobs on one
// WatchJobs stream (never one stream per job: a browser opens at most six
// HTTP/1.1 connections per origin).
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

//go:embed dist
var dist embed.FS

// hashedName matches the bundle's file names, which carry a hash of their
// content (app-3F2A9KQL.js): such a file never changes, so browsers may
// keep it forever; index.html names the current ones and is revalidated.
var hashedName = regexp.MustCompile(`-[A-Z0-9]{8}\.[a-z]+$`)

// contentSecurityPolicy allows the page its own scripts, styles and API
// calls and nothing else (the favicon is an inline data: image).
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// contentTypes is fixed here rather than taken from package mime, which
// reads the host's mime.types and could serve JavaScript with a type a
// browser refuses for a module script.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

type asset struct {
	body        []byte
	gzipped     []byte // nil when compression does not pay
	contentType string
	cacheCtl    string
	etag        string
}

var (
	assetsOnce sync.Once
	assets     map[string]*asset
)

func loadAssets() map[string]*asset {
	assetsOnce.Do(func() {
		sub, err := fs.Sub(dist, "dist")
		if err != nil {
			panic(err) // dist is embedded at build time; it is always there
		}
		assets = make(map[string]*asset)
		err = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			body, err := fs.ReadFile(sub, name)
			if err != nil {
				return err
			}
			assets["/"+name] = newAsset(name, body)
			return nil
		})
		if err != nil {
			panic(err)
		}
	})
	return assets
}

func newAsset(name string, body []byte) *asset {
	a := &asset{body: body, contentType: contentTypes[path.Ext(name)]}
	if a.contentType == "" {
		a.contentType = "application/octet-stream"
	}
	if hashedName.MatchString(name) {
		a.cacheCtl = "public, max-age=31536000, immutable"
	} else {
		a.cacheCtl = "no-cache"
	}
	sum := sha256.Sum256(body)
	a.etag = `"` + hex.EncodeToString(sum[:8]) + `"`
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(body)
	zw.Close()
	if buf.Len() < len(body)*9/10 {
		a.gzipped = buf.Bytes()
	}
	return a
}

// Handler serves the page: index.html at / and the bundle's files by
// name, gzipped for browsers that accept it. Anything else is 404, so a
// mistyped API path is not answered with a page.
func Handler() http.Handler {
	files := loadAssets()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := r.URL.Path
		if name == "/" {
			name = "/index.html"
		}
		a, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", a.cacheCtl)
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Vary", "Accept-Encoding")
		if strings.HasSuffix(name, ".html") {
			h.Set("Content-Security-Policy", contentSecurityPolicy)
			h.Set("Referrer-Policy", "no-referrer")
		}
		if match := r.Header.Get("If-None-Match"); match != "" && match == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		body := a.body
		if a.gzipped != nil && acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = a.gzipped
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method == http.MethodHead {
			return
		}
		w.Write(body)
	})
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}
