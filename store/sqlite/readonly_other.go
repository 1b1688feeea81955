//go:build !unix

package sqlite

// onReadOnlyFS does not tell where access(2) is not.
var onReadOnlyFS = func(string) bool { return false }
