//go:build !unix

package sqlite

// lockFile does not lock where flock is not: there, nothing stops a
// second process from opening the file (docs/OPERATING.md says one
// process a file).
func lockFile(string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
