# The README's commands. `make test` is what CI runs (via .ci/run).
BUF := go tool -modfile=tools/go.mod buf

.PHONY: test check generate web web-deps demo fuzz

## test: every check and every test suite, race detector on; then the
## engine and wire suites again with PostgreSQL as their store (a server
## from JOBWATCH_TEST_POSTGRES, 127.0.0.1:5432 or a throwaway initdb
## cluster; see internal/pgtest).
test: check
	go test -race -count=1 -timeout 20m ./...
	JOBWATCH_TEST_BACKEND=postgres go test -race -count=1 -timeout 20m ./jobs/... ./server/... ./client/... ./cmd/... ./web/...

## fuzz: a short run of every Go fuzz target (every func Fuzz* in a
## _test.go file), FUZZTIME each. A crasher fails it loudly; go saves the
## input under the package's testdata/fuzz/, where, committed, it is a
## regression test that every `go test` runs.
FUZZTIME ?= 10s
fuzz:
	@for file in $$(git ls-files '*_test.go'); do \
	  for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$file"); do \
	    pkg=./$$(dirname "$$file"); \
	    echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
	    go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s "$$pkg" || { \
	      echo "FUZZ FAILED: $$name in $$pkg; the crasher is in $$pkg/testdata/fuzz/$$name/: fix the bug and commit the input" >&2; \
	      exit 1; }; \
	  done; \
	done

## check: formatting, vet, lint, and that generated code and the page bundle
## are exactly what their sources produce.
check: web-deps
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(BUF) lint
	$(MAKE) generate
	git diff --exit-code -- gen web/src/gen || { echo "generated code is stale: run make generate"; exit 1; }
	cd web && npm run --silent typecheck && npm run --silent build
	git diff --exit-code -- web/dist || { echo "web/dist is stale: run make web"; exit 1; }

## generate: rewrite gen/ (Go) and web/src/gen (TypeScript) from proto/.
generate: web-deps
	$(BUF) generate

## web: rebuild the embedded page bundle.
web: web-deps
	cd web && npm run build

web-deps:
	@if [ -f web/package-lock.json ]; then \
	  if [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules ]; then cd web && npm ci --no-audit --no-fund; fi; \
	fi

## demo: the README's first command.
demo:
	go run ./cmd/jobwatch demo
