//go:build race

package main

// raceEnabled: the daemon under test is built with -race too, which shares
// the test's build cache.
const raceEnabled = true
