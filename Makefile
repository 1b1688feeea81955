# The README's commands. `make test` is what CI runs (via .ci/run).
BUF := go tool -modfile=tools/go.mod buf

.PHONY: test check generate web web-deps ts-deps demo fuzz

# check as a pass of test, through a variable rather than $(MAKE) itself,
# so that `make -n test` prints the passes instead of running them.
CHECK := $(MAKE) --no-print-directory check

## test: every check (gofmt, go mod tidy, go vet, staticcheck, buf lint,
## generated code) and every test suite, race detector on; then the
## assertions the race detector would distort (the parked call's stack
## size), without it; then the engine and wire suites again with
## PostgreSQL as their store (a server from JOBWATCH_TEST_POSTGRES,
## 127.0.0.1:5432 or a throwaway initdb cluster; see internal/pgtest).
## Every pass runs even when one before it failed, so a slip in the
## first does not hide what the others would have said; the failed
## passes are named at the end, each with its failing tests' lines (or
## its last lines), so that the end of a long log says what failed, and
## make fails.
test: ts-deps
	@failed=""; failedlogs=""; logs=$$(mktemp -d); trap 'rm -rf "$$logs"' EXIT; \
	run() { what="$$1"; shift; echo "make test: $$what: $$*"; \
	  log="$$logs/$$(printf '%s' "$$what" | tr -c 'A-Za-z0-9' _)"; printf '%s' "$$what" > "$$log.what"; \
	  { "$$@" 2>&1; echo $$? > "$$log.rc"; } | tee "$$log"; \
	  [ "$$(cat "$$log.rc")" = 0 ] || { echo "make test: FAILED: $$what" >&2; failed="$$failed\n  $$what"; failedlogs="$$failedlogs $$log"; }; }; \
	run "check" $(CHECK); \
	run "SQLite, race detector on" go test -race -count=1 -timeout 30m ./...; \
	run "stack sizes, race detector off" go test -count=1 -timeout 5m -run '^TestParkedCallsKeepTheirStacksWithin8KiB$$' ./server/; \
	run "PostgreSQL, race detector on" env JOBWATCH_TEST_BACKEND=postgres go test -race -count=1 -timeout 30m ./jobs/... ./server/... ./client/... ./cmd/... ./web/... ./ts/...; \
	for log in $$failedlogs; do \
	  echo "make test: what failed in $$(cat "$$log.what"):" >&2; \
	  lines=$$(grep -E -e '^[[:space:]]*--- FAIL' -e '^(panic:|FAIL[[:space:]])' -e '^[[:space:]]+[A-Za-z0-9_./-]+\.go:[0-9]+: ' "$$log" | head -n 100); \
	  if [ -n "$$lines" ]; then printf '%s\n' "$$lines" >&2; else tail -n 20 "$$log" >&2; fi; \
	done; \
	if [ -n "$$failed" ]; then printf 'make test: these passes failed:%b\n' "$$failed" >&2; exit 1; fi; \
	echo "make test: every pass passed"

## fuzz: a short run of every Go fuzz target (every func Fuzz* in a
## _test.go file), FUZZTIME each. A crasher fails it loudly; go saves the
## input under the package's testdata/fuzz/, where, committed, it is a
## regression test that every `go test` runs. A run that fails without
## saving an input is the fuzzing engine's own failure, not a crasher (on
## a loaded machine its coordinator can give up on a slow worker with
## "context deadline exceeded"): that run is tried once more, and fails
## loudly if it fails again.
FUZZTIME ?= 10s
fuzz:
	@for file in $$(git ls-files '*_test.go'); do \
	  for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$file"); do \
	    pkg=./$$(dirname "$$file"); corpus="$$pkg/testdata/fuzz/$$name"; \
	    for try in 1 2; do \
	      saved=$$(ls "$$corpus" 2>/dev/null | wc -l); \
	      echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
	      if go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s "$$pkg"; then break; fi; \
	      if [ "$$try" = 1 ] && [ "$$(ls "$$corpus" 2>/dev/null | wc -l)" = "$$saved" ]; then \
	        echo "fuzz: $$name failed without saving an input (the fuzzing engine's failure, not a crasher): once more" >&2; continue; fi; \
	      echo "FUZZ FAILED: $$name in $$pkg; the crasher is in $$corpus/: fix the bug and commit the input" >&2; \
	      exit 1; \
	    done; \
	  done; \
	done

## chaos: the chaos test in full (cmd/jobwatch/chaos_test.go), race
## detector on: three jobwatch serve replicas on one PostgreSQL schema
## (as internal/pgtest finds one) under load from 16 remote workers and
## 16 submitters, each through a Go client given every replica's
## address; a random replica killed with SIGKILL every 10 s for 2
## minutes and restarted. Every acknowledged job must then end SUCCEEDED
## and the invariant checker prints its figures (docs/OPERATING.md,
## "Replicas dying under load"). A shorter form runs in make test's
## PostgreSQL pass. Not part of make test.
.PHONY: chaos
chaos:
	JOBWATCH_CHAOS=full JOBWATCH_TEST_BACKEND=postgres go test -race -v -count=1 -timeout 30m -run '^TestChaosReplicasKilledUnderLoadKeepEveryPromise$$' ./cmd/jobwatch/

## fair: the black-box fair-claiming tests at the issue's size
## (cmd/jobwatch/fair_replicas_test.go), race detector on: a tenant with
## 100,000 jobs queued that keeps submitting while another's single job
## is claimed within the bound, and 10,000 claims split 3:1 by weight,
## through real servers and workers: one serve on SQLite, then two
## replicas on one PostgreSQL schema. Smaller forms run in make test.
.PHONY: fair
fair:
	JOBWATCH_FAIR=full go test -race -v -count=1 -timeout 30m -run '^TestFair' ./cmd/jobwatch/
	JOBWATCH_FAIR=full JOBWATCH_TEST_BACKEND=postgres go test -race -v -count=1 -timeout 30m -run '^TestFair' ./cmd/jobwatch/

## check: formatting, tidy modules, vet, lint, and that generated code and
## the page bundle are exactly what their sources produce. Tidy: go.mod
## and go.sum are what `go mod tidy` makes of them, here and in
## tools/riverbench (a module of its own, so River's dependencies stay
## out of jobwatch's). tools/go.mod is left out: it only pins the code
## generators `go tool` runs, and tidying it would add to tools/go.sum
## the checksums of modules that only the tests of buf's dependencies
## use.
check: web-deps ts-deps
	@out=$$(gofmt -l $$(./.ci/go-files)); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go mod tidy -diff || { echo "go.mod is not tidy: run go mod tidy"; exit 1; }
	cd tools/riverbench && go mod tidy -diff || { echo "tools/riverbench/go.mod is not tidy: run go mod tidy there"; exit 1; }
	go vet ./...
	go tool -modfile=tools/go.mod staticcheck ./...
	$(BUF) lint
	@# Generated code and the page bundle are compared with copies taken
	@# before they are made again, not with git, so that the check holds
	@# in a tree that is no git checkout (an archive) too. The client's
	@# build goes first: it copies the generated code the page's
	@# typecheck reads through it, so a proto change never leaves it stale.
	@was=$$(mktemp -d); trap 'rm -rf "$$was"' EXIT; \
	  mkdir -p "$$was/web/src" && cp -R gen "$$was/gen" && cp -R web/src/gen "$$was/web/src/gen" && cp -R web/dist "$$was/web/dist" || exit 1; \
	  $(MAKE) --no-print-directory generate || exit 1; \
	  for d in gen web/src/gen; do diff -r "$$was/$$d" "$$d" > /dev/null || { diff -ru "$$was/$$d" "$$d" | head -n 40; echo "generated code is stale: run make generate"; exit 1; }; done; \
	  (cd ts/client && npm run --silent build) && (cd web && npm run --silent typecheck && npm run --silent build) || exit 1; \
	  diff -r "$$was/web/dist" web/dist > /dev/null || { diff -ru "$$was/web/dist" web/dist | head -n 40; echo "web/dist is stale: run make web"; exit 1; }

## generate: rewrite gen/ (Go) and web/src/gen (TypeScript) from proto/.
generate: web-deps
	$(BUF) generate

## web: rebuild the embedded page bundle.
web: web-deps
	cd web && npm run build

## ts-deps: the TypeScript client library's packages (ts/client), which
## its build and its tests (ts/tstest) need.
ts-deps:
	@if [ ! -d ts/client/node_modules ] || [ ts/client/package-lock.json -nt ts/client/node_modules ]; then \
	  cd ts/client && npm ci --no-audit --no-fund; fi

web-deps:
	@if [ -f web/package-lock.json ]; then \
	  if [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules ]; then cd web && npm ci --no-audit --no-fund; fi; \
	fi

## demo: the README's first command. go run says nothing while it
## builds, and the first build compiles SQLite's C source (cgo): say so.
demo:
	@echo "make demo: building jobwatch; the first build compiles SQLite (cgo) and takes a few minutes without output, later ones seconds"
	go run ./cmd/jobwatch demo

## dist: the release: jobwatch for linux/amd64 and linux/arm64 (cgo,
## arm64 with Debian's gcc-aarch64-linux-gnu), version, commit and build
## date stamped, in tarballs with README.md and LICENSE, and SHA256SUMS,
## under dist/ (which git ignores). DIST_ARCHES=arm64 builds only those;
## scripts/dist.sh says the rest.
.PHONY: dist
dist:
	bash scripts/dist.sh $(DIST_ARCHES)

## soak: SOAKTIME (30m) of steady load against one jobwatch serve, SQLite
## (JOBWATCH_TEST_BACKEND=postgres: PostgreSQL): submitters and workers
## keep about 200 jobs/s flowing while 10,000 WaitJob and WatchJob calls
## stay parked. It prints the server's RSS, goroutines, open files and
## parked calls every minute, and fails if any of the first three grows
## more than 5% after the warm-up or serve logs a line above WARN
## (docs/OPERATING.md, "Soak"). Not part of make test.
SOAKTIME ?= 30m
.PHONY: soak
soak:
	JOBWATCH_SOAK=$(SOAKTIME) go test -v -count=1 -timeout 0 -run '^TestSoak$$' ./cmd/jobwatch/
