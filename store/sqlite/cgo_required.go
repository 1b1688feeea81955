//go:build !cgo

package sqlite

// The SQLite store is mattn/go-sqlite3, which is C: this build has cgo
// off, because no C compiler was found or CGO_ENABLED=0. The name below
// is undefined on purpose, so that the build's first error says what to
// do (README.md, "Two commands", says it too).
var _ = jobwatch_needs_cgo__install_a_C_compiler_such_as_gcc_then_build_with_CGO_ENABLED_1
