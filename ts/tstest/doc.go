// Package tstest runs the tests of the TypeScript client library
// (ts/client: the client, the Node worker and the example worker) against
// a real jobwatch server that its Go test starts, on the store under test
// (SQLite, or PostgreSQL with JOBWATCH_TEST_BACKEND=postgres). It holds
// no code of its own: Go tests must live in a package, and this one gives
// the TypeScript tests a server.
package tstest
