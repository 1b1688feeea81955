//go:build race

package main

// raceEnabled: the race detector makes every call of the serve processes
// the tests start from this binary several times dearer in CPU.
const raceEnabled = true
